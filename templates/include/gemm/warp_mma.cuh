// One warp's share of a CTA tile for the m16n8 atoms (m16n8k16, m16n8k8):
// fragments loaded from shared memory with ldmatrix (sm_75+) and multiplied into
// fp32 accumulators, one k16 step at a time.
#pragma once
#include "gemm/config.cuh"

namespace gemm {

// One k16 step of a 16x8 output tile with either m16n8 atom.
template <class Atom, class Kind>
__device__ __forceinline__ void mma_k16(float (&acc)[4], const u32 (&a)[4], const u32 (&b)[2], Kind kind) {
  if constexpr (kSame<Atom, AtomM16N8K8>) {
    // A k16 fragment is two k8 fragments: (a0, a1; b0) then (a2, a3; b1).
    mma_m16n8k8(acc, a[0], a[1], b[0], kind);
    mma_m16n8k8(acc, a[2], a[3], b[1], kind);
  } else {
    mma_m16n8k16(acc, a, b, kind);
  }
}

// A fragments of the k16 step at `k0` for a warp's m16 tiles: ldmatrix matrices
// 0..3 = (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15), (rows 8-15, k 8-15).
template <class Cfg, int MI>
__device__ __forceinline__ void load_a_fragments(u32 (&a)[MI][4], u32 smem_a, int warp_m0, int k0) {
  using Layout = typename Cfg::LayoutA;
  const int lane = threadIdx.x & 31;
  if constexpr (Layout::kXor) {
    // NOTE: the lane's offset in the first m16 tile, then whole periods of rows. With
    // offset_k at each tile's own row ptxas does not see that rows 16 apart keep their XOR
    // bits: the B loads (same form below) took three instructions each where padded ones
    // take one (128x128x32 s4's lean loop 131 instructions, 127 so). Padded rows keep the
    // per-tile form, whose SASS the default set was timed with (this form changes 114 kernels).
    static_assert(16 % Layout::kPeriodRows == 0, "m16 tiles start whole periods of the layout apart");
    const u32 lane_offset = Layout::offset_k(warp_m0 + (lane & 15), (lane >> 4) * 8, k0);
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) ldmatrix_x4(a[mi], smem_a + lane_offset + mi * 16 * Layout::kRowBytes);
  } else {
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) {
      const int row = warp_m0 + mi * 16 + (lane & 15);
      ldmatrix_x4(a[mi], smem_a + Layout::offset_k(row, (lane >> 4) * 8, k0));
    }
  }
}

// The fp32 accumulators of a warp's MI x NI grid of m16n8 tiles, in the mma.sync
// C-fragment layout: lane (g, t) holds rows g and g + 8, columns 2t and 2t + 1.
template <int MI, int NI>
struct M16N8Accumulators {
  static constexpr int kMI = MI;              // m16 tiles per warp
  static constexpr int kNI = NI;              // n8 tiles per warp
  static constexpr int kAcc = kMI * kNI * 4;  // accumulators per thread

  float acc[kMI][kNI][4];

  __device__ __forceinline__ float* acc_flat() { return &acc[0][0][0]; }

  __device__ __forceinline__ void clear() {
#pragma unroll
    for (int mi = 0; mi < kMI; ++mi)
#pragma unroll
      for (int ni = 0; ni < kNI; ++ni)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[mi][ni][e] = 0.f;
  }

  // The row inside the warp tile of this thread's accumulator acc_flat()[i].
  __device__ __forceinline__ static int acc_row(int i) {
    const int e = i % 4;
    return i / (kNI * 4) * 16 + ((threadIdx.x & 31) >> 2) + (e >= 2 ? 8 : 0);
  }

  // The least row, over the warp's lanes, of accumulator acc_flat()[i] (a constant):
  // a warp needs entry i only where that row exists.
  __device__ __forceinline__ static constexpr int acc_row_base(int i) { return i / (kNI * 4) * 16 + (i % 4 >= 2 ? 8 : 0); }

  // Visit the accumulators as pairs of adjacent columns: f(row, col, v[col], v[col + 1]).
  template <class F>
  __device__ __forceinline__ void for_each_pair(int row0, int col0, F&& f) const {
    const int lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int mi = 0; mi < kMI; ++mi)
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int ni = 0; ni < kNI; ++ni)
          f(row0 + mi * 16 + g + h * 8, col0 + ni * 8 + t * 2, acc[mi][ni][h * 2], acc[mi][ni][h * 2 + 1]);
  }
};

template <class Cfg>
struct WarpMmaM16N8 : M16N8Accumulators<Cfg::kWarpTileM / 16, Cfg::kWarpTileN / 8> {
  using Base = M16N8Accumulators<Cfg::kWarpTileM / 16, Cfg::kWarpTileN / 8>;
  using Base::acc;
  using Base::kMI;
  using Base::kNI;
  using MmaKind = typename Cfg::TA::MmaKind;
  static constexpr int kStepK = 16;  // K per load / mma step

  u32 a[2][kMI][4];  // double-buffered along k16 steps
  u32 b[2][kNI][2];

  // Fragments of k16 step `kk` (in elements of the CTA K tile) into buffer `buf`.
  // warp_m0 / warp_n0: the warp's offset inside the CTA tile.
  __device__ __forceinline__ void load(int buf, u32 smem_a, u32 smem_b, int warp_m0, int warp_n0, int k0) {
    const int lane = threadIdx.x & 31;
    load_a_fragments<Cfg>(a[buf], smem_a, warp_m0, k0);
    using LayoutB = typename Cfg::LayoutB;
#pragma unroll
    for (int ni = 0; ni < kNI; ni += 2) {
      u32 r[4];
      if constexpr (Cfg::kOrderB == OrderB::kNK) {
        // Shared rows are n, K contiguous: the plain load yields the col-major B fragment.
        const int col = ((lane >> 3) & 1) * 8;  // the lane's column inside the k16 step
        if constexpr (LayoutB::kXor) {
          // As for A (load_a_fragments): the first pair's offset, then whole periods.
          static_assert(16 % LayoutB::kPeriodRows == 0, "pairs of n8 tiles start whole periods apart");
          const int n = warp_n0 + (lane & 7) + (lane >> 4) * 8;
          ldmatrix_x4(r, smem_b + LayoutB::offset_k(n, col, k0) + ni * 8 * LayoutB::kRowBytes);
        } else {
          const int n = warp_n0 + ni * 8 + (lane & 7) + (lane >> 4) * 8;
          ldmatrix_x4(r, smem_b + LayoutB::offset_k(n, col, k0));
        }
      } else {
        // Shared rows are k, N contiguous: the transposing load yields the same fragment.
        const int k = k0 + (lane & 7) + ((lane >> 3) & 1) * 8;
        const int n = warp_n0 + ni * 8 + (lane >> 4) * 8;
        ldmatrix_x4_trans(r, smem_b + (k * Cfg::kLdsB + n) * 2);
      }
      b[buf][ni][0] = r[0];
      b[buf][ni][1] = r[1];
      b[buf][ni + 1][0] = r[2];
      b[buf][ni + 1][1] = r[3];
    }
  }

  __device__ __forceinline__ void mma(int buf) {
#pragma unroll
    for (int mi = 0; mi < kMI; ++mi)
#pragma unroll
      for (int ni = 0; ni < kNI; ++ni) {
        mma_k16<typename Cfg::Atom>(acc[mi][ni], a[buf][mi], b[buf][ni], MmaKind{});
      }
  }
};

}  // namespace gemm
