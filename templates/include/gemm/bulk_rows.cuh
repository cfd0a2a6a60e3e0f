// Bulk copies (cp.async.bulk, sm_90) of A's rows of a direct-B decode tile's K tile: a
// row of A's K tile is one contiguous run of global memory and lands as one padded row
// of the stage (PaddedRows: contiguous there too). One lane of warp 0 issues them, a
// copy a row that exists, and the stage's mbarrier counts their bytes; the other warps
// issue none. The scale and zero rows stay on the cp.async copies (GroupRowsCopy): a
// bulk copy a 32-byte row would cost warp 0 more than the cp.async copies cost the warps
// that share them.
//
// NOTE: why: the decode tiles are bound by their warps' instruction streams, not by their
// loads (docs/perf/read_order_h100.md), and every warp spent about 28 of its ~260
// instructions a K tile on its share of A's copies (a 64-bit address chain, a predicate
// and three issue-slot fillers per LDGSTS, sm_90 SASS of 16x16x1024 w1x1x8 s3).
// NOTE: every operand of a bulk copy is uniform over the warp (the copy instruction takes
// uniform registers); a lane-dependent address made ptxas wrap each copy in a loop over
// the warp's distinct values (ELECT, R2UR, UBLKCP: about 20 instructions a copy).
//
// Only K tiles inside K, of CTAs whose A is 16-byte aligned, go this way (`ok`, uniform
// over the CTA): the K edge needs its zero fill, which bulk copies do not do, so it
// takes the cp.async copies. Rows of A past M are not copied; the stage keeps what it
// held there, which feeds only output rows that are never stored.
#pragma once
#include "gemm/ptx.cuh"
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#include "gemm/sm90/ptx_sm90.cuh"
#endif

namespace gemm {

template <int CtaK, int RowBytesA>
struct BulkRowsA {
  static constexpr u32 kRowBytes = CtaK * 2;  // one row of A's K tile
  const char* a;  // A at (m0, the split's first K)
  i64 lda_bytes;
  int rows;       // A's rows to copy: the CTA's rows inside M, at most the tile's
  bool ok;        // the CTA's tiles inside K may go by bulk copies

  template <class Params>
  __device__ __forceinline__ void init(const Params& p, int m0, int k0, int tile_rows) {
    lda_bytes = p.lda * 2;
    a = static_cast<const char*>(p.A) + m0 * lda_bytes + static_cast<i64>(k0) * 2;
    rows = p.M - m0 < tile_rows ? p.M - m0 : tile_rows;
    ok = ((reinterpret_cast<u64>(a) | static_cast<u64>(lda_bytes)) & 15) == 0;
  }

  // The stages' mbarriers: one arrival a K tile, from thread 0 (with the bulk copies'
  // bytes, or alone for a tile the cp.async copies bring). A static shared array, so
  // that the dynamic layout (and the host's size of it) stays as it is.
  template <int Stages>
  __device__ __forceinline__ static u32 bars() {
    __shared__ alignas(8) u64 full[Stages];
    return smem_addr(full);
  }
  template <int Stages>
  __device__ __forceinline__ static void init_bars() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (threadIdx.x == 0) {
#pragma unroll
      for (int s = 0; s < Stages; ++s) mbar_init(bars<Stages>() + 8 * s, 1);
      fence_mbarrier_init();
    }
#endif
  }
  __device__ __forceinline__ static void arrive(u32 bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (threadIdx.x == 0) mbar_arrive(bar);
#endif
  }
  __device__ __forceinline__ static void wait(u32 bar, u32 parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    mbar_wait(bar, parity);
#endif
  }

  // Thread 0: the first `n` rows of A's K tile at `k0` (from the split's first element)
  // into the stage at `sa`, signalling `bar`, which first expects their bytes.
  __device__ __forceinline__ void issue(u32 sa, u32 bar, int k0, int n) const {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (threadIdx.x == 0) {
      mbar_arrive_expect_tx(bar, static_cast<u32>(n) * kRowBytes);
      const char* src = a + static_cast<i64>(k0) * 2;
      for (int r = 0; r < n; ++r) bulk_load(sa + static_cast<u32>(r * RowBytesA), src + r * lda_bytes, kRowBytes, bar);
    }
#endif
  }
};

}  // namespace gemm
