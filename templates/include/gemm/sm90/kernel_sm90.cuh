// The SM90 family: a persistent, warp-specialized GEMM on Hopper.
//
//   D = alpha * A @ B + beta * C   (+ bias, gated SiLU: gemm/epilogue.cuh)
//   A: M x K row-major 16-bit; B: N x K row-major ("nk", the nn.Linear weight) or
//   K x N row-major ("kn"); fp32 accumulation.
//
// One CTA per SM loops over work units (an output tile, or one K slice of it under
// split-K). Warpgroups 0..kConsumers-1 are consumers: each owns 64 rows of the tile
// and issues one m64nNk16 wgmma per k16 step, both operands from shared memory.
// The last warpgroup is the producer: one elected thread issues the TMA copies of A
// and B into a ring of kStages stages; out-of-bounds parts of a box arrive as zeros,
// so M, N and K residues need no masking before the epilogue.
//
//   full[s]  : count 1. The producer arrives with expect_tx(stage bytes); the phase
//              completes when the copies have landed.
//   empty[s] : count 4 * kConsumers (every consumer warp), arriving once the wgmma
//              reading stage s completed; the producer waits before refilling it.
//
// The ring runs on across work units (its position counts every K tile this CTA
// has taken), so the producer fills the next unit's stages while the consumers run
// the epilogue of the last one: loads never stop at a tile boundary.
#pragma once
#include "gemm/config.cuh"
#include "gemm/epilogue.cuh"
#include "gemm/sm90/ptx_sm90.cuh"
#include "gemm/split_k.cuh"

namespace gemm {

template <class TA_, class TD_, int CtaM_, int CtaN_, int Stages_, OrderB OrderB_>
struct Sm90Config {
  using TA = TA_;
  using TB = TA_;
  using TD = TD_;
  static constexpr int kCtaM = CtaM_, kCtaN = CtaN_;
  static constexpr int kCtaK = 64;  // 64 16-bit elements = one 128-byte swizzled row
  static constexpr int kStages = Stages_;
  static constexpr OrderB kOrderB = OrderB_;
  static constexpr int kConsumers = kCtaM / 64;  // warpgroups, 64 rows each
  static constexpr int kConsumerThreads = 128 * kConsumers;
  static constexpr int kThreads = kConsumerThreads + 128;
  static constexpr int kTileBytesA = kCtaM * kCtaK * 2;
  static constexpr int kTileBytesB = kCtaN * kCtaK * 2;
  static constexpr int kStageBytes = kTileBytesA + kTileBytesB;
  // "kn" B arrives in boxes of 64 columns (the swizzle span) x 64 rows of K.
  static constexpr int kBoxBytesB = 64 * kCtaK * 2;
  // NOTE: 128B-swizzled tiles must start on a 1024-byte boundary (the swizzle acts on
  // address bits 4-9) and dynamic shared memory promises less, so 1024 bytes more are
  // asked for and the base is rounded up.
  static constexpr int kSmemBytes = kStages * kStageBytes + 1024;
  // Registers: 384 threads at one CTA per SM cap a thread at 168; the producer gives
  // back down to 40 and two consumers take 232 each (128*40 + 256*232 <= 65536). With
  // one consumer (256 threads) every thread may keep 255 already: no exchange.
  static constexpr bool kMoveRegisters = kConsumers == 2;
  static constexpr int kProducerRegs = 40;
  static constexpr int kConsumerRegs = 232;

  static_assert(sizeof(typename TA::Storage) == 2, "wgmma f16/bf16 operands are 16-bit");
  static_assert(kCtaM == 64 || kCtaM == 128, "cta M is 64 (one consumer warpgroup) or 128 (two)");
  static_assert(kCtaN == 64 || kCtaN == 128 || kCtaN == 192 || kCtaN == 256, "cta N is 64, 128, 192 or 256");
  static_assert(kStages >= 2 && kStages <= 8, "2..8 stages");
  static_assert(kSmemBytes <= 227 * 1024, "the stages exceed sm_90's 227 KiB of shared memory per block");
};

// The accumulators of one consumer thread as the epilogue walks them: pairs of adjacent
// columns (the m64nNk16 D fragment, see wgmma_ss).
template <int N>
struct WgmmaTile {
  float (&acc)[N / 2];

  template <class F>
  __device__ __forceinline__ void for_each_pair(int row0, int col0, F&& f) const {
    const int lane = threadIdx.x % 32;
    const int r = row0 + 16 * ((threadIdx.x / 32) % 4) + lane / 4;
    const int c = col0 + 2 * (lane % 4);
#pragma unroll
    for (int j = 0; j < N / 8; ++j) {
      f(r, c + 8 * j, acc[4 * j], acc[4 * j + 1]);
      f(r + 8, c + 8 * j, acc[4 * j + 2], acc[4 * j + 3]);
    }
  }
};

// A work unit: output tile (tile_m, tile_n), K tiles [k_tile0, k_tile0 + k_tiles).
struct Sm90Unit {
  int tile, m0, n0, split, k_tile0, k_tiles;
};

// Unit u is K slice u % splits of tile u / splits: the slices of one tile run on
// neighbouring CTAs at about the same time, so the split-K hand-over rarely waits.
// Tiles are rasterized in groups of 2^swizzle rows of M: consecutive tiles walk down
// the group's rows, then on along N, so the CTAs in flight together share B tiles
// within a group and A tiles across the groups' columns in L2.
// NOTE: a unit only waits (split-K) for units of smaller index, which co-resident
// CTAs take in increasing order: the grid never exceeds one CTA per SM, so no wait
// can deadlock.
template <class Cfg, class Params>
__device__ __forceinline__ Sm90Unit sm90_unit(const Params& p, int u, int k_tiles_total) {
  Sm90Unit w;
  w.tile = u / p.splits;
  w.split = u - w.tile * p.splits;
  const int group = 1 << p.swizzle;
  const int per_group = group * p.tiles_n;
  const int first_m = w.tile / per_group * group;
  const int rows = min(group, p.tiles_m - first_m);
  const int in_group = w.tile - first_m * p.tiles_n;
  w.m0 = (first_m + in_group % rows) * Cfg::kCtaM;
  w.n0 = in_group / rows * Cfg::kCtaN;
  w.k_tile0 = w.split * p.k_tiles_per_split;
  const int left = k_tiles_total - w.k_tile0;
  w.k_tiles = left < 0 ? 0 : (left > p.k_tiles_per_split ? p.k_tiles_per_split : left);
  return w;
}

template <class Cfg, class Params>
__device__ __forceinline__ void gemm_sm90(const Params& p, const CUtensorMap* tma_a, const CUtensorMap* tma_b) {
  constexpr int kStages = Cfg::kStages;
  constexpr bool kTransB = Cfg::kOrderB == OrderB::kKN;
  using Mma = typename Cfg::TA::MmaKind;

  extern __shared__ unsigned char smem_raw[];
  __shared__ u64 full_bar[kStages];
  __shared__ u64 empty_bar[kStages];

  // A launch with too little dynamic shared memory would let TMA write past the end.
  if (dynamic_smem_size() < static_cast<u32>(Cfg::kSmemBytes)) __trap();

  const u32 base = (smem_addr(smem_raw) + 1023u) & ~1023u;
  const int wg = threadIdx.x / 128;
  const int lane = threadIdx.x % 32;
  const int units = p.tiles_m * p.tiles_n * p.splits;
  const int k_tiles_total = (p.K + Cfg::kCtaK - 1) / Cfg::kCtaK;

  auto tile_a = [&](int s) { return base + static_cast<u32>(s * Cfg::kStageBytes); };
  auto tile_b = [&](int s) { return base + static_cast<u32>(s * Cfg::kStageBytes + Cfg::kTileBytesA); };
  auto full = [&](int s) { return smem_addr(&full_bar[s]); };
  auto empty = [&](int s) { return smem_addr(&empty_bar[s]); };

  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full(s), 1);
      mbar_init(empty(s), Cfg::kConsumers * 4);
    }
    // NOTE: TMA's complete_tx (async proxy) and the other threads must see initialised
    // barriers; the fence publishes the inits, the __syncthreads orders the threads.
    fence_mbarrier_init();
  }
  __syncthreads();

  if (wg == Cfg::kConsumers) {
    // ---- producer warpgroup ----
    // NOTE: setmaxnreg is .sync.aligned per warpgroup: every warp executes it, then
    // one thread of warp 0 works and the others are done.
    if constexpr (Cfg::kMoveRegisters) setmaxnreg_dec<Cfg::kProducerRegs>();
    if (threadIdx.x / 32 % 4 == 0 && elect_one()) {
      prefetch_tensormap(tma_a);
      prefetch_tensormap(tma_b);
      int it = 0;  // the ring position: K tiles this CTA has loaded
      for (int u = blockIdx.x; u < units; u += gridDim.x) {
        const Sm90Unit w = sm90_unit<Cfg>(p, u, k_tiles_total);
        for (int kt = 0; kt < w.k_tiles; ++kt, ++it) {
          const int s = it % kStages;
          // Wait until the consumers released the stage's previous contents; in the
          // ring's first round the parity trick returns at once.
          mbar_wait(empty(s), ((it / kStages) & 1) ^ 1);
          // NOTE: the full box bytes are expected even when part of it is out of
          // bounds: the zero fill is delivered (and counted) like data.
          mbar_arrive_expect_tx(full(s), Cfg::kStageBytes);
          const int k = (w.k_tile0 + kt) * Cfg::kCtaK;
          tma_load_2d(tile_a(s), tma_a, full(s), k, w.m0);
          if constexpr (kTransB) {
#pragma unroll
            for (int j = 0; j < Cfg::kCtaN / 64; ++j)
              tma_load_2d(tile_b(s) + j * Cfg::kBoxBytesB, tma_b, full(s), w.n0 + 64 * j, k);
          } else {
            tma_load_2d(tile_b(s), tma_b, full(s), k, w.n0);
          }
        }
      }
    }
    return;
  }

  // ---- consumer warpgroups ----
  if constexpr (Cfg::kMoveRegisters) setmaxnreg_inc<Cfg::kConsumerRegs>();
  float acc[Cfg::kCtaN / 2];
  // This warpgroup's 64 rows of the A tile: 64 rows of 128 bytes, whole 1024-byte
  // swizzle atoms, so its descriptors keep base offset 0.
  const u32 a_rows = static_cast<u32>(wg * 64 * Cfg::kCtaK * 2);
  int it = 0;  // the ring position, as the producer's
  for (int u = blockIdx.x; u < units; u += gridDim.x) {
    const Sm90Unit w = sm90_unit<Cfg>(p, u, k_tiles_total);
    if (w.k_tiles == 0) {
#pragma unroll
      for (int i = 0; i < Cfg::kCtaN / 2; ++i) acc[i] = 0.0f;  // an empty K slice (or K == 0) adds nothing
    }
    for (int kt = 0; kt < w.k_tiles; ++kt, ++it) {
      const int s = it % kStages;
      mbar_wait(full(s), (it / kStages) & 1);
      // NOTE: orders the accumulators' last ordinary accesses (the previous unit's
      // epilogue) before the wgmma that overwrites them.
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < Cfg::kCtaK / 16; ++kk) {
        // A k16 slice is 32 bytes along A's 128-byte swizzled rows; of "kn" B it is 16
        // rows (2048 bytes) down each 64-column box.
        const u64 da = smem_desc_kmajor_sw128(tile_a(s) + a_rows + kk * 32);
        const u64 db = kTransB ? smem_desc_nmajor_sw128(tile_b(s) + kk * 2048, Cfg::kBoxBytesB)
                               : smem_desc_kmajor_sw128(tile_b(s) + kk * 32);
        // scale-d false on a unit's first step overwrites the last unit's sums.
        wgmma_ss<Cfg::kCtaN, Mma, kTransB>(acc, da, db, kt > 0 || kk > 0);
      }
      wgmma_commit();
      // NOTE: keep this K tile's group in flight while waiting for the previous one;
      // once that completed its stage is no longer read and goes back to the producer.
      wgmma_wait<1>();
      wgmma_fence_operand(acc);
      if (kt > 0 && lane == 0) mbar_arrive(empty((it - 1) % kStages));
    }
    wgmma_wait<0>();
    wgmma_fence_operand(acc);
    if (w.k_tiles > 0 && lane == 0) mbar_arrive(empty((it - 1) % kStages));

    if (p.splits > 1) {
      const int tid = threadIdx.x;  // consumers are threads 0 .. kConsumerThreads - 1
      const int warp_row0 = 64 * wg + 16 * ((tid / 32) % 4) + lane / 4;
      auto row_of = [&](int i) { return warp_row0 + 8 * ((i / 2) % 2); };
      if (!split_k_handover<Cfg::kConsumerThreads, Cfg::kCtaN / 2, Cfg::kCtaM * Cfg::kCtaN>(
              acc, row_of, p, w.tile, w.split, p.M - w.m0, tid))
        continue;
    }
    Epilogue<Cfg>::store(WgmmaTile<Cfg::kCtaN>{acc}, p, w.m0 + 64 * wg, w.n0);
  }
}

}  // namespace gemm
