// The GEMM kernel body shared by both mainloops: CTA placement, mainloop,
// K-slice reduction, epilogue. A generated file defines the parameter struct and
// instantiates gemm_sm80 or gemm_sm70 once.
#pragma once
#include "gemm/cta_trace.cuh"
#include "gemm/epilogue.cuh"
#include "gemm/epilogue_staged.cuh"
#include "gemm/grouped.cuh"
#include "gemm/split_k.cuh"
#include "gemm/warp_mma_of.cuh"

namespace gemm {

// Moves a K slice's accumulators to shared memory (kStore) or adds them from there, all
// of them or (kRows0To7) only those of rows 0-7 of a 16-row warp tile.
template <bool kStore, bool kRows0To7, class Warp>
__device__ __forceinline__ void move_k_slice(float* acc, float* slot, int lane) {
#pragma unroll
  for (int i = 0; i < Warp::kAcc; ++i) {
    if (kRows0To7 && Warp::acc_row_base(i) >= 8) continue;
    if constexpr (kStore) {
      slot[i * 32 + lane] = acc[i];
    } else {
      acc[i] += slot[i * 32 + lane];
    }
  }
}

// Sum the accumulators of K-slices 1.. into slice 0 through shared memory.
// Returns false for the warps that are done (their partial sums were handed over).
// `rows_left`: the rows of the output from the tile's first (M - m0).
template <class Cfg, class Warp>
__device__ __forceinline__ bool reduce_k_slices(Warp& warp, char* smem, int warp_mn, int warp_k, int rows_left) {
  if constexpr (Cfg::kWarpsK == 1) {
    return true;
  } else {
    constexpr int kWarpsMN = Cfg::kWarpsM * Cfg::kWarpsN;
    const int lane = threadIdx.x & 31;
    float* red = reinterpret_cast<float*>(smem);
    float* acc = warp.acc_flat();
    // GEMM_LEAN_TAIL (config.cuh): a 16-row warp tile with at most 8 rows of output (decode)
    // moves half its sums. One uniform branch around each whole loop: tested per entry,
    // each test split the loads into blocks whose adds waited before the next loads issued.
    const bool rows_0_to_7 = GEMM_LEAN_TAIL && Cfg::kWarpTileM == 16 &&
                             rows_left - (warp_mn % Cfg::kWarpsM) * Cfg::kWarpTileM <= 8;
    constexpr bool kLean = GEMM_LEAN_TAIL && Cfg::kWarpTileM == 16;
    __syncthreads();  // the pipeline buffers are free once every warp left the mainloop
    if (GEMM_CTA_TRACE) cta_trace(kTraceAllLeft, trace_clock());
    if (warp_k > 0) {
      float* dst = red + ((warp_k - 1) * kWarpsMN + warp_mn) * Warp::kAcc * 32;
      if (kLean && rows_0_to_7) {
        move_k_slice<true, kLean, Warp>(acc, dst, lane);
      } else {
        move_k_slice<true, false, Warp>(acc, dst, lane);
      }
    }
    __syncthreads();
    if (warp_k > 0) return false;
    if (kLean && rows_0_to_7) {
#pragma unroll
      for (int s = 0; s < Cfg::kWarpsK - 1; ++s)
        move_k_slice<false, kLean, Warp>(acc, red + (s * kWarpsMN + warp_mn) * Warp::kAcc * 32, lane);
    } else {
#pragma unroll
      for (int s = 0; s < Cfg::kWarpsK - 1; ++s)
        move_k_slice<false, false, Warp>(acc, red + (s * kWarpsMN + warp_mn) * Warp::kAcc * 32, lane);
    }
    return true;
  }
}

// The mma.sync families' form of split_k_handover: only K-slice 0 warps get here.
template <class Cfg, class Warp, class Params>
__device__ __forceinline__ bool split_k_reduce(Warp& warp, const Params& p, int tile, int split, int rows_left) {
  constexpr int kThreads = Cfg::kWarpsM * Cfg::kWarpsN * 32;  // the threads still running
  const int warp_row0 = ((threadIdx.x >> 5) % Cfg::kWarpsM) * Cfg::kWarpTileM;
  auto row_of = [&](int i) { return warp_row0 + Warp::acc_row(i); };  // the tile row of acc[i]
  return split_k_handover<kThreads, Warp::kAcc, Cfg::kCtaM * Cfg::kCtaN>(warp.acc_flat(), row_of, p, tile, split,
                                                                        rows_left, threadIdx.x % kThreads);
}

// f(the problem the tile belongs to): `p` itself, or in a grouped launch the expert's
// (gemm/grouped.cuh). NOTE: built again at each use, from `p` (constant memory) and the
// few integers of `g`, rather than once: its shifted pointers would otherwise stay live
// across the mainloop (about 9 registers; the sm_80 builds spilled 8-20 bytes).
template <class Cfg, class Params, class F>
__device__ __forceinline__ void with_problem(const Params& p, const GroupTile& g, F&& f) {
  if constexpr (Cfg::kGrouped) {
    f(expert_problem<Cfg>(p, g));
  } else {
    f(p);
  }
}

// One output tile (tile_m, tile_n) of split `split`; `tile_id` numbers it among all the
// launch's tiles (split-K's workspace slot); `g`: a grouped launch's expert.
template <class Cfg, class Mainloop, class Params>
__device__ __forceinline__ void gemm_tile(const Params& p, const GroupTile& g, int tile_m, int tile_n, int split,
                                          int tile_id) {
  extern __shared__ __align__(16) char smem[];
  if (GEMM_CTA_TRACE) {
    cta_trace(kTraceStartNs, trace_global_ns());
    cta_trace(kTraceSm, trace_sm());
    cta_trace(kTraceStart, trace_clock());
  }
  const int m0 = tile_m * Cfg::kCtaM;
  const int n0 = tile_n * Cfg::kCtaN;
  const int warp_id = threadIdx.x >> 5;
  // Warp order: M fastest, then N, then the K slice.
  const int warp_m = warp_id % Cfg::kWarpsM;
  const int warp_n = (warp_id / Cfg::kWarpsM) % Cfg::kWarpsN;
  // NOTE: the K slice is read through a shuffle so that the compiler knows it is the
  // same in every lane: the quantized mainloops' group tests, which derive from it,
  // become uniform (W4 decode 1% faster on the H200). All three indices that way cost
  // the 9-16-row decode loop a register it does not have (a spill under the cap).
  const int warp_k = __shfl_sync(0xffffffffu, warp_id / (Cfg::kWarpsM * Cfg::kWarpsN), 0);

  // This split's K tiles: [split * k_tiles_per_split, ...) clipped to K (maybe none).
  const int k_tiles_total = (p.K + Cfg::kCtaK - 1) / Cfg::kCtaK;
  const int k_tile0 = split * p.k_tiles_per_split;
  int k_tiles = k_tiles_total - k_tile0;
  k_tiles = k_tiles < 0 ? 0 : (k_tiles > p.k_tiles_per_split ? p.k_tiles_per_split : k_tiles);

  Mainloop mainloop;
  with_problem<Cfg>(p, g, [&](const Params& q) { mainloop.init(q, m0, n0, k_tile0 * Cfg::kCtaK); });

  WarpMma<Cfg> warp;
  warp.clear();
  if (GEMM_CTA_TRACE) cta_trace(kTraceSetUp, trace_clock());
  mainloop(warp, smem_addr(smem), k_tiles, warp_m * Cfg::kWarpTileM, warp_n * Cfg::kWarpTileN,
           warp_k * Cfg::kWarpTileK);
  if (GEMM_CTA_TRACE) {
    cta_trace(kTraceLoopEnd, trace_clock());
    cta_trace(kTraceKTiles, k_tiles);
  }

  int rows_left = 0;  // the output's rows from the tile's first
  with_problem<Cfg>(p, g, [&](const Params& q) { rows_left = q.M - m0; });
  if (!reduce_k_slices<Cfg>(warp, smem, warp_id % (Cfg::kWarpsM * Cfg::kWarpsN), warp_k, rows_left)) return;
  if (GEMM_CTA_TRACE) cta_trace(kTraceReduced, trace_clock());
#if defined(GEMM_SM80_LEAVE_OUT) && GEMM_SM80_LEAVE_OUT == 6
  return;  // the experiment without split-K's hand-over nor the epilogue (mainloop_sm80.cuh)
#endif
  bool handed_over = false;  // a split whose partial sums another CTA adds up
  with_problem<Cfg>(p, g, [&](const Params& q) {
    handed_over = q.splits > 1 && !split_k_reduce<Cfg>(warp, q, tile_id, split, q.M - m0);
  });
  if (GEMM_CTA_TRACE) {
    cta_trace(handed_over ? kTraceEnd : kTraceHandedOver, trace_clock());
    if (handed_over) cta_trace(kTraceEndNs, trace_global_ns());
  }
  if (handed_over) return;
#if defined(GEMM_SM80_LEAVE_OUT) && GEMM_SM80_LEAVE_OUT == 1
  return;  // the experiment without an epilogue (mainloop_sm80.cuh)
#endif
  with_problem<Cfg>(p, g, [&](const Params& q) {
    if constexpr (StagedEpilogue<Cfg>::kFits) {
      if (StagedEpilogue<Cfg>::usable(q)) {
        StagedEpilogue<Cfg>::store(warp, q, smem_addr(smem), m0, n0, warp_m * Cfg::kWarpTileM,
                                   warp_n * Cfg::kWarpTileN);
        return;
      }
    }
    Epilogue<Cfg>::store(warp, q, m0 + warp_m * Cfg::kWarpTileM, n0 + warp_n * Cfg::kWarpTileN);
  });
  if (GEMM_CTA_TRACE) {
    cta_trace(kTraceEnd, trace_clock());
    cta_trace(kTraceEndNs, trace_global_ns());
  }
}

template <class Cfg, class Mainloop, class Params>
__device__ __forceinline__ void gemm_kernel(const Params& p) {
  // Rasterization: groups of 2^swizzle consecutive CTAs share a tile row of M and
  // walk 2^swizzle tiles of N, so CTAs in flight together reuse each other's tiles in L2.
  const int swizzle = p.swizzle;
  const int tile_m = blockIdx.x >> swizzle;
  const int tile_n = (blockIdx.y << swizzle) | (blockIdx.x & ((1 << swizzle) - 1));
  if (tile_n >= p.tiles_n) return;  // the grid's last column group may overhang N
  const int split = blockIdx.z;
  const int tile_id = tile_m * p.tiles_n + tile_n;
  if constexpr (Cfg::kGrouped) {
    // tile_m counts the tile rows of all experts in turn (gemm/grouped.cuh).
    const GroupTile g = find_group_tile<Cfg::kCtaM>(p.offsets, p.experts, tile_m);
    if (g.expert < 0) return;  // past the last tile row: the grid is a bound
    gemm_tile<Cfg, Mainloop>(p, g, g.tile, tile_n, split, tile_id);
  } else {
    gemm_tile<Cfg, Mainloop>(p, GroupTile{}, tile_m, tile_n, split, tile_id);
  }
}

}  // namespace gemm
