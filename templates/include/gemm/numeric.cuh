// Element types as tags: storage size, conversion to and from fp32, and the MMA
// flavour they select. Storage is raw bits (u16/float) so no CUDA header is needed.
#pragma once
#include "gemm/ptx.cuh"

namespace gemm {

// std::is_same without the standard library (NVRTC compiles without system headers).
template <class A, class B>
inline constexpr bool kSame = false;
template <class A>
inline constexpr bool kSame<A, A> = true;

struct Half {
  using Storage = u16;
  using MmaKind = MmaF16;
  static constexpr int kBytes = 2;
  __device__ __forceinline__ static float to_f32(Storage v) { return f16_to_f32(v); }
  __device__ __forceinline__ static Storage from_f32(float v) { return f32_to_f16(v); }
};

struct BFloat16 {
  using Storage = u16;
  using MmaKind = MmaBF16;
  static constexpr int kBytes = 2;
  __device__ __forceinline__ static float to_f32(Storage v) { return bf16_to_f32(v); }
  __device__ __forceinline__ static Storage from_f32(float v) { return f32_to_bf16(v); }
};

struct Float32 {
  using Storage = float;
  static constexpr int kBytes = 4;
  __device__ __forceinline__ static float to_f32(Storage v) { return v; }
  __device__ __forceinline__ static Storage from_f32(float v) { return v; }
};

// Weight-only quantized B: unsigned 4- or 8-bit integers packed along K. Storage is
// counted in 16-bit units so the tile copies move them like any 16-bit operand.
struct U4 {
  using Storage = u16;
  static constexpr int kBits = 4;
};

struct U8 {
  using Storage = u16;
  static constexpr int kBits = 8;
};

template <class T>
struct QuantBits {
  static constexpr int value = 0;  // not quantized
};
template <>
struct QuantBits<U4> {
  static constexpr int value = 4;
};
template <>
struct QuantBits<U8> {
  static constexpr int value = 8;
};

// Two adjacent output elements as one store: 4 bytes for 16-bit types, 8 for fp32.
// NOTE: on sm_80 and later one cvt packs both halves (f16x2 / bf16x2, round to nearest
// even like the single conversions): ptxas does not fuse two conversions and a
// shift-or into it, and the SM90 epilogue packs every accumulator pair.
// The primary template serves the 16-bit types (Half, BFloat16): one u32, `a` low.
template <class T>
struct Pair {
  using Type = u32;
  __device__ __forceinline__ static Type pack(float a, float b) {
#if __CUDA_ARCH__ >= 800
    u32 r;  // the first source is the high half
    if constexpr (kSame<T, Half>) {
      asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(b), "f"(a));
    } else {
      asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(b), "f"(a));
    }
    return r;
#else
    return static_cast<u32>(T::from_f32(a)) | (static_cast<u32>(T::from_f32(b)) << 16);
#endif
  }
  __device__ __forceinline__ static void unpack(Type v, float& a, float& b) {
    a = T::to_f32(static_cast<u16>(v & 0xffffu));
    b = T::to_f32(static_cast<u16>(v >> 16));
  }
};

template <>
struct Pair<Float32> {
  using Type = float2;
  __device__ __forceinline__ static Type pack(float a, float b) { return make_float2(a, b); }
  __device__ __forceinline__ static void unpack(Type v, float& a, float& b) {
    a = v.x;
    b = v.y;
  }
};

}  // namespace gemm
