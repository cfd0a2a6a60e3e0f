// Global -> shared copy of the scale and zero rows that one K tile of quantized B
// needs. V stores the scales ([groups, N]) and then the zeros, with one leading
// dimension; a stage holds kGroupRows rows of each (every group a K tile can touch),
// scales first.
//
// NOTE: a thread's rows of the stage tile are fixed, so its source is a pointer
// computed once plus the tile's first group times the leading dimension: one uniform
// product per tile. Only the rows of groups the tile really touches are read (a tile
// of 256 with groups of 128 needs 2 of its 8 rows).
#pragma once
#include "gemm/ptx.cuh"

namespace gemm {

template <int GroupRows, int Cols, int Lds, int Threads>
struct GroupRowsCopy {
  static constexpr int kVec = 8;  // elements per 16-byte copy
  static constexpr int kVecsPerRow = Cols / kVec;
  static constexpr int kRows = 2 * GroupRows;  // scales, then zeros
  static constexpr int kVecs = kRows * kVecsPerRow;
  static constexpr int kIters = (kVecs + Threads - 1) / Threads;
  static constexpr int kRowStep = Threads / kVecsPerRow;
  static_assert(Cols % kVec == 0 && Threads % kVecsPerRow == 0, "the CTA's threads cover whole rows");

  const char* base;          // V: the address of copies that read nothing
  const char* src[kIters];   // this thread's copy i for the tile whose first group is 0
  i64 ld_bytes;
  int group_row[kIters];     // the row of copy i inside the scale (or zero) rows: 0 .. GroupRows-1
  int col_bytes;             // bytes of this thread's vector left of the column edge
  u32 smem_offset;

  // V: [2 * groups, ld]; n0: the CTA's first column; N: the columns of V.
  __device__ __forceinline__ void init(const void* v, i64 ld, int groups_, int N, int n0) {
    const int r = threadIdx.x / kVecsPerRow;
    const int c = (threadIdx.x % kVecsPerRow) * kVec;
    base = static_cast<const char*>(v);
    ld_bytes = ld * 2;
    smem_offset = static_cast<u32>((r * Lds + c) * 2);
    col_bytes = (N - n0 - c) * 2;
    col_bytes = col_bytes < 0 ? 0 : (col_bytes > 16 ? 16 : col_bytes);
#pragma unroll
    for (int i = 0; i < kIters; ++i) {
      const int tile_row = r + i * kRowStep;
      const bool zeros = tile_row >= GroupRows;
      group_row[i] = zeros ? tile_row - GroupRows : tile_row;
      src[i] = base + ((zeros ? groups_ : 0) + group_row[i]) * ld_bytes + static_cast<i64>(n0 + c) * 2;
      opaque(src[i]);
    }
    opaque(col_bytes);
    opaque(ld_bytes);
  }

  // Rows of the groups [g0, g_end) into the stage at `dst`; those of groups past the
  // matrix's last (`groups`) are zero-filled: warp steps past K still read them, and
  // their products must stay finite. The other rows of the stage are left as they
  // are: no warp reads them. Neither are columns past N copied: they feed only output
  // columns that are never stored.
  __device__ __forceinline__ void issue(u32 dst, int g0, int g_end, int groups) const {
    const i64 shift = g0 * ld_bytes;
    const int rows = g_end - g0;
    if (g_end <= groups && col_bytes % 16 == 0) {
      // Every K tile but the last, in every CTA but the one at N's edge: whole vectors
      // of existing rows, the predicate on the instruction.
#pragma unroll
      for (int i = 0; i < kIters; ++i) {
        if (kVecs % Threads != 0 && threadIdx.x + i * Threads >= kVecs) continue;
        cp_async_if<16>(group_row[i] < rows && col_bytes != 0, dst + smem_offset + i * kRowStep * Lds * 2,
                        src[i] + shift);
      }
      return;
    }
    const int rows_inside = (g_end < groups ? g_end : groups) - g0;
#pragma unroll
    for (int i = 0; i < kIters; ++i) {
      if (kVecs % Threads != 0 && threadIdx.x + i * Threads >= kVecs) continue;
      if (group_row[i] < rows && col_bytes > 0) {
        const int bytes = group_row[i] < rows_inside ? col_bytes : 0;
        // NOTE: a copy that reads nothing still gets a valid address (V itself).
        cp_async_zfill<16>(dst + smem_offset + i * kRowStep * Lds * 2, bytes ? src[i] + shift : base, bytes);
      }
    }
  }
};

}  // namespace gemm
