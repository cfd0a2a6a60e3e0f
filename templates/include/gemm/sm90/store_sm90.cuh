// The SM90 family's epilogue store: through shared memory and TMA.
//
// A consumer warpgroup computes its 64 rows of the tile one box at a time (64 rows of
// D, 128 bytes wide: 64 16-bit or 32 fp32 columns), writes the box into a staging
// buffer in the TMA 128-byte swizzle, and one thread hands it to a TMA store, which
// writes whole rows of D in the background: the warpgroup goes on to its next tile's
// wgmma while D drains. A warpgroup rotates over kStoreBuffers buffers and waits, before
// it refills one, only until the store issued from it has read it.
//
// NOTE: why not the direct stores of gemm/epilogue.cuh: a warp's store writes 16 bytes
// in each of 8 rows (half of every 32-byte sector), and the warpgroup's wgmma wait for
// all of them to issue. bench/experiments/sm90_variants.py (H200, bf16) measured the
// 128x256 tile at 657 TFLOP/s with them and 803 with no epilogue at all, at 8192^3.
//
// Values are the Epilogue's (alpha, bias, gated SiLU, beta * C, the output type); rows
// and columns beyond D are computed, and TMA leaves them unwritten.
#pragma once
#include "gemm/epilogue.cuh"
#include "gemm/sm90/ptx_sm90.cuh"

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
  static constexpr int kBoxRows = 64;                                        // a consumer warpgroup's rows
  static constexpr int kBoxBytes = kBoxRows * 128;
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

  // This warpgroup's 64 x kCtaN accumulators (the m64nNk16 D fragment) to D rows
  // row0.., accumulator columns col0... `staging`: its kBuffers boxes; `issued`: the
  // boxes it has stored so far (the same in every thread), which picks the buffer.
  // `barrier`: a named barrier id for this warpgroup's 128 threads.
  template <bool kGated, class Params>
  __device__ __forceinline__ static void store(const float (&acc)[Cfg::kCtaN / 2], const Params& p,
                                               const CUtensorMap* tma_d, u32 staging, int barrier, int row0,
                                               int col0, int& issued) {
    constexpr int kAccPerBox = (kGated ? 2 : 1) * kBoxCols;
    constexpr int kBoxes = Cfg::kCtaN / kAccPerBox;
    constexpr int kGroupsPerBox = kAccPerBox / 8;  // 8-column groups of the fragment
    constexpr u64 kPairBytes = 2 * sizeof(Storage);
    const int t = threadIdx.x % 128;
    const int lane = t % 32;
    const int fragment_row = 16 * (t / 32) + lane / 4;  // and fragment_row + 8
    const int fragment_col = 2 * (lane % 4);
    const bool read_c = p.beta != 0.f;
    const bool add_bias = (p.epilogue & kEpilogueBias) != 0;
    const Storage* C = static_cast<const Storage*>(p.C);
    const Storage* bias = static_cast<const Storage*>(p.bias);
    const bool paired_c = reinterpret_cast<u64>(C) % kPairBytes == 0 && p.ldc % 2 == 0;
    const float alpha = p.alpha, beta = p.beta;
    const int M = p.M, N = p.N;
#pragma unroll
    for (int box = 0; box < kBoxes; ++box) {
      const u32 buf = staging + static_cast<u32>((issued % kBuffers) * kBoxBytes);
      if (t == 0) bulk_wait_group_read<kBuffers - 1>();  // the store that last used buf has read it
      named_barrier_sync<128>(barrier);
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
          const float v0 = alpha * acc[4 * j + 2 * h] + b0;
          const float v1 = alpha * acc[4 * j + 2 * h + 1] + b1;
          const bool inside = r < M && c < N;
          const Storage* c_row = C + static_cast<i64>(r) * p.ldc;
          if constexpr (kGated) {
            float out = v0 / (1.f + __expf(-v0)) * v1;
            if (read_c && inside) out += beta * TD::to_f32(c_row[c >> 1]);
            const int e = 4 * jj + lane % 4;  // the D column in the box
            st_shared(swizzled(buf, rl, e * static_cast<int>(sizeof(Storage))), TD::from_f32(out));
          } else {
            float o0 = v0, o1 = v1;
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
      // NOTE: the box's generic-proxy writes must be visible to the async proxy (TMA)
      // before the one thread issues the store: each writer fences, then all meet.
      fence_proxy_async_smem();
      named_barrier_sync<128>(barrier);
      if (t == 0) {
        const int d_col = (kGated ? col0 / 2 : col0) + box * kBoxCols;
#if GEMM_SM90_LEAVE_OUT == 3
        (void)d_col;
#elif GEMM_SM90_STORE_EVICT_FIRST
        tma_store_2d_hint(tma_d, buf, d_col, row0, l2_evict_first_policy());
#else
        tma_store_2d(tma_d, buf, d_col, row0);
#endif
        bulk_commit_group();
      }
      ++issued;
    }
  }

  // Before the CTA exits: its staging buffers must outlive the stores reading them.
  __device__ __forceinline__ static void drain() {
    if (threadIdx.x % 128 == 0) bulk_wait_group_read<0>();
  }
};

}  // namespace gemm
