// A deliberately simple SM90 GEMM: the GPU smoke test of the blocks in ptx_sm90.cuh,
// not the product kernel (no persistence, no clusters, no smem epilogue).
//
//   D[M x N] = A[M x K] @ B[N x K]^T    A, B row-major 16-bit ("nk" B: the nn.Linear
//                                       weight), fp32 accumulation, D row-major (ldd).
//
// One CTA computes a 128 x 128 tile of D. Warpgroups 0 and 1 are consumers (64 rows
// each, one m64n128k16 wgmma per k16 step); warpgroup 2 is the producer, one elected
// thread of its first warp issuing the TMA loads. The K loop runs over 64-wide K tiles
// through a ring of `Stages` shared-memory stages:
//
//   full[s]  : count 1. The producer arrives with expect_tx(stage bytes); the phase
//              completes when both TMA copies have landed.
//   empty[s] : count 8 (every consumer warp). A consumer warp arrives once the wgmma
//              reading stage s has completed; the producer waits for it before
//              overwriting the stage.
//
// Residues need no special casing in the mainloop: TMA zero-fills the parts of a box
// outside the tensor (M, N and K tails alike), so the extra K columns add zeros; the
// epilogue checks row < M and col < N.
#pragma once
#include "gemm/numeric.cuh"
#include "gemm/sm90/ptx_sm90.cuh"

namespace gemm {
namespace sm90_smoke {

constexpr int kBlockM = 128;
constexpr int kBlockN = 128;
constexpr int kBlockK = 64;  // 64 16-bit elements = one 128-byte swizzle row
constexpr int kConsumers = 2;  // warpgroups, 64 rows of the tile each
constexpr int kThreads = 128 * (kConsumers + 1);
constexpr int kTileBytesA = kBlockM * kBlockK * 2;
constexpr int kTileBytesB = kBlockN * kBlockK * 2;
constexpr int kStageBytes = kTileBytesA + kTileBytesB;
// NOTE: 128B-swizzled tiles must start on a 1024-byte boundary (the swizzle is applied
// to absolute address bits 4-9) and dynamic shared memory promises less, so the host
// asks for 1024 bytes more and the kernel rounds its base up.
constexpr int smem_bytes(int stages) { return stages * kStageBytes + 1024; }

// NOTE: 384 threads at one CTA per SM cap a thread at 168 registers; the producer
// warpgroup drops to 40 and the consumers rise to 232 (128*40 + 256*232 <= 65536).
constexpr int kProducerRegs = 40;
constexpr int kConsumerRegs = 232;

template <class In, class Out, int Stages>
__device__ __forceinline__ void smoke_gemm(const CUtensorMap& tma_a, const CUtensorMap& tma_b, void* d_ptr, int ldd,
                                           int M, int N, int K) {
  static_assert(In::kBytes == 2, "wgmma f16/bf16 operands are 16-bit");
  static_assert(Stages >= 2 && Stages <= 4, "2..4 stages");
  static_assert(kThreads == 384, "the kernel is declared __launch_bounds__(384, 1)");
  using Mma = typename In::MmaKind;

  extern __shared__ unsigned char smem_raw[];
  __shared__ u64 full_bar[Stages];
  __shared__ u64 empty_bar[Stages];

  // A launch with too little dynamic shared memory would let TMA write past the end.
  if (dynamic_smem_size() < static_cast<u32>(smem_bytes(Stages))) __trap();

  const u32 base = (smem_addr(smem_raw) + 1023u) & ~1023u;
  const int wg = threadIdx.x / 128;
  const int warp_in_wg = (threadIdx.x / 32) % 4;
  const int lane = threadIdx.x % 32;
  const int m0 = blockIdx.x * kBlockM;
  const int n0 = blockIdx.y * kBlockN;
  const int k_tiles = (K + kBlockK - 1) / kBlockK;

  auto tile_a = [&](int s) { return base + static_cast<u32>(s * kStageBytes); };
  auto tile_b = [&](int s) { return base + static_cast<u32>(s * kStageBytes + kTileBytesA); };
  auto full = [&](int s) { return smem_addr(&full_bar[s]); };
  auto empty = [&](int s) { return smem_addr(&empty_bar[s]); };

  if (threadIdx.x == 0) init_ring(full_bar, empty_bar, kConsumers * 4);
  __syncthreads();

  if (wg == kConsumers) {
    // ---- producer warpgroup ----
    // NOTE: every warp of the warpgroup executes setmaxnreg (it is .sync.aligned per
    // warpgroup); then only one thread of warp 0 works and the rest exit.
    setmaxnreg_dec<kProducerRegs>();
    if (warp_in_wg == 0 && elect_one()) {
      prefetch_tensormap(&tma_a);
      prefetch_tensormap(&tma_b);
      for (int kt = 0; kt < k_tiles; ++kt) {
        const int s = kt % Stages;
        const u32 round = static_cast<u32>(kt / Stages);
        // Wait until the consumers released the stage's previous contents (round - 1);
        // in round 0 the parity trick returns at once.
        mbar_wait(empty(s), (round & 1u) ^ 1u);
        // NOTE: the full box bytes are expected even when part of it is out of bounds:
        // the zero fill is delivered (and counted) like data.
        mbar_arrive_expect_tx(full(s), kStageBytes);
        tma_load_2d(tile_a(s), &tma_a, full(s), kt * kBlockK, m0);
        tma_load_2d(tile_b(s), &tma_b, full(s), kt * kBlockK, n0);
      }
    }
  } else {
    // ---- consumer warpgroups ----
    setmaxnreg_inc<kConsumerRegs>();
    float acc[kBlockN / 2];
#pragma unroll
    for (int i = 0; i < kBlockN / 2; ++i) acc[i] = 0.0f;  // the answer when K == 0

    // This warpgroup's 64 rows of the A tile: 64 rows * 128 bytes, a whole number of
    // 1024-byte swizzle atoms, so its descriptors keep base offset 0.
    const u32 a_rows = static_cast<u32>(wg * 64 * kBlockK * 2);
    for (int kt = 0; kt < k_tiles; ++kt) {
      const int s = kt % Stages;
      mbar_wait(full(s), static_cast<u32>(kt / Stages) & 1u);

      // NOTE: the fence orders the accumulators' last ordinary accesses (the zero init,
      // the operand fences) before the wgmma that reads them.
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kBlockK / 16; ++kk) {
        // A k16 slice is 32 bytes along the 128-byte swizzled row.
        const u64 da = smem_desc_kmajor_sw128(tile_a(s) + a_rows + kk * 32);
        const u64 db = smem_desc_kmajor_sw128(tile_b(s) + kk * 32);
        // scale-d false on the very first step overwrites the accumulators; it
        // exercises the predicate (the zero init alone would give the same result).
        wgmma_ss<kBlockN, Mma>(acc, da, db, kt > 0 || kk > 0);
      }
      wgmma_commit();
      // NOTE: keep this K tile's group in flight while waiting for the previous one;
      // once it completed, its stage is no longer read and goes back to the producer.
      wgmma_wait<1>();
      wgmma_fence_operand(acc);
      if (kt > 0 && lane == 0) mbar_arrive(empty((kt - 1) % Stages));
    }
    wgmma_wait<0>();
    wgmma_fence_operand(acc);

    // ---- epilogue: straight from the accumulator fragment to global memory ----
    // Fragment of m64nNk16 D (see wgmma_ss): row = 16*warp + lane/4 + 8*((i/2)%2),
    // col = 8*(i/4) + 2*(lane%4) + i%2.
    using Store = typename Out::Storage;
    Store* d = static_cast<Store*>(d_ptr);
    const int row0 = m0 + wg * 64 + warp_in_wg * 16 + lane / 4;
    const int col0 = n0 + 2 * (lane % 4);
#pragma unroll
    for (int i = 0; i < kBlockN / 2; ++i) {
      const int row = row0 + 8 * ((i / 2) % 2);
      const int col = col0 + 8 * (i / 4) + i % 2;
      if (row < M && col < N) d[static_cast<i64>(row) * ldd + col] = Out::from_f32(acc[i]);
    }
  }
}

}  // namespace sm90_smoke
}  // namespace gemm
