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

  CopyA copy_a;
  CopyB copy_b;

  // (m0, n0): the CTA's output tile; k0: the first K element of its split.
  __device__ __forceinline__ void init(const void* A, i64 lda, const void* B, i64 ldb, int M, int N, int K, int m0,
                                       int n0, int k0) {
    copy_a.init(A, lda, M, K, m0, k0);
    if constexpr (kBAlongRows) {
      copy_b.init(B, ldb, K, N, k0, n0);
    } else {
      copy_b.init(B, ldb, N, K, n0, k0);
    }
  }

  // Displacement (rows, cols) of B's K tile starting at k0.
  __device__ __forceinline__ static int b_drow(int k0) { return kBAlongRows ? k0 : 0; }
  __device__ __forceinline__ static int b_dcol(int k0) { return kBAlongRows ? 0 : k0; }
};

}  // namespace gemm
