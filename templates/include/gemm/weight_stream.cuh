// Global -> register loads of fragment-ordered quantized B (the direct B path of
// MainloopSm80): a lane's words of one k32 step, for each of its warp's n8 rows, land
// in the registers its dequantization reads, without shared memory.
//
// NOTE: the packed layout (gemm_runtime.quant.pack_for_gemm) puts the 32 lanes' words
// of one n8 x k32 block next to each other, so every load below is one fully used
// 128-byte (4-bit) or 256-byte (8-bit) line per warp.
#pragma once
#include "gemm/ptx.cuh"

namespace gemm {

// Where a CTA's packed weights start: set up once per CTA, from the kernel parameters.
template <int Words, int BlockBytes>
struct WeightOrigin {
  const char* src;  // this lane's word of the CTA's first n8 row, first block of its split
  int row_bytes;    // bytes between n8 rows (ldb in bytes)
  int rows_left;    // n8 rows of B from the first
  int blocks_left;  // k32 blocks of B from the first

  // (n0, k0): the CTA's first column and its split's first K element.
  template <class Params>
  __device__ __forceinline__ void init(const Params& p, int n0, int k0) {
    const int lane = threadIdx.x & 31;
    row_bytes = static_cast<int>(p.ldb) * 2;
    src = static_cast<const char*>(p.B) + static_cast<i64>(n0 / 8) * row_bytes + static_cast<i64>(k0 / 32) * BlockBytes +
          lane * Words * 4;
    rows_left = (p.N + 7) / 8 - n0 / 8;
    blocks_left = (p.K + 31) / 32 - k0 / 32;
  }
};

// One warp's loads, tile after tile: the first n8 row's pointer, moved one K tile on
// by `next_tile`; the other rows are a multiple of the row stride away.
// NOTE: keeping a pointer per row from tile to tile would spare rebuilding them at each
// tile (load_tile), but costs the registers that keep the 8-warp decode tiles at two
// CTAs per SM without spilling.
template <int NI, int Words, int BlockBytes, int BlocksPerTile>
struct WeightCursor {
  using StepWords = u32[NI][Words];  // a lane's words of one k32 step

  const char* first;  // this lane's word of the warp's first n8 row, current tile's first block
  int row_bytes;
  int blocks_left;    // k32 blocks from the current tile's first
  int rows_left;      // n8 rows from the warp's first

  // (warp_n0, warp_k0): the warp's offsets inside the CTA tile.
  __device__ __forceinline__ void init(const WeightOrigin<Words, BlockBytes>& o, int warp_n0, int warp_k0) {
    first = o.src + static_cast<i64>(warp_n0 / 8) * o.row_bytes + (warp_k0 / 32) * BlockBytes;
    row_bytes = o.row_bytes;
    blocks_left = o.blocks_left - warp_k0 / 32;
    rows_left = o.rows_left - warp_n0 / 8;
  }

  // The words of the current tile's `Steps` k32 steps, w[step][ni]. Blocks past K and
  // rows past N read nothing and leave zeros.
  // NOTE: one test for the whole tile and one pointer per row, so that every load of a
  // tile inside B is one instruction with a constant offset: tested per step, the
  // compiler rebuilt the row pointers for each step (three instructions per load).
  template <int Steps>
  __device__ __forceinline__ void load_tile(StepWords (&w)[Steps]) const {
    const char* row[NI];
#pragma unroll
    for (int ni = 0; ni < NI; ++ni) row[ni] = first + static_cast<i64>(ni) * row_bytes;
    if (Steps <= blocks_left && NI <= rows_left) {
#pragma unroll
      for (int step = 0; step < Steps; ++step)
#pragma unroll
        for (int ni = 0; ni < NI; ++ni) ld_stream(w[step][ni], row[ni] + step * BlockBytes);
    } else {
#pragma unroll
      for (int step = 0; step < Steps; ++step)
#pragma unroll
        for (int ni = 0; ni < NI; ++ni)
          ld_stream_or_zeros(step < blocks_left && ni < rows_left, w[step][ni], row[ni] + step * BlockBytes);
    }
  }

  __device__ __forceinline__ void next_tile() {
    first += BlocksPerTile * BlockBytes;
    blocks_left -= BlocksPerTile;
  }
};

}  // namespace gemm
