// Stream-K for the SM90 quantized family (kernel_sm90_quant.cuh): the K tiles of all
// output tiles form one sequence, tile after tile (iteration t * k_tiles + k is K tile k
// of tile t), and each CTA of the grid takes an equal contiguous share of it, so no SM
// idles in a last, partly filled wave (224 tiles on 132 SMs run as 1.7 waves of work,
// not 2).
//
// A tile cut between CTAs is finished by the CTA holding its K tile 0: the others (their
// shares start inside the tile) hand their sums over through the workspace, one fp32
// partial tile per CTA in its own slot and a flag, and that CTA adds them in order of
// rank, so every run gives the same sums.
// NOTE: ranks run against block order (rank = ctas - 1 - blockIdx.x). The CTA finishing
// a tile holds the tile's head at the end of its share and waits for the ranks above
// it, which hold the tile's rest at the start of theirs: by then they are long done, and
// being of lower block index they started first, so no wait can hang even when other
// kernels hold some SMs and not all of the grid is resident.
// Its experiment knobs (GEMM_SM90Q_LEAVE_OUT, GEMM_SM90Q_SK_FENCE) are kernel_sm90_quant.cuh's,
// defined there before this file is included.
#pragma once
#include "gemm/ptx.cuh"
#include "gemm/split_k.cuh"

namespace gemm {

// The named barrier of a give's partials and the warp raising its flag (SK_FENCE 2).
constexpr int kStreamKGiveBarrier = 8;

struct StreamK {
  long long total;  // K tiles of all output tiles
  int ctas;         // the grid: ranks 0 .. ctas - 1

  // The first iteration of rank r's share ([begin(r), begin(r + 1)); none when equal).
  __device__ __forceinline__ long long begin(int r) const { return static_cast<long long>(r) * total / ctas; }
  // The rank whose share holds iteration g: the last r with begin(r) <= g.
  __device__ __forceinline__ int rank_of(long long g) const {
    return static_cast<int>(((g + 1) * ctas - 1) / total);
  }
};

// A share that starts inside a tile: its sums go to the rank's slot of the partials
// (D's rows of the tile only, rows_left of them), then its flag is raised. `kThreads`
// threads take part, each holding `kAcc` accumulators, acc[i] in tile row row_of(i).
template <int kThreads, int kAcc, int kTileFloats, class RowOf, class Params>
__device__ __forceinline__ void stream_k_give(const float* acc, RowOf row_of, const Params& p, int rank, int rows_left,
                                              int tid) {
  float* mine = p.partials + static_cast<i64>(rank) * kTileFloats;
#pragma unroll
  for (int i = 0; i < kAcc; ++i) st_cg_if(row_of(i) < rows_left, mine + i * kThreads + tid, acc[i]);
  if (GEMM_SM90Q_SK_FENCE == 2) {
    // The flag is stream_k_raise's: the consumers go on without waiting for it.
    named_barrier_arrive<kThreads + 32>(kStreamKGiveBarrier);
    return;
  }
  if (GEMM_SM90Q_SK_FENCE) __threadfence();  // the partials are visible GPU-wide before the flag
  named_barrier_sync<kThreads>(kSplitKBarrier);
  if (tid == 0 && GEMM_SM90Q_LEAVE_OUT != 8 && GEMM_SM90Q_LEAVE_OUT != 9) st_release_gpu(p.semaphores + rank, 1);
}

// GEMM_SM90Q_SK_FENCE 2: a warp outside the consumers raises the give's flag once the
// `kConsumers` threads' partials are stored (their arrive on the barrier orders their
// stores before its release, which is cumulative), so the consumers' next K tiles do not
// wait for the stores to reach L2. Called by one whole warp.
template <int kConsumers, class Params>
__device__ __forceinline__ void stream_k_raise(const Params& p, int rank, int lane) {
  named_barrier_sync<kConsumers + 32>(kStreamKGiveBarrier);
  if (lane == 0 && GEMM_SM90Q_LEAVE_OUT != 8 && GEMM_SM90Q_LEAVE_OUT != 9) st_release_gpu(p.semaphores + rank, 1);
}

// The tile's head share adds the sums of ranks first .. last (their shares hold the rest
// of the tile), lowering each flag for the next launch once it is seen raised.
template <int kThreads, int kAcc, int kTileFloats, class RowOf, class Params>
__device__ __forceinline__ void stream_k_take(float* acc, RowOf row_of, const Params& p, const StreamK& sk, int first,
                                              int last, int rows_left, int tid) {
  if (tid == 0 && GEMM_SM90Q_LEAVE_OUT != 8) {
    for (int r = first; r <= last; ++r) {
      if (sk.begin(r) == sk.begin(r + 1)) continue;  // an empty share hands nothing over
      while (ld_acquire_gpu(p.semaphores + r) == 0) {
      }
      st_release_gpu(p.semaphores + r, 0);
    }
  }
  named_barrier_sync<kThreads>(kSplitKBarrier);
  for (int r = first; r <= last; ++r) {
    if (sk.begin(r) == sk.begin(r + 1)) continue;
    const float* theirs = p.partials + static_cast<i64>(r) * kTileFloats;
#pragma unroll
    for (int i = 0; i < kAcc; ++i) acc[i] += ld_cg_or_zero(row_of(i) < rows_left, theirs + i * kThreads + tid);
  }
}

}  // namespace gemm
