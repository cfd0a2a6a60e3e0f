// Division by a divisor fixed for the whole kernel, as a multiply-high, an add and a
// shift: what a persistent kernel's tile scheduler does per work unit, where a plain
// `/` compiles to a reciprocal (MUFU) and a dozen dependent fix-up instructions.
//
// With l = ceil(log2 d) and m = floor(2^32 * (2^l - d) / d) + 1, n / d = (umulhi(n, m)
// + n) >> l for every n < 2^31 (Granlund and Montgomery, "Division by invariant
// integers using multiplication", 1994, section 4; the sum cannot overflow as
// umulhi(n, m) < n < 2^31).
#pragma once
#include "gemm/ptx.cuh"

namespace gemm {

struct FastDiv {
  u32 divisor, multiplier, shift;

  __device__ __forceinline__ explicit FastDiv(int d) : divisor(static_cast<u32>(d)), shift(0) {
    while ((1u << shift) < divisor) ++shift;
    multiplier = static_cast<u32>(((1ull << 32) * ((1ull << shift) - divisor)) / divisor + 1);
  }
  // n in [0, 2^31).
  __device__ __forceinline__ int div(int n) const {
    return static_cast<int>((__umulhi(static_cast<u32>(n), multiplier) + static_cast<u32>(n)) >> shift);
  }
};

}  // namespace gemm
