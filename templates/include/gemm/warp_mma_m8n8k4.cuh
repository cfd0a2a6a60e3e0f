// One warp's share of a CTA tile for the Volta atom m8n8k4. Each instruction is
// four independent 8x8x4 products, one per quad pair; quad pair q covers rows
// (q&1)*8 and columns (q>>1)*8 of a 16x16 piece, so one instruction makes a 16x16x4
// warp product and a k16 step is four of them. Fragments come from shared memory
// with plain loads (Volta has no ldmatrix): a thread's A row and B column hold
// their 4 k values contiguously when K is the contiguous dimension.
#pragma once
#include "gemm/config.cuh"

namespace gemm {

template <class Cfg>
struct WarpMmaM8N8K4 {
  static constexpr int kStepK = 16;  // K per load / mma step
  static constexpr int kMI = Cfg::kWarpTileM / 16;  // 16x16 pieces per warp
  static constexpr int kNI = Cfg::kWarpTileN / 16;
  static constexpr int kAcc = kMI * kNI * 8;
  static_assert(kSame<typename Cfg::TA, Half>, "m8n8k4 multiplies fp16 only");

  u32 a[2][kMI][4][2];  // [buf][mi][k4 sub-step][2 regs = 4 halves]
  u32 b[2][kNI][4][2];
  float acc[kMI][kNI][8];

  __device__ __forceinline__ float* acc_flat() { return &acc[0][0][0]; }

  __device__ __forceinline__ void clear() {
#pragma unroll
    for (int i = 0; i < kAcc; ++i) acc_flat()[i] = 0.f;
  }

  // This thread's row (of A) or column (of B) inside a quad pair's 8, and the
  // quad pair's 8-row / 8-column offset inside a 16x16 piece.
  __device__ __forceinline__ static int lane_j() {
    const int lane = threadIdx.x & 31;
    return (lane & 3) + ((lane >> 4) << 2);
  }
  __device__ __forceinline__ static int qp_row() { return ((threadIdx.x >> 2) & 1) * 8; }
  // The accumulator layout's row of this lane inside its quad pair's 8 (before the +2 of i & 2).
  __device__ __forceinline__ static int acc_row_in() {
    const int lane = threadIdx.x & 31;
    return (lane & 1) + ((lane >> 4) << 2);
  }

  // The row inside the warp tile of this thread's accumulator acc_flat()[i].
  __device__ __forceinline__ static int acc_row(int i) { return i / (kNI * 8) * 16 + qp_row() + acc_row_in() + (i & 2); }
  // The least row, over the warp's lanes, of acc_flat()[i] (a constant; see M16N8Accumulators).
  __device__ __forceinline__ static constexpr int acc_row_base(int i) { return i / (kNI * 8) * 16 + (i & 2); }
  __device__ __forceinline__ static int qp_col() { return ((threadIdx.x >> 3) & 1) * 8; }

  __device__ __forceinline__ void load(int buf, u32 smem_a, u32 smem_b, int warp_m0, int warp_n0, int k0) {
    const int j = lane_j();
#pragma unroll
    for (int mi = 0; mi < kMI; ++mi) {
      const int row = warp_m0 + mi * 16 + qp_row() + j;
#pragma unroll
      for (int s = 0; s < 4; ++s) ld_shared_v2(a[buf][mi][s], smem_a + (row * Cfg::kLdsA + k0 + s * 4) * 2);
    }
#pragma unroll
    for (int ni = 0; ni < kNI; ++ni) {
      const int n = warp_n0 + ni * 16 + qp_col() + j;
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        if constexpr (Cfg::kOrderB == OrderB::kNK) {
          ld_shared_v2(b[buf][ni][s], smem_b + (n * Cfg::kLdsB + k0 + s * 4) * 2);
        } else {
          // K runs down the shared rows: gather the column's 4 k values.
          u16 v[4];
#pragma unroll
          for (int e = 0; e < 4; ++e) v[e] = ld_shared_u16(smem_b + ((k0 + s * 4 + e) * Cfg::kLdsB + n) * 2);
          b[buf][ni][s][0] = static_cast<u32>(v[0]) | (static_cast<u32>(v[1]) << 16);
          b[buf][ni][s][1] = static_cast<u32>(v[2]) | (static_cast<u32>(v[3]) << 16);
        }
      }
    }
  }

  __device__ __forceinline__ void mma(int buf) {
#pragma unroll
    for (int s = 0; s < 4; ++s)
#pragma unroll
      for (int mi = 0; mi < kMI; ++mi)
#pragma unroll
        for (int ni = 0; ni < kNI; ++ni)
          mma_m8n8k4(acc[mi][ni], a[buf][mi][s][0], a[buf][mi][s][1], b[buf][ni][s][0], b[buf][ni][s][1]);
  }

  template <class F>
  __device__ __forceinline__ void for_each_pair(int row0, int col0, F&& f) const {
    const int lane = threadIdx.x & 31;
    const int row_in = acc_row_in();
#pragma unroll
    for (int mi = 0; mi < kMI; ++mi)
#pragma unroll
      for (int ni = 0; ni < kNI; ++ni)
#pragma unroll
        for (int i = 0; i < 8; i += 2) {
          const int r = row0 + mi * 16 + qp_row() + row_in + (i & 2);
          const int c = col0 + ni * 16 + qp_col() + (i & 4) + (lane & 2);
          f(r, c, acc[mi][ni][i], acc[mi][ni][i + 1]);
        }
  }
};

}  // namespace gemm
