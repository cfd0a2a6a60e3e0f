// Experiment knob GEMM_CTA_TRACE, 0 in every build. At 1 (bench/experiments/decode_trace.py)
// thread 0 of each CTA of the mma.sync kernels stamps the moments of its tile's phases
// into a module global, so that a decode launch's time can be split into the first round
// trip, the K loop, the reduction of the warps' K slices, split-K's hand-over and the
// epilogue, and its CTAs' start times into waves. At 0 nothing is emitted.
#pragma once

#ifndef GEMM_CTA_TRACE
#define GEMM_CTA_TRACE 0
#endif

namespace gemm {

// The trace's layout: per CTA (linear block index, the first kCtaTraceCtas) kCtaTracePoints
// stamps; TracePoint names them. Global-timer stamps are in ns and comparable across SMs;
// clock stamps are the SM's cycles, comparable within a CTA only.
// NOTE: enumerators, not constexpr ints: NVRTC emitted those as module globals, so
// every build's cubins changed with the header included.
enum : int { kCtaTraceCtas = 8192, kCtaTracePoints = 13 };
enum TracePoint : int {
  kTraceStartNs = 0,      // %globaltimer at entry
  kTraceSm = 1,           // %smid
  kTraceStart = 2,        // clock64 at entry
  kTraceFirstTile = 3,    // the prologue's first tile landed (after its barrier)
  kTraceLoopEnd = 4,      // thread 0's warp left the K loop
  kTraceReduced = 5,      // the CTA's K slices summed (every warp had left the loop)
  kTraceHandedOver = 6,   // split-K's hand-over done (this CTA goes on to the epilogue)
  kTraceEnd = 7,          // the epilogue's stores issued (or the partials handed over)
  kTraceEndNs = 8,        // %globaltimer then
  kTraceKTiles = 9,       // the K tiles this CTA ran
  kTraceSetUp = 10,       // the mainloop's state built (pointers, copy state), before any load
  kTraceIssued = 11,      // the prologue's loads issued (before its wait)
  kTraceAllLeft = 12,     // every warp had left the K loop (K-sliced tiles: after the first barrier)
};

}  // namespace gemm

#if GEMM_CTA_TRACE
extern "C" {
__device__ unsigned long long gemm_cta_trace[gemm::kCtaTraceCtas * gemm::kCtaTracePoints];
}
#endif

namespace gemm {

__device__ __forceinline__ void cta_trace(int point, unsigned long long value) {
#if GEMM_CTA_TRACE
  if (threadIdx.x == 0) {
    const unsigned cta = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    if (cta < kCtaTraceCtas) gemm_cta_trace[cta * kCtaTracePoints + point] = value;
  }
#endif
}

__device__ __forceinline__ unsigned long long trace_clock() {
#if GEMM_CTA_TRACE
  return clock64();
#else
  return 0;
#endif
}

__device__ __forceinline__ unsigned long long trace_global_ns() {
  unsigned long long t = 0;
#if GEMM_CTA_TRACE
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
#endif
  return t;
}

__device__ __forceinline__ unsigned long long trace_sm() {
  unsigned s = 0;
#if GEMM_CTA_TRACE
  asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
#endif
  return s;
}

}  // namespace gemm
