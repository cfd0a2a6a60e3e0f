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
//
// Clusters (kCluster CTAs along M, 2): the CTAs of a cluster take vertically adjacent
// tiles of the same columns, so their B tiles are the same. Each producer loads
// 1/kCluster of it and multicasts it to all; a stage is refilled only once the
// consumers of every CTA released it, so each consumer warp arrives on the empty
// barrier of every CTA of the cluster (count 4 * kConsumers * kCluster). A CTA whose
// tile lies below M still runs the pipeline (its A box is all zero fill): its part of
// B feeds the others.
//
// Grouped (Grouped_, docs/MOE.md): the work units enumerate the experts' tile rows, which
// every CTA counts at entry (gemm/grouped.cuh), times the tile columns; every warp that
// takes a unit finds its expert with the same warp-wide scan (a unit past the last tile
// row, which the count leaves out, would be skipped by producer and consumers alike, so
// their ring positions stay in step). The grid is the host's, sized by a bound on the
// tile rows (cost_model.tiles_of). A is the grouped
// rows sorted by expert (the runtime gathers them first), one tensor map over all rows:
// an expert's tile row starts at its first row, and rows of the next expert that share
// the box are computed and dropped by the epilogue, which stops at the expert's rows. B's
// tensor map covers the stacked weights [E * N, K]: expert e's tile starts at row
// e * N + n0, and columns past N (the next expert's rows, or zero fill) are dropped the
// same way. D goes out through TMA where a warpgroup's rows all belong to the expert, and
// copied from the staging boxes by the threads where a box would reach into the next
// expert's rows. No clusters. Split-K as dense: the tiles past whole rounds of the grid
// split, the hand-over counting the expert's rows of the tile.
#pragma once
#include "gemm/config.cuh"
#include "gemm/epilogue.cuh"
#include "gemm/grouped.cuh"
#include "gemm/sm90/ptx_sm90.cuh"
#include "gemm/sm90/schedule_sm90.cuh"
#include "gemm/sm90/store_sm90.cuh"
#include "gemm/split_k.cuh"

// Experiment knobs, off in every build (bench/experiments/sm90_variants.py sets them
// to time the pipeline with one stage left out): GEMM_SM90_LEAVE_OUT 1 drops the
// epilogue's stores, 2 the wgmma (consumers only wait for and release stages), 3 only
// the TMA stores' issue (the staging still runs); GEMM_SM90_WGMMA_DEPTH is the wgmma
// groups kept in flight (1); GEMM_SM90_STORE_EVICT_FIRST 1 marks D's lines evict-first.
#ifndef GEMM_SM90_LEAVE_OUT
#define GEMM_SM90_LEAVE_OUT 0
#endif
#ifndef GEMM_SM90_STORE_EVICT_FIRST
#define GEMM_SM90_STORE_EVICT_FIRST 0
#endif
#ifndef GEMM_SM90_WGMMA_DEPTH
#define GEMM_SM90_WGMMA_DEPTH 1
#endif
// GEMM_SM90_UNIFORM_WG 1 takes the warpgroup index through a shuffle from lane 0, so
// that ptxas keeps the K loop's A descriptors (which follow it) on the uniform datapath:
// read from threadIdx they go through vector registers and 9-16 R2UR a K tile (the
// 128x256 loop: 104 instructions, 84 so). H200 (docs/NOTES.md, fifty-fourth session,
// bf16 on 8192^3 / 4096x28672x4096 / 4096^3): 128x128 1.09-1.13x, 64x128 1.13-1.21x,
// 64x64 1.11-1.17x, 64x256 1.02-1.07x. 0 reads it from threadIdx; -1 (the default) takes
// the shuffle except on two consumer warpgroups of 256 columns (128x256), whose 128
// accumulators a thread beside it spill 4-8 bytes (the default set compiles spill-free).
#ifndef GEMM_SM90_UNIFORM_WG
#define GEMM_SM90_UNIFORM_WG -1
#endif
// GEMM_SM90_TRACE 1 (bench/experiments/sm90_trace.py) records SM clocks per work unit
// into the split-K partials pointer of an unsplit launch: where a tile's time goes.
#ifndef GEMM_SM90_TRACE
#define GEMM_SM90_TRACE 0
#endif

namespace gemm {

// The trace's layout: per CTA, per work unit (the first kTraceUnits), kTracePoints
// clock64 stamps: per consumer warpgroup wg, 4 * wg + {0 unit start, 1 first stage
// landed, 2 last wgmma done, 3 epilogue issued}; the producer's 8 first stage issued,
// 9 last stage issued.
constexpr int kTraceUnits = 64;
constexpr int kTracePoints = 12;
__device__ __forceinline__ void trace_stamp(const void* buffer, int unit_index, int point) {
  if (GEMM_SM90_TRACE && buffer != nullptr && unit_index < kTraceUnits) {
    long long* t = static_cast<long long*>(const_cast<void*>(buffer));
    t[(static_cast<i64>(blockIdx.x) * kTraceUnits + unit_index) * kTracePoints + point] = clock64();
  }
}

template <class TA_, class TD_, int CtaM_, int CtaN_, int Stages_, OrderB OrderB_, int Cluster_, bool Grouped_>
struct Sm90Config {
  using TA = TA_;
  using TB = TA_;
  using TD = TD_;
  static constexpr int kCtaM = CtaM_, kCtaN = CtaN_;
  static constexpr bool kGrouped = Grouped_;
  static constexpr bool kQuantB = false;
  static constexpr int kCtaK = 64;  // 64 16-bit elements = one 128-byte swizzled row
  static constexpr int kStages = Stages_;
  static constexpr OrderB kOrderB = OrderB_;
  static constexpr int kConsumers = kCtaM / 64;  // warpgroups, 64 rows each
  static constexpr int kConsumerThreads = 128 * kConsumers;
  static constexpr int kThreads = kConsumerThreads + 128;
  static constexpr int kTileBytesA = kCtaM * kCtaK * 2;
  static constexpr int kTileBytesB = kCtaN * kCtaK * 2;
  static constexpr int kStageBytes = kTileBytesA + kTileBytesB;
  // Bytes of A a stage receives: the tile's rows, or for an M below the tile M rounded
  // up to 8 (the host encodes A's box so: codegen/families/sm90.py, a_box_rows).
  __device__ static int a_box_bytes(int M) { return (M >= kCtaM ? kCtaM : (M + 7) / 8 * 8) * kCtaK * 2; }
  // "kn" B arrives in boxes of 64 columns (the swizzle span) x 64 rows of K.
  static constexpr int kBoxBytesB = 64 * kCtaK * 2;
  static constexpr int kCluster = Cluster_;
  // One CTA's share of the B tile it loads for the cluster: rows of the N x K tile
  // ("nk"), or rows of K of each 64-column box ("kn"), whole 1024-byte swizzle atoms.
  static constexpr int kPartRowsB = (kOrderB == OrderB::kNK ? kCtaN : kCtaK) / kCluster;
  // The epilogue's staging boxes (store_sm90.cuh), per consumer warpgroup: its whole
  // share of the tile where that fits beside the ring (one wait, two barriers and one
  // fence per tile, and the stores drain during the next mainloop), else two (the
  // store of one overlaps the filling of the next), else one.
  static constexpr int kSmemLimit = 227 * 1024;
  static constexpr int kStoreBoxBytes = 64 * 128;
  static constexpr int kRingBytes = kStages * kStageBytes;
  static constexpr int kStoreBoxes = kCtaN * static_cast<int>(sizeof(typename TD::Storage)) / 128;
  static constexpr bool kStagingFits(int boxes) { return kRingBytes + boxes * kConsumers * kStoreBoxBytes + 1024 <= kSmemLimit; }
  static constexpr int kStoreBuffers = kStagingFits(kStoreBoxes) ? kStoreBoxes : kStagingFits(2) ? 2 : 1;
  // NOTE: 128B-swizzled tiles must start on a 1024-byte boundary (the swizzle acts on
  // address bits 4-9) and dynamic shared memory promises less, so 1024 bytes more are
  // asked for and the base is rounded up.
  static constexpr int kSmemBytes = kRingBytes + kStoreBuffers * kConsumers * kStoreBoxBytes + 1024;
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
  static_assert(kSmemBytes <= kSmemLimit, "the stages exceed sm_90's 227 KiB of shared memory per block");
  static_assert(kCluster == 1 || kCluster == 2, "clusters of 1 or 2 CTAs");
  static_assert(kPartRowsB % 8 == 0, "a CTA's share of B is whole 8-row swizzle atoms");
  static_assert(!kGrouped || (kCluster == 1 && kOrderB == OrderB::kNK),
                "grouped kernels take stacked [E, N, K] weights, without clusters");
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

template <class Cfg, class Params>
__device__ __forceinline__ void gemm_sm90(const Params& p, const CUtensorMap* tma_a, const CUtensorMap* tma_b,
                                          const CUtensorMap* tma_d) {
  constexpr int kStages = Cfg::kStages;
  constexpr int kCluster = Cfg::kCluster;
  constexpr bool kTransB = Cfg::kOrderB == OrderB::kKN;
  using Mma = typename Cfg::TA::MmaKind;

  extern __shared__ unsigned char smem_raw[];
  __shared__ u64 full_bar[kStages];
  __shared__ u64 empty_bar[kStages];

  // A launch with too little dynamic shared memory would let TMA write past the end.
  if (dynamic_smem_size() < static_cast<u32>(Cfg::kSmemBytes)) __trap();

  // NOTE: every CTA of a cluster computes the same base: multicast copies land at the
  // same offset in each.
  const u32 base = (smem_addr(smem_raw) + 1023u) & ~1023u;
  constexpr bool kWideTwoConsumers = Cfg::kConsumers == 2 && Cfg::kCtaN == 256;
  constexpr bool kUniformWg = GEMM_SM90_UNIFORM_WG == 1 || (GEMM_SM90_UNIFORM_WG == -1 && !kWideTwoConsumers);
  const int wg = kUniformWg ? __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x / 128), 0)
                            : static_cast<int>(threadIdx.x / 128);
  const int lane = threadIdx.x % 32;
  const int rank = kCluster > 1 ? static_cast<int>(cluster_ctarank()) : 0;
  const int k_tiles_total = (p.K + Cfg::kCtaK - 1) / Cfg::kCtaK;
  // The schedule lives in shared memory, built once by warp 0 and read back per unit:
  // kept in registers, its dozen fields stay live beside the accumulators through the
  // mainloop (the grouped 128x256 tile spilled 36-40 bytes so on sm_90a).
  // NOTE: a grouped launch's p.tiles_m is the host's bound on the experts' tile rows; the
  // kernel counts the real ones, so no unit past them is scheduled and split-K's whole
  // rounds and split tail are those of the real tiles (the host sizes the workspace for
  // any count up to the bound: codegen/families/sm90.py, split_tiles).
  __shared__ alignas(16) unsigned char schedule_smem[sizeof(Sm90Schedule)];
  if (threadIdx.x < 32) {
    const int tiles_m = Cfg::kGrouped ? group_tile_rows<Cfg::kCtaM>(p.offsets, p.experts)
                                      : (p.tiles_m + kCluster - 1) / kCluster;  // in cluster tiles
    if (threadIdx.x == 0)
      *reinterpret_cast<Sm90Schedule*>(schedule_smem) = Sm90Schedule(
          tiles_m, p.tiles_n, p.splits, p.swizzle, gridDim.x / kCluster, p.k_tiles_per_split, k_tiles_total);
  }
  const Sm90Schedule& schedule = *reinterpret_cast<const Sm90Schedule*>(schedule_smem);
  // NOTE: cluster kernels do not split (codegen/families/sm90.py), so every unit is a
  // cluster tile there; the rounds are the grid's CTAs.
  const void* trace = GEMM_SM90_TRACE && p.splits == 1 ? static_cast<const void*>(p.partials) : nullptr;
  auto unit = [&](int u) { return schedule.unit(u); };

  auto tile_a = [&](int s) { return base + static_cast<u32>(s * Cfg::kStageBytes); };
  auto tile_b = [&](int s) { return base + static_cast<u32>(s * Cfg::kStageBytes + Cfg::kTileBytesA); };
  auto full = [&](int s) { return smem_addr(&full_bar[s]); };
  auto empty = [&](int s) { return smem_addr(&empty_bar[s]); };

  // Each stage is released by every consumer warp of every CTA its B part went to.
  if (threadIdx.x == 0) init_ring(full_bar, empty_bar, Cfg::kConsumers * 4 * kCluster);
  if constexpr (kCluster > 1) {
    cluster_sync();
  } else {
    __syncthreads();
  }

  if (wg == Cfg::kConsumers) {
    // ---- producer warpgroup ----
    // NOTE: setmaxnreg is .sync.aligned per warpgroup: every warp executes it, then
    // one thread of warp 0 works and the others are done.
    if constexpr (Cfg::kMoveRegisters) setmaxnreg_dec<Cfg::kProducerRegs>();
    // NOTE: a grouped producer's whole warp takes each unit (the expert scan is
    // warp-wide); its elected thread issues the copies.
    const bool leader = threadIdx.x / 32 % 4 == 0 && elect_one();
    if (Cfg::kGrouped ? threadIdx.x / 32 % 4 == 0 : leader) {
      if (leader) {
        prefetch_tensormap(tma_a);
        prefetch_tensormap(tma_b);
      }
      int it = 0;  // the ring position: K tiles this CTA has loaded
      int traced = 0;
      const u32 stage_bytes = static_cast<u32>(Cfg::a_box_bytes(p.M) + Cfg::kTileBytesB);
      for (int u = blockIdx.x / kCluster; u < schedule.units; u += gridDim.x / kCluster, ++traced) {
        const Sm90Unit w = unit(u);
        int m0 = (w.tile_m * kCluster + rank) * Cfg::kCtaM;
        int n0 = w.tile_n * Cfg::kCtaN;
        if constexpr (Cfg::kGrouped) {
          const GroupTile g = find_group_tile<Cfg::kCtaM>(p.offsets, p.experts, w.tile_m);
          if (g.expert < 0) continue;  // past the last tile row: the consumers skip it too
          m0 = g.row0 + g.tile * Cfg::kCtaM;
          n0 += g.expert * p.N;
        }
        for (int kt = 0; kt < w.k_tiles && (!Cfg::kGrouped || leader); ++kt, ++it) {
          const int s = it % kStages;
          // Wait until the consumers (of every CTA the stage's B part goes to)
          // released the stage's previous contents; in the ring's first round the
          // parity trick returns at once.
          mbar_wait(empty(s), ((it / kStages) & 1) ^ 1);
          if (kt == 0) trace_stamp(trace, traced, 8);
          if (kt + 1 == w.k_tiles) trace_stamp(trace, traced, 9);
          // NOTE: the full stage is expected (A's box as the host sized it for M), the
          // other CTAs' parts of B included, even where a box is partly out of bounds:
          // the zero fill is delivered and counted like data.
          mbar_arrive_expect_tx(full(s), stage_bytes);
          const int k = (w.k_tile0 + kt) * Cfg::kCtaK;
          tma_load_2d(tile_a(s), tma_a, full(s), k, m0);
          constexpr int kPart = Cfg::kPartRowsB * 128;  // bytes of a CTA's share (of each box)
          if constexpr (kCluster == 1) {
            if constexpr (kTransB) {
#pragma unroll
              for (int j = 0; j < Cfg::kCtaN / 64; ++j)
                tma_load_2d(tile_b(s) + j * Cfg::kBoxBytesB, tma_b, full(s), n0 + 64 * j, k);
            } else {
              tma_load_2d(tile_b(s), tma_b, full(s), k, n0);
            }
          } else {
            constexpr u16 kAll = (1u << kCluster) - 1;
            if constexpr (kTransB) {
#pragma unroll
              for (int j = 0; j < Cfg::kCtaN / 64; ++j)
                tma_load_2d_multicast(tile_b(s) + j * Cfg::kBoxBytesB + rank * kPart, tma_b, full(s), n0 + 64 * j,
                                      k + rank * Cfg::kPartRowsB, kAll);
            } else {
              tma_load_2d_multicast(tile_b(s) + rank * kPart, tma_b, full(s), k, n0 + rank * Cfg::kPartRowsB, kAll);
            }
          }
        }
      }
    }
  } else {
    // ---- consumer warpgroups ----
    if constexpr (Cfg::kMoveRegisters) setmaxnreg_inc<Cfg::kConsumerRegs>();
    using Store = Sm90Store<Cfg>;
    float acc[Cfg::kCtaN / 2];
    // The runtime sets kEpilogueTmaStore where it could describe D by a tensor map.
    const bool gated = (p.epilogue & kEpilogueGatedSilu) != 0;
    const bool tma_store = (p.epilogue & kEpilogueTmaStore) != 0 && Store::fits(gated);
    const u32 staging = base + static_cast<u32>(Cfg::kRingBytes + wg * Cfg::kStoreBuffers * Cfg::kStoreBoxBytes);
    int stored = 0;  // boxes this warpgroup handed to TMA stores
    // NOTE: each warpgroup meets at its own named barrier in the store, above the
    // split-K hand-over's (which both take, 256 threads): one id used with two thread
    // counts at once is an illegal instruction.
    // This warpgroup's 64 rows of the A tile: 64 rows of 128 bytes, whole 1024-byte
    // swizzle atoms, so its descriptors keep base offset 0.
    const u32 a_rows = static_cast<u32>(wg * 64 * Cfg::kCtaK * 2);
    auto release = [&](int s) {
      if (lane != 0) return;
      if constexpr (kCluster == 1) {
        mbar_arrive(empty(s));
      } else {
#pragma unroll
        for (int r = 0; r < kCluster; ++r) mbar_arrive_cluster(map_shared_rank(empty(s), r));
      }
    };
    int it = 0;  // the ring position, as the producer's
    int traced = 0;
    const bool stamps = threadIdx.x % 128 == 0;
    for (int u = blockIdx.x / kCluster; u < schedule.units; u += gridDim.x / kCluster, ++traced) {
      const Sm90Unit w = unit(u);
      if constexpr (Cfg::kGrouped) {
        if (find_group_tile<Cfg::kCtaM>(p.offsets, p.experts, w.tile_m).expert < 0) continue;  // as the producer
      }
      if (stamps) trace_stamp(trace, traced, 4 * wg);
      const int tile_m = w.tile_m * kCluster + rank;
      int m0 = tile_m * Cfg::kCtaM;
      const int n0 = w.tile_n * Cfg::kCtaN;
      for (int kt = 0; kt < w.k_tiles; ++kt, ++it) {
        const int s = it % kStages;
        mbar_wait(full(s), (it / kStages) & 1);
        if (stamps && kt == 0) trace_stamp(trace, traced, 4 * wg + 1);
        // NOTE: orders the accumulators' last ordinary accesses (the previous unit's
        // epilogue) before the wgmma that overwrites them.
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < Cfg::kCtaK / 16 && GEMM_SM90_LEAVE_OUT != 2; ++kk) {
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
        wgmma_wait<GEMM_SM90_WGMMA_DEPTH>();
        wgmma_fence_operand(acc);
        if (GEMM_SM90_WGMMA_DEPTH == 0) {
          release(s);
        } else if (kt > 0) {
          release((it - 1) % kStages);
        }
      }
      wgmma_wait<0>();
      wgmma_fence_operand(acc);
      GroupTile g{};
      if constexpr (Cfg::kGrouped) {
        // NOTE: found again rather than kept live across the mainloop beside the
        // accumulators (128x256 spilled so on sm_90a); m0 becomes the tile's first row
        // within its expert's rows.
        g = find_group_tile<Cfg::kCtaM>(p.offsets, p.experts, w.tile_m);
        m0 = g.tile * Cfg::kCtaM;
      }
      if (w.k_tiles == 0) {
        // NOTE: here, after the last wait, not before the K loop: there ptxas serializes
        // every wgmma (C7515, accumulators defined by other instructions inside the
        // pipeline), or, if-converted, costs a select per accumulator per unit. The empty
        // asm keeps it a branch.
        asm volatile("");
#pragma unroll
        for (int i = 0; i < Cfg::kCtaN / 2; ++i) acc[i] = 0.0f;  // an empty K slice (or K == 0) adds nothing
      }
      if (stamps) trace_stamp(trace, traced, 4 * wg + 2);
      if (GEMM_SM90_WGMMA_DEPTH > 0 && w.k_tiles > 0) release((it - 1) % kStages);
      if (m0 >= p.M) continue;  // a cluster's CTA below the last tile row: its B part was the work

      if (w.splits > 1) {
        const int tid = threadIdx.x;  // consumers are threads 0 .. kConsumerThreads - 1
        const int tile_rows = (Cfg::kGrouped ? g.rows : p.M) - m0;  // the tile's rows of D (of its expert's)
        const int warp_row0 = 64 * wg + 16 * ((tid / 32) % 4) + lane / 4;
        auto row_of = [&](int i) { return warp_row0 + 8 * ((i / 2) % 2); };
        // NOTE: the workspace slot is the split tile's index, not the output tile's: the
        // whole tiles never hand over, and the runtime sizes the workspace for the rest.
        if (!split_k_handover<Cfg::kConsumerThreads, Cfg::kCtaN / 2, Cfg::kCtaM * Cfg::kCtaN>(
                acc, row_of, p, w.split_tile, w.split, tile_rows, tid))
          continue;
      }
      if (GEMM_SM90_LEAVE_OUT == 1) continue;
      const int row0 = m0 + 64 * wg;
      if (row0 >= p.M) continue;  // this warpgroup's rows lie below D
      const int barrier = kSplitKBarrier + 1 + wg;
      if constexpr (Cfg::kGrouped) {
        // NOTE: the expert's problem is built here, not kept across the mainloop. Its
        // rows go out through the staging boxes, by TMA where the warpgroup's 64 all
        // belong to the expert, else (the expert's last rows) copied (store_sm90.cuh).
        const Params q = expert_problem<Cfg>(p, g);
        const int rows = q.M - row0 < 64 ? q.M - row0 : 64;
        if (row0 >= q.M) {
        } else if (!tma_store) {
          Epilogue<Cfg>::store(WgmmaTile<Cfg::kCtaN>{acc}, q, row0, n0);
        } else if (!gated) {
          Store::template store<false>(acc, q, tma_d, staging, barrier, row0, n0, stored, g.row0 + row0, rows);
        } else if constexpr (Store::kGatedFits) {
          Store::template store<true>(acc, q, tma_d, staging, barrier, row0, n0, stored, g.row0 + row0, rows);
        }
      } else if (!tma_store) {
        Epilogue<Cfg>::store(WgmmaTile<Cfg::kCtaN>{acc}, p, row0, n0);
      } else if (!gated) {
        Store::template store<false>(acc, p, tma_d, staging, barrier, row0, n0, stored, row0);
      } else if constexpr (Store::kGatedFits) {
        Store::template store<true>(acc, p, tma_d, staging, barrier, row0, n0, stored, row0);
      }
      if (stamps) trace_stamp(trace, traced, 4 * wg + 3);
    }
    Store::drain();
  }
  // NOTE: a CTA's shared memory must outlive the other CTAs' multicast copies into it
  // and their arrivals on its barriers.
  if constexpr (kCluster > 1) cluster_sync();
}

}  // namespace gemm
