// Integer weights to 16-bit floats in registers, two at a time, right before the MMA.
//
// NOTE: the conversion is the exponent trick, not a per-element float conversion: an
// integer q below 2^mantissa ORed into the bits of the float M (1024 for fp16, 128 for
// bf16, whose last mantissa bit weighs 1) reads as exactly M + q. Then
//   w = ((M + q) - (M + z)) * s
// is one exact subtraction and one rounded product per pair (two fma.rn.x2), the same
// single rounding as dequantizing in fp32 and rounding once.
#pragma once
#include "gemm/numeric.cuh"

namespace gemm {

template <class T>
struct DequantConsts;

template <>
struct DequantConsts<Half> {
  static constexpr u32 kMagic2 = 0x64006400u;  // 1024, 1024
  static constexpr float kMagic = 1024.f;
  static constexpr u32 kOne2 = 0x3C003C00u;
};

template <>
struct DequantConsts<BFloat16> {
  static constexpr u32 kMagic2 = 0x43004300u;  // 128, 128
  static constexpr float kMagic = 128.f;
  static constexpr u32 kOne2 = 0x3F803F80u;
};

// The per-(group, column) constants of a pair: the scale twice and -(M + zero) twice.
template <class T>
struct GroupConsts {
  u32 scale2, neg_base2;

  __device__ __forceinline__ static GroupConsts make(u16 scale_bits, u16 zero_bits) {
    const u16 nb = T::from_f32(-(DequantConsts<T>::kMagic + T::to_f32(zero_bits)));  // exact: an integer
    return {static_cast<u32>(scale_bits) * 0x10001u, static_cast<u32>(nb) * 0x10001u};
  }
};

// x holds two consecutive K values of one column: the low byte's two nibbles (4-bit)
// or the two low bytes (8-bit). Returns them as a packed pair, lower K first.
template <class T, int Bits>
__device__ __forceinline__ u32 dequant2(u32 x, GroupConsts<T> c) {
  static_assert(Bits == 4 || Bits == 8, "4- or 8-bit weights");
  using Kind = typename T::MmaKind;
  const u32 spread = Bits == 4 ? ((x & 0xFu) | ((x & 0xF0u) << 12)) : ((x & 0xFFu) | ((x & 0xFF00u) << 8));
  const u32 biased = spread | DequantConsts<T>::kMagic2;
  const u32 diff = fma2(biased, DequantConsts<T>::kOne2, c.neg_base2, Kind{});  // q - z, exact
  return fma2(diff, c.scale2, 0x80008000u, Kind{});                            // (q - z) * s
}

}  // namespace gemm
