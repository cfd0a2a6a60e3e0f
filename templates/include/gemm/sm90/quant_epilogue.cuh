// The SM90 quantized kernel's epilogue tiles (kernel_sm90_quant.cuh): the CTA's
// accumulators staged in shared memory as rows of D for the common epilogue
// (StagedTransposedTile: register A; StagedTile: shared B), a 16-bit D's plain rows
// stored from that staging (plain_rows, store_plain_rows), and the hand-off epilogue
// (HandoffTile), whose rows warps of the producer warpgroup store.
#pragma once
#include "gemm/epilogue.cuh"
#include "gemm/grouped.cuh"
#include "gemm/numeric.cuh"
#include "gemm/ptx.cuh"
#include "gemm/sm90/ptx_sm90.cuh"

namespace gemm {

// The CTA's accumulators of D^T, staged in shared memory as rows of D, handed to the
// epilogue as pairs of adjacent columns of D in row order: consecutive threads take
// consecutive pairs of a row, so a warp's stores write 32 adjacent pairs of one row of D.
// NOTE: why not the fragment as it is (a neighbour-lane exchange gives each thread pairs
// of adjacent columns of D): a warp's store then writes 16 bytes in each of 8 rows of D;
// on the H200 that epilogue took 40% of a W4 128x128 tile's time at M = 4096 (llama3-8b
// gate_up: 2487 us, 1511 us with no epilogue) and 66% of a 256x128 tile's.
template <class Cfg>
struct StagedTransposedTile {
  float* rows;  // the staging: Cfg::kTokens rows of Cfg::kStagedPitch floats
  int tokens;   // rows of D the tile still has (M - the first token), at most kTokens

  // Each consumer thread writes its accumulators (wgmma_ss's D^T fragment, warpgroup wg).
  // NOTE: the pitch of kRows + 4 floats puts the 8 weight rows x 4 token pairs a warp
  // writes at once on 32 different banks.
  // NOTE: plain C++ stores, not st.shared asm: with asm operands reading the accumulators
  // ptxas serializes the 128- and 256-token tiles' wgmma (C7514).
  // wg: the warpgroup's block of weight rows (Cfg::kRowConsumers of them).
  __device__ __forceinline__ void stage(const float (&acc)[Cfg::kAcc], int wg) const { put<false>(acc, wg); }
  // The same, added to what another warpgroup of the same rows staged (Cfg::kKSplit).
  __device__ __forceinline__ void add(const float (&acc)[Cfg::kAcc], int wg) const { put<true>(acc, wg); }

  template <bool kAdd>
  __device__ __forceinline__ void put(const float (&acc)[Cfg::kAcc], int wg) const {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int b = 0; b < Cfg::kBlocks; ++b) {
      const int row = 64 * (wg * Cfg::kBlocks + b) + 16 * ((threadIdx.x / 32) % 4) + lane / 4;
#pragma unroll
      for (int i = 0; i < Cfg::kBlockAcc; ++i) {
        const int token = 8 * (i / 4) + 2 * (lane % 4) + i % 2;
        float& r = rows[token * Cfg::kStagedPitch + row + 8 * ((i / 2) % 2)];
        if constexpr (kAdd) {
          r += acc[b * Cfg::kBlockAcc + i];
        } else {
          r = acc[b * Cfg::kBlockAcc + i];
        }
      }
    }
  }

  template <class F>
  __device__ __forceinline__ void for_each_pair(int row0, int col0, F&& f) const {
    constexpr int kPairs = Cfg::kRows / 2;  // per row of D
    for (int idx = threadIdx.x; idx < tokens * kPairs; idx += Cfg::kConsumerThreads) {
      const int token = idx / kPairs, pair = idx % kPairs;
      const float2 v = *reinterpret_cast<const float2*>(rows + token * Cfg::kStagedPitch + 2 * pair);
      f(row0 + token, col0 + 2 * pair, v.x, v.y);
    }
  }
};

// The plain epilogue of a 16-bit D (the register-A form's) from the staged rows (alpha, the bias, a grouped
// launch's row scales; no C, no gated SiLU): four columns per thread and one 8-byte
// store, so a warp reads 512 contiguous bytes of a staged row and writes 256 of a row of
// D. The common epilogue's pairs cost about 30 instructions per two values, which with K
// = 1408-2048 (22-32 K tiles a tile) is a large share of a tile's time.
// NOTE: plain_rows is uniform per launch: every thread takes the same path.
template <class Cfg, class Params>
__device__ __forceinline__ bool plain_rows(const Params& p) {
  return p.beta == 0.f && (p.epilogue & kEpilogueGatedSilu) == 0 && p.ldd % 4 == 0 &&
         reinterpret_cast<u64>(p.D) % 8 == 0;
}

template <class Cfg, class Params>
__device__ __forceinline__ void store_plain_rows(const StagedTransposedTile<Cfg>& staged, const Params& p, int row0,
                                                 int col0) {
  using TD = typename Cfg::TD;
  using Storage = typename TD::Storage;
  using PairT = Pair<TD>;
  constexpr int kQuads = Cfg::kRows / 4;  // per row of D
  const bool add_bias = (p.epilogue & kEpilogueBias) != 0;
  const Storage* bias = static_cast<const Storage*>(p.bias);
  Storage* D = static_cast<Storage*>(p.D);
  for (int idx = threadIdx.x; idx < staged.tokens * kQuads; idx += Cfg::kConsumerThreads) {
    const int token = idx / kQuads, c = col0 + 4 * (idx % kQuads), r = row0 + token;
    if (c >= p.N) continue;
    const float4 v = *reinterpret_cast<const float4*>(staged.rows + token * Cfg::kStagedPitch + 4 * (idx % kQuads));
    float o[4] = {p.alpha * v.x, p.alpha * v.y, p.alpha * v.z, p.alpha * v.w};
    const int n = min(4, p.N - c);
    if (add_bias) {
#pragma unroll
      for (int j = 0; j < 4; ++j) o[j] += j < n ? TD::to_f32(bias[c + j]) : 0.f;
    }
    // As the common epilogue: the row scale after the bias.
    const float scale = row_scale<Cfg>(p, r);
#pragma unroll
    for (int j = 0; j < 4; ++j) o[j] *= scale;
    Storage* d = D + static_cast<i64>(r) * p.ldd + c;
    if (n == 4) {
      *reinterpret_cast<uint2*>(d) = make_uint2(PairT::pack(o[0], o[1]), PairT::pack(o[2], o[3]));
    } else {
      for (int j = 0; j < n; ++j) d[j] = TD::from_f32(o[j]);
    }
  }
}

// The hand-off epilogue (Cfg::kHandoff; plain_rows launches without splits): the D tile as
// 16-bit rows in shared memory (kHandoffPitch elements a row, after the stages), written
// by the consumers with alpha, the bias and the row scales applied in fp32 and rounded
// once (as store_plain_rows), and stored by three warps of the producer warpgroup while
// the consumers run the next tile's K loop. Two mbarriers pass it: `full` once every
// consumer thread wrote (kConsumerThreads arrivals), `empty` once the storers read it
// (kHandoffStorers arrivals).
// NOTE: why: with the common epilogue the tensor cores idle while the consumers store,
// 13% of a 256x128 tile's time on the Qwen-MoE-like gate_up at 8192 tokens (K = 2048;
// sm90_quant_variants, no_epilogue), more at K = 1408. H200, against that epilogue
// (bench.experiments.build_ab --bits 4, one call): Qwen-MoE-like W4 experts at 8192 tokens
// down 546 -> 492 us, gate_up 923 -> 865; Mixtral-like 8192 gate_up 5 948 -> 5 649; dense
// llama3-8b gate_up W4 at M = 4096 1 365 -> 1 295. Written with per-element 16-bit stores
// (no stmatrix) it gained half of that and lost 7% on the Qwen-like down.
constexpr int kHandoffStorers = 96;

template <class Cfg>
struct HandoffTile {
  using Storage = typename Cfg::TD::Storage;
  Storage* rows;  // Cfg::kTokens rows of kHandoffPitch elements

  // The consumer thread's accumulators (warpgroup wg) as rows of D: `q` the tile's problem
  // (grouped: its expert's), m0 / n0 its first row and column there, `tokens` its rows.
  // A warp's wgmma fragment of 8 tokens x 16 weight rows is two 8 x 8 matrices whose rows
  // are weight rows; stmatrix_x4_trans stores two such pairs, a token's 8 weight rows
  // (16 bytes of a row of D) at each address. With kHandoffPitch = kRows + 8 the 8 tokens
  // of a matrix land on 8 x 4 different banks.
  template <class Params>
  __device__ __forceinline__ void write(const float (&acc)[Cfg::kAcc], int wg, const Params& q, int m0, int n0,
                                        int tokens) const {
    using TD = typename Cfg::TD;
    using PairT = Pair<TD>;
    const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
    const bool add_bias = (q.epilogue & kEpilogueBias) != 0;
    const bool scaled = Cfg::kGrouped && q.U != nullptr;
    const bool plain = !add_bias && !scaled && q.alpha == 1.f;
    const Storage* bias = static_cast<const Storage*>(q.bias);
    // This lane's address among the four matrices of a store: matrix lane / 8 (token group
    // j + (lane / 16), weight rows + 8 (lane / 8 % 2)), its row (a token) lane % 8.
    const u32 base = smem_addr(rows);
#pragma unroll
    for (int b = 0; b < Cfg::kBlocks; ++b) {
      const int row0 = 64 * (wg * Cfg::kBlocks + b) + 16 * warp;  // the warp's first weight row
      const int mine = row0 + lane / 4;                           // the lane's rows: mine, mine + 8
      float add[2] = {0.f, 0.f};
      if (add_bias) {
#pragma unroll
        for (int h = 0; h < 2; ++h) add[h] = n0 + mine + 8 * h < q.N ? TD::to_f32(bias[n0 + mine + 8 * h]) : 0.f;
      }
      const u32 lane_addr =
          base + static_cast<u32>(((8 * (lane / 16) + lane % 8) * Cfg::kHandoffPitch + row0 + 8 * (lane / 8 % 2)) * 2);
#pragma unroll
      for (int j = 0; j < Cfg::kBlockAcc / 4; j += 2) {
        u32 r[4];  // matrices (j, rows + 0), (j, rows + 8), (j + 1, rows + 0), (j + 1, rows + 8)
#pragma unroll
        for (int m = 0; m < 4; ++m) {
          const int jj = j + m / 2, h = m % 2;
          const float* a = acc + b * Cfg::kBlockAcc + 4 * jj + 2 * h;  // tokens 8 jj + 2 (lane % 4), + 1
          if (plain) {
            r[m] = PairT::pack(a[0], a[1]);
          } else {
            const int token = 8 * jj + 2 * (lane % 4);
            // Row scales past the tile's rows are not read (the next expert's, or past U).
            const float s0 = token < tokens ? row_scale<Cfg>(q, m0 + token) : 0.f;
            const float s1 = token + 1 < tokens ? row_scale<Cfg>(q, m0 + token + 1) : 0.f;
            r[m] = PairT::pack((q.alpha * a[0] + add[h]) * s0, (q.alpha * a[1] + add[h]) * s1);
          }
        }
        stmatrix_x4_trans(lane_addr + static_cast<u32>(8 * j * Cfg::kHandoffPitch * 2), r[0], r[1], r[2], r[3]);
      }
    }
  }

  // A storer thread's share (`id` of kHandoffStorers) of the tile's `tokens` rows, Width
  // elements a store.
  template <int Width, class Params>
  __device__ __forceinline__ void store_rows(const Params& q, int m0, int n0, int tokens, int id) const {
    constexpr int kVecs = Cfg::kRows / Width;  // per row of the tile
    Storage* D = static_cast<Storage*>(q.D);
    for (int idx = id; idx < tokens * kVecs; idx += kHandoffStorers) {
      const int token = idx / kVecs, c = Width * (idx % kVecs), col = n0 + c;
      if (col >= q.N) continue;
      const Storage* src = rows + token * Cfg::kHandoffPitch + c;
      Storage* d = D + static_cast<i64>(m0 + token) * q.ldd + col;
      if (col + Width <= q.N) {
        if constexpr (Width == 8) {
          *reinterpret_cast<uint4*>(d) = *reinterpret_cast<const uint4*>(src);
        } else {
          *reinterpret_cast<uint2*>(d) = *reinterpret_cast<const uint2*>(src);
        }
      } else {
        for (int e = 0; e < q.N - col; ++e) d[e] = src[e];
      }
    }
  }

  // 16 bytes a store where D's rows allow it, else 8 (plain_rows: ldd a multiple of 4, D
  // 8-byte aligned).
  template <class Params>
  __device__ __forceinline__ void store(const Params& q, int m0, int n0, int tokens, int id) const {
    if (q.ldd % 8 == 0 && reinterpret_cast<u64>(q.D) % 16 == 0) {
      store_rows<8>(q, m0, n0, tokens, id);
    } else {
      store_rows<4>(q, m0, n0, tokens, id);
    }
  }
};

// Shared B: the CTA's accumulators of D (wgmma_ss's fragment: token slice ts of 64, the
// warpgroup's kConsumerRows weight rows as columns), staged as rows of D like
// StagedTransposedTile, whose for_each_pair hands them to the epilogue.
// NOTE: the pitch of kRows + 8 floats puts the 4 tokens x 4 column pairs of a half-warp's
// 8-byte stores on 32 different banks.
template <class Cfg>
struct StagedTile : StagedTransposedTile<Cfg> {
  static constexpr int kSlice = Cfg::kConsumerRows / 2;  // accumulators per token slice
  __device__ __forceinline__ void stage(const float (&acc)[Cfg::kAcc], int wg) const {
    const int lane = threadIdx.x % 32;
    const int token0 = 16 * ((threadIdx.x / 32) % 4) + lane / 4;
    const int col0 = Cfg::kConsumerRows * wg + 2 * (lane % 4);
#pragma unroll
    for (int ts = 0; ts < Cfg::kTokenSlices; ++ts)
#pragma unroll
      for (int i = 0; i < Cfg::kConsumerRows / 2; i += 2) {
        const int token = 64 * ts + token0 + 8 * ((i / 2) % 2), col = col0 + 8 * (i / 4);
        *reinterpret_cast<float2*>(this->rows + token * Cfg::kStagedPitch + col) = make_float2(acc[kSlice * ts + i], acc[kSlice * ts + i + 1]);
      }
  }
};

}  // namespace gemm
