// One warp's share of a CTA tile: fragments loaded from shared memory with
// ldmatrix and multiplied with mma.sync m16n8k16 into fp32 accumulators.
#pragma once
#include "gemm/config.cuh"

namespace gemm {

template <class Cfg>
struct WarpMma {
  static constexpr int kMI = Cfg::kWarpTileM / 16;  // m16 tiles per warp
  static constexpr int kNI = Cfg::kWarpTileN / 8;   // n8 tiles per warp
  using MmaKind = typename Cfg::TA::MmaKind;

  u32 a[2][kMI][4];  // double-buffered along k16 steps
  u32 b[2][kNI][2];
  float acc[kMI][kNI][4];

  __device__ __forceinline__ void clear() {
#pragma unroll
    for (int mi = 0; mi < kMI; ++mi)
#pragma unroll
      for (int ni = 0; ni < kNI; ++ni)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[mi][ni][e] = 0.f;
  }

  // Fragments of k16 step `kk` (in elements of the CTA K tile) into buffer `buf`.
  // warp_m0 / warp_n0: the warp's offset inside the CTA tile.
  __device__ __forceinline__ void load(int buf, u32 smem_a, u32 smem_b, int warp_m0, int warp_n0, int k0) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int mi = 0; mi < kMI; ++mi) {
      // Matrices 0..3 = (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15), (rows 8-15, k 8-15).
      const int row = warp_m0 + mi * 16 + (lane & 15);
      const int col = k0 + (lane >> 4) * 8;
      ldmatrix_x4(a[buf][mi], smem_a + (row * Cfg::kLdsA + col) * 2);
    }
#pragma unroll
    for (int ni = 0; ni < kNI; ni += 2) {
      u32 r[4];
      if constexpr (Cfg::kOrderB == OrderB::kNK) {
        // Shared rows are n, K contiguous: the plain load yields the col-major B fragment.
        const int n = warp_n0 + ni * 8 + (lane & 7) + (lane >> 4) * 8;
        const int k = k0 + ((lane >> 3) & 1) * 8;
        ldmatrix_x4(r, smem_b + (n * Cfg::kLdsB + k) * 2);
      } else {
        // Shared rows are k, N contiguous: the transposing load yields the same fragment.
        const int k = k0 + (lane & 7) + ((lane >> 3) & 1) * 8;
        const int n = warp_n0 + ni * 8 + (lane >> 4) * 8;
        ldmatrix_x4_trans(r, smem_b + (k * Cfg::kLdsB + n) * 2);
      }
      b[buf][ni][0] = r[0];
      b[buf][ni][1] = r[1];
      b[buf][ni + 1][0] = r[2];
      b[buf][ni + 1][1] = r[3];
    }
  }

  __device__ __forceinline__ void mma(int buf) {
#pragma unroll
    for (int mi = 0; mi < kMI; ++mi)
#pragma unroll
      for (int ni = 0; ni < kNI; ++ni) mma_m16n8k16(acc[mi][ni], a[buf][mi], b[buf][ni], MmaKind{});
  }
};

}  // namespace gemm
