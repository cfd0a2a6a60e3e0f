// The tile copies of A and B for one CTA, shared by both mainloops. K runs along
// the rows of A and of an N x K B, and down the rows of a K x N B.
#pragma once
#include "gemm/config.cuh"
#include "gemm/tile_copy.cuh"

namespace gemm {

template <class Cfg>
struct OperandCopies {
  using CopyA = TileCopy<Cfg::kTileARows, Cfg::kTileACols, Cfg::kLdsA, Cfg::kAlign, Cfg::kThreads>;
  using CopyB = TileCopy<Cfg::kTileBRows, Cfg::kTileBCols, Cfg::kLdsB, Cfg::kAlign, Cfg::kThreads>;
  static constexpr bool kBAlongRows = Cfg::kOrderB == OrderB::kKN;

  // Scales and zeros of quantized B: rows are groups, columns are N.
  using CopyV = TileCopy<(Cfg::kGroupRows > 0 ? Cfg::kGroupRows : 1), Cfg::kCtaN, Cfg::kLdsV, 8, Cfg::kThreads>;

  CopyA copy_a;
  CopyB copy_b;
  CopyV copy_scales, copy_zeros;
  int group_shift;  // group of K index k: k >> group_shift
  int k_origin;     // first K index of this CTA's split

  // Group of the K index `k` counted from the split's first element.
  __device__ __forceinline__ int group_of(int k) const { return (k_origin + k) >> group_shift; }

  // (m0, n0): the CTA's output tile; k0: the first K element of its split.
  template <class Params>
  __device__ __forceinline__ void init(const Params& p, int m0, int n0, int k0) {
    const void* A = p.A;
    const void* B = p.B;
    const i64 lda = p.lda, ldb = p.ldb;
    const int M = p.M, N = p.N, K = p.K;
    copy_a.init(A, lda, M, K, m0, k0);
    k_origin = k0;
    if constexpr (Cfg::kQuantB) {
      // B in 16-bit units: K * bits / 16 of them per row; ldb is in those units too.
      constexpr int kPer = 16 / Cfg::kBitsB;
      copy_b.init(B, ldb, N, K / kPer, n0, k0 / kPer);
      group_shift = p.group_shift;
      // V holds the scales ([groups, N]) and then the zeros, each with leading dimension ldv.
      copy_scales.init(p.V, p.ldv, p.groups, N, 0, n0);
      copy_zeros.init(static_cast<const char*>(p.V) + static_cast<i64>(p.groups) * p.ldv * 2, p.ldv, p.groups, N, 0,
                      n0);
    } else if constexpr (kBAlongRows) {
      copy_b.init(B, ldb, K, N, k0, n0);
    } else {
      copy_b.init(B, ldb, N, K, n0, k0);
    }
  }

  // Displacement (rows, cols) of B's K tile starting k0 after the split's first element.
  __device__ __forceinline__ static int b_drow(int k0) { return kBAlongRows ? k0 : 0; }
  __device__ __forceinline__ static int b_dcol(int k0) { return kBAlongRows ? 0 : (Cfg::kQuantB ? k0 * Cfg::kBitsB / 16 : k0); }
};

}  // namespace gemm
