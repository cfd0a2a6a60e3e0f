// Grouped launches (mixture-of-experts, docs/MOE.md): one launch multiplies the row
// groups of E experts, rows offsets[e] .. offsets[e + 1] of A (or, gathered, A's rows
// gather[r] for those rows r), D and the row scales U, by each expert's weight,
// B + e * N * ldb (the experts' weights one after another). The host does not know how
// the rows split over the experts (the offsets live on the device), so the grid covers a
// bound on the tile rows (gemm_runtime.cost_model.tiles_of), and each CTA finds its
// expert here; the CTAs past the last tile row have nothing to do.
#pragma once
#include "gemm/config.cuh"

namespace gemm {

// A grouped CTA's work: tile row `tile` of expert `expert`, whose `rows` rows start at
// row `row0` of the grouped problem. expert < 0: past the last tile row.
struct GroupTile {
  int expert, tile, row0, rows;
};

// Tile rows of an expert whose rows are lo .. hi - 1 (none when it has none).
template <int CtaM>
__device__ __forceinline__ int expert_tile_rows(int lo, int hi) {
  return hi > lo ? (hi - lo + CtaM - 1) / CtaM : 0;
}

// Tile row `tile_m` of the enumeration (expert 0's ceil(rows / CtaM) tile rows, then
// expert 1's, ...). Every warp finds it on its own, without a barrier or shared memory:
// the lanes take 32 experts at a time, and a prefix sum of their tile rows across the
// lanes says which one holds it. Call from every lane of every warp (full-mask shuffles).
// NOTE: a round's offsets are loaded during the round before (GEMM_GROUPED_SCAN_AHEAD):
// the loop may return after any round, so the compiler issued each round's loads only
// after the previous round's shuffles, one L2 round trip after another, before the
// CTA's first weight copy (64 experts: two, where one is needed).
#ifndef GEMM_GROUPED_SCAN_AHEAD
#define GEMM_GROUPED_SCAN_AHEAD 1
#endif
template <int CtaM>
__device__ __forceinline__ GroupTile find_group_tile(const int* offsets, int experts, int tile_m) {
  constexpr unsigned kAll = 0xffffffffu;
  const int lane = threadIdx.x & 31;
  int before = 0;  // tile rows of the experts already passed
  int lo = lane < experts ? offsets[lane] : 0;
  int hi = lane < experts ? offsets[lane + 1] : 0;
  for (int e0 = 0; e0 < experts; e0 += 32) {
    const int e = e0 + lane;
    if (!GEMM_GROUPED_SCAN_AHEAD && e0 > 0) {
      lo = e < experts ? offsets[e] : 0;
      hi = e < experts ? offsets[e + 1] : 0;
    }
    const int ahead = GEMM_GROUPED_SCAN_AHEAD ? e + 32 : experts;
    const int lo_next = ahead < experts ? offsets[ahead] : 0;
    const int hi_next = ahead < experts ? offsets[ahead + 1] : 0;
    const int tiles = expert_tile_rows<CtaM>(lo, hi);
    int upto = tiles;  // tile rows of experts e0 .. e
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      const int v = __shfl_up_sync(kAll, upto, d);
      if (lane >= d) upto += v;
    }
    const int total = __shfl_sync(kAll, upto, 31);
    if (tile_m < before + total) {
      // The first lane whose experts reach past tile_m: an empty expert never is.
      const int owner = __ffs(__ballot_sync(kAll, before + upto > tile_m)) - 1;
      const int first = __shfl_sync(kAll, upto - tiles, owner);
      const int row0 = __shfl_sync(kAll, lo, owner);
      const int rows = __shfl_sync(kAll, hi - lo, owner);
      return {e0 + owner, tile_m - before - first, row0, rows};
    }
    before += total;
    lo = lo_next;
    hi = hi_next;
  }
  return {-1, 0, 0, 0};
}

// The tile rows of all experts (what find_group_tile enumerates): a persistent grouped
// kernel schedules these rather than the host's bound, so its rasterization groups and
// split-K tail fall on real work. Warp-wide, like find_group_tile.
template <int CtaM>
__device__ __forceinline__ int group_tile_rows(const int* offsets, int experts) {
  constexpr unsigned kAll = 0xffffffffu;
  const int lane = threadIdx.x & 31;
  int tiles = 0;
  for (int e = lane; e < experts; e += 32) tiles += expert_tile_rows<CtaM>(offsets[e], offsets[e + 1]);
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) tiles += __shfl_xor_sync(kAll, tiles, d);
  return tiles;
}

// The expert's problem: `p` with A, B, C, D, U, the bias and (quantized B) the scales
// and zeros V moved to the expert's rows and weight, and M its rows.
template <class Cfg, class Params>
__device__ __forceinline__ Params expert_problem(const Params& p, const GroupTile& g) {
  using Storage = typename Cfg::TD::Storage;
  Params q = p;
  const i64 row0 = g.row0;
  // Gathered A stays where it is; the expert's rows read their A rows through gather.
  if (p.gather != nullptr) {
    q.gather = p.gather + row0;
  } else {
    q.A = static_cast<const char*>(p.A) + row0 * p.lda * 2;
  }
  // The experts' weights follow each other (the runtime checks): dense [N, K], N rows of
  // ldb 16-bit units apart; packed (gemm_runtime.packed_weight), ceil(N / 8) rows of
  // blocks, then the scales and zeros, 2 * groups rows of ldv.
  if constexpr (Cfg::kQuantB) {
    q.B = static_cast<const char*>(p.B) + static_cast<i64>(g.expert) * ((p.N + 7) / 8) * p.ldb * 2;
    q.V = static_cast<const char*>(p.V) + static_cast<i64>(g.expert) * 2 * p.groups * p.ldv * 2;
  } else {
    q.B = static_cast<const char*>(p.B) + static_cast<i64>(g.expert) * p.N * p.ldb * 2;
  }
  q.D = static_cast<char*>(p.D) + row0 * p.ldd * static_cast<i64>(sizeof(Storage));
  if (p.C != nullptr) q.C = static_cast<const char*>(p.C) + row0 * p.ldc * static_cast<i64>(sizeof(Storage));
  if (p.U != nullptr) q.U = static_cast<const float*>(p.U) + row0;
  if (p.bias != nullptr) q.bias = static_cast<const Storage*>(p.bias) + static_cast<i64>(g.expert) * p.N;
  q.M = g.rows;
  return q;
}

// The scale of row `r` of the expert's D (1 without row scales or outside grouped kernels).
template <class Cfg, class Params>
__device__ __forceinline__ float row_scale(const Params& p, int r) {
  if constexpr (Cfg::kGrouped) {
    return p.U != nullptr ? static_cast<const float*>(p.U)[r] : 1.0f;
  } else {
    return 1.0f;
  }
}

}  // namespace gemm
