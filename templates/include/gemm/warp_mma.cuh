// One warp's share of a CTA tile for the m16n8 atoms (m16n8k16, m16n8k8):
// fragments loaded from shared memory with ldmatrix (sm_75+) and multiplied into
// fp32 accumulators, one k16 step at a time.
#pragma once
#include "gemm/config.cuh"
#include "gemm/dequant.cuh"

namespace gemm {

template <class Cfg>
struct WarpMmaM16N8 {
  static constexpr int kMI = Cfg::kWarpTileM / 16;  // m16 tiles per warp
  static constexpr int kNI = Cfg::kWarpTileN / 8;   // n8 tiles per warp
  using MmaKind = typename Cfg::TA::MmaKind;

  static constexpr int kAcc = kMI * kNI * 4;  // accumulators per thread

  u32 a[2][kMI][4];  // double-buffered along k16 steps
  u32 b[2][kNI][2];
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

  // A fragments of the k16 step at `k0`: matrices 0..3 = (rows 0-7, k 0-7),
  // (rows 8-15, k 0-7), (rows 0-7, k 8-15), (rows 8-15, k 8-15).
  __device__ __forceinline__ void load_a(int buf, u32 smem_a, int warp_m0, int k0) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int mi = 0; mi < kMI; ++mi) {
      const int row = warp_m0 + mi * 16 + (lane & 15);
      const int col = k0 + (lane >> 4) * 8;
      ldmatrix_x4(a[buf][mi], smem_a + (row * Cfg::kLdsA + col) * 2);
    }
  }

  // Fragments of k16 step `kk` (in elements of the CTA K tile) into buffer `buf`.
  // warp_m0 / warp_n0: the warp's offset inside the CTA tile.
  __device__ __forceinline__ void load(int buf, u32 smem_a, u32 smem_b, int warp_m0, int warp_n0, int k0) {
    const int lane = threadIdx.x & 31;
    load_a(buf, smem_a, warp_m0, k0);
#pragma unroll
    for (int ni = 0; ni < kNI; ni += 2) {
      u32 r[4];
      if constexpr (Cfg::kOrderB == OrderB::kNK) {
        // Shared rows are n, K contiguous: the plain load yields the col-major B fragment.
        const int n = warp_n0 + ni * 8 + (lane & 7) + (lane >> 4) * 8;
        const int k = k0 + ((lane >> 3) & 1) * 8;
        ldmatrix_x4(r, smem_b + (n * Cfg::kLdsB + k) * 2);
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

  // Quantized B: the A fragments as usual; each B fragment from two loads of packed
  // integers (the K pairs 2t, 2t+1 and 2t+8, 2t+9 of column g), dequantized with the
  // scale and zero of group row `group_row` of the stage's V tile at `smem_v`.
  __device__ __forceinline__ void load_quant(int buf, u32 smem_a, u32 smem_b, u32 smem_v, int group_row,
                                             int warp_m0, int warp_n0, int k0) {
    const int lane = threadIdx.x & 31;
    load_a(buf, smem_a, warp_m0, k0);
    using T = typename Cfg::TA;
    constexpr int kBits = Cfg::kBitsB;
    constexpr u32 kZerosOffset = Cfg::kGroupRows * Cfg::kLdsV * 2;
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int ni = 0; ni < kNI; ++ni) {
      const int n = warp_n0 + ni * 8 + g;
      const u32 v = smem_v + (group_row * Cfg::kLdsV + n) * 2;
      const auto consts = GroupConsts<T>::make(ld_shared_u16(v), ld_shared_u16(v + kZerosOffset));
      const u32 row = smem_b + n * Cfg::kLdsB * 2;
      u32 x0, x1;
      if constexpr (kBits == 4) {
        x0 = ld_shared_u8(row + k0 / 2 + t);
        x1 = ld_shared_u8(row + k0 / 2 + t + 4);
      } else {
        x0 = ld_shared_u16(row + k0 + 2 * t);
        x1 = ld_shared_u16(row + k0 + 2 * t + 8);
      }
      b[buf][ni][0] = dequant2<T, kBits>(x0, consts);
      b[buf][ni][1] = dequant2<T, kBits>(x1, consts);
    }
  }

  __device__ __forceinline__ void mma(int buf) {
#pragma unroll
    for (int mi = 0; mi < kMI; ++mi)
#pragma unroll
      for (int ni = 0; ni < kNI; ++ni) {
        if constexpr (kSame<typename Cfg::Atom, AtomM16N8K8>) {
          // A k16 fragment is two k8 fragments: (a0, a1; b0) then (a2, a3; b1).
          mma_m16n8k8(acc[mi][ni], a[buf][mi][0], a[buf][mi][1], b[buf][ni][0], MmaKind{});
          mma_m16n8k8(acc[mi][ni], a[buf][mi][2], a[buf][mi][3], b[buf][ni][1], MmaKind{});
        } else {
          mma_m16n8k16(acc[mi][ni], a[buf][mi], b[buf][ni], MmaKind{});
        }
      }
  }

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

}  // namespace gemm
