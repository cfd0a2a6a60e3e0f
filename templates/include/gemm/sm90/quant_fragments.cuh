// The SM90 quantized kernel's weight fragments (kernel_sm90_quant.cuh): a ring stage's
// layout (Sm90QuantStage), a consumer lane's offsets into it, made once and pinned
// (LaneOffsets, lane_offsets, pin_register), and one K tile's weights dequantized from a
// stage: a warp's wgmma A registers (quant_a_fragments, register A), or its part of the
// warpgroup's buffer, wgmma's B operand (SharedBWeights, shared B).
#pragma once
#include "gemm/dequant.cuh"
#include "gemm/ptx.cuh"
#include "gemm/sm90/ptx_sm90.cuh"

namespace gemm {

template <class Cfg>
struct Sm90QuantStage {
  u32 base;
  __device__ __forceinline__ u32 x(int s) const { return base + static_cast<u32>(s * Cfg::kStageBytes); }
  __device__ __forceinline__ u32 w(int s) const { return x(s) + Cfg::kKPerStage * Cfg::kTileBytesX; }
  __device__ __forceinline__ u32 scales(int s) const { return w(s) + Cfg::kTileBytesW; }
  __device__ __forceinline__ u32 zeros(int s) const { return scales(s) + Cfg::kVRows * Cfg::kRows * 2; }
};

// A consumer lane's byte offsets into a stage for one m64 block (local_row0: the warp's
// first weight row in the CTA): its first packed word (n8 tile local_row0 / 8, k32 block
// 0 of the stage's K tile `part`) and its row's scale and zero (half 0, the stage's group
// `group`); the other tiles, blocks and groups are constants beyond them. A stage holds
// an n8 tile's K tiles one after another (Cfg::kKPerStage of them).
// NOTE: made once before the K loop and pinned there (pin_register): NVVM otherwise
// re-derives them from threadIdx next to their loads, an S2R and about eight integer
// instructions in every K tile of every consumer warp, which beside a 64- or 128-token
// wgmma cost about an issue slot each (docs/perf/wgmma_rate_kinds.md).
struct LaneOffsets {
  u32 words;
  u32 rows;
};

__device__ __forceinline__ u32 pin_register(u32 v) {
  asm volatile("" : "+r"(v));
  return v;
}

template <class Cfg>
__device__ __forceinline__ LaneOffsets lane_offsets(int local_row0, int lane, int part = 0, int group = 0) {
  const u32 words = static_cast<u32>(((local_row0 / 8 * Cfg::kKPerStage + part) * 2 * 32 + lane) * Cfg::kWords * 4);
  const u32 rows = static_cast<u32>(2 * (group * Cfg::kRows + local_row0 + lane / 4));
  return {pin_register(words), pin_register(rows)};
}

// A lane's scales and zeros of one K tile (stage s), made once per group: [group of the
// K tile][half: the warp's n8 tile], one group, or two for groups of 32 (VRows,
// Sm90QuantConfig::v_rows).
template <class Cfg, int VRows>
using QuantAConsts = typename Dequant<typename Cfg::TA, Cfg::kBits>::Consts[VRows][2];

template <class Cfg, int VRows>
__device__ __forceinline__ void quant_a_consts(const Sm90QuantStage<Cfg>& st, int s, LaneOffsets lane,
                                               QuantAConsts<Cfg, VRows>& c) {
  using D = Dequant<typename Cfg::TA, Cfg::kBits>;
#pragma unroll
  for (int g = 0; g < VRows; ++g)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      // this lane's weight row (B column g): row local_row0 + 8 half + lane / 4 of group g
      const u32 v = lane.rows + static_cast<u32>(2 * (g * Cfg::kRows + 8 * half));
      c[g][half] = D::make(ld_shared_u16(st.scales(s) + v), ld_shared_u16(st.zeros(s) + v));
    }
}

// A warp's A registers of one K tile (stage s) with its scales and zeros made:
// [k32 block][k16 step][register], the two n8 tiles of its 16 weight rows dequantized
// (registers {tile 0 reg 0, tile 1 reg 0, tile 0 reg 1, tile 1 reg 1} of each step, see
// wgmma_rs).
template <class Cfg, int VRows>
__device__ __forceinline__ void quant_a_apply(const Sm90QuantStage<Cfg>& st, int s, LaneOffsets lane,
                                              const QuantAConsts<Cfg, VRows>& c, u32 (&a)[2][2][4]) {
  using D = Dequant<typename Cfg::TA, Cfg::kBits>;
  static_assert(D::kWords == Cfg::kWords, "the packed words per lane and block");
#pragma unroll
  for (int kb = 0; kb < 2; ++kb) {
    BlockFragments f[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      // n8 tile local_row0 / 8 + half, k32 block kb: 32 lanes of kWords words each
      const u32 words =
          st.w(s) + lane.words + static_cast<u32>((half * Cfg::kKPerStage * 2 + kb) * 32 * Cfg::kWords * 4);
      u32 w[D::kWords];
      if constexpr (D::kWords == 1) {
        w[0] = ld_shared_u32(words);
      } else {
        ld_shared_v2(w, words);
      }
      D::apply(w, c[VRows == 2 ? kb : 0][half], f[half]);
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      a[kb][h][0] = f[0][h][0];
      a[kb][h][1] = f[1][h][0];
      a[kb][h][2] = f[0][h][1];
      a[kb][h][3] = f[1][h][1];
    }
  }
}

// Both: a K tile's A registers from its stage.
template <class Cfg, int VRows>
__device__ __forceinline__ void quant_a_fragments(const Sm90QuantStage<Cfg>& st, int s, LaneOffsets lane,
                                                  u32 (&a)[2][2][4]) {
  QuantAConsts<Cfg, VRows> c;
  quant_a_consts<Cfg, VRows>(st, s, lane, c);
  quant_a_apply<Cfg, VRows>(st, s, lane, c, a);
}

// Shared B: a warp's part of one K tile's dequantized weights (stage s) for its consumer
// warpgroup's buffer. The warp takes kTiles n8 tiles of weight rows, both k32 blocks of
// each: f[tile][k32 block][k16 step][register], the B fragments the packed layout gives.
// The scales and zeros are made once per row and group (the two blocks share them unless
// groups are 32).
template <class Cfg>
struct SharedBWeights {
  using D = Dequant<typename Cfg::TA, Cfg::kBits>;
  static constexpr int kTiles = Cfg::kConsumerRows / 32;  // n8 tiles per warp
  static_assert(D::kWords == Cfg::kWords, "the packed words per lane and block");
  using Fragments = BlockFragments[kTiles][2];

  // tile0: the warp's first n8 tile among the CTA's weight rows.
  __device__ __forceinline__ static void dequantize(const Sm90QuantStage<Cfg>& st, int s, int tile0, int v_rows,
                                                    int lane, Fragments& f) {
#pragma unroll
    for (int t = 0; t < kTiles; ++t) {
      const int row = (tile0 + t) * 8 + lane / 4;  // this lane's weight row
      typename D::Consts c[2];
      c[0] = D::make(ld_shared_u16(st.scales(s) + 2 * row), ld_shared_u16(st.zeros(s) + 2 * row));
      c[1] = c[0];
      if (v_rows == 2) {
        const int v = Cfg::kRows + row;
        c[1] = D::make(ld_shared_u16(st.scales(s) + 2 * v), ld_shared_u16(st.zeros(s) + 2 * v));
      }
#pragma unroll
      for (int kb = 0; kb < 2; ++kb) {
        const u32 words = st.w(s) + static_cast<u32>((((tile0 + t) * 2 + kb) * 32 + lane) * Cfg::kWords * 4);
        u32 w[D::kWords];
        if constexpr (D::kWords == 1) {
          w[0] = ld_shared_u32(words);
        } else {
          ld_shared_v2(w, words);
        }
        D::apply(w, c[kb], f[t][kb]);
      }
    }
  }

  // The fragments into the warpgroup's buffer: K-major rows of 128 bytes (64 K), the
  // 16-byte chunk j of row n at chunk j ^ (n % 8) (TMA's 128-byte swizzle, as
  // smem_desc_kmajor_sw128 describes it). A block's four registers are four 8 x 8
  // matrices (weight rows x 8 K: chunks 4 kb + 2 h + r), which is stmatrix's fragment:
  // one stmatrix.x4 per block, lane l giving the address of row l % 8 of matrix l / 8,
  // and a matrix's 8 rows fall on 8 different chunks (no bank conflicts).
  // local_tile0: the warp's first n8 tile within the warpgroup's rows.
  __device__ __forceinline__ static void store(u32 buffer, int local_tile0, int lane, const Fragments& f) {
#pragma unroll
    for (int t = 0; t < kTiles; ++t)
#pragma unroll
      for (int kb = 0; kb < 2; ++kb) {
        const int n = (local_tile0 + t) * 8 + lane % 8, chunk = 4 * kb + lane / 8;
        stmatrix_x4(buffer + static_cast<u32>(n * 128 + ((chunk ^ (n % 8)) << 4)), f[t][kb][0][0], f[t][kb][0][1],
                    f[t][kb][1][0], f[t][kb][1][1]);
      }
  }
};

}  // namespace gemm
