// PTX wrappers used by the mainloops. Written from the PTX ISA; every wrapper is
// one instruction (or one tiny group) so that the SASS is predictable.
#pragma once

namespace gemm {

using u16 = unsigned short;
using u32 = unsigned int;
using u64 = unsigned long long;
using i64 = long long;

__device__ __forceinline__ u32 smem_addr(const void* p) {
  return static_cast<u32>(__cvta_generic_to_shared(p));
}

// The L2 prefetch size every cp.async asks for (PTX's .level::prefetch_size): on a miss,
// L2 fetches that many aligned bytes around the request, not only the sectors asked for.
// 0 leaves it to ptxas, which (NVRTC 13) marks the dense tiles' copies 128 bytes
// (LDGSTS.LTC128B) and the quantized tiles' none; CUTLASS 2.x asks for 128 everywhere.
// NOTE: timed on the H200 (docs/NOTES.md, twenty-seventh session), 128 changed nothing,
// not even on the 4-bit decode tiles whose weight rows are 64 bytes a K tile, and 256
// slowed the K-32 and narrow decode tiles; the knob stays for other GPUs' L2.
#ifndef GEMM_CP_ASYNC_PREFETCH
#define GEMM_CP_ASYNC_PREFETCH 0
#endif
#if GEMM_CP_ASYNC_PREFETCH == 0
#define GEMM_CP_L2 ""
#elif GEMM_CP_ASYNC_PREFETCH == 64
#define GEMM_CP_L2 ".L2::64B"
#elif GEMM_CP_ASYNC_PREFETCH == 128
#define GEMM_CP_L2 ".L2::128B"
#elif GEMM_CP_ASYNC_PREFETCH == 256
#define GEMM_CP_L2 ".L2::256B"
#else
#error "GEMM_CP_ASYNC_PREFETCH takes 0, 64, 128 or 256 (bytes)"
#endif

// ---------------------------------------------------------------------------
// cp.async: global -> shared without a register round trip (sm_80+).
// `src_bytes` < Bytes zero-fills the rest of the destination; 0 reads nothing,
// which is how row/column residues and K tails are predicated.
// NOTE: .cg (L2 only) exists for 16 bytes alone; smaller copies must use .ca.
// ---------------------------------------------------------------------------
template <int Bytes>
__device__ __forceinline__ void cp_async_zfill(u32 dst, const void* src, int src_bytes) {
  static_assert(Bytes == 4 || Bytes == 8 || Bytes == 16, "cp.async copies 4, 8 or 16 bytes");
  if constexpr (Bytes == 16) {
    asm volatile("cp.async.cg.shared.global" GEMM_CP_L2 " [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
  } else {
    asm volatile("cp.async.ca.shared.global" GEMM_CP_L2 " [%0], [%1], %2, %3;\n" ::"r"(dst), "l"(src), "n"(Bytes), "r"(src_bytes));
  }
}

// Values the compiler must keep as computed: it cannot see through the empty asm, so
// it can neither fold them into later uses nor rebuild them from their inputs.
__device__ __forceinline__ void opaque(u32& v) { asm volatile("" : "+r"(v)); }
__device__ __forceinline__ void opaque(int& v) { asm volatile("" : "+r"(v)); }
__device__ __forceinline__ void opaque(i64& v) { asm volatile("" : "+l"(v)); }
__device__ __forceinline__ void opaque(const char*& p) { asm volatile("" : "+l"(p)); }

// A whole-vector cp.async when `copy`, else nothing: the predicate sits on the
// instruction, so there is no branch around it.
// A whole 16-byte copy, no predicate and no zero fill: for tiles known to lie inside
// the matrix.
__device__ __forceinline__ void cp_async16(u32 dst, const void* src) {
  asm volatile("cp.async.cg.shared.global" GEMM_CP_L2 " [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
}

template <int Bytes>
__device__ __forceinline__ void cp_async_if(bool copy, u32 dst, const void* src) {
  static_assert(Bytes == 4 || Bytes == 8 || Bytes == 16, "cp.async copies 4, 8 or 16 bytes");
  if constexpr (Bytes == 16) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %0, 0;\n"
        " @p cp.async.cg.shared.global" GEMM_CP_L2 " [%1], [%2], 16;\n}\n" ::"r"(static_cast<int>(copy)),
        "r"(dst), "l"(src));
  } else {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %0, 0;\n"
        " @p cp.async.ca.shared.global" GEMM_CP_L2 " [%1], [%2], %3;\n}\n" ::"r"(static_cast<int>(copy)),
        "r"(dst), "l"(src), "n"(Bytes));
  }
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int N>
__device__ __forceinline__ void cp_async_wait() {
  static_assert(N >= 0, "wait_group count must be non-negative");
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// ---------------------------------------------------------------------------
// ldmatrix: four 8x8 b16 matrices per warp; lane l gives the row address of
// matrix l/8, row l%8. `.trans` delivers the transpose (used for K x N tiles).
// ---------------------------------------------------------------------------
__device__ __forceinline__ void ldmatrix_x4(u32 (&r)[4], u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// Two matrices: lanes 0-15 give the row addresses.
__device__ __forceinline__ void ldmatrix_x2(u32 (&r)[2], u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
}

__device__ __forceinline__ void ldmatrix_x4_trans(u32 (&r)[4], u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// ---------------------------------------------------------------------------
// mma.sync m16n8k16, fp32 accumulate. A: 4 regs (row-major 16x16), B: 2 regs
// (col-major 16x8), C/D: 4 fp32 (rows g and g+8, columns 2t and 2t+1).
// ---------------------------------------------------------------------------
struct MmaF16 {};
struct MmaBF16 {};

__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const u32 (&a)[4], const u32 (&b)[2], MmaF16) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const u32 (&a)[4], const u32 (&b)[2], MmaBF16) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// mma.sync m16n8k8 (sm_75+; bf16 from sm_80): A 2 regs (rows g and g+8, k 2t..2t+1),
// B 1 reg (k 2t..2t+1, column g); the same accumulator layout as m16n8k16. A
// m16n8k16 fragment is exactly two m16n8k8 fragments: (a0,a1;b0) and (a2,a3;b1).
__device__ __forceinline__ void mma_m16n8k8(float (&d)[4], u32 a0, u32 a1, u32 b0, MmaF16) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a0), "r"(a1), "r"(b0));
}

__device__ __forceinline__ void mma_m16n8k8(float (&d)[4], u32 a0, u32 a1, u32 b0, MmaBF16) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a0), "r"(a1), "r"(b0));
}

// mma.sync m8n8k4 (sm_70; emulated from sm_80 on). The warp splits into four
// quad pairs (lanes 4q..4q+3 and 4q+16..4q+19), each an independent 8x8x4 product.
// Inside a quad pair, j = lane%4 + 4*(lane>=16) holds row j of A (k 0..3) and
// column j of B (k 0..3); accumulator register i holds row (lane&1) + (i&2) + 4*(lane>=16),
// column (i&4) + (lane&2) + (i&1).
__device__ __forceinline__ void mma_m8n8k4(float (&d)[8], u32 a0, u32 a1, u32 b0, u32 b1) {
  asm volatile(
      "mma.sync.aligned.m8n8k4.row.col.f32.f16.f16.f32 {%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9}, {%10,%11}, "
      "{%0,%1,%2,%3,%4,%5,%6,%7};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
      : "r"(a0), "r"(a1), "r"(b0), "r"(b1));
}

// ---------------------------------------------------------------------------
// Plain global/shared accesses for the 2-byte-aligned fallback and the epilogue.
// ---------------------------------------------------------------------------
__device__ __forceinline__ u16 ld_global_u16(const void* p) {
  u16 v;
  asm volatile("ld.global.u16 %0, [%1];\n" : "=h"(v) : "l"(p));
  return v;
}

__device__ __forceinline__ void st_shared_u16(u32 addr, u16 v) {
  asm volatile("st.shared.u16 [%0], %1;\n" ::"r"(addr), "h"(v));
}

// Register-staged copies (the SM70 mainloop): one shared store per staged vector.
__device__ __forceinline__ void st_shared(u32 addr, uint4 v) {
  asm volatile("st.shared.v4.u32 [%0], {%1,%2,%3,%4};\n" ::"r"(addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w));
}
__device__ __forceinline__ void st_shared(u32 addr, uint2 v) {
  asm volatile("st.shared.v2.u32 [%0], {%1,%2};\n" ::"r"(addr), "r"(v.x), "r"(v.y));
}
__device__ __forceinline__ void st_shared(u32 addr, u32 v) { asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(addr), "r"(v)); }
__device__ __forceinline__ void st_shared(u32 addr, u16 v) { st_shared_u16(addr, v); }

// Packed half2 / bfloat162 fused multiply-add (one rounding for the pair).
__device__ __forceinline__ u32 fma2(u32 a, u32 b, u32 c, MmaF16) {
  u32 d;
  asm("fma.rn.f16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

__device__ __forceinline__ u32 fma2(u32 a, u32 b, u32 c, MmaBF16) {
  u32 d;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// Bit manipulation for the dequantization: (a & b) | c in one LOP3, and a byte
// permute of the pair {b, a} (PTX prmt: selector nibble i picks result byte i).
__device__ __forceinline__ u32 and_or(u32 a, u32 b, u32 c) {
  u32 d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));  // 0xEA = (0xF0 & 0xCC) | 0xAA
  return d;
}

template <u32 Selector>
__device__ __forceinline__ u32 byte_perm(u32 a, u32 b) {
  u32 d;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "n"(Selector));
  return d;
}

// Two fp32 values rounded to a bf16 pair: `lo` in the low half (sm_80+).
__device__ __forceinline__ u32 f32x2_to_bf16x2(float lo, float hi) {
  u32 d;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}

__device__ __forceinline__ u32 ld_shared_u32(u32 addr) {
  u32 v;
  asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(addr));
  return v;
}

__device__ __forceinline__ u16 ld_shared_u16(u32 addr) {
  u16 v;
  asm volatile("ld.shared.u16 %0, [%1];\n" : "=h"(v) : "r"(addr));
  return v;
}

__device__ __forceinline__ void ld_shared_v2(u32 (&r)[2], u32 addr) {
  asm volatile("ld.shared.v2.u32 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
}

__device__ __forceinline__ uint4 ld_shared_v4(u32 addr) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr));
  return v;
}

// ---------------------------------------------------------------------------
// Global -> register loads of data every CTA reads once (packed weights): through
// the non-coherent path, not kept in L1, so the activations cached there stay.
// The `_or_zeros` forms are predicated in the instruction (no branch per load) and
// leave zeros where `pred` is false.
// ---------------------------------------------------------------------------
template <int Words>
__device__ __forceinline__ void ld_stream(u32 (&r)[Words], const void* p) {
  static_assert(Words == 1 || Words == 2, "one or two 32-bit words");
  if constexpr (Words == 1) {
    asm volatile("ld.global.nc.L1::no_allocate.b32 %0, [%1];\n" : "=r"(r[0]) : "l"(p));
  } else {
    asm volatile("ld.global.nc.L1::no_allocate.v2.b32 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "l"(p));
  }
}

template <int Words>
__device__ __forceinline__ void ld_stream_or_zeros(bool pred, u32 (&r)[Words], const void* p) {
  static_assert(Words == 1 || Words == 2, "one or two 32-bit words");
#pragma unroll
  for (int i = 0; i < Words; ++i) r[i] = 0;
  if constexpr (Words == 1) {
    asm volatile(
        "{\n .reg .pred q;\n setp.ne.b32 q, %2, 0;\n @q ld.global.nc.L1::no_allocate.b32 %0, [%1];\n}\n"
        : "+r"(r[0])
        : "l"(p), "r"(static_cast<int>(pred)));
  } else {
    asm volatile(
        "{\n .reg .pred q;\n setp.ne.b32 q, %3, 0;\n @q ld.global.nc.L1::no_allocate.v2.b32 {%0,%1}, [%2];\n}\n"
        : "+r"(r[0]), "+r"(r[1])
        : "l"(p), "r"(static_cast<int>(pred)));
  }
}

// ---------------------------------------------------------------------------
// Split-K handshake: a per-tile semaphore in global memory (acquire / release at
// GPU scope), fp32 partials through L2 only (.cg) so no SM reads a stale L1 line,
// and a named barrier for the warps still running after the K-slice reduction.
// ---------------------------------------------------------------------------
__device__ __forceinline__ int ld_acquire_gpu(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void st_release_gpu(int* p, int v) {
  asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ void red_release_gpu_add(int* p, int v) {
  asm volatile("red.release.gpu.global.add.s32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}

// Predicated in the instruction, not by a branch around it: the loads of a tile's
// partial sums then go out back to back instead of one round trip each.
__device__ __forceinline__ float ld_cg_or_zero(bool pred, const float* p) {
  float v = 0.f;
  asm volatile(
      "{\n .reg .pred q;\n setp.ne.b32 q, %2, 0;\n @q ld.global.cg.f32 %0, [%1];\n}\n"
      : "+f"(v)
      : "l"(p), "r"(static_cast<int>(pred)));
  return v;
}

__device__ __forceinline__ void st_cg_if(bool pred, float* p, float v) {
  asm volatile("{\n .reg .pred q;\n setp.ne.b32 q, %2, 0;\n @q st.global.cg.f32 [%0], %1;\n}\n" ::"l"(p), "f"(v),
               "r"(static_cast<int>(pred)));
}

template <int Threads>
__device__ __forceinline__ void named_barrier_sync(int id) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "n"(Threads) : "memory");
}

// Arrives on named barrier `id` without waiting: the threads that bar.sync on it see this
// thread's earlier memory accesses.
template <int Threads>
__device__ __forceinline__ void named_barrier_arrive(int id) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "n"(Threads) : "memory");
}

// ---------------------------------------------------------------------------
// Conversions between fp32 and the 16-bit storage formats, kept as raw bits so
// that no CUDA header is needed under NVRTC.
// ---------------------------------------------------------------------------
__device__ __forceinline__ float f16_to_f32(u16 h) {
  float f;
  asm("cvt.f32.f16 %0, %1;\n" : "=f"(f) : "h"(h));
  return f;
}

__device__ __forceinline__ u16 f32_to_f16(float f) {
  u16 h;
  asm("cvt.rn.f16.f32 %0, %1;\n" : "=h"(h) : "f"(f));
  return h;
}

__device__ __forceinline__ float bf16_to_f32(u16 h) { return __uint_as_float(static_cast<u32>(h) << 16); }

__device__ __forceinline__ u16 f32_to_bf16(float f) {
  u16 h;
  asm("cvt.rn.bf16.f32 %0, %1;\n" : "=h"(h) : "f"(f));
  return h;
}

// Programmatic dependent launch (sm_90 up; gemm_runtime.Gemm's programmatic_launch).
// A kernel launched with programmatic stream serialization may start while the previous
// kernel on its stream still runs: grid_dependency_wait blocks until that grid has
// completed and its writes are visible, and every generated kernel calls it before its
// first global access (the templates in templates/), so nothing is read or written
// early; for a kernel launched without the attribute it returns at once.
// grid_dependents_launch, with GEMM_PDL_EARLY_TRIGGER=1, lets the next such kernel be
// scheduled once every CTA of this one has called it (first thing, in the templates):
// its CTAs then take SM slots and wait there while this one runs. By default it does
// nothing, and the next kernel is scheduled as this one's CTAs exit (the implicit
// trigger), which still overlaps its launch with this one's end.
// NOTE: the early trigger measured slower (H200, bench.experiments.pdl_trigger, the
// llama3-8b chain in a CUDA graph, the same plans, interleaved): W4 at M = 1 63.6 us
// against 57.3 plain and 57.0 with the trigger at exit; fp16 126.1 / 124.5 / 123.1; at M
// = 16 within 1.3% either way. The narrow decode kernels are one wave of 2-3 CTAs an SM;
// the next kernel's CTAs, placed early, crowd the SMs that free up first.
#ifndef GEMM_PDL_EARLY_TRIGGER
#define GEMM_PDL_EARLY_TRIGGER 0
#endif
__device__ __forceinline__ void grid_dependents_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && GEMM_PDL_EARLY_TRIGGER
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

}  // namespace gemm
