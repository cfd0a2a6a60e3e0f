// The transposed product of weight-only quantized GEMM on wgmma, deliberately simple:
// the GPU smoke test of the register-A path the SM90 quantized family will build on
// (issue 16; docs/QUANT.md), not the product kernel (no persistence, no split-K, no
// shared-memory epilogue, no overlap of dequantization with the MMAs).
//
//   D[M x N] = X[M x K] @ W[N x K]^T,  W = (q - z) * s per group of K   (PackedWeight)
//
// computed as D^T = W . X^T: the dequantized weights are wgmma's 64-row A operand, taken
// from registers (wgmma_rs), and the tokens are its N operand, a K-major tile of X in
// shared memory. One CTA covers 128 weight rows (two consumer warpgroups, 64 each) and
// kTokens tokens; warpgroup 2 is the producer, one thread TMA-loading X's K tiles
// through a ring of full/empty mbarriers (as smoke_gemm.cuh).
//
// The weights need no layout of their own: the sm80 layout gives lane (g, t) of a warp,
// for each n8 x k32 block, the m16n8k16 B fragments of column g (dequant.cuh), and the
// wgmma A fragment of a 16-row slice is exactly those of its two n8 blocks: rows g and
// g + 8. A consumer thread reads its words straight from global memory (each warp's 32
// words of a block are one 128-byte line), dequantizes them with the product's
// Dequant, and hands them to wgmma.
#pragma once
#include "gemm/dequant.cuh"
#include "gemm/numeric.cuh"
#include "gemm/sm90/ptx_sm90.cuh"

namespace gemm {
namespace sm90_smoke_quant {

constexpr int kRows = 128;   // weight rows (columns of D) per CTA
constexpr int kTokens = 64;  // tokens (rows of D) per CTA: wgmma N
constexpr int kBlockK = 64;  // one 128-byte swizzled row of X per token
constexpr int kConsumers = 2;
constexpr int kThreads = 128 * (kConsumers + 1);
constexpr int kStages = 4;
constexpr int kStageBytes = kTokens * kBlockK * 2;
constexpr int kSmemBytes = kStages * kStageBytes + 1024;  // + the round-up to 1024 bytes
constexpr int kProducerRegs = 40;
constexpr int kConsumerRegs = 232;

struct Params {
  const u32* b;  // PackedWeight.b as 32-bit words: [ceil(N / 8)][kp * bits / 4]
  const void* v;  // PackedWeight.v: [2 * groups][np] scales then zeros, the activations' type
  void* d;        // D [M x N], row stride ldd
  int ldd, M, N, K;
  int kp;           // K padded to 32 (PackedWeight.padded_k)
  int np;           // N padded to 8 (v's row length)
  int groups, group_shift;
};

// A warp's fragments of one k32 block for its 16 weight rows: the two n8 blocks' B
// fragments, dequantized, as the A registers of the block's two k16 steps.
template <class T, int Bits>
__device__ __forceinline__ void block_a_fragments(const Params& p, int row0, int k32, int lane, u32 (&a)[2][4]) {
  using D = Dequant<T, Bits>;
  const int words_per_row = p.kp * Bits / 4;  // of one n8 tile's row of blocks: 8 weights per K
  const int n8_tiles = (p.N + 7) / 8;
  BlockFragments f[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int tile = row0 / 8 + half;
    const int row = row0 + 8 * half + lane / 4;  // this lane's weight row (B column g)
    if (tile >= n8_tiles || k32 * 32 >= p.kp) {
      // Past the packed weight: zeros, which the zero-filled X beyond K meets anyway.
#pragma unroll
      for (int h = 0; h < 2; ++h) f[half][h][0] = f[half][h][1] = 0u;
      continue;
    }
    u32 w[D::kWords];
    const u32* block = p.b + static_cast<i64>(tile) * words_per_row + k32 * 32 * D::kWords;
#pragma unroll
    for (int i = 0; i < D::kWords; ++i) w[i] = block[lane * D::kWords + i];
    const int group = (k32 * 32) >> p.group_shift;
    const u16* v = static_cast<const u16*>(p.v);
    const u16 scale = v[static_cast<i64>(group) * p.np + row];
    const u16 zero = v[static_cast<i64>(p.groups + group) * p.np + row];
    D::apply(w, D::make(scale, zero), f[half]);
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    a[h][0] = f[0][h][0];  // row g,     k 2t..
    a[h][1] = f[1][h][0];  // row g + 8, k 2t..
    a[h][2] = f[0][h][1];  // row g,     k 2t + 8..
    a[h][3] = f[1][h][1];  // row g + 8, k 2t + 8..
  }
}

template <class T, class Out, int Bits>
__device__ __forceinline__ void smoke_quant_gemm(const CUtensorMap& tma_x, const Params& p) {
  static_assert(T::kBytes == 2, "wgmma f16/bf16 operands are 16-bit");
  static_assert(kThreads == 384, "the kernel is declared __launch_bounds__(384, 1)");
  using Mma = typename T::MmaKind;

  extern __shared__ unsigned char smem_raw[];
  __shared__ u64 full_bar[kStages];
  __shared__ u64 empty_bar[kStages];
  if (dynamic_smem_size() < static_cast<u32>(kSmemBytes)) __trap();

  const u32 base = (smem_addr(smem_raw) + 1023u) & ~1023u;
  const int wg = threadIdx.x / 128;
  const int warp_in_wg = (threadIdx.x / 32) % 4;
  const int lane = threadIdx.x % 32;
  const int n0 = blockIdx.x * kRows;    // first weight row (column of D)
  const int m0 = blockIdx.y * kTokens;  // first token (row of D)
  const int k_tiles = (p.K + kBlockK - 1) / kBlockK;

  auto tile_x = [&](int s) { return base + static_cast<u32>(s * kStageBytes); };
  auto full = [&](int s) { return smem_addr(&full_bar[s]); };
  auto empty = [&](int s) { return smem_addr(&empty_bar[s]); };

  if (threadIdx.x == 0) init_ring(full_bar, empty_bar, kConsumers * 4);
  __syncthreads();

  if (wg == kConsumers) {
    // ---- producer: X's K tiles ----
    setmaxnreg_dec<kProducerRegs>();
    if (warp_in_wg == 0 && elect_one()) {
      prefetch_tensormap(&tma_x);
      for (int kt = 0; kt < k_tiles; ++kt) {
        const int s = kt % kStages;
        mbar_wait(empty(s), (static_cast<u32>(kt / kStages) & 1u) ^ 1u);
        mbar_arrive_expect_tx(full(s), kStageBytes);
        tma_load_2d(tile_x(s), &tma_x, full(s), kt * kBlockK, m0);
      }
    }
    return;
  }

  // ---- consumers: dequantize, multiply, store D^T's fragment untransposed ----
  setmaxnreg_inc<kConsumerRegs>();
  float acc[kTokens / 2];
#pragma unroll
  for (int i = 0; i < kTokens / 2; ++i) acc[i] = 0.0f;  // the answer when K == 0
  const int row0 = n0 + wg * 64 + warp_in_wg * 16;      // this warp's 16 weight rows
  for (int kt = 0; kt < k_tiles; ++kt) {
    // Dequantize before waiting for X: the weights do not depend on it.
    u32 a[2][2][4];  // [k32 block][k16 step][register]
#pragma unroll
    for (int kb = 0; kb < 2; ++kb) block_a_fragments<T, Bits>(p, row0, 2 * kt + kb, lane, a[kb]);
    const int s = kt % kStages;
    mbar_wait(full(s), static_cast<u32>(kt / kStages) & 1u);
    // NOTE: orders the A registers' and accumulators' last ordinary writes before the
    // wgmma that reads them.
    wgmma_fence();
#pragma unroll
    for (int kb = 0; kb < 2; ++kb)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        // The k16 step's 32 bytes along X's 128-byte swizzled rows.
        const u64 dx = smem_desc_kmajor_sw128(tile_x(s) + (2 * kb + h) * 32);
        wgmma_rs<kTokens, Mma>(acc, a[kb][h], dx, true);
      }
    wgmma_commit();
    wgmma_wait<0>();
    // NOTE: the wgmma read the A registers asynchronously: they are kept (not
    // reallocated to the next tile's values) until the wait above.
    wgmma_fence_operand(a);
    wgmma_fence_operand(acc);
    if (lane == 0) mbar_arrive(empty(s));
  }

  // Fragment of m64nNk16 D^T (wgmma_ss): weight row 16 * warp + lane / 4 + 8 * ((i / 2) % 2),
  // token 8 * (i / 4) + 2 * (lane % 4) + i % 2; D holds it at [token][row].
  using Store = typename Out::Storage;
  Store* d = static_cast<Store*>(p.d);
  const int row = row0 + lane / 4;
  const int token0 = m0 + 2 * (lane % 4);
#pragma unroll
  for (int i = 0; i < kTokens / 2; ++i) {
    const int n = row + 8 * ((i / 2) % 2);
    const int m = token0 + 8 * (i / 4) + i % 2;
    if (m < p.M && n < p.N) d[static_cast<i64>(m) * p.ldd + n] = Out::from_f32(acc[i]);
  }
}

}  // namespace sm90_smoke_quant
}  // namespace gemm
