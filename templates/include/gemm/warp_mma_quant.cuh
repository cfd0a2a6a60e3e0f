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
// Deferred scaling (Dq::kDeferred, see dequant.cuh), for one-m16 warp tiles (decode):
// the MMAs take the bare codes into fp32 partial sums of the current group, one more
// MMA per k16 (per k32 at up to 8 rows) sums A's rows, and the mainloop calls end_group
// when the warp's next step lies in another group (or there is none), which scales the
// partials into the accumulators.
//
// NOTE: the deferred product is computed transposed, D^T = B^T A^T. The weights are
// the MMA's 16-row operand: a lane's codes of n8 tiles 2p and 2p + 1 (its column g of
// each) are rows g and g + 8 of an A fragment as they are. A's rows are the 8-column
// operand, one register pair per 8 rows (load_token_fragments). Decode has at most 8
// rows: one MMA per 16 columns instead of one per 8 in the m16 form, whose rows 1-15
// were padding. end_groups transposes the sums back into the C-fragment layout.
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
  // shared by several m16 tiles; the transposed MMA pairs the n8 tiles.
  static constexpr bool kDeferred = Dq::kDeferred && kMI == 1 && kNI % 2 == 0;
  static constexpr int kPairs = kDeferred ? kNI / 2 : 1;  // n16 rows of the transposed product
  static constexpr u32 kZerosOffset = Cfg::kGroupRows * Cfg::kLdsV * 2;  // zero rows after the scale rows

  u32 a[2][2][kMI][4];  // [buffer][k16 half][mi]
  u32 b[2][kNI][2][2];  // [buffer][ni][k16 half][register]: fragments, or codes (deferred)
  typename Dq::Consts consts[kDeferred ? 1 : kNI];
  int consts_group = -1;  // the group `consts` were made for
  // Deferred, transposed: tile (p, ti) holds D^T for columns 16p .. 16p + 15 of the warp
  // and rows 8 ti .. 8 ti + 7; during the mainloop its sums live in acc[0][2p + ti].
  float part[kPairs][2][4];  // the current group's sums of A times the codes
  float row_sums[2][4];      // its sums of A's rows, C registers 0, 1: rows 8 ti + 2t, + 1 (2, 3 repeat them;
                             // for rows 0-7 alone, see mma_transposed)
  bool upper = true;         // whether the warp has rows 8-15 of A (when not, their sums stay 0)
#if defined(GEMM_SM80_LEAVE_OUT) && GEMM_SM80_LEAVE_OUT == 7
  u32 sink = 0;  // the experiment without the tensor MMAs (mma)
#endif
  // Whether rows 8-15's MMAs are skipped when the warp has no such rows: MainloopSm80
  // (direct B, decode ring) runs its loop twice, `upper` a constant in each. The register-staged
  // SM70 mainloop keeps one loop for all rows: with both, NVRTC 13 allocates 151
  // registers (either alone: 96 and 128) and the 8-bit tile spills.
  static constexpr bool kSkipUpperTokens = Cfg::kDirectB || Cfg::kDecodeRing;

  __device__ __forceinline__ void clear() {
    Base::clear();
#pragma unroll
    for (int ti = 0; ti < 2; ++ti)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        row_sums[ti][e] = 0.f;
#pragma unroll
        for (int p = 0; p < kPairs; ++p) part[p][ti][e] = 0.f;
      }
  }

  // `rows`: the rows of A the warp's tile has inside M (more when M is larger).
  __device__ __forceinline__ void set_rows(int rows) { upper = rows > 8; }

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
    if constexpr (kDeferred) {
      if (!kSkipUpperTokens || upper) {
        load_token_fragments(a[buf][0][0], smem_a, warp_m0, k0);
        load_token_fragments(a[buf][1][0], smem_a, warp_m0, k0 + 16);
      } else {
        // Rows 0-7 only: registers 2 and 3 (rows 8-15) are never read.
        load_lower_token_fragments(a[buf][0][0], smem_a, warp_m0, k0);
        load_lower_token_fragments(a[buf][1][0], smem_a, warp_m0, k0 + 16);
      }
      if constexpr (Dq::kAHiScale != 0) {
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int r = 1; r < 4; r += 2) a[buf][h][0][r] = fma2(a[buf][h][0][r], Dq::kAHiScale, 0x80008000u, MmaKind{});
      }
#pragma unroll
      for (int ni = 0; ni < kNI; ++ni) Dq::apply_codes(w[ni], b[buf][ni]);
    } else {
      load_a_fragments<Cfg>(a[buf][0], smem_a, warp_m0, k0);
      load_a_fragments<Cfg>(a[buf][1], smem_a, warp_m0, k0 + 16);
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

  // Deferred: A's k16 step at `k0` as the transposed product's 8-column operands, one
  // register pair per token tile: ldmatrix matrices (rows 0-7, k 0-7), (rows 0-7, k 8-15),
  // (rows 8-15, k 0-7), (rows 8-15, k 8-15). Registers 1 and 3 are the k + 8 half.
  __device__ __forceinline__ static void load_token_fragments(u32 (&r)[4], u32 smem_a, int warp_m0, int k0) {
    const int lane = threadIdx.x & 31;
    const int row = warp_m0 + (lane & 7) + (lane >> 4) * 8;
    const int col = k0 + ((lane >> 3) & 1) * 8;
    ldmatrix_x4(r, smem_a + (row * Cfg::kLdsA + col) * 2);
  }

  // load_token_fragments for rows 0-7 only, into registers 0 and 1.
  __device__ __forceinline__ static void load_lower_token_fragments(u32 (&r)[4], u32 smem_a, int warp_m0, int k0) {
    const int lane = threadIdx.x & 31;
    const int row = warp_m0 + (lane & 7);
    const int col = k0 + ((lane >> 3) & 1) * 8;
    u32 lo[2];
    ldmatrix_x2(lo, smem_a + (row * Cfg::kLdsA + col) * 2);
    r[0] = lo[0];
    r[1] = lo[1];
  }

  __device__ __forceinline__ void mma(int buf) {
#if defined(GEMM_SM80_LEAVE_OUT) && GEMM_SM80_LEAVE_OUT == 7
    // The experiment without the tensor MMAs (mainloop_sm80.cuh's knob): their operands
    // are XORed into `sink`, which end_groups adds to the output, so that the loads and
    // the dequantization feeding them stay in the kernel.
    // NOTE: only the A registers the loop loaded: at M <= 8 (kSkipUpperTokens, `upper`
    // false) registers 2 and 3 are never written, and XORing them made the whole sink
    // undefined, so that ptxas dropped 12 of the loop's 15 weight loads and every
    // ldmatrix (the forty-fourth session's timings of this variant; docs/NOTES.md,
    // forty-fifth session).
    const int a_regs = !kDeferred || !kSkipUpperTokens || upper ? 4 : 2;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int r = 0; r < 4; ++r)
        if (r < a_regs) sink ^= a[buf][h][0][r];
#pragma unroll
      for (int ni = 0; ni < kNI; ++ni) sink ^= b[buf][ni][h][0] ^ b[buf][ni][h][1];
    }
    return;
#endif
    if constexpr (kDeferred) {
      // NOTE: `upper` is a constant in each of MainloopSm80's two loops, so this
      // branch folds away there.
      if (!kSkipUpperTokens || upper) {
        mma_transposed<2>(buf);
      } else {
        mma_transposed<1>(buf);
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

  // Deferred: the k32 step's MMAs for the first `TI` token tiles (1: rows 0-7 of A).
  // NOTE: for rows 0-7 alone (TI = 1 in MainloopSm80's loop without them), the row
  // sums of both k16 halves take one m16n8k16 MMA with A's registers as its 16-row
  // operand (rows g: each half's k 0-7, rows g + 8: its k 8-15) and ones as the 8-column
  // one; fold_group adds the two row halves. Two m16n8k8 MMAs, one per half, took 0-2%
  // longer at M = 1 (H100, docs/NOTES.md, forty-fifth session). With ones as the 16-row
  // operand instead, the four-register constant is rebuilt by NVRTC before every MMA
  // under the register cap. (TI = 1 comes only from direct-B and decode-ring kernels,
  // kSkipUpperTokens: the SM80 mainloop, sm_80 and later.)

  template <int TI>
  __device__ __forceinline__ void mma_transposed(int buf) {
    const u32 ones[4] = {Dq::kOnesLo, Dq::kOnesLo, Dq::kOnesHi, Dq::kOnesHi};
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int ti = 0; ti < TI; ++ti) {
        const u32 tokens[2] = {a[buf][h][0][2 * ti], a[buf][h][0][2 * ti + 1]};
        if (TI > 1) {
          mma_k16<typename Cfg::Atom>(row_sums[ti], ones, tokens, MmaKind{});
        } else if (h == 1) {
          const u32 halves[4] = {a[buf][0][0][0], a[buf][0][0][1], a[buf][1][0][0], a[buf][1][0][1]};
          const u32 ones_b[2] = {Dq::kOnesLo, Dq::kOnesLo};
          mma_m16n8k16(row_sums[0], halves, ones_b, MmaKind{});
        }
#pragma unroll
        for (int p = 0; p < kPairs; ++p) {
          const u32 weights[4] = {b[buf][2 * p][h][0], b[buf][2 * p + 1][h][0], b[buf][2 * p][h][1],
                                  b[buf][2 * p + 1][h][1]};
          mma_k16<typename Cfg::Atom>(part[p][ti], weights, tokens, MmaKind{});
        }
      }
  }

  // Deferred: the group whose partial sums these are ended; `smem_v`: the V tile of
  // the stage its last step came from, `group_row`: the group's row in it.
  // Scales the partials into the accumulators and starts the next group from zero.
  __device__ __forceinline__ void end_group(u32 smem_v, int group_row, int warp_n0) {
    if constexpr (kDeferred) {
      if (!kSkipUpperTokens || upper) {
        fold_group<2>(smem_v, group_row, warp_n0);
      } else {
        fold_group<1>(smem_v, group_row, warp_n0);
      }
    }
  }

  // end_group for the first `TI` token tiles.
  template <int TI>
  __device__ __forceinline__ void fold_group(u32 smem_v, int group_row, int warp_n0) {
    const int g = (threadIdx.x & 31) >> 2;  // this lane's transposed rows: columns g and g + 8 of each pair
    // A's row sums of the group for this lane's rows 2t and 2t + 1, per token tile.
    float sums[TI][2];
    if constexpr (TI == 1) {
      // Row g's sum is in every lane of quad g (mma_transposed): fetch rows 2t, 2t + 1.
      const int t = threadIdx.x & 3;
      // Undoes A's prescale of k 8-15, which the m16n8k16 form undid with kOnesHi.
      static_assert(Dq::kAHiScale == 0 || Dq::kOnesHi == 16 * Dq::kOnesLo, "k 8-15 prescaled by 1/16");
      constexpr float kHiSumScale = Dq::kAHiScale != 0 ? 16.f : 1.f;
      const float mine = row_sums[0][0] + kHiSumScale * row_sums[0][2];
      sums[0][0] = __shfl_sync(0xffffffffu, mine, 8 * t);
      sums[0][1] = __shfl_sync(0xffffffffu, mine, 8 * t + 4);
    } else {
#pragma unroll
      for (int ti = 0; ti < TI; ++ti) {
        sums[ti][0] = row_sums[ti][0];
        sums[ti][1] = row_sums[ti][1];
      }
    }
#pragma unroll
    for (int p = 0; p < kPairs; ++p) {
      const u32 v = smem_v + (group_row * Cfg::kLdsV + warp_n0 + p * 16 + g) * 2;
      const u32 s2 = ld_shared_u16(v) | static_cast<u32>(ld_shared_u16(v + 16)) << 16;
      const u32 z2 = ld_shared_u16(v + kZerosOffset) | static_cast<u32>(ld_shared_u16(v + kZerosOffset + 16)) << 16;
      float s[2], z[2];
      Dq::group_consts(s2, z2, s, z);
#pragma unroll
      for (int ti = 0; ti < TI; ++ti)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float& d = acc[0][2 * p + ti][e];
          d = fmaf(s[e >> 1], fmaf(-z[e >> 1], sums[ti][e & 1], part[p][ti][e]), d);
          part[p][ti][e] = 0.f;
        }
    }
#pragma unroll
    for (int ti = 0; ti < TI; ++ti)
#pragma unroll
      for (int e = 0; e < 4; ++e) row_sums[ti][e] = 0.f;
  }

  // Deferred: after the last group, the accumulators transposed back into the C-fragment
  // layout, in output units.
  __device__ __forceinline__ void end_groups() {
#if defined(GEMM_SM80_LEAVE_OUT) && GEMM_SM80_LEAVE_OUT == 7
    acc[0][0][0] += __uint_as_float(sink & 1u);
#endif
    if constexpr (kDeferred) {
      const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
      float out[kNI][4];
#pragma unroll
      for (int ni = 0; ni < kNI; ++ni)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          // C element (row g + 8 (e >> 1), column 8 ni + 2t + (e & 1)) is transposed row
          // 8 (ni & 1) + 2t + (e & 1), column g: lane (2t + (e & 1), g / 2), register
          // 2 (ni & 1) + g % 2 of tile (ni / 2, e >> 1).
          const int src = (2 * t + (e & 1)) * 4 + (g >> 1);
          const float* tile = acc[0][(ni >> 1) * 2 + (e >> 1)];
          const float even = __shfl_sync(0xffffffffu, tile[2 * (ni & 1)], src);
          const float odd = __shfl_sync(0xffffffffu, tile[2 * (ni & 1) + 1], src);
          out[ni][e] = (g & 1 ? odd : even) * Dq::kFinalScale;
        }
#pragma unroll
      for (int ni = 0; ni < kNI; ++ni)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[0][ni][e] = out[ni][e];
    }
  }
};

}  // namespace gemm
