// One warp's share of a CTA tile when B is quantized (m16n8 atoms). A step is a k32
// block: A fragments of its two k16 halves by ldmatrix, and per n8 tile the lane's
// packed weights, one 32-bit word (4-bit) or two (8-bit) from shared memory
// or, for direct-B mainloops, from registers, turned at once into the B fragments of
// both halves (dequantized, or the bare codes under deferred scaling).
//
// NOTE: the scale/zero constants of a column only change at group boundaries (every
// 32 to K elements), so they are kept per n8 tile and reloaded only when the step's
// group differs from the one they were made for; the group is the same for the
// whole warp, so the test is a uniform branch.
//
// Deferred scaling (Dq::kDeferred, see dequant.cuh): the MMAs take the bare codes into
// fp32 partial sums of the current group, one more MMA per k16 sums A's rows, and the
// mainloop calls end_group when the warp's next step lies in another group (or there
// is none), which scales the partials into the accumulators.
#pragma once
#include "gemm/config.cuh"
#include "gemm/dequant.cuh"
#include "gemm/warp_mma.cuh"

namespace gemm {

template <class Cfg>
struct WarpMmaQuant : M16N8Accumulators<Cfg::kWarpTileM / 16, Cfg::kWarpTileN / 8> {
  static constexpr int kStepK = 32;
  using Base = M16N8Accumulators<Cfg::kWarpTileM / 16, Cfg::kWarpTileN / 8>;
  using Base::kMI;
  using Base::kNI;
  using Base::acc;
  using T = typename Cfg::TA;
  using MmaKind = typename T::MmaKind;
  using Dq = Dequant<T, Cfg::kBitsB>;

  // Deferred scaling doubles the fp32 sums a warp keeps: only for one-m16 warp tiles
  // (decode), whose few accumulators make that cheap and whose dequantization is not
  // shared by several m16 tiles.
  static constexpr bool kDeferred = Dq::kDeferred && kMI == 1;
  static constexpr int kPartMI = kDeferred ? kMI : 1, kPartNI = kDeferred ? kNI : 1;
  static constexpr u32 kZerosOffset = Cfg::kGroupRows * Cfg::kLdsV * 2;  // zero rows after the scale rows

  u32 a[2][2][kMI][4];  // [buffer][k16 half][mi]
  u32 b[2][kNI][2][2];  // [buffer][ni][k16 half][register]: fragments, or codes (deferred)
  typename Dq::Consts consts[kDeferred ? 1 : kNI];
  int consts_group = -1;  // the group `consts` were made for
  float part[kPartMI][kPartNI][4];  // deferred: the current group's sums of A times the codes
  float row_sums[kPartMI][4];       // deferred: its sums of A's rows (e 0, 1: row g; 2, 3: row g + 8)

  __device__ __forceinline__ void clear() {
    Base::clear();
#pragma unroll
    for (int mi = 0; mi < kPartMI; ++mi)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        row_sums[mi][e] = 0.f;
#pragma unroll
        for (int ni = 0; ni < kPartNI; ++ni) part[mi][ni][e] = 0.f;
      }
  }

  using Words = u32[kNI][Dq::kWords];  // a lane's packed weights of one k32 step

  // Fragments of the k32 step at K offset `k0` of the stage into buffer `buf`.
  // `group`: the step's group; `group_row`: that group's row in the stage's V tile.
  __device__ __forceinline__ void load(int buf, u32 smem_a, u32 smem_b, u32 smem_v, int group, int group_row,
                                       int warp_m0, int warp_n0, int k0) {
    const int lane = threadIdx.x & 31;
    // Row warp_n0 / 8 + ni of the B tile, block k0 / 32, this lane's words.
    constexpr int kLaneBytes = Dq::kWords * 4;
    const u32 block = smem_b + ((warp_n0 / 8) * Cfg::kLdsB + k0 / 32 * Cfg::kQuantBlockUnits) * 2 + lane * kLaneBytes;
    Words w;
#pragma unroll
    for (int ni = 0; ni < kNI; ++ni) {
      const u32 addr = block + ni * Cfg::kLdsB * 2;
      if constexpr (Dq::kWords == 1) {
        w[ni][0] = ld_shared_u32(addr);
      } else {
        ld_shared_v2(w[ni], addr);
      }
    }
    load(buf, smem_a, smem_v, group, group_row, warp_m0, warp_n0, k0, w);
  }

  // The same with the lane's packed weights already in registers (MainloopSm80's
  // direct B loads).
  __device__ __forceinline__ void load(int buf, u32 smem_a, u32 smem_v, int group, int group_row, int warp_m0,
                                       int warp_n0, int k0, const Words& w) {
    const int lane = threadIdx.x & 31;
    load_a_fragments<Cfg>(a[buf][0], smem_a, warp_m0, k0);
    load_a_fragments<Cfg>(a[buf][1], smem_a, warp_m0, k0 + 16);
    if constexpr (kDeferred) {
      if constexpr (Dq::kAHiScale != 0) {
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int mi = 0; mi < kMI; ++mi)
#pragma unroll
            for (int r = 2; r < 4; ++r) a[buf][h][mi][r] = fma2(a[buf][h][mi][r], Dq::kAHiScale, 0x80008000u, MmaKind{});
      }
#pragma unroll
      for (int ni = 0; ni < kNI; ++ni) Dq::apply_codes(w[ni], b[buf][ni]);
    } else {
      if (group != consts_group) {
        consts_group = group;
#pragma unroll
        for (int ni = 0; ni < kNI; ++ni) {
          const u32 v = smem_v + (group_row * Cfg::kLdsV + warp_n0 + ni * 8 + (lane >> 2)) * 2;
          consts[ni] = Dq::make(ld_shared_u16(v), ld_shared_u16(v + kZerosOffset));
        }
      }
#pragma unroll
      for (int ni = 0; ni < kNI; ++ni) Dq::apply(w[ni], consts[ni], b[buf][ni]);
    }
  }

  __device__ __forceinline__ void mma(int buf) {
    if constexpr (kDeferred) {
      const u32 ones[2] = {Dq::kOnesLo, Dq::kOnesHi};
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int mi = 0; mi < kMI; ++mi) {
          mma_k16<typename Cfg::Atom>(row_sums[mi], a[buf][h][mi], ones, MmaKind{});
#pragma unroll
          for (int ni = 0; ni < kNI; ++ni)
            mma_k16<typename Cfg::Atom>(part[mi][ni], a[buf][h][mi], b[buf][ni][h], MmaKind{});
        }
    } else {
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int mi = 0; mi < kMI; ++mi)
#pragma unroll
          for (int ni = 0; ni < kNI; ++ni)
            mma_k16<typename Cfg::Atom>(acc[mi][ni], a[buf][h][mi], b[buf][ni][h], MmaKind{});
    }
  }

  // Deferred: the group whose partial sums these are ended; `smem_v`: the V tile of
  // the stage its last step came from, `group_row`: the group's row in it;
  // `upper_rows`: whether the warp has rows 8-15 (at most 8 rows: their sums stay 0).
  // Scales the partials into the accumulators and starts the next group from zero.
  __device__ __forceinline__ void end_group(u32 smem_v, int group_row, int warp_n0, bool upper_rows) {
    if constexpr (kDeferred) {
      // NOTE: two instantiations behind one uniform branch; with the test inside, the
      // compiler predicates rows 8-15's work, which then issues at every M.
      if (upper_rows) {
        fold_group<4>(smem_v, group_row, warp_n0);
      } else {
        fold_group<2>(smem_v, group_row, warp_n0);
      }
    }
  }

  // end_group for the first `Elems` accumulators of each n8 tile (2: rows g, 4: also g + 8).
  template <int Elems>
  __device__ __forceinline__ void fold_group(u32 smem_v, int group_row, int warp_n0) {
    const int t = threadIdx.x & 3;  // this lane's accumulator columns: 2t and 2t + 1 of each n8
#pragma unroll
    for (int ni = 0; ni < kNI; ++ni) {
      const u32 v = smem_v + (group_row * Cfg::kLdsV + warp_n0 + ni * 8 + 2 * t) * 2;
      float s[2], z[2];
      Dq::group_consts(ld_shared_u32(v), ld_shared_u32(v + kZerosOffset), s, z);
#pragma unroll
      for (int e = 0; e < Elems; ++e) {
        acc[0][ni][e] = fmaf(s[e & 1], fmaf(-z[e & 1], row_sums[0][e & 2], part[0][ni][e]), acc[0][ni][e]);
        part[0][ni][e] = 0.f;
      }
    }
#pragma unroll
    for (int e = 0; e < Elems; e += 2) row_sums[0][e] = row_sums[0][e + 1] = 0.f;
  }

  // Deferred: after the last group, the accumulators in output units.
  __device__ __forceinline__ void end_groups() {
    if constexpr (kDeferred && Dq::kFinalScale != 1.f) {
#pragma unroll
      for (int ni = 0; ni < kNI; ++ni)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[0][ni][e] *= Dq::kFinalScale;
    }
  }
};

}  // namespace gemm
