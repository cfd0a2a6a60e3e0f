// Packed quantized weights back to a dense N x K matrix of the activations' type, each
// weight once (gemm_runtime/unpack.py). For the whole-weight path of prefill (issue 17):
// at M >= 1024 a weight dequantized once into a workspace costs ~2.5 bytes of memory
// traffic per weight, where the quantized kernels dequantize it once per CTA row of
// tiles (16 times at M = 4096 on 256-row tiles) beside their MMAs.
//
// A warp takes kUnpackChunk n8 x k32 blocks of the packed layout along K at a time
// (gemm_runtime/packed_weight.py): lane (g, t) reads its word(s) of each, dequantizes
// them with the kernels' own Dequant (so the values are bit for bit what the MMAs would
// see), and writes its fragment registers, each a (k, k + 1) pair of column g, to row
// n0 + g of D.
// A warp's four stores of a block fill 8 rows x 64 bytes, which L2 merges into whole
// sectors before they reach memory.
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

// A warp's share per trip: kChunk blocks along K of one 8-column tile, all loaded before
// any is converted, so that each warp keeps kChunk loads in flight.
constexpr int kUnpackChunk = 4;

template <class T, int kBits>
__device__ __forceinline__ void unpack_weight(const UnpackParams& p) {
  using Dq = Dequant<T, kBits>;
  constexpr int kBlockBytes = 32 * kBits;  // 8 columns x 32 K
  const int lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int blocks_k = (p.K + 31) / 32;
  const int chunks_k = (blocks_k + kUnpackChunk - 1) / kUnpackChunk;
  const i64 chunks = static_cast<i64>((p.N + 7) / 8) * chunks_k;
  const i64 warps = static_cast<i64>(gridDim.x) * (blockDim.x / 32);
  for (i64 c = static_cast<i64>(blockIdx.x) * (blockDim.x / 32) + (threadIdx.x >> 5); c < chunks; c += warps) {
    const int tile = static_cast<int>(c / chunks_k), block0 = static_cast<int>(c % chunks_k) * kUnpackChunk;
    const unsigned char* src = p.B + tile * p.ldb + static_cast<i64>(block0) * kBlockBytes + lane * Dq::kWords * 4;
    u32 w[kUnpackChunk][Dq::kWords];
#pragma unroll
    for (int j = 0; j < kUnpackChunk; ++j) {
#pragma unroll
      for (int i = 0; i < Dq::kWords; ++i)
        w[j][i] = block0 + j < blocks_k ? reinterpret_cast<const u32*>(src + j * kBlockBytes)[i] : 0u;
    }
    const int n = tile * 8 + g;
    if (n >= p.N) continue;  // the zero columns padding N to 8
    u16* row = p.D + n * p.ldd;
#pragma unroll
    for (int j = 0; j < kUnpackChunk; ++j) {
      const int block = block0 + j;
      if (block >= blocks_k) break;
      const int group = (block * 32) >> p.group_shift;
      const u16 scale = p.V[group * p.ldv + n], zero = p.V[(p.groups + group) * p.ldv + n];
      BlockFragments f;
      Dq::apply(w[j], Dq::make(scale, zero), f);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int k = block * 32 + 16 * h + 8 * r + 2 * t;
          if (k + 1 < p.K) {
            *reinterpret_cast<u32*>(row + k) = f[h][r];
          } else if (k < p.K) {
            row[k] = static_cast<u16>(f[h][r] & 0xFFFFu);
          }
        }
      }
    }
  }
}

}  // namespace gemm
