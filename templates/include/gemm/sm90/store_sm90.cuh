// The SM90 family's epilogue store: through shared memory and TMA.
//
// A consumer warpgroup computes its 64 rows of the tile in boxes (64 rows of D, 128
// bytes wide: 64 16-bit or 32 fp32 columns), writes them into staging buffers in the
// TMA 128-byte swizzle, and one thread hands them to TMA stores, which write whole rows
// of D in the background: the warpgroup goes on to its next tile's wgmma while D
// drains. Where the smem beside the ring holds the warpgroup's whole share, all its
// boxes go at once; else it rotates over kStoreBuffers buffers and waits, before it
// refills one, only until the store issued from it has read it (store_boxes).
//
// NOTE: why not the direct stores of gemm/epilogue.cuh: a warp's store writes 16 bytes
// in each of 8 rows (half of every 32-byte sector), and the warpgroup's wgmma wait for
// all of them to issue. bench/experiments/sm90_variants.py (H200, bf16) measured the
// 128x256 tile at 657 TFLOP/s with them and 803 with no epilogue at all, at 8192^3.
//
// Values are the Epilogue's (alpha, bias, gated SiLU, beta * C, the output type, and a
// grouped launch's row scales); rows and columns beyond D are computed, and TMA leaves
// them unwritten. In a grouped kernel `p` is the expert's problem, `row0` the
// warpgroup's first row in it, `d_row0` that row in D; where fewer than 64 rows are left
// in the expert (its last rows) a box would write the next expert's, so the staged boxes
// go out by the warpgroup's threads instead, 16 bytes each, whole 128-byte rows per warp
// (copy_rows).
// NOTE: why not the direct stores there: they took long enough to put the CTAs that met
// an expert's end behind the others of their rasterization group, which then read the
// B tiles they shared from DRAM again (ncu, Mixtral-like gate_up at 8192 tokens:
// 4.8 -> 19.4 GB of DRAM reads, 6.2 ms against 4.9 with every boundary on 64 rows).
#pragma once
#include "gemm/epilogue.cuh"
#include "gemm/grouped.cuh"
#include "gemm/sm90/ptx_sm90.cuh"

// Experiment knob (bench/experiments/sm90_variants.py): 0 sends the plain epilogue
// through the general path, to time the two in one run.
#ifndef GEMM_SM90_PLAIN_STMATRIX
#define GEMM_SM90_PLAIN_STMATRIX 1
#endif
// Experiment knob: 0 leaves the staging's proxy fence out (timing only: D may be wrong).
#ifndef GEMM_SM90_STORE_FENCE
#define GEMM_SM90_STORE_FENCE 1
#endif
// Experiment knob: 0 rotates single boxes over the staging buffers (store_boxes).
#ifndef GEMM_SM90_STORE_ROUNDS
#define GEMM_SM90_STORE_ROUNDS 1
#endif

namespace gemm {

__device__ __forceinline__ void st_shared(u32 addr, float v) { st_shared(addr, __float_as_uint(v)); }
__device__ __forceinline__ void st_shared(u32 addr, float2 v) {
  st_shared(addr, make_uint2(__float_as_uint(v.x), __float_as_uint(v.y)));
}

template <class Cfg>
struct Sm90Store {
  using TD = typename Cfg::TD;
  using Storage = typename TD::Storage;
  using PairT = Pair<TD>;
  static constexpr int kBoxCols = 128 / static_cast<int>(sizeof(Storage));  // D columns per box
  static constexpr int kBoxBytes = Cfg::kStoreBoxBytes;
  static constexpr int kBuffers = Cfg::kStoreBuffers;
  static_assert(kBuffers >= 1 && kBuffers <= 4, "1..4 staging buffers per consumer warpgroup");

  // Whether the tile's accumulator columns split into whole boxes: gated SiLU halves
  // them, so a box of D takes 2 * kBoxCols of them. Where not, the kernel stores directly.
  static_assert(Cfg::kCtaN % kBoxCols == 0, "a tile is whole boxes of D");
  static constexpr bool kGatedFits = Cfg::kCtaN % (2 * kBoxCols) == 0;
  __device__ __forceinline__ static bool fits(bool gated) { return !gated || kGatedFits; }

  // Byte x of row r of a staging box, as TMA's 128-byte swizzle lays it out (the 16-byte
  // chunk index XOR row % 8; boxes start on 1024-byte boundaries). The 8 rows a warp
  // writes at once then fall on different chunks: no bank conflicts.
  __device__ __forceinline__ static u32 swizzled(u32 box, int r, int x) {
    return box + static_cast<u32>(r * 128 + ((((x >> 4) ^ r) & 7) << 4) + (x & 15));
  }

  // Where D is 16-bit, the plain epilogue (alpha * acc: no C, no bias, not gated; the
  // common case) has a path of its own: stmatrix writes four 8x8 blocks per instruction
  // straight from the fragment and one cvt packs two values (Pair), about 2 instructions per
  // pair of values where the general path below takes about 20.
  static constexpr bool kPlainFast = sizeof(Storage) == 2 && GEMM_SM90_PLAIN_STMATRIX;

  __device__ __forceinline__ static void tma_store(const CUtensorMap* tma_d, u32 buf, int d_col, int row0) {
#if GEMM_SM90_LEAVE_OUT == 3
    (void)tma_d, (void)buf, (void)d_col, (void)row0;
#elif GEMM_SM90_STORE_EVICT_FIRST
    tma_store_2d_hint(tma_d, buf, d_col, row0, l2_evict_first_policy());
#else
    tma_store_2d(tma_d, buf, d_col, row0);
#endif
  }

  // The warpgroup's kBoxes boxes of D (columns d_col0.., rows row0..): fill(box, buf)
  // writes box `box` into the staging box at `buf`, then one thread stores it.
  // NOTE: generic-proxy writes must be visible to the async proxy (TMA) before the store
  // is issued: every writer fences, then all meet. A buffer is refilled only once the
  // store that last used it has read it.
  // The boxes go in rounds of kBuffers (one round where the warpgroup's whole share
  // fits): a round waits until the last round's stores have read their buffers, fills
  // them all, fences once and meets twice: per box half the fences and barriers of
  // rotating single boxes (GEMM_SM90_STORE_ROUNDS 0), and one wait per round. On the
  // 128x256 tile (four boxes, two buffers) 2 340 against 2 940 clocks of epilogue per
  // unit (bench/experiments/sm90_trace.py, H200); the kernel's time, at the board's power
  // cap, did not move.
  // Grouped kernels rotate single boxes still: in rounds their 64x256 tile spilled.
  // `copy(box, buf)`: where the warpgroup's rows end inside the box (a grouped
  // expert's last rows), every thread's part of the staged box goes out by copy_rows
  // instead of a TMA store; the next round's barrier then orders those reads before it.
  template <int kBoxes, class Fill, class Copy>
  __device__ __forceinline__ static void store_boxes(const CUtensorMap* tma_d, u32 staging, int barrier, int d_col0,
                                                     int row0, int& issued, Fill&& fill, bool by_tma, Copy&& copy) {
    const bool leader = threadIdx.x % 128 == 0;
    if constexpr ((GEMM_SM90_STORE_ROUNDS && !Cfg::kGrouped) || kBuffers >= kBoxes) {
#pragma unroll
      for (int first = 0; first < kBoxes; first += kBuffers) {
        constexpr int kRound = kBuffers < kBoxes ? kBuffers : kBoxes;
        if (leader) bulk_wait_group_read<0>();
        named_barrier_sync<128>(barrier);
#pragma unroll
        for (int b = 0; b < kRound; ++b)
          if (first + b < kBoxes) fill(first + b, staging + static_cast<u32>(b * kBoxBytes));
        if (GEMM_SM90_STORE_FENCE) fence_proxy_async_smem();
        named_barrier_sync<128>(barrier);
        if (!by_tma) {
#pragma unroll
          for (int b = 0; b < kRound; ++b)
            if (first + b < kBoxes) copy(first + b, staging + static_cast<u32>(b * kBoxBytes));
        } else if (leader) {
#pragma unroll
          for (int b = 0; b < kRound; ++b)
            if (first + b < kBoxes)
              tma_store(tma_d, staging + static_cast<u32>(b * kBoxBytes), d_col0 + (first + b) * kBoxCols, row0);
          bulk_commit_group();
        }
      }
    } else {
      // NOTE: copied boxes commit no bulk group, so the rotating buffers' count of
      // groups in flight no longer says which buffer is free: a copying warpgroup waits
      // for all.
#pragma unroll
      for (int box = 0; box < kBoxes; ++box, ++issued) {
        const u32 buf = staging + static_cast<u32>((issued % kBuffers) * kBoxBytes);
        if (leader) {
          if (by_tma) {
            bulk_wait_group_read<kBuffers - 1>();
          } else {
            bulk_wait_group_read<0>();
          }
        }
        named_barrier_sync<128>(barrier);
        fill(box, buf);
        if (GEMM_SM90_STORE_FENCE) fence_proxy_async_smem();
        named_barrier_sync<128>(barrier);
        if (!by_tma) {
          copy(box, buf);
        } else if (leader) {
          tma_store(tma_d, buf, d_col0 + box * kBoxCols, row0);
          bulk_commit_group();
        }
      }
    }
  }

  // Rows 0 .. rows - 1 of staged box `buf` to D's rows row0.. (of `p`) and columns d_col..
  // below d_cols: thread t takes 16-byte chunk t % 8 of rows t / 8, + 16, ..., so a warp
  // writes four whole 128-byte rows at once. D's rows are whole 16-byte chunks here (the
  // runtime encodes D's tensor map only then), so a chunk lies wholly inside or outside.
  template <class Params>
  __device__ __forceinline__ static void copy_rows(const Params& p, u32 buf, int row0, int d_col, int rows,
                                                   int d_cols) {
    constexpr int kChunkCols = 16 / static_cast<int>(sizeof(Storage));
    const int t = threadIdx.x % 128;
    const int chunk = t % 8;
    const int col = d_col + chunk * kChunkCols;
    if (col >= d_cols) return;
    char* d = static_cast<char*>(p.D) + static_cast<i64>(col) * static_cast<i64>(sizeof(Storage));
    for (int r = t / 8; r < rows; r += 16) {
      const uint4 v = ld_shared_v4(buf + static_cast<u32>(r * 128 + (((chunk ^ r) & 7) << 4)));
      *reinterpret_cast<uint4*>(d + static_cast<i64>(row0 + r) * p.ldd * static_cast<i64>(sizeof(Storage))) = v;
    }
  }

  // D = alpha * acc for 16-bit D. A box's 8 column groups go out as 4 stmatrix.x4, each
  // two groups x the warp's 16 rows: lane t addresses row t % 8 of matrix t / 8, i.e.
  // box row 16 * warp + 8 * (matrix & 1) + t % 8, column group 2q + (matrix >> 1), whose
  // 16-byte chunk the swizzle moves to (group ^ row % 8); as rows of a matrix are rows
  // % 8 = t % 8 and 2q is even, that chunk is 2q ^ ((matrix >> 1) ^ t % 8).
  // `lo` and `hi` scale the thread's two fragment rows (alpha, times a grouped launch's
  // row scales).
  template <class Copy>
  __device__ __forceinline__ static void store_scaled(const float (&acc)[Cfg::kCtaN / 2], float lo, float hi,
                                                      const CUtensorMap* tma_d, u32 staging, int barrier, int row0,
                                                      int col0, int& issued, bool by_tma, Copy&& copy) {
    constexpr int kBoxes = Cfg::kStoreBoxes;
    const int t = threadIdx.x % 128;
    const int lane = t % 32, matrix = lane / 8, row = lane % 8;
    const u32 row_bytes = static_cast<u32>((16 * (t / 32) + 8 * (matrix & 1) + row) * 128);
    const int chunk = (matrix >> 1) ^ row;
    store_boxes<kBoxes>(tma_d, staging, barrier, col0, row0, issued, [&](int box, u32 buf) {
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float* a = acc + 4 * (8 * box + 2 * q);  // column groups 8 * box + 2q and + 1
        stmatrix_x4(buf + row_bytes + static_cast<u32>(((2 * q) ^ chunk) << 4), PairT::pack(lo * a[0], lo * a[1]),
                    PairT::pack(hi * a[2], hi * a[3]), PairT::pack(lo * a[4], lo * a[5]),
                    PairT::pack(hi * a[6], hi * a[7]));
      }
    }, by_tma, copy);
  }

  // This warpgroup's 64 x kCtaN accumulators (the m64nNk16 D fragment) to D rows
  // row0.., accumulator columns col0... `staging`: its kBuffers boxes; `issued`: the
  // boxes it has stored so far (the same in every thread), which picks the buffer.
  // `barrier`: a named barrier id for this warpgroup's 128 threads. `rows`: the rows of
  // D left from row0 (fewer than 64 only at a grouped expert's end: copied, not stored
  // by TMA).
  template <bool kGated, class Params>
  __device__ __forceinline__ static void store(const float (&acc)[Cfg::kCtaN / 2], const Params& p,
                                               const CUtensorMap* tma_d, u32 staging, int barrier, int row0,
                                               int col0, int& issued, int d_row0, int rows = 64) {
    const bool by_tma = rows >= 64;
    const int d_col0 = kGated ? col0 / 2 : col0;
    const int d_cols = kGated ? p.N / 2 : p.N;
    auto copy = [&](int box, u32 buf) { copy_rows(p, buf, row0, d_col0 + box * kBoxCols, rows, d_cols); };
    const bool read_c = p.beta != 0.f;
    const bool add_bias = (p.epilogue & kEpilogueBias) != 0;
    const int t = threadIdx.x % 128;
    const int lane = t % 32;
    const int fragment_row = 16 * (t / 32) + lane / 4;  // and fragment_row + 8
    // The row scales of the thread's two fragment rows (1 outside grouped launches).
    const float scale_lo = row_scale<Cfg>(p, row0 + fragment_row);
    const float scale_hi = row_scale<Cfg>(p, row0 + fragment_row + 8);
    if constexpr (!kGated && kPlainFast) {
      if (!read_c && !add_bias) {
        store_scaled(acc, p.alpha * scale_lo, p.alpha * scale_hi, tma_d, staging, barrier, d_row0, col0, issued,
                     by_tma, copy);
        return;
      }
    }
    constexpr int kAccPerBox = (kGated ? 2 : 1) * kBoxCols;
    constexpr int kBoxes = Cfg::kCtaN / kAccPerBox;
    constexpr int kGroupsPerBox = kAccPerBox / 8;  // 8-column groups of the fragment
    constexpr u64 kPairBytes = 2 * sizeof(Storage);
    const int fragment_col = 2 * (lane % 4);
    const Storage* C = static_cast<const Storage*>(p.C);
    const Storage* bias = static_cast<const Storage*>(p.bias);
    const bool paired_c = reinterpret_cast<u64>(C) % kPairBytes == 0 && p.ldc % 2 == 0;
    const float alpha = p.alpha, beta = p.beta;
    const int M = p.M, N = p.N;
    store_boxes<kBoxes>(tma_d, staging, barrier, d_col0, d_row0, issued, [&](int box, u32 buf) {
#pragma unroll
      for (int jj = 0; jj < kGroupsPerBox; ++jj) {
        const int j = box * kGroupsPerBox + jj;
        const int c = col0 + 8 * j + fragment_col;
        float b0 = 0.f, b1 = 0.f;
        if (add_bias && c < N) {
          b0 = TD::to_f32(bias[c]);
          if (c + 1 < N) b1 = TD::to_f32(bias[c + 1]);
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int rl = fragment_row + 8 * h;
          const int r = row0 + rl;
          const float s = h == 0 ? scale_lo : scale_hi;
          const float v0 = alpha * acc[4 * j + 2 * h] + b0;
          const float v1 = alpha * acc[4 * j + 2 * h + 1] + b1;
          const bool inside = r < M && c < N;
          const Storage* c_row = C + static_cast<i64>(r) * p.ldc;
          if constexpr (kGated) {
            float out = v0 / (1.f + __expf(-v0)) * v1 * s;
            if (read_c && inside) out += beta * TD::to_f32(c_row[c >> 1]);
            const int e = 4 * jj + lane % 4;  // the D column in the box
            st_shared(swizzled(buf, rl, e * static_cast<int>(sizeof(Storage))), TD::from_f32(out));
          } else {
            float o0 = v0 * s, o1 = v1 * s;
            if (read_c && inside) {
              if (paired_c && c + 1 < N) {
                float c0, c1;
                PairT::unpack(*reinterpret_cast<const typename PairT::Type*>(c_row + c), c0, c1);
                o0 += beta * c0;
                o1 += beta * c1;
              } else {
                o0 += beta * TD::to_f32(c_row[c]);
                if (c + 1 < N) o1 += beta * TD::to_f32(c_row[c + 1]);
              }
            }
            const int e = 8 * jj + fragment_col;
            st_shared(swizzled(buf, rl, e * static_cast<int>(sizeof(Storage))), PairT::pack(o0, o1));
          }
        }
      }
    }, by_tma, copy);
  }

  // Before the CTA exits: its staging buffers must outlive the stores reading them.
  __device__ __forceinline__ static void drain() {
    if (threadIdx.x % 128 == 0) bulk_wait_group_read<0>();
  }
};

}  // namespace gemm
