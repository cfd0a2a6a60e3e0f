// The GEMM kernel body shared by both mainloops: CTA placement, mainloop,
// K-slice reduction, epilogue. A generated file defines the parameter struct and
// instantiates gemm_sm80 or gemm_sm70 once.
#pragma once
#include "gemm/epilogue.cuh"
#include "gemm/warp_mma_of.cuh"

namespace gemm {

// Sum the accumulators of K-slices 1.. into slice 0 through shared memory.
// Returns false for the warps that are done (their partial sums were handed over).
template <class Cfg, class Warp>
__device__ __forceinline__ bool reduce_k_slices(Warp& warp, char* smem, int warp_mn, int warp_k) {
  if constexpr (Cfg::kWarpsK == 1) {
    return true;
  } else {
    constexpr int kWarpsMN = Cfg::kWarpsM * Cfg::kWarpsN;
    const int lane = threadIdx.x & 31;
    float* red = reinterpret_cast<float*>(smem);
    float* acc = warp.acc_flat();
    __syncthreads();  // the pipeline buffers are free once every warp left the mainloop
    if (warp_k > 0) {
      float* dst = red + ((warp_k - 1) * kWarpsMN + warp_mn) * Warp::kAcc * 32;
#pragma unroll
      for (int i = 0; i < Warp::kAcc; ++i) dst[i * 32 + lane] = acc[i];
    }
    __syncthreads();
    if (warp_k > 0) return false;
#pragma unroll
    for (int s = 0; s < Cfg::kWarpsK - 1; ++s) {
      const float* src = red + (s * kWarpsMN + warp_mn) * Warp::kAcc * 32;
#pragma unroll
      for (int i = 0; i < Warp::kAcc; ++i) acc[i] += src[i * 32 + lane];
    }
    return true;
  }
}

template <class Cfg, class Mainloop, class Params>
__device__ __forceinline__ void gemm_kernel(const Params& p) {
  extern __shared__ __align__(16) char smem[];
  const int m0 = blockIdx.x * Cfg::kCtaM;
  const int n0 = blockIdx.y * Cfg::kCtaN;
  const int warp_id = threadIdx.x >> 5;
  // Warp order: M fastest, then N, then the K slice.
  const int warp_m = warp_id % Cfg::kWarpsM;
  const int warp_n = (warp_id / Cfg::kWarpsM) % Cfg::kWarpsN;
  const int warp_k = warp_id / (Cfg::kWarpsM * Cfg::kWarpsN);

  Mainloop mainloop;
  mainloop.init(p.A, p.lda, p.B, p.ldb, p.M, p.N, p.K, m0, n0);

  WarpMma<Cfg> warp;
  warp.clear();
  const int k_tiles = (p.K + Cfg::kCtaK - 1) / Cfg::kCtaK;
  mainloop(warp, smem_addr(smem), k_tiles, warp_m * Cfg::kWarpTileM, warp_n * Cfg::kWarpTileN,
           warp_k * Cfg::kWarpTileK);

  if (!reduce_k_slices<Cfg>(warp, smem, warp_id % (Cfg::kWarpsM * Cfg::kWarpsN), warp_k)) return;
  Epilogue<Cfg>::store(warp, p, m0 + warp_m * Cfg::kWarpTileM, n0 + warp_n * Cfg::kWarpTileN);
}

}  // namespace gemm
