// Quantized B dequantized once per CTA tile into shared memory (GemmConfig::kStagedB).
//
// The sm80 family's other quantized warps (warp_mma_quant.cuh) dequantize their own B
// fragments in registers: every warp along M repeats the work for the same weights, so
// a prefill tile with two warps along M dequantizes each weight twice, and one with one
// warp along M has too small a tile for mma.sync (issue 17: W4 took 1.7-1.9x the time of
// fp16 at M >= 1024 on the H200). Here every warp dequantizes a share of the next K
// tile's packed weights into a buffer of 16-bit B fragments, and the MMA warps read
// their fragments from it as a dense B.
//
// The buffer is in fragment order, so neither side shuffles: for k16 step kk of the
// tile and pair p of n8 tiles (2p, 2p + 1), lane L's 16 bytes at
//   ((kk * kCtaN / 16 + p) * 32 + L) * 16
// hold its B fragment registers (0, 1) of tile 2p, then of tile 2p + 1. A lane
// dequantizing packed block (tile, k32 block) gets exactly the fragments of that lane
// (dequant.cuh), for both k16 steps of the block; so the writer of a pair's block and
// every reader of it are the same lane number, and both move whole 16-byte vectors in
// lane order (one 512-byte row a warp: no bank conflicts).
#pragma once
#include "gemm/config.cuh"
#include "gemm/dequant.cuh"
#include "gemm/warp_mma.cuh"

namespace gemm {

// Where a CTA tile's dequantized weights live (one of the two buffers) and who writes
// which part. A unit is one k32 block of a pair of n8 tiles: a lane's two packed words
// (4-bit; four for 8-bit) in, two 16-byte fragment vectors out. Warp w writes units
// [w kUnitsPerWarp, (w + 1) kUnitsPerWarp), in pair-major order (whole pairs: every
// block of kPairsPerWarp pairs), spread over the k16 steps of the tile it runs them
// under.
template <class Cfg>
struct StagedB {
  static constexpr int kPairs = Cfg::kCtaN / 16;  // pairs of n8 tiles across the CTA tile
  static constexpr int kBlocksK = Cfg::kCtaK / 32;
  static constexpr int kSteps = Cfg::kCtaK / 16;  // k16 steps of a K tile
  static constexpr int kUnits = kPairs * kBlocksK;
  static constexpr int kUnitsPerWarp = kUnits / Cfg::kWarps;
  static constexpr int kPairsPerWarp = kUnitsPerWarp / kBlocksK;
  static constexpr u32 kZerosOffset = Cfg::kGroupRows * Cfg::kLdsV * 2;  // zero rows after the scale rows
  static constexpr u32 kVectorRow = 32 * 16;                             // a warp's 16-byte vectors
  using Dq = Dequant<typename Cfg::TA, Cfg::kBitsB>;
  static_assert(kUnits % Cfg::kWarps == 0, "staged B: the units split evenly over the warps");
  static_assert(kUnitsPerWarp % kBlocksK == 0, "staged B: a warp's units are whole pairs of n8 tiles");
  // K tiles then start at multiples of kCtaK, and a block's group row is (32 block) >> shift.
  static_assert((Cfg::kCtaK & (Cfg::kCtaK - 1)) == 0, "staged B: the K tile a power of two");

  // Byte offset of lane `lane`'s vector of pair `p` at k16 step `kk`.
  __device__ __forceinline__ static u32 vector(int kk, int p, int lane) {
    return static_cast<u32>((kk * kPairs + p) * kVectorRow + lane * 16);
  }

  // A thread's shared-memory offsets for its warp's first pair, made once before the K
  // loop: every unit's own are a compile-time distance from them (the static K loop of
  // 256x128 s4 has ~70 instructions fewer than with the offsets made per unit).
  struct Lanes {
    u32 words;   // its packed words of block 0, from the stage's packed tile
    u32 column;  // its column's scale in group row 0, from the stage's scale rows
    u32 vector;  // its fragment vector at k16 step 0, from a staged buffer
  };
  __device__ __forceinline__ static Lanes lanes(int warp, int lane) {
    const int p0 = warp * kPairsPerWarp;
    return {static_cast<u32>(2 * p0 * Cfg::kLdsB * 2 + lane * Dq::kWords * 4),
            static_cast<u32>((2 * p0 * 8 + (lane >> 2)) * 2), vector(0, p0, lane)};
  }

  // Units [lo(step), hi(step)) of this warp's are dequantized under k16 step `step`.
  __device__ __forceinline__ static constexpr int lo(int step) { return step * kUnitsPerWarp / kSteps; }
  __device__ __forceinline__ static constexpr int hi(int step) { return (step + 1) * kUnitsPerWarp / kSteps; }
  static constexpr int kMaxUnitsPerStep = (kUnitsPerWarp + kSteps - 1) / kSteps;

  // What a step's units read from the ring: per unit and n8 tile, the lane's packed
  // words and its column's scale and zero.
  struct Inputs {
    u32 w[kMaxUnitsPerStep][2][Dq::kWords];
    u16 scale[kMaxUnitsPerStep][2], zero[kMaxUnitsPerStep][2];
  };

  // Step `step`'s inputs from the stage whose packed B tile is at `smem_b` and
  // scale/zero rows at `smem_v` (their first row the group of the tile's first K index);
  // `group_shift`: the group of K index k is k >> group_shift.
  __device__ __forceinline__ static void load(int step, u32 smem_b, u32 smem_v, const Lanes& at, int group_shift,
                                              Inputs& in) {
#pragma unroll
    for (int u = lo(step); u < hi(step); ++u) {
      const int pair = u / kBlocksK, block = u % kBlocksK;
      const int group_row = (block * 32) >> group_shift;
#pragma unroll
      for (int t = 0; t < 2; ++t) {
        const int tile = 2 * pair + t;  // from the warp's first
        const u32 words = smem_b + at.words + (tile * Cfg::kLdsB + block * Cfg::kQuantBlockUnits) * 2;
        if constexpr (Dq::kWords == 1) {
          in.w[u - lo(step)][t][0] = ld_shared_u32(words);
        } else {
          ld_shared_v2(in.w[u - lo(step)][t], words);
        }
        const u32 v = smem_v + at.column + (group_row * Cfg::kLdsV + tile * 8) * 2;
        in.scale[u - lo(step)][t] = ld_shared_u16(v);
        in.zero[u - lo(step)][t] = ld_shared_u16(v + kZerosOffset);
      }
    }
  }

  // Step `step`'s units from `in` into the buffer at `dst`.
  __device__ __forceinline__ static void store(int step, const Inputs& in, u32 dst, const Lanes& at) {
#pragma unroll
    for (int u = lo(step); u < hi(step); ++u) {
      const int pair = u / kBlocksK, block = u % kBlocksK;
      BlockFragments f[2];
#pragma unroll
      for (int t = 0; t < 2; ++t)
        Dq::apply(in.w[u - lo(step)][t], Dq::make(in.scale[u - lo(step)][t], in.zero[u - lo(step)][t]), f[t]);
#pragma unroll
      for (int h = 0; h < 2; ++h)
        st_shared(dst + at.vector + ((2 * block + h) * kPairs + pair) * kVectorRow,
                  make_uint4(f[0][h][0], f[0][h][1], f[1][h][0], f[1][h][1]));
    }
  }

  // Both at once (the prologue's tile 0, and the loop of tiles that do not split:
  // run_staged's kSplit).
  __device__ __forceinline__ static void dequantize(int step, u32 smem_b, u32 smem_v, u32 dst, const Lanes& at,
                                                    int group_shift) {
    Inputs in;
    load(step, smem_b, smem_v, at, group_shift, in);
    store(step, in, dst, at);
  }
};

// The MMA side: the dense m16n8 warp (warp_mma.cuh), its B fragments from the staged
// buffer, two n8 tiles per 16-byte load, instead of from a dense tile by ldmatrix.
template <class Cfg>
struct WarpMmaStaged : WarpMmaM16N8<Cfg> {
  using Base = WarpMmaM16N8<Cfg>;
  using Base::a;
  using Base::b;
  using Base::kNI;

  // Fragments of the k16 step at `k0` (elements into the CTA K tile) into buffer `buf`:
  // A from the ring stage at `smem_a`, B from the staged buffer at `staged`.
  __device__ __forceinline__ void load(int buf, u32 smem_a, u32 staged, int warp_m0, int warp_n0, int k0) {
    const int lane = threadIdx.x & 31;
    load_a_fragments<Cfg>(a[buf], smem_a, warp_m0, k0);
#pragma unroll
    for (int ni = 0; ni < kNI; ni += 2) {
      const uint4 r = ld_shared_v4(staged + StagedB<Cfg>::vector(k0 / 16, warp_n0 / 16 + ni / 2, lane));
      b[buf][ni][0] = r.x;
      b[buf][ni][1] = r.y;
      b[buf][ni + 1][0] = r.z;
      b[buf][ni + 1][1] = r.w;
    }
  }
};

}  // namespace gemm
