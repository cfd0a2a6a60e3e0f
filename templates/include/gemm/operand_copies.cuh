// The tile copies of A and B for one CTA, shared by both mainloops. K runs along
// the rows of A and of an N x K B, and down the rows of a K x N B.
#pragma once
#include "gemm/config.cuh"
#include "gemm/tile_copy.cuh"

namespace gemm {

template <class Cfg>
struct OperandCopies {
  using CopyA = TileCopy<Cfg::kTileARows, Cfg::kTileACols, typename Cfg::LayoutA, Cfg::kAlign, Cfg::kThreads>;
  using CopyB = TileCopy<Cfg::kTileBRows, Cfg::kTileBCols, typename Cfg::LayoutB, Cfg::kAlignB, Cfg::kThreads>;
  static constexpr bool kBAlongRows = Cfg::kOrderB == OrderB::kKN;

  // Scales and zeros of quantized B (rows are groups, columns are N) are each
  // mainloop's own: the SM70 one stages them through registers, the SM80 one copies
  // the rows a tile needs by cp.async.
  static constexpr int kGroupRows = Cfg::kGroupRows > 0 ? Cfg::kGroupRows : 1;

  CopyA copy_a;
  CopyB copy_b;
  int group_shift;  // group of K index k: k >> group_shift
  int group_mask;   // group size - 1
  int groups;       // groups along all of K
  int k_origin;     // first K index of this CTA's split
  int k_extent;     // K - k_origin: the split's K tiles lie inside K up to this offset
  int rows;         // M - m0: the CTA's rows inside M (more than the tile's when M is larger)

  // Group of the K index `k` counted from the split's first element.
  __device__ __forceinline__ int group_of(int k) const { return (k_origin + k) >> group_shift; }

  // One past the last group the K tile at `k0` spans, counting groups past K.
  __device__ __forceinline__ int group_end(int k0) const { return group_of(k0 + Cfg::kCtaK - 1) + 1; }

  // (m0, n0): the CTA's output tile; k0: the first K element of its split.
  template <class Params>
  __device__ __forceinline__ void init(const Params& p, int m0, int n0, int k0) {
    const void* A = p.A;
    const void* B = p.B;
    const i64 lda = p.lda, ldb = p.ldb;
    const int M = p.M, N = p.N, K = p.K;
    copy_a.init(A, lda, M, K, m0, k0);
    k_origin = k0;
    k_extent = K - k0;
    rows = M - m0;
    if constexpr (Cfg::kQuantB) {
      // Fragment-ordered B: a row per 8 columns, a block of kQuantBlockUnits 16-bit
      // units per 32 K; ldb is in those units.
      constexpr int kUnits = Cfg::kQuantBlockUnits;
      copy_b.init(B, ldb, (N + 7) / 8, (K + 31) / 32 * kUnits, n0 / 8, k0 / 32 * kUnits);
      group_shift = p.group_shift;
      group_mask = (1 << group_shift) - 1;
      groups = p.groups;
    } else if constexpr (kBAlongRows) {
      copy_b.init(B, ldb, K, N, k0, n0);
    } else {
      copy_b.init(B, ldb, N, K, n0, k0);
    }
  }

  // Displacement (rows, cols) of B's K tile starting k0 after the split's first element.
  __device__ __forceinline__ static int b_drow(int k0) { return kBAlongRows ? k0 : 0; }
  __device__ __forceinline__ static int b_dcol(int k0) {
    // NOTE: k0 >= 0; the unsigned shift spares the rounding fix-up of a signed division.
    return kBAlongRows ? 0 : (Cfg::kQuantB ? static_cast<int>(static_cast<u32>(k0) >> 5) * Cfg::kQuantBlockUnits : k0);
  }

  // Deferred scaling: after the MMAs of step `step` of K tile `tile` (the warp's K
  // slice starts at warp_k0), hand the group's partial sums over when the warp's next
  // step lies in another group or there is none. `stage_smem`: the stage the step read.
  template <class Warp>
  __device__ __forceinline__ void end_group_after(Warp& warp, u32 stage_smem, int tile, int step, int k_tiles,
                                                  int warp_k0, int warp_n0) const {
    if constexpr (Cfg::kQuantB) {
      if constexpr (Warp::kDeferred) {
        const int k0 = tile * Cfg::kCtaK;
        const int k = k0 + warp_k0 + step * 32;
        const bool tile_end = step + 1 == Cfg::kWarpTileK / 32;
        // Groups are powers of two of at least 32 and steps are aligned k32 blocks: the
        // warp's next step starts a group exactly when the K index after this step is
        // a multiple of the group size (the next step of a K-sliced warp, one CTA tile
        // on, starts a group whenever a group ends in between).
        const int next_k = tile_end ? k0 + Cfg::kCtaK + warp_k0 : k + 32;
        const bool group_ends = tile_end && Cfg::kWarpsK > 1 ? group_of(k) != group_of(next_k)
                                                               : ((k_origin + next_k) & group_mask) == 0;
        if ((tile_end && tile + 1 == k_tiles) || group_ends)
          warp.end_group(stage_smem + Cfg::kStageBytesA + Cfg::kStageBytesB, group_of(k) - group_of(k0), warp_n0);
      }
    }
  }

  // Deferred scaling: before the mainloop, the rows of A the warp's tile has.
  template <class Warp>
  __device__ __forceinline__ void begin_groups(Warp& warp, int warp_m0) const {
    if constexpr (Cfg::kQuantB) {
      if constexpr (Warp::kDeferred) warp.set_rows(rows - warp_m0);
    }
  }

  // Deferred scaling: after the mainloop.
  template <class Warp>
  __device__ __forceinline__ void end_groups(Warp& warp) const {
    if constexpr (Cfg::kQuantB) {
      if constexpr (Warp::kDeferred) warp.end_groups();
    }
  }

  // The fragments of the warp step at `kk` (K offset inside the tile) of K tile `tile`
  // from the stage at `stage_smem`: the quantized path also finds the step's group.
  template <class Warp>
  __device__ __forceinline__ void load_fragments(Warp& warp, int buf, u32 stage_smem, int tile, int kk, int warp_m0,
                                                 int warp_n0) const {
    const u32 sa = stage_smem;
    const u32 sb = sa + Cfg::kStageBytesA;
    if constexpr (Cfg::kQuantB) {
      const int k0 = tile * Cfg::kCtaK;
      const int group = group_of(k0 + kk);
      warp.load(buf, sa, sb, sb + Cfg::kStageBytesB, group, group - group_of(k0), warp_m0, warp_n0, kk);
    } else {
      warp.load(buf, sa, sb, warp_m0, warp_n0, kk);
    }
  }
};

}  // namespace gemm
