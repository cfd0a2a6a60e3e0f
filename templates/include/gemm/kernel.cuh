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

// Serial split-K: the splits of one output tile take turns through the tile's
// semaphore (split z waits until it reads z), add the partial sums of the splits
// before them, and hand theirs on; the last split keeps its sums for the epilogue
// and zeroes the semaphore, so the workspace is ready for the next call.
// Returns false for the splits that are done. Only K-slice 0 warps get here.
// NOTE: blocks start in order of their linear index and z is the slowest grid
// dimension, so the split a CTA waits for has started (or finished): no deadlock.
template <class Cfg, class Warp, class Params>
__device__ __forceinline__ bool serial_split_k(Warp& warp, const Params& p, int tile, int split) {
  constexpr int kThreads = Cfg::kWarpsM * Cfg::kWarpsN * 32;  // the threads still running
  constexpr int kBarrier = 1;                                 // 0 is __syncthreads
  const int tid = threadIdx.x % kThreads;
  int* sem = p.semaphores + tile;
  float* part = p.partials + static_cast<i64>(tile) * (Cfg::kCtaM * Cfg::kCtaN);
  float* acc = warp.acc_flat();
  if (tid == 0) {
    while (ld_acquire_gpu(sem) != split) {
    }
  }
  named_barrier_sync<kThreads>(kBarrier);
  if (split > 0) {
#pragma unroll
    for (int i = 0; i < Warp::kAcc; ++i) acc[i] += ld_cg(part + i * kThreads + tid);
  }
  if (split + 1 < p.splits) {
#pragma unroll
    for (int i = 0; i < Warp::kAcc; ++i) st_cg(part + i * kThreads + tid, acc[i]);
    __threadfence();  // the partials are visible GPU-wide before the release below
    named_barrier_sync<kThreads>(kBarrier);
    if (tid == 0) st_release_gpu(sem, split + 1);
    return false;
  }
  if (tid == 0) st_release_gpu(sem, 0);
  return true;
}

template <class Cfg, class Mainloop, class Params>
__device__ __forceinline__ void gemm_kernel(const Params& p) {
  extern __shared__ __align__(16) char smem[];
  // Rasterization: groups of 2^swizzle consecutive CTAs share a tile row of M and
  // walk 2^swizzle tiles of N, so CTAs in flight together reuse each other's tiles in L2.
  const int swizzle = p.swizzle;
  const int tile_m = blockIdx.x >> swizzle;
  const int tile_n = (blockIdx.y << swizzle) | (blockIdx.x & ((1 << swizzle) - 1));
  if (tile_n >= p.tiles_n) return;  // the grid's last column group may overhang N
  const int split = blockIdx.z;
  const int m0 = tile_m * Cfg::kCtaM;
  const int n0 = tile_n * Cfg::kCtaN;
  const int warp_id = threadIdx.x >> 5;
  // Warp order: M fastest, then N, then the K slice.
  const int warp_m = warp_id % Cfg::kWarpsM;
  const int warp_n = (warp_id / Cfg::kWarpsM) % Cfg::kWarpsN;
  const int warp_k = warp_id / (Cfg::kWarpsM * Cfg::kWarpsN);

  // This split's K tiles: [split * k_tiles_per_split, ...) clipped to K (maybe none).
  const int k_tiles_total = (p.K + Cfg::kCtaK - 1) / Cfg::kCtaK;
  const int k_tile0 = split * p.k_tiles_per_split;
  int k_tiles = k_tiles_total - k_tile0;
  k_tiles = k_tiles < 0 ? 0 : (k_tiles > p.k_tiles_per_split ? p.k_tiles_per_split : k_tiles);

  Mainloop mainloop;
  mainloop.init(p, m0, n0, k_tile0 * Cfg::kCtaK);

  WarpMma<Cfg> warp;
  warp.clear();
  mainloop(warp, smem_addr(smem), k_tiles, warp_m * Cfg::kWarpTileM, warp_n * Cfg::kWarpTileN,
           warp_k * Cfg::kWarpTileK);

  if (!reduce_k_slices<Cfg>(warp, smem, warp_id % (Cfg::kWarpsM * Cfg::kWarpsN), warp_k)) return;
  if (p.splits > 1 && !serial_split_k<Cfg>(warp, p, tile_m * p.tiles_n + tile_n, split)) return;
  Epilogue<Cfg>::store(warp, p, m0 + warp_m * Cfg::kWarpTileM, n0 + warp_n * Cfg::kWarpTileN);
}

}  // namespace gemm
