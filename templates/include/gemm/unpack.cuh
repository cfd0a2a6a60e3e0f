// Packed quantized weights back to a dense N x K matrix of the activations' type, each
// weight once (gemm_runtime/unpack.py). For the whole-weight plans of prefill (issue 17,
// docs/QUANT.md): at M >= 1024 a weight dequantized once into a buffer costs ~2.5 bytes
// of memory traffic per weight, where the quantized kernels dequantize it once per CTA
// row of tiles (16 times at M = 4096 on 256-row tiles) beside their MMAs.
//
// A warp takes kUnpackChunk n8 x k32 blocks of the packed layout along K at a time
// (gemm_runtime/packed_weight.py): lane (g, t) reads its word(s) of each block and the
// block's scale and zero for column g, all before converting any (so each warp keeps
// them all in flight), dequantizes them with the kernels' own Dequant (so the values are
// bit for bit what the MMAs would see), and writes its fragment registers, each a (k,
// k + 1) pair of column g, into the warp's slice of shared memory: 8 rows of D x
// kUnpackChunk * 32 values. The warp then stores those rows to D, a row per instruction,
// 16 bytes a lane (whole 512-byte runs), where D's rows allow it.
// NOTE: the fragments' own order would store 8 rows x 16 bytes per instruction, half a
// sector of each row; the first version did, at 1.4-1.5 TB/s on the H200.
#pragma once
#include "gemm/dequant.cuh"

namespace gemm {

struct UnpackParams {
  const unsigned char* B;  // packed blocks: a row per 8 columns, 32 * bits bytes per k32 block
  const u16* V;  // [2 * groups, ldv]: the scales, then the zero points
  u16* D;        // [N, ldd] in the activations' type
  i64 ldb;       // bytes between rows of B
  i64 ldv;       // elements between rows of V
  i64 ldd;       // elements between rows of D (even: pairs are stored as one word)
  int N, K, groups, group_shift;
};

constexpr int kUnpackChunk = 8;        // k32 blocks a warp converts per trip
constexpr int kUnpackWarps = 8;        // warps per CTA (unpack.py's THREADS / 32)
constexpr int kUnpackRowValues = kUnpackChunk * 32;
// A row's pitch in the staging slice: 16 bytes over the row, so that the 8 rows' words
// of one fragment register fall on 8 different groups of 4 banks.
constexpr int kUnpackPitch = kUnpackRowValues + 8;
constexpr int kUnpackSmemBytes = kUnpackWarps * 8 * kUnpackPitch * 2;

template <class T, int kBits>
__device__ __forceinline__ void unpack_weight(const UnpackParams& p) {
  using Dq = Dequant<T, kBits>;
  constexpr int kBlockBytes = 32 * kBits;  // 8 columns x 32 K
  __shared__ __align__(16) u16 staging[kUnpackWarps][8][kUnpackPitch];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  u16(&rows)[8][kUnpackPitch] = staging[warp];
  const int blocks_k = (p.K + 31) / 32;
  const int chunks_k = (blocks_k + kUnpackChunk - 1) / kUnpackChunk;
  const i64 chunks = static_cast<i64>((p.N + 7) / 8) * chunks_k;
  const i64 warps = static_cast<i64>(gridDim.x) * kUnpackWarps;
  // Whole 16-byte stores need D's rows at 16-byte multiples (the buffers unpack.py makes).
  const bool wide = p.ldd % 8 == 0 && (reinterpret_cast<unsigned long long>(p.D) & 15) == 0;
  for (i64 c = static_cast<i64>(blockIdx.x) * kUnpackWarps + warp; c < chunks; c += warps) {
    const int tile = static_cast<int>(c / chunks_k), block0 = static_cast<int>(c % chunks_k) * kUnpackChunk;
    const unsigned char* src = p.B + tile * p.ldb + static_cast<i64>(block0) * kBlockBytes + lane * Dq::kWords * 4;
    // Column n's scale and zero; the columns padding N to 8 read column N - 1's.
    const int n = min(tile * 8 + g, p.N - 1);
    u32 w[kUnpackChunk][Dq::kWords];
    u16 scale[kUnpackChunk], zero[kUnpackChunk];
#pragma unroll
    for (int j = 0; j < kUnpackChunk; ++j) {
      const bool in = block0 + j < blocks_k;
#pragma unroll
      for (int i = 0; i < Dq::kWords; ++i) w[j][i] = in ? reinterpret_cast<const u32*>(src + j * kBlockBytes)[i] : 0u;
      const int group = (min(block0 + j, blocks_k - 1) * 32) >> p.group_shift;
      scale[j] = p.V[group * p.ldv + n];
      zero[j] = p.V[(p.groups + group) * p.ldv + n];
    }
#pragma unroll
    for (int j = 0; j < kUnpackChunk; ++j) {
      BlockFragments f;
      Dq::apply(w[j], Dq::make(scale[j], zero[j]), f);
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int r = 0; r < 2; ++r)
          *reinterpret_cast<u32*>(&rows[g][j * 32 + 16 * h + 8 * r + 2 * t]) = f[h][r];
    }
    __syncwarp();
    const int k0 = block0 * 32;
    const int rows_here = min(8, p.N - tile * 8), values = min(kUnpackRowValues, p.K - k0);
    if (wide) {
      // Lane l stores values 8 l .. 8 l + 7 of each row; only a row's last run is short.
      const int v = 8 * lane;
      for (int r = 0; r < rows_here; ++r) {
        u16* dst = p.D + (static_cast<i64>(tile) * 8 + r) * p.ldd + k0 + v;
        if (v + 8 <= values) {
          *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(&rows[r][v]);
        } else {
          for (int e = 0; e < values - v; ++e) dst[e] = rows[r][v + e];
        }
      }
    } else {
      // Pairs: lane l stores values 2 l, 2 l + 1 of every 64 of a row (ldd is even).
      for (int r = 0; r < rows_here; ++r) {
        u16* dst = p.D + (static_cast<i64>(tile) * 8 + r) * p.ldd + k0;
        for (int v = 2 * lane; v < values; v += 64) {
          if (v + 1 < values) {
            *reinterpret_cast<u32*>(dst + v) = *reinterpret_cast<const u32*>(&rows[r][v]);
          } else {
            dst[v] = rows[r][v];
          }
        }
      }
    }
    __syncwarp();  // the slice is written again by the next trip
  }
}

}  // namespace gemm
