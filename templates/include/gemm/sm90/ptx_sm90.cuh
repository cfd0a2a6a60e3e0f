// SM90 (Hopper) PTX wrappers: mbarrier, TMA (cp.async.bulk.tensor), wgmma, setmaxnreg,
// elect.sync. Written from the PTX ISA; one instruction (or one tiny group) each, so
// that the SASS is predictable. wgmma and setmaxnreg need the sm_90a target (the
// arch-specific feature set); a plain sm_90 compile rejects them.
//
// Addresses of shared memory are 32-bit shared-window addresses (gemm::smem_addr).
#pragma once
#include "gemm/ptx.cuh"

namespace gemm {

// The driver's CUtensorMap, opaque: 128 bytes, 64-byte aligned. NVRTC has no CUDA
// headers, so it is declared here; only its address is ever used on the device.
// NOTE: in namespace gemm so that a translation unit that does include cuda.h (and its
// ::CUtensorMap) still compiles.
struct alignas(64) CUtensorMap {
  u64 opaque[16];
};
static_assert(sizeof(CUtensorMap) == 128, "CUtensorMap is 128 bytes");

// Bytes of dynamic shared memory this launch really got (the special register), so a
// kernel can refuse to run on a launch that gave it less than its layout needs.
__device__ __forceinline__ u32 dynamic_smem_size() {
  u32 v;
  asm volatile("mov.u32 %0, %%dynamic_smem_size;\n" : "=r"(v));
  return v;
}

// ---------------------------------------------------------------------------
// mbarrier: a 64-bit shared-memory object with an arrival count and a transaction
// (byte) count; a phase completes when both reach zero, and its parity flips.
// ---------------------------------------------------------------------------

// Initialise with the number of arrivals that complete one phase.
__device__ __forceinline__ void mbar_init(u32 bar, u32 arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(arrivals) : "memory");
}

// Make mbarrier.init visible to the async proxy (TMA's complete_tx) and to other threads.
// NOTE: only the .release.cluster form exists; it covers a single CTA as well.
__device__ __forceinline__ void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// A ring of shared-memory stages: full[s] completes when stage s's copies have landed
// (one arrival, which brings the expected bytes), empty[s] when `releases` consumer
// warps are done reading it. One thread initialises; the fence publishes the inits to
// TMA's complete_tx (async proxy) and to the other threads (of the cluster); the caller's
// __syncthreads or cluster_sync after it orders them.
template <int Stages>
__device__ __forceinline__ void init_ring(u64 (&full)[Stages], u64 (&empty)[Stages], u32 releases) {
#pragma unroll
  for (int s = 0; s < Stages; ++s) {
    mbar_init(smem_addr(&full[s]), 1);
    mbar_init(smem_addr(&empty[s]), releases);
  }
  fence_mbarrier_init();
}

// Return the barrier's memory to ordinary use (required before reusing it as data).
__device__ __forceinline__ void mbar_inval(u32 bar) {
  asm volatile("mbarrier.inval.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

// One arrival (release semantics: this thread's prior accesses happen before the phase completes).
// The state token is discarded (`_`): waiters use the parity form instead.
__device__ __forceinline__ void mbar_arrive(u32 bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// mbar_arrive where `arrive` is nonzero, as one predicated instruction: the address is
// made by every thread (on the uniform datapath where it is uniform) rather than behind
// a divergent branch, where the compiler computes it in vector registers.
__device__ __forceinline__ void mbar_arrive_if(u32 bar, u32 arrive) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.u32 p, %1, 0;\n @p mbarrier.arrive.shared::cta.b64 _, [%0];\n}\n" ::"r"(bar),
      "r"(arrive)
      : "memory");
}

// One arrival that also raises the expected transaction count by `bytes`: the phase then
// completes only once the TMA copies signalling this barrier delivered that many bytes.
__device__ __forceinline__ void mbar_arrive_expect_tx(u32 bar, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

// Whether the phase of parity `parity` has completed. May time out (returning false)
// before it does, so callers loop.
// GEMM_SM90_TRY_WAIT_NS (an experiment knob, unset in builds) passes a suspend-time
// hint: how long the thread may sleep in the instruction before it times out.
__device__ __forceinline__ bool mbar_try_wait(u32 bar, u32 parity) {
  u32 done;
#ifdef GEMM_SM90_TRY_WAIT_NS
  asm volatile(
      "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2, %3;\n selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(bar), "r"(parity), "n"(GEMM_SM90_TRY_WAIT_NS)
      : "memory");
#else
  asm volatile(
      "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
#endif
  return done != 0;
}

// Block until the phase of parity `parity` has completed (acquire semantics).
// NOTE: a freshly initialised barrier is in phase 0, so waiting for parity 1 returns at
// once; a producer waits on its "empty" barriers with parity (round & 1) ^ 1 for that reason.
__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
  while (!mbar_try_wait(bar, parity)) {
  }
}

// ---------------------------------------------------------------------------
// Thread-block clusters: CTAs of one cluster can reach each other's shared memory
// through the shared::cluster window.
// ---------------------------------------------------------------------------

// This CTA's rank in its cluster.
__device__ __forceinline__ u32 cluster_ctarank() {
  u32 r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}

// The shared::cluster address of the object at this CTA's shared address `addr` in the
// CTA of rank `rank`.
__device__ __forceinline__ u32 map_shared_rank(u32 addr, u32 rank) {
  u32 out;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(out) : "r"(addr), "r"(rank));
  return out;
}

// One arrival on the mbarrier at shared::cluster address `bar` (maybe another CTA's).
// NOTE: release at CTA scope (the default), not .release.cluster: a cluster-scope
// release waits for this thread's prior accesses to be visible cluster-wide, a fence
// per arrival that halved the cluster kernels' speed (H200). What the arrival
// announces (wgmma has finished reading a stage, wgmma_wait) needs no fence.
__device__ __forceinline__ void mbar_arrive_cluster(u32 bar) {
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// Every thread of every CTA of the cluster: each CTA's barrier inits are visible to the
// others before they arrive on them, and no CTA exits while another may still write
// into its shared memory.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}

// ---------------------------------------------------------------------------
// TMA: tile copies global -> shared described by a CUtensorMap, completing on an
// mbarrier with complete_tx. `map` is the generic address of a __grid_constant__
// kernel parameter (or of a tensor map in global/const memory). Coordinates are in
// elements, innermost (contiguous) dimension first; out-of-bounds parts of the box are
// filled (zeros with OOB_FILL_NONE) and still count toward the transaction bytes.
// ---------------------------------------------------------------------------

// Pull the tensor map into the descriptor cache ahead of the first copy that uses it.
__device__ __forceinline__ void prefetch_tensormap(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(map) : "memory");
}

// 2-D tile load into this CTA's shared memory at `dst`, signalling `bar`.
__device__ __forceinline__ void tma_load_2d(u32 dst, const CUtensorMap* map, u32 bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::
          "r"(dst),
      "l"(map), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}

// The same tile delivered to every CTA of the cluster named in `cta_mask`, at the same
// shared offset `dst` and signalling the barrier at offset `bar` in each of them.
__device__ __forceinline__ void tma_load_2d_multicast(u32 dst, const CUtensorMap* map, u32 bar, int c0, int c1,
                                                      u16 cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(dst),
      "l"(map), "r"(c0), "r"(c1), "r"(bar), "h"(cta_mask)
      : "memory");
}

// 2-D tile store from this CTA's shared memory at `src` through the tensor map; the
// parts of the box outside the tensor are not written. Joins the thread's open bulk
// group (bulk_commit_group closes it).
__device__ __forceinline__ void tma_store_2d(const CUtensorMap* map, u32 src, int c0, int c1) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n" ::"l"(map), "r"(c0),
               "r"(c1), "r"(src)
               : "memory");
}

// The same with an L2 eviction-priority policy (createpolicy) for the written lines.
__device__ __forceinline__ void tma_store_2d_hint(const CUtensorMap* map, u32 src, int c0, int c1, u64 policy) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group.L2::cache_hint [%0, {%1, %2}], [%3], %4;\n" ::"l"(map),
               "r"(c0), "r"(c1), "r"(src), "l"(policy)
               : "memory");
}

// An L2 policy that evicts the lines it covers first.
__device__ __forceinline__ u64 l2_evict_first_policy() {
  u64 policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}

__device__ __forceinline__ void bulk_commit_group() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }

// Block until at most N of this thread's bulk groups still read their shared-memory
// source (their global writes may still be under way).
template <int N>
__device__ __forceinline__ void bulk_wait_group_read() {
  static_assert(N >= 0 && N <= 7, "cp.async.bulk.wait_group takes 0..7 here");
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}

// `bytes` (a multiple of 16, both addresses 16-byte aligned) from global memory into this
// CTA's shared memory, signalling `bar` (whose expected bytes the caller has raised).
__device__ __forceinline__ void bulk_load(u32 dst, const void* src, u32 bytes, u32 bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}

// Order the global memory this thread's generic-proxy accesses observed (as an acquire
// made visible) before its later async-proxy accesses (a bulk copy reading it).
__device__ __forceinline__ void fence_proxy_async_global() { asm volatile("fence.proxy.async.global;\n" ::: "memory"); }

// Order this thread's generic-proxy shared-memory writes (st.shared, stmatrix) before
// later async-proxy accesses (TMA stores, wgmma reading that tile).
__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// Four 8x8 matrices of 16-bit elements from the warp's registers to shared memory:
// lane t supplies the address of row t % 8 of matrix t / 8, and its register i holds
// elements 2 * (t % 4), +1 of row t / 4 of matrix i (the mma / wgmma D fragment of
// one 8-column group, so accumulators go out without any reshuffle).
__device__ __forceinline__ void stmatrix_x4(u32 addr, u32 r0, u32 r1, u32 r2, u32 r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r0), "r"(r1),
               "r"(r2), "r"(r3)
               : "memory");
}

// stmatrix_x4 transposed: the same fragments (lane t's register i: elements 2 * (t % 4), +1
// of row t / 4 of matrix i), but each of the 8 addresses of a matrix receives one of its
// columns (8 elements of 16 bits, one from each row).
__device__ __forceinline__ void stmatrix_x4_trans(u32 addr, u32 r0, u32 r1, u32 r2, u32 r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r0),
               "r"(r1), "r"(r2), "r"(r3)
               : "memory");
}

// ---------------------------------------------------------------------------
// Warp-level helpers.
// ---------------------------------------------------------------------------

// True in exactly one lane of the (fully converged) warp; cheaper and more explicit
// than lane == 0 for "one thread issues the copies".
__device__ __forceinline__ bool elect_one() {
  u32 elected;
  asm volatile(
      "{\n .reg .b32 r;\n .reg .pred p;\n elect.sync r|p, 0xffffffff;\n selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(elected));
  return elected != 0;
}

// Move registers between warpgroups: a producer gives up registers (dec) so the
// consumers holding accumulators can take them (inc). Executed by every warp of a warpgroup.
// NOTE: honoured only when the kernel has a register cap at entry
// (__launch_bounds__(threads, 1) or -maxrregcount); otherwise ptxas warns (C7508).
template <int Regs>
__device__ __forceinline__ void setmaxnreg_inc() {
  static_assert(Regs >= 24 && Regs <= 256 && Regs % 8 == 0, "setmaxnreg: 24..256, a multiple of 8");
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(Regs));
}

template <int Regs>
__device__ __forceinline__ void setmaxnreg_dec() {
  static_assert(Regs >= 24 && Regs <= 256 && Regs % 8 == 0, "setmaxnreg: 24..256, a multiple of 8");
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(Regs));
}

// ---------------------------------------------------------------------------
// wgmma: warpgroup (4 consecutive warps, the first at a warp index divisible by 4)
// matrix multiply-accumulate, issued asynchronously.
//
// Ordering rules (PTX ISA, "asynchronous warpgroup level matrix" section):
//   * wgmma_fence() before the first wgmma, and whenever the accumulator or A
//     registers were touched by other instructions since the last wgmma;
//   * wgmma ops are gathered into a group by wgmma_commit(); wgmma_wait<N>() blocks
//     until at most N groups are pending. Reading the accumulators (or reusing the
//     shared-memory tiles) is only legal once their group has completed.
//   * consecutive wgmma of the same shape accumulating into the same registers need
//     no fence between them: the hardware orders them.
// ---------------------------------------------------------------------------
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }

__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }

template <int N>
__device__ __forceinline__ void wgmma_wait() {
  static_assert(N >= 0 && N <= 7, "wgmma.wait_group takes 0..7");
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// The compiler sees a wgmma's accumulators as written when the asm issues, not when the
// group completes, so it could move their reads above wgmma_wait(). An empty asm that
// "modifies" each register pins them: call after wgmma_wait and before wgmma_fence.
template <int R>
__device__ __forceinline__ void wgmma_fence_operand(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// The same for A registers a wgmma_rs read asynchronously ([k32 block][k16 step][register]
// of a K tile): kept, not reallocated to other values, until the wait before this.
template <int B, int S, int R>
__device__ __forceinline__ void wgmma_fence_operand(u32 (&a)[B][S][R]) {
#pragma unroll
  for (int b = 0; b < B; ++b)
#pragma unroll
    for (int s = 0; s < S; ++s)
#pragma unroll
      for (int r = 0; r < R; ++r) asm volatile("" : "+r"(a[b][s][r])::"memory");
}

// Shared-memory matrix descriptor (PTX ISA "Matrix Descriptor Format"):
//   bits  0-13  start address >> 4      bits 16-29  leading dimension byte offset >> 4
//   bits 32-45  stride dimension byte offset >> 4
//   bits 49-51  base offset (0: tiles start on a swizzle-pattern boundary)
//   bits 62-63  swizzle: 0 none, 1 128B, 2 64B, 3 32B
enum class SmemSwizzle : u32 { kNone = 0, k128B = 1, k64B = 2, k32B = 3 };

__device__ __forceinline__ u64 make_smem_desc(u32 addr, u32 lbo_bytes, u32 sbo_bytes, SmemSwizzle swizzle) {
  return static_cast<u64>((addr & 0x3FFFFu) >> 4) | (static_cast<u64>((lbo_bytes >> 4) & 0x3FFFu) << 16) |
         (static_cast<u64>((sbo_bytes >> 4) & 0x3FFFu) << 32) | (static_cast<u64>(swizzle) << 62);
}

// K-major operand in the layout TMA writes with SWIZZLE_128B: each row (of M or N) is
// 128 bytes of K (64 16-bit elements), 8 rows form a 1024-byte swizzle atom, atoms are
// stacked along M/N. `addr` is where the wgmma's 16-wide K slice starts: the tile base
// (1024-byte aligned) plus 32 bytes per k16 step.
// NOTE: SBO = 1024, the distance between 8-row atoms. LBO is unused for swizzled
// K-major layouts whose K slice fits in the 128-byte row (it always does for k16), so
// it is set to 16 bytes (encoded 1). Advancing the start by 32/64/96 bytes keeps bits
// 7-9 of the address, so the base offset stays 0: the hardware swizzles on the absolute
// address, which is why the tile base must be 1024-byte aligned.
__device__ __forceinline__ u64 smem_desc_kmajor_sw128(u32 addr) {
  return make_smem_desc(addr, 16, 1024, SmemSwizzle::k128B);
}

// A descriptor's start moved on by `bytes` (a multiple of 16), in its low word alone:
// the start field is an address in the shared window (under 256 KiB) >> 4, which never
// carries into the offsets above it. One add where rebuilding the descriptor takes four.
__device__ __forceinline__ u64 smem_desc_advance(u64 desc, u32 bytes) {
  u64 moved;
  asm("{\n .reg .b32 lo, hi;\n mov.b64 {lo, hi}, %1;\n add.u32 lo, lo, %2;\n mov.b64 %0, {lo, hi};\n}\n"
      : "=l"(moved)
      : "l"(desc), "r"(bytes >> 4));
  return moved;
}

// N-major (MN-major) operand in the layout TMA writes with SWIZZLE_128B from a K x N
// row-major matrix in boxes of 64 columns: a box is 64 rows of K, each 128 bytes of N
// (64 16-bit elements), every 8 rows a 1024-byte swizzle atom (8 K x 64 N). `addr` is the
// k16 slice's start: the tile base plus 2048 bytes (16 rows) per k16 step, so it stays
// 1024-byte aligned and the base offset 0.
// NOTE: for MN-major swizzled layouts the two offsets swap roles against K-major: LBO is
// the step between atoms along N (the next 64-column box: `box_bytes`), SBO the step
// between atoms along K (8 rows of 128 bytes: 1024).
__device__ __forceinline__ u64 smem_desc_nmajor_sw128(u32 addr, u32 box_bytes) {
  return make_smem_desc(addr, box_bytes, 1024, SmemSwizzle::k128B);
}

template <class Kind>
constexpr bool kWgmmaBF16 = false;
template <>
constexpr bool kWgmmaBF16<MmaBF16> = true;

// Operand lists. The accumulators are always %0..%(N/2-1); the operands after them are
// numbered on from there.
#define GEMM_WGMMA_ACC8(d, i) \
  "+f"(d[i + 0]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), \
      "+f"(d[i + 7])
#define GEMM_WGMMA_ACC4(d, i) "+f"(d[i + 0]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define GEMM_WGMMA_ACC32(d, i) \
  GEMM_WGMMA_ACC8(d, i), GEMM_WGMMA_ACC8(d, i + 8), GEMM_WGMMA_ACC8(d, i + 16), GEMM_WGMMA_ACC8(d, i + 24)

#define GEMM_WGMMA_D0_7 "%0, %1, %2, %3, %4, %5, %6, %7"
#define GEMM_WGMMA_D0_15 GEMM_WGMMA_D0_7 ", %8, %9, %10, %11, %12, %13, %14, %15"
#define GEMM_WGMMA_D0_31                      \
  "%0, %1, %2, %3, %4, %5, %6, %7, "          \
  "%8, %9, %10, %11, %12, %13, %14, %15, "    \
  "%16, %17, %18, %19, %20, %21, %22, %23, " \
  "%24, %25, %26, %27, %28, %29, %30, %31"
#define GEMM_WGMMA_D32_63                     \
  "%32, %33, %34, %35, %36, %37, %38, %39, " \
  "%40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, " \
  "%56, %57, %58, %59, %60, %61, %62, %63"
#define GEMM_WGMMA_D64_95                     \
  "%64, %65, %66, %67, %68, %69, %70, %71, " \
  "%72, %73, %74, %75, %76, %77, %78, %79, " \
  "%80, %81, %82, %83, %84, %85, %86, %87, " \
  "%88, %89, %90, %91, %92, %93, %94, %95"
#define GEMM_WGMMA_D96_127                            \
  "%96, %97, %98, %99, %100, %101, %102, %103, "     \
  "%104, %105, %106, %107, %108, %109, %110, %111, " \
  "%112, %113, %114, %115, %116, %117, %118, %119, " \
  "%120, %121, %122, %123, %124, %125, %126, %127"

#define GEMM_WGMMA_D64 GEMM_WGMMA_D0_31 ", " GEMM_WGMMA_D32_63
#define GEMM_WGMMA_D128 GEMM_WGMMA_D64 ", " GEMM_WGMMA_D64_95 ", " GEMM_WGMMA_D96_127

// Both operands from descriptors: d, a-desc, b-desc, scale-d, imm-scale-a, imm-scale-b,
// imm-trans-a, imm-trans-b. Scales +1; A K-major; B K-major (TB "0") or N-major ("1").
// scale-d is a predicate: false computes D = A*B, ignoring the accumulators' contents.
#define GEMM_WGMMA_SS(SHAPE, TYPES, TB, DLIST, IA, IB, IS, ...)                                      \
  asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %" #IS ", 0;\n"                                \
               " wgmma.mma_async.sync.aligned." SHAPE ".f32" TYPES " {" DLIST "}, %" #IA ", %" #IB \
               ", p, 1, 1, 0, " TB ";\n}\n"                                                       \
               : __VA_ARGS__                                                                      \
               : "l"(desc_a), "l"(desc_b), "r"(static_cast<int>(scale_d)))

// A from registers: d, {a0..a3}, b-desc, scale-d, imm-scale-a, imm-scale-b, imm-trans-b.
#define GEMM_WGMMA_RS(SHAPE, TYPES, DLIST, IA, IB, IS, ...)                                                  \
  asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %" #IS ", 0;\n"                                        \
               " wgmma.mma_async.sync.aligned." SHAPE ".f32" TYPES " {" DLIST "}, {" IA "}, %" #IB        \
               ", p, 1, 1, 0;\n}\n"                                                                       \
               : __VA_ARGS__                                                                              \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(static_cast<int>(scale_d)))

// D[64 x N] (+)= A[64 x 16] * B[16 x N], fp32 accumulators, A K-major in shared memory,
// B K-major (TransB false: the N x K weight) or N-major (TransB true: K x N row-major B,
// described by smem_desc_nmajor_sw128). `Kind` is MmaF16 or MmaBF16 (the operand type).
//
// Accumulator fragment (PTX ISA "Register Fragments", wgmma D for .f32): warp w of the
// warpgroup owns rows 16w..16w+15; within it, each 8-column block j = i / 4 is laid out
// like an mma.sync m16n8 accumulator:
//   row(i) = 16*w + lane/4 + 8*((i/2) % 2)
//   col(i) = 8*(i/4) + 2*(lane%4) + i%2          for i in 0..N/2-1
#define GEMM_WGMMA_SS_ALL(SHAPE, TB, DLIST, IA, IB, IS, ...)               \
  if constexpr (kWgmmaBF16<Kind>) {                                        \
    GEMM_WGMMA_SS(SHAPE, ".bf16.bf16", TB, DLIST, IA, IB, IS, __VA_ARGS__); \
  } else {                                                                 \
    GEMM_WGMMA_SS(SHAPE, ".f16.f16", TB, DLIST, IA, IB, IS, __VA_ARGS__);   \
  }
#define GEMM_WGMMA_SS_N(SHAPE, DLIST, IA, IB, IS, ...)                   \
  if constexpr (TransB) {                                                \
    GEMM_WGMMA_SS_ALL(SHAPE, "1", DLIST, IA, IB, IS, __VA_ARGS__)         \
  } else {                                                               \
    GEMM_WGMMA_SS_ALL(SHAPE, "0", DLIST, IA, IB, IS, __VA_ARGS__)         \
  }

template <int N, class Kind, bool TransB = false>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], u64 desc_a, u64 desc_b, bool scale_d) {
  static_assert(N == 64 || N == 128 || N == 192 || N == 256, "wgmma_ss: N is 64, 128, 192 or 256");
  if constexpr (N == 64) {
    GEMM_WGMMA_SS_N("m64n64k16", GEMM_WGMMA_D0_31, 32, 33, 34, GEMM_WGMMA_ACC32(d, 0))
  } else if constexpr (N == 128) {
    GEMM_WGMMA_SS_N("m64n128k16", GEMM_WGMMA_D64, 64, 65, 66, GEMM_WGMMA_ACC32(d, 0), GEMM_WGMMA_ACC32(d, 32))
  } else if constexpr (N == 192) {
    GEMM_WGMMA_SS_N("m64n192k16", GEMM_WGMMA_D64 ", " GEMM_WGMMA_D64_95, 96, 97, 98, GEMM_WGMMA_ACC32(d, 0),
                    GEMM_WGMMA_ACC32(d, 32), GEMM_WGMMA_ACC32(d, 64))
  } else {
    GEMM_WGMMA_SS_N("m64n256k16", GEMM_WGMMA_D128, 128, 129, 130, GEMM_WGMMA_ACC32(d, 0), GEMM_WGMMA_ACC32(d, 32),
                    GEMM_WGMMA_ACC32(d, 64), GEMM_WGMMA_ACC32(d, 96))
  }
}

// The operand type from Kind, as GEMM_WGMMA_SS_ALL (inline asm takes only literal strings).
#define GEMM_WGMMA_RS_ALL(SHAPE, DLIST, IA, IB, IS, ...)               \
  if constexpr (kWgmmaBF16<Kind>) {                                    \
    GEMM_WGMMA_RS(SHAPE, ".bf16.bf16", DLIST, IA, IB, IS, __VA_ARGS__); \
  } else {                                                             \
    GEMM_WGMMA_RS(SHAPE, ".f16.f16", DLIST, IA, IB, IS, __VA_ARGS__);   \
  }

// wgmma_ss with A from registers (e.g. dequantized in registers). Warp w holds rows
// 16w..16w+15 of the 64 x 16 A slice in the mma.sync m16n8k16 A layout: with g = lane/4,
// t = lane%4, a0 = (row g, k 2t..2t+1), a1 = (row g+8, k 2t..), a2 = (row g, k 2t+8..),
// a3 = (row g+8, k 2t+8..). The accumulator layout is that of wgmma_ss.
// NOTE: the A registers must not be rewritten until the wgmma's group completed, and a
// wgmma_fence() is needed after writing them, as for the accumulators.
// N = 8 to 32 are the decode widths: a few tokens' columns, so that the tensor cores do
// not multiply 64 columns of which one is a token.
template <int N, class Kind>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const u32 (&a)[4], u64 desc_b, bool scale_d) {
  static_assert(N == 8 || N == 16 || N == 32 || N == 64 || N == 128 || N == 256,
                "wgmma_rs: N is 8, 16, 32, 64, 128 or 256");
  if constexpr (N == 8) {
    GEMM_WGMMA_RS_ALL("m64n8k16", "%0, %1, %2, %3", "%4, %5, %6, %7", 8, 9, GEMM_WGMMA_ACC4(d, 0))
  } else if constexpr (N == 16) {
    GEMM_WGMMA_RS_ALL("m64n16k16", GEMM_WGMMA_D0_7, "%8, %9, %10, %11", 12, 13, GEMM_WGMMA_ACC8(d, 0))
  } else if constexpr (N == 32) {
    GEMM_WGMMA_RS_ALL("m64n32k16", GEMM_WGMMA_D0_15, "%16, %17, %18, %19", 20, 21, GEMM_WGMMA_ACC8(d, 0),
                      GEMM_WGMMA_ACC8(d, 8))
  } else if constexpr (N == 64) {
    GEMM_WGMMA_RS_ALL("m64n64k16", GEMM_WGMMA_D0_31, "%32, %33, %34, %35", 36, 37, GEMM_WGMMA_ACC32(d, 0))
  } else if constexpr (N == 128) {
    GEMM_WGMMA_RS_ALL("m64n128k16", GEMM_WGMMA_D64, "%64, %65, %66, %67", 68, 69, GEMM_WGMMA_ACC32(d, 0),
                      GEMM_WGMMA_ACC32(d, 32))
  } else {
    GEMM_WGMMA_RS_ALL("m64n256k16", GEMM_WGMMA_D128, "%128, %129, %130, %131", 132, 133, GEMM_WGMMA_ACC32(d, 0),
                      GEMM_WGMMA_ACC32(d, 32), GEMM_WGMMA_ACC32(d, 64), GEMM_WGMMA_ACC32(d, 96))
  }
}

// wgmma_rs on a prefix of an accumulator set of 256 tokens: m64nNk16 into d[0, N / 2),
// which holds the set's first N tokens (the fragment layout above does not depend on N),
// for a tile with fewer rows. Every register of the set is an operand, read and written,
// though the instruction names only the prefix, so that the compiler sees each wgmma of a
// K loop that issues this on some tiles and the full width on others define the whole set.
template <int N, class Kind>
__device__ __forceinline__ void wgmma_rs_prefix(float (&d)[128], const u32 (&a)[4], u64 desc_b, bool scale_d) {
  static_assert(N == 64 || N == 128, "wgmma_rs_prefix: 64 or 128 of 256 tokens");
  if constexpr (N == 64) {
    GEMM_WGMMA_RS_ALL("m64n64k16", GEMM_WGMMA_D0_31, "%128, %129, %130, %131", 132, 133, GEMM_WGMMA_ACC32(d, 0),
                      GEMM_WGMMA_ACC32(d, 32), GEMM_WGMMA_ACC32(d, 64), GEMM_WGMMA_ACC32(d, 96))
  } else {
    GEMM_WGMMA_RS_ALL("m64n128k16", GEMM_WGMMA_D64, "%128, %129, %130, %131", 132, 133, GEMM_WGMMA_ACC32(d, 0),
                      GEMM_WGMMA_ACC32(d, 32), GEMM_WGMMA_ACC32(d, 64), GEMM_WGMMA_ACC32(d, 96))
  }
}

#undef GEMM_WGMMA_SS
#undef GEMM_WGMMA_SS_ALL
#undef GEMM_WGMMA_SS_N
#undef GEMM_WGMMA_RS
#undef GEMM_WGMMA_RS_ALL
#undef GEMM_WGMMA_D64
#undef GEMM_WGMMA_D128
#undef GEMM_WGMMA_D0_7
#undef GEMM_WGMMA_D0_15
#undef GEMM_WGMMA_D0_31
#undef GEMM_WGMMA_D32_63
#undef GEMM_WGMMA_D64_95
#undef GEMM_WGMMA_D96_127
#undef GEMM_WGMMA_ACC32
#undef GEMM_WGMMA_ACC8
#undef GEMM_WGMMA_ACC4

}  // namespace gemm
