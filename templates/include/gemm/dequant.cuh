// Integer weights to 16-bit floats in registers, right before the MMA.
//
// The packed layout (gemm_runtime.quant.pack_for_gemm) gives every thread, for each
// n8 x k32 block of B, the 8 weights its m16n8k16 B fragments of two k16 steps need:
// one 32-bit word (4-bit) or two (8-bit). Word bits are ordered so that each
// extraction below yields one fragment register, a (k, k+1) pair of one column.
//
// NOTE: the conversion is the exponent trick, not a per-element float conversion: an
// integer q below 2^mantissa ORed into the bits of the float M (1024 for fp16, 128 for
// bf16, whose last mantissa bit weighs 1) reads as exactly M + q. Then
//   w = ((M + q) - (M + z)) * s
// is one exact subtraction and one rounded product per pair (two fma.rn.x2), the same
// single rounding as dequantizing in fp32 and rounding once. 8-bit codes do not fit
// bf16's 7-bit mantissa, so u8 with bf16 goes through fp32 (2^23 + q) instead.
//
// Deferred scaling (kDeferred; WarpMmaQuant): the MMA takes the bare codes instead,
// as exact 16-bit values c(q) (one LOP3 or PRMT per fragment register), and per group
// its fp32 sums P = sum a * c(q) and the row sums R = sum a (in the codes' units) become
//   sum a * (q - z) * s = s * (P - z' R)
// with z' the zero in the codes' terms (group_consts): two FFMAs per accumulator per
// group instead of two packed operations per fragment register per k32 step.
#pragma once
#include "gemm/numeric.cuh"

namespace gemm {

// Fragments of one n8 x k32 block: b[h][r] is register r of the k16 step h.
using BlockFragments = u32[2][2];

// A 16-bit value in both halves of a register (a column's scale or zero, packed).
// NOTE: as a PTX pair {v, v}, which ptxas folds into the f16x2 / bf16x2 instruction that
// reads it (an .H0_H0 operand); v * 0x10001 cost an IMAD per scale and zero, in every
// K tile of the sm90_quant consumer (thirty-eighth session, docs/NOTES.md).
__device__ __forceinline__ u32 twice(u16 v) {
  u32 d;
  asm("mov.b32 %0, {%1, %1};\n" : "=r"(d) : "h"(v));
  return d;
}

template <class T, int Bits>
struct Dequant;

// fp16, 4-bit. Word nibble i holds k = 2t + 8 (i & 3) + (i >> 2) (t = lane % 4), so
// nibbles (0, 4) are register 0 of step 0, (1, 5) register 1, and the same one byte up
// for step 1. The high nibble of a byte is taken in place (16 q) and scaled by 1/16.
template <>
struct Dequant<Half, 4> {
  static constexpr int kWords = 1;
  struct Consts {
    u32 scale2, neg_lo2, neg_hi2;  // s s; -(1024 + z) twice; -(64 + z) twice
  };

  __device__ __forceinline__ static Consts make(u16 scale, u16 zero) {
    const u32 z2 = twice(zero);
    return {twice(scale), fma2(z2, 0xBC00BC00u, 0xE400E400u, MmaF16{}), fma2(z2, 0xBC00BC00u, 0xD400D400u, MmaF16{})};
  }

  __device__ __forceinline__ static void apply(const u32 (&w)[kWords], const Consts& c, BlockFragments& b) {
    u32 x = w[0];
#pragma unroll
    for (int h = 0; h < 2; ++h, x >>= 8) {
      const u32 lo = and_or(x, 0x000F000Fu, 0x64006400u);  // 1024 + q
      const u32 hi = and_or(x, 0x00F000F0u, 0x64006400u);  // 1024 + 16 q
      b[h][0] = fma2(fma2(lo, 0x3C003C00u, c.neg_lo2, MmaF16{}), c.scale2, 0x80008000u, MmaF16{});
      b[h][1] = fma2(fma2(hi, 0x2C002C00u, c.neg_hi2, MmaF16{}), c.scale2, 0x80008000u, MmaF16{});
    }
  }

  // Deferred: c(q) = q * 2^-24 (the code as an fp16 subnormal, exact); the high nibble
  // of a byte reads 16 q * 2^-24, so the A registers it meets (k + 8 .. k + 15 of each
  // k16, A fragment registers 2 and 3) are taken at 1/16, and the row-sum MMA meets them
  // with 16 * 2^-24 (the others with 2^-24), so that P - z R is 2^-24 sum a (q - z);
  // kFinalScale undoes the 2^-24 once, after the last group.
  // NOTE: A / 16 is exact down to |a| = 2^-10; below, it rounds on the subnormal grid
  // (at most 2^-25 away), far under the output's own rounding.
  static constexpr bool kDeferred = true;
  static constexpr u32 kAHiScale = 0x2C002C00u;                        // 1/16 twice; 0: A as it is
  static constexpr u32 kOnesLo = 0x00010001u, kOnesHi = 0x00100010u;  // row-sum B: 2^-24, 16 * 2^-24
  static constexpr float kFinalScale = 16777216.f;                    // 2^24

  __device__ __forceinline__ static void apply_codes(const u32 (&w)[kWords], BlockFragments& b) {
    b[0][0] = w[0] & 0x000F000Fu;
    b[0][1] = w[0] & 0x00F000F0u;
    b[1][0] = (w[0] >> 8) & 0x000F000Fu;
    b[1][1] = (w[0] >> 8) & 0x00F000F0u;
  }

  // Scale and the zero the codes are taken from, of two adjacent columns.
  __device__ __forceinline__ static void group_consts(u32 s2, u32 z2, float (&s)[2], float (&z)[2]) {
    Pair<Half>::unpack(s2, s[0], s[1]);
    Pair<Half>::unpack(z2, z[0], z[1]);
  }
};

// bf16, 4-bit: the same word; 128 + 16 q would overflow bf16's mantissa, so every
// nibble pair is shifted down to the bottom instead.
template <>
struct Dequant<BFloat16, 4> {
  static constexpr int kWords = 1;
  struct Consts {
    u32 scale2, neg2;  // s s; -(128 + z) twice
  };

  __device__ __forceinline__ static Consts make(u16 scale, u16 zero) {
    return {twice(scale), fma2(twice(zero), 0xBF80BF80u, 0xC300C300u, MmaBF16{})};
  }

  // Fragment register i of the word's block (i >> 1: k16 step, i & 1: register) as the
  // bf16 codes 128 + q, exact.
  __device__ __forceinline__ static u32 code(const u32 (&w)[kWords], int i) {
    return and_or(w[0] >> (4 * i), 0x000F000Fu, 0x43004300u);
  }

  __device__ __forceinline__ static void apply(const u32 (&w)[kWords], const Consts& c, BlockFragments& b) {
#pragma unroll
    for (int i = 0; i < 4; ++i)
      b[i >> 1][i & 1] = fma2(fma2(code(w, i), 0x3F803F80u, c.neg2, MmaBF16{}), c.scale2, 0x80008000u, MmaBF16{});
  }

  // Deferred: the codes 128 + q as they are (bf16 subnormals would leave fp32's range
  // in the products), so the codes are taken from 128 + z.
  static constexpr bool kDeferred = true;
  static constexpr u32 kAHiScale = 0;
  static constexpr u32 kOnesLo = 0x3F803F80u, kOnesHi = 0x3F803F80u;  // 1
  static constexpr float kFinalScale = 1.f;

  __device__ __forceinline__ static void apply_codes(const u32 (&w)[kWords], BlockFragments& b) {
#pragma unroll
    for (int i = 0; i < 4; ++i) b[i >> 1][i & 1] = code(w, i);
  }

  __device__ __forceinline__ static void group_consts(u32 s2, u32 z2, float (&s)[2], float (&z)[2]) {
    Pair<BFloat16>::unpack(s2, s[0], s[1]);
    Pair<BFloat16>::unpack(z2, z[0], z[1]);
    z[0] += 128.f;
    z[1] += 128.f;
  }
};

// fp16, 8-bit: word h is step h's fragments, bytes (k, k+1, k+8, k+9) with k = 2t.
template <>
struct Dequant<Half, 8> {
  static constexpr int kWords = 2;
  struct Consts {
    u32 scale2, neg2;  // s s; -(1024 + z) twice
  };

  __device__ __forceinline__ static Consts make(u16 scale, u16 zero) {
    return {twice(scale), fma2(twice(zero), 0xBC00BC00u, 0xE400E400u, MmaF16{})};
  }

  __device__ __forceinline__ static void apply(const u32 (&w)[kWords], const Consts& c, BlockFragments& b) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      // Bytes 0, 1 (then 2, 3) under the exponent byte 0x64 of 1024.
      const u32 lo = byte_perm<0x4140>(w[h], 0x64646464u);
      const u32 hi = byte_perm<0x4342>(w[h], 0x64646464u);
      b[h][0] = fma2(fma2(lo, 0x3C003C00u, c.neg2, MmaF16{}), c.scale2, 0x80008000u, MmaF16{});
      b[h][1] = fma2(fma2(hi, 0x3C003C00u, c.neg2, MmaF16{}), c.scale2, 0x80008000u, MmaF16{});
    }
  }

  // Deferred: c(q) = q * 2^-24, the byte under a zero high byte (an exact subnormal).
  static constexpr bool kDeferred = true;
  static constexpr u32 kAHiScale = 0;
  static constexpr u32 kOnesLo = 0x00010001u, kOnesHi = 0x00010001u;  // 2^-24
  static constexpr float kFinalScale = 16777216.f;

  __device__ __forceinline__ static void apply_codes(const u32 (&w)[kWords], BlockFragments& b) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      b[h][0] = byte_perm<0x4140>(w[h], 0u);
      b[h][1] = byte_perm<0x4342>(w[h], 0u);
    }
  }

  __device__ __forceinline__ static void group_consts(u32 s2, u32 z2, float (&s)[2], float (&z)[2]) {
    Dequant<Half, 4>::group_consts(s2, z2, s, z);
  }
};

// bf16, 8-bit: each byte becomes the fp32 2^23 + q; (q - z) * s is exact in fp32
// (9 by 8 significant bits), so the only rounding is the conversion of the pair.
template <>
struct Dequant<BFloat16, 8> {
  static constexpr int kWords = 2;
  // 8-bit codes do not fit bf16's mantissa: the scaling stays in the inner loop.
  static constexpr bool kDeferred = false;
  struct Consts {
    float scale, neg;  // s; -(2^23 + z)
  };

  __device__ __forceinline__ static Consts make(u16 scale, u16 zero) {
    return {bf16_to_f32(scale), -(8388608.f + bf16_to_f32(zero))};
  }

  template <u32 Byte>
  __device__ __forceinline__ static float value(u32 w, const Consts& c) {
    const float biased = __uint_as_float(byte_perm<0x7440 | Byte>(w, 0x4B000000u));  // 2^23 + q
    return __fmul_rn(__fadd_rn(biased, c.neg), c.scale);
  }

  __device__ __forceinline__ static void apply(const u32 (&w)[kWords], const Consts& c, BlockFragments& b) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      b[h][0] = f32x2_to_bf16x2(value<0>(w[h], c), value<1>(w[h], c));
      b[h][1] = f32x2_to_bf16x2(value<2>(w[h], c), value<3>(w[h], c));
    }
  }
};

}  // namespace gemm
