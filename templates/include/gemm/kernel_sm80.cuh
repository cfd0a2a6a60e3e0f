// Entry of the SM80 (cp.async multi-stage) kernels.
#pragma once
#include "gemm/kernel.cuh"
#include "gemm/mainloop_sm80.cuh"

namespace gemm {

template <class Cfg, class Params>
__device__ __forceinline__ void gemm_sm80(const Params& p) {
  gemm_kernel<Cfg, MainloopSm80<Cfg>>(p);
}

}  // namespace gemm
