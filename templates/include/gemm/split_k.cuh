// Split-K's hand-over of one output tile between the CTAs that computed its K slices,
// through the workspace (semaphores, fp32 partials), for any accumulator fragment.
#pragma once
#include "gemm/ptx.cuh"

// Experiment knob (bench/experiments/decode_variants.py's handover_fence; builds leave it
// at 0): GEMM_SPLIT_K_FENCE 1 has every thread of a split fence after its partials
// (__threadfence: MEMBAR.SC.GPU) before the barrier. Without it thread 0's release after
// the barrier orders them (a release is cumulative: it carries the stores the barrier
// ordered before it), as sm90/stream_k.cuh's hand-over does: H100, the W4 decode plans
// with splits at M = 16 2-4% faster without the fence, level at M = 1 (docs/NOTES.md,
// forty-first session).
#ifndef GEMM_SPLIT_K_FENCE
#define GEMM_SPLIT_K_FENCE 0
#endif

namespace gemm {

// Split-K: splits 0 .. S-2 of an output tile each write their fp32 partial sums to
// their own slot of the tile, then count themselves in on the tile's semaphore; the
// last split (S-1) waits until all S-1 have arrived, adds their partials in split
// order (so the result is the same on every run), keeps the sums for the epilogue
// and zeroes the semaphore, so the workspace is ready for the next call. Only rows
// of the output (m < M) travel: at decode sizes most of the tile's rows are empty.
// Returns false for the splits that are done. `kThreads` threads take part (`tid` is
// this one's index among them), each holding `kAcc` accumulators, acc[i] in tile row
// row_of(i); the partials keep that fragment order. `tile` is the tile's workspace
// slot, whatever the kernel numbers it by (the output tile index for the mma.sync
// families, the index among the split tiles for sm90): slot t owns semaphore t and
// partial tiles [t * (splits - 1), (t + 1) * (splits - 1)), so the runtime's workspace
// check counts the slots a launch uses (MainloopFamily.split_tiles).
// NOTE: one wait, not a chain of hand-overs: the splits finish at about the same
// time, and a chain would add a global-memory round trip per split. Blocks start in
// order of their linear index and z is the slowest grid dimension, so the splits
// the last one waits for have started (or finished): no deadlock.
// The named barrier the hand-over's threads meet at (0 is __syncthreads); a kernel's
// other named barriers take ids above it.
constexpr int kSplitKBarrier = 1;

template <int kThreads, int kAcc, int kTileFloats, class RowOf, class Params>
__device__ __forceinline__ bool split_k_handover(float* acc, RowOf row_of, const Params& p, int tile, int split,
                                                 int rows_left, int tid) {
  int* sem = p.semaphores + tile;
  float* slots = p.partials + static_cast<i64>(tile) * (p.splits - 1) * kTileFloats;
  if (split + 1 < p.splits) {
    float* mine = slots + static_cast<i64>(split) * kTileFloats;
#pragma unroll
    for (int i = 0; i < kAcc; ++i) st_cg_if(row_of(i) < rows_left, mine + i * kThreads + tid, acc[i]);
    if (GEMM_SPLIT_K_FENCE) __threadfence();  // the knob's old form (above)
    named_barrier_sync<kThreads>(kSplitKBarrier);
    if (tid == 0) red_release_gpu_add(sem, 1);
    return false;
  }
  if (tid == 0) {
    while (ld_acquire_gpu(sem) != p.splits - 1) {
    }
    st_release_gpu(sem, 0);  // every other split has arrived: nobody reads it again in this launch
  }
  named_barrier_sync<kThreads>(kSplitKBarrier);
  for (int s = 0; s + 1 < p.splits; ++s) {
    const float* theirs = slots + static_cast<i64>(s) * kTileFloats;
#pragma unroll
    for (int i = 0; i < kAcc; ++i) acc[i] += ld_cg_or_zero(row_of(i) < rows_left, theirs + i * kThreads + tid);
  }
  return true;
}

}  // namespace gemm
