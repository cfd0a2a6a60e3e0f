// Entry of the SM70 (register-staged double buffer) kernels.
#pragma once
#include "gemm/kernel.cuh"
#include "gemm/mainloop_sm70.cuh"

namespace gemm {

template <class Cfg, class Params>
__device__ __forceinline__ void gemm_sm70(const Params& p) {
  gemm_kernel<Cfg, MainloopSm70<Cfg>>(p);
}

}  // namespace gemm
