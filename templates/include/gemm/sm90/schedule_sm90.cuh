// The SM90 family's persistent tile scheduler: which work unit (an output tile, or one
// K slice of it under split-K) a CTA's u-th turn takes.
#pragma once
#include "gemm/fast_div.cuh"

namespace gemm {

// A work unit: the cluster's tile (tile_m, tile_n) in tiles of kCluster * kCtaM rows,
// K tiles [k_tile0, k_tile0 + k_tiles), slice `split` of `splits` (1: the whole tile).
// A split unit's `split_tile` is its tile's index among the split tiles (0 .. tiles -
// whole - 1): the split-K workspace slot, so semaphores and partials are needed for
// those tiles only (Sm90Family.split_tiles sizes them); -1 for a whole tile.
struct Sm90Unit {
  int tile_m, tile_n, split, splits, split_tile, k_tile0, k_tiles;
};

// Split-K splits only the tiles that would leave the last round of the grid partly
// idle: the first `whole` tiles (whole rounds of a `grid`-CTA grid, a multiple of
// `splits`) run unsplit, one unit each; the rest split into `splits` units each, so
// the last rounds run 1/splits-long units on every CTA. Where the tiles do not fill
// one round, `whole` is 0 and every tile splits.
__device__ __forceinline__ int sm90_whole_tiles(int tiles, int splits, int grid) {
  return splits > 1 ? tiles / grid * grid : tiles;
}

// Unit u < whole is tile u; unit whole + v is K slice v % splits of tile whole + v /
// splits, split tile v / splits: the slices of one tile run on neighbouring CTAs at
// about the same time, so the split-K hand-over rarely waits.
// Tiles are rasterized in groups of 2^swizzle rows of M: consecutive tiles walk down
// the group's rows, then on along N, so the CTAs in flight together share B tiles
// within a group and A tiles across the groups' columns in L2.
// NOTE: a last K slice waits (split-K) only for the tile's other slices, which the
// grid, a multiple of `splits` CTAs (codegen/families/sm90.py), puts on the CTAs just
// below it in the same round (the split units start on a round boundary: `whole` is
// whole rounds); blocks start in index order, so those have started and no wait can
// hang, even with SMs held by other kernels. Cluster kernels do not split.
// NOTE: the divisors are fixed per launch, so they are FastDivs built once per CTA: the
// consumers decode a unit between two tiles, with the tensor cores idle (a plain `/`
// cost about 600 SM clocks per unit there: bench/experiments/sm90_trace.py).
struct Sm90Schedule {
  int tiles_m, tiles_n, splits, swizzle, k_tiles_per_split, k_tiles_total;
  int whole, units;
  FastDiv by_splits, by_group_tiles, by_last_rows;

  __device__ __forceinline__ Sm90Schedule(int tiles_m_, int tiles_n_, int splits_, int swizzle_, int grid,
                                          int k_tiles_per_split_, int k_tiles_total_)
      : tiles_m(tiles_m_), tiles_n(tiles_n_), splits(splits_), swizzle(swizzle_),
        k_tiles_per_split(k_tiles_per_split_), k_tiles_total(k_tiles_total_),
        whole(sm90_whole_tiles(tiles_m_ * tiles_n_, splits_, grid)),
        units(whole + (tiles_m_ * tiles_n_ - whole) * splits_),
        by_splits(splits_),
        by_group_tiles(tiles_n_ << swizzle_),
        // the last group of tile rows is short where 2^swizzle does not divide tiles_m
        by_last_rows(tiles_m_ % (1 << swizzle_) != 0 ? tiles_m_ % (1 << swizzle_) : 1) {}

  __device__ __forceinline__ Sm90Unit unit(int u) const {
    Sm90Unit w;
    int tile = u;
    w.split = 0;
    w.splits = 1;
    w.split_tile = -1;
    if (u >= whole) {
      w.split_tile = by_splits.div(u - whole);
      tile = whole + w.split_tile;
      w.split = (u - whole) - w.split_tile * splits;
      w.splits = splits;
    }
    const int group = by_group_tiles.div(tile);
    const int first_m = group << swizzle;
    const int in_group = tile - first_m * tiles_n;
    if (tiles_m - first_m >= (1 << swizzle)) {  // a whole group: 2^swizzle rows
      w.tile_m = first_m + (in_group & ((1 << swizzle) - 1));
      w.tile_n = in_group >> swizzle;
    } else {
      const int across = by_last_rows.div(in_group);
      w.tile_m = first_m + in_group - across * static_cast<int>(by_last_rows.divisor);
      w.tile_n = across;
    }
    if (w.splits == 1) {
      w.k_tile0 = 0;
      w.k_tiles = k_tiles_total;
      return w;
    }
    w.k_tile0 = w.split * k_tiles_per_split;
    const int left = k_tiles_total - w.k_tile0;
    w.k_tiles = left < 0 ? 0 : (left > k_tiles_per_split ? k_tiles_per_split : left);
    return w;
  }
};

}  // namespace gemm
