// Weight-only quantized GEMM on wgmma (issue 16; docs/QUANT.md), written from the PTX ISA:
//
//   D[M x N] = epilogue(alpha * X[M x K] @ W[N x K]^T),  W = (q - z) * s per group of K
//
// computed transposed, D^T = W . X^T: the dequantized weights are wgmma's 64-row A
// operand from registers (wgmma_rs), the tokens its N operand, a K-major tile of X in
// shared memory. A CTA covers kRows weight rows (columns of D; 64 per consumer
// warpgroup) and kTokens tokens (rows of D).
//
// Roles, as in kernel_sm90.cuh: warpgroup kConsumers is the producer, one elected thread
// issuing, per K tile of 64, three TMA copies into a ring stage (full/empty mbarriers):
//   X  : kTokens rows x 64 K, 128-byte swizzled (the B operand's K-major layout);
//   W  : the packed weight's kRows / 8 n8 tiles x one K tile of their blocks, the packed
//        rows seen as 32-bit words (PackedWeight.b; a 2-D box is at most 256 elements);
//   V  : the scales, then the zeros, of the tile's groups (one row, two for groups of 32)
//        for the kRows weight rows (PackedWeight.v, out-of-bounds rows and columns zero).
// The consumers dequantize a K tile from shared memory (dequant.cuh, the sm80 kernels'
// Dequant: the packed layout gives a warp's two n8 tiles' B fragments, which are its A
// fragment of a 16-row slice) while the wgmma of the previous K tile runs.
//
// The epilogue is the common one (epilogue.cuh): the CTA's D^T fragments are staged in
// shared memory as rows of D (StagedTransposedTile), and pairs of adjacent columns of D
// go out row by row, so bias, gated SiLU, beta * C (C may alias D) and every output type
// come as they are, with whole rows of D per warp store.
//
// A grid of at most the resident CTAs. Without splits, each walks whole output tiles,
// persistently (CTA b takes tiles b, b + grid, ...; weight tiles fastest), its next
// tile's copies landing in the stages below the epilogue's staging while it stores.
// With them, stream-K (stream_k.cuh): each takes an equal share of all tiles' K tiles,
// handing cut tiles over through the workspace.
//
// Grouped (Grouped_, docs/MOE.md): token tile y is a tile of one expert's rows
// (find_group_tile over the offsets; the CTAs walk the host's bound on them and stop at
// the first tile past the experts' last), X's rows are the grouped rows
// (sorted by expert), the weight and V tiles the expert's (the stacked experts seen as
// one matrix of E times the rows), and the epilogue stores the expert's rows only
// (expert_problem). No splits.
//
// The shared-B form (Sm90QuantConfig's kSharedB; the experimental sm90_quant_smem family)
// computes D = X . W^T instead: each of two consumer warpgroups dequantizes half the
// CTA's weight rows into buffers in shared memory (SharedBWeights, one stmatrix per
// block), the B operand of wgmma_ss with N = those rows and the tokens as M in slices of
// 64; producer, stream-K and epilogue (StagedTile) are the same. Measured slower than
// the register-A form on every problem timed (docs/NOTES.md).
//
// Its parts: quant_knobs.cuh (the experiment knobs), quant_config.cuh (Sm90QuantConfig:
// the tile, shared memory, registers), quant_fragments.cuh (a stage's weights
// dequantized into wgmma operands), quant_epilogue.cuh (the D tile staged and stored);
// here the kernel: its roles, its walk over the tiles and its K loops.
#pragma once
#include "gemm/dequant.cuh"
#include "gemm/epilogue.cuh"
#include "gemm/grouped.cuh"
#include "gemm/numeric.cuh"
#include "gemm/sm90/ptx_sm90.cuh"
#include "gemm/sm90/stream_k.cuh"
#include "gemm/split_k.cuh"
// The parts named above (each header that reads the knobs includes quant_knobs.cuh).
#include "gemm/sm90/quant_config.cuh"
#include "gemm/sm90/quant_epilogue.cuh"
#include "gemm/sm90/quant_fragments.cuh"
#include "gemm/sm90/quant_knobs.cuh"

namespace gemm {

// The token columns a register-A K loop multiplies (run_register_a).
template <int W>
struct TokenWidth {
  static constexpr int value = W;
};

template <class Cfg, class Params>
__device__ __forceinline__ void gemm_sm90_quant(const Params& p, const CUtensorMap* tma_x, const CUtensorMap* tma_w,
                                                const CUtensorMap* tma_v) {
  constexpr int kStages = Cfg::kStages;
  using Mma = typename Cfg::TA::MmaKind;

  extern __shared__ unsigned char smem_raw[];
  __shared__ u64 full_bar[kStages];
  __shared__ u64 empty_bar[kStages];
  __shared__ u64 ring_free_bar;  // the consumers are done with a tile's end (ring_free)
  __shared__ u64 handoff_full_bar, handoff_empty_bar;  // the hand-off staging (HandoffTile)
  __shared__ u64 land_ok_bar, land_full_bar;           // stream-K's landing (stream_k_land)
  if (dynamic_smem_size() < static_cast<u32>(Cfg::kSmemBytes)) __trap();

  const Sm90QuantStage<Cfg> st{pin_register((smem_addr(smem_raw) + 1023u) & ~1023u)};
  const int wg = threadIdx.x / 128;
  const int lane = threadIdx.x % 32;
  const int k_tiles = (p.K + Cfg::kStageK - 1) / Cfg::kStageK;  // of every output tile: its ring stages
  const int v_rows = Cfg::v_rows(p.group_shift);
  // Output tile t is token tile t / tiles_n (grouped: of the experts' tile rows as
  // find_group_tile enumerates them; the host's tiles_m is a bound on them, and a walk
  // stops at the first tile past the last), weight tile t % tiles_n. The CTA's walk over
  // them (its K tiles: `count`, at most):
  //   without splits, persistent: tiles blockIdx.x, + gridDim.x, ..., whole. The tiles
  //     in flight at once are neighbours, as in a grid of a CTA per tile, so X's tiles
  //     and W's meet in L2; a CTA's next tile fills the stages below the staging while
  //     its epilogue stores.
  //   with them, stream-K (stream_k.cuh): its share [begin, end) of all tiles' K tiles,
  //     tile after tile, the first one possibly from K tile kt0 on.
  // NOTE: the bound, not group_tile_rows: that scan of the offsets would come before the
  // first tile's, which the first copies wait for.
  const long long tiles = static_cast<long long>(p.tiles_m) * p.tiles_n;
  // Equal shares for grouped launches: their `tiles` is a bound, not the tiles the grid
  // was sized by, so a grid of twice it says nothing of how the tiles are cut.
  const StreamK sk = Cfg::kGrouped ? StreamK{tiles * k_tiles, static_cast<int>(gridDim.x)}
                                   : skewed_stream_k(tiles, k_tiles, static_cast<int>(gridDim.x), p.splits);
  const bool stream_k = p.splits > 1;
  const int rank = stream_k ? sk.ctas - 1 - static_cast<int>(blockIdx.x) : 0;
  const long long begin = stream_k ? sk.begin(rank) : 0;
  const int first_tile = stream_k ? static_cast<int>(begin / k_tiles) : static_cast<int>(blockIdx.x);
  const int stride = stream_k ? 1 : static_cast<int>(gridDim.x);
  const int kt0 = stream_k ? static_cast<int>(begin - static_cast<long long>(first_tile) * k_tiles) : 0;
  const int count = stream_k ? static_cast<int>(sk.begin(rank + 1) - begin)
                    : blockIdx.x < tiles ? static_cast<int>((tiles - 1 - blockIdx.x) / gridDim.x + 1) * k_tiles
                                         : 0;
  // Where tile t is: its token tile's first row (m0: of X's rows for the copies, of the
  // expert's for the epilogue) and weight tile's (n0), and for grouped launches the
  // expert (a full-warp scan: call from whole warps); `past` once the tiles of the
  // experts' rows are all behind (then so are every later tile's).
  struct Located {
    GroupTile g;
    int token_tile, n0;
    bool past;
  };
  auto locate = [&](int tile) {
    Located at{{}, tile / p.tiles_n, tile % p.tiles_n * Cfg::kRows, false};
    if constexpr (Cfg::kGrouped) {
      at.g = find_group_tile<Cfg::kTokens>(p.offsets, p.experts, at.token_tile);
      at.token_tile = at.g.tile;
      at.past = at.g.expert < 0;
    }
    return at;
  };
  // NOTE: the rings' shared-memory addresses made once and pinned (pin_register): from
  // &bar[s] the compiler remade them at every use (an S2UR of the CTA's id and two
  // uniform instructions), in every K tile; so with the stages' base (st).
  const u32 full_bar0 = pin_register(smem_addr(&full_bar[0])), empty_bar0 = pin_register(smem_addr(&empty_bar[0]));
  auto full = [&](int s) { return full_bar0 + static_cast<u32>(s * sizeof(u64)); };
  auto empty = [&](int s) { return empty_bar0 + static_cast<u32>(s * sizeof(u64)); };
  const u32 ring_free = smem_addr(&ring_free_bar);
  const u32 land_ok = smem_addr(&land_ok_bar), land_full = smem_addr(&land_full_bar);
  constexpr int kTileFloats = Cfg::kPartialFloats;  // a give's partials
  // Stream-K: a CTA takes at most once, at its last tile, where its share ends inside a tile
  // it holds the head of (a run shorter than the tile from K tile 0). The tile's rest is
  // the shares of ranks rank + 1 .. tail_rank(tile); the tail's is the one that may land.
  // NOTE: the consumers call tail_rank at the take rather than keep its value through the
  // K loop: one more live register there had NVVM remake lane offsets from %tid.x.
  auto tail_rank = [&](long long tile) { return sk.rank_of((tile + 1) * k_tiles - 1); };
  const long long share_end = begin + count, last_tile = (share_end - 1) / k_tiles;
  const bool takes_last =
      stream_k && count > 0 && last_tile * k_tiles >= begin && share_end < (last_tile + 1) * k_tiles;
  const bool lands = Cfg::kLand && takes_last && GEMM_SM90Q_LEAVE_OUT != 7 && GEMM_SM90Q_LEAVE_OUT != 9;

  // Whether this launch's tiles leave through the hand-off (uniform: from the parameters).
  const bool handoff = Cfg::kHandoff && !stream_k && plain_rows<Cfg>(p) && GEMM_SM90Q_LEAVE_OUT != 1;
  const u32 handoff_full = smem_addr(&handoff_full_bar), handoff_empty = smem_addr(&handoff_empty_bar);
  const HandoffTile<Cfg> handoff_tile{reinterpret_cast<typename Cfg::TD::Storage*>(
      smem_raw + (st.base - smem_addr(smem_raw)) + Cfg::kHandoffOffset)};

  if (threadIdx.x == 0) {
    mbar_init(ring_free, Cfg::kConsumers * 4);
    mbar_init(handoff_full, Cfg::kConsumerThreads);
    mbar_init(handoff_empty, kHandoffStorers);
    mbar_init(land_ok, Cfg::kConsumers * 4);
    mbar_init(land_full, 1);
    init_ring(full_bar, empty_bar, Cfg::kStageReaders * 4);  // a stage's consumers (kStageReaders)
  }
  __syncthreads();

  // NOTE: the ring goes by the CTA's own K tile count `it` (stage it % kStages, phase
  // it / kStages), across the tiles of its share.
  if (wg == Cfg::kConsumers) {
    // ---- producer warpgroup ----
    if constexpr (Cfg::kMoveRegisters) setmaxnreg_dec<Cfg::kProducerRegs>();
    // One warp, converged: it locates grouped tiles with full-warp scans and waits on the
    // barriers whole; one lane of it issues.
    // NOTE: the walk's first version ran one lane alone through the K loop, the others
    // parked at the next tile's shuffles, and scanned the offsets once more before the
    // first tile (group_tile_rows): its grouped kernels ran up to a third slower and
    // erratically (H200, bench.moe, Mixtral-like 128 tokens down: 197-205 us against 148
    // with both changed; which of the two it was is not measured).
    if (threadIdx.x / 32 % 4 == 0) {
      const bool leader = elect_one();
      if (leader) {
        prefetch_tensormap(tma_x);
        prefetch_tensormap(tma_w);
        prefetch_tensormap(tma_v);
      }
      // NOTE: whole boxes are expected, out-of-bounds parts included (zero-filled).
      const u32 stage_bytes =
          static_cast<u32>((GEMM_SM90Q_LEAVE_OUT == 4 ? 0 : Cfg::kKPerStage * Cfg::x_box_bytes(p.M)) +
                           (GEMM_SM90Q_LEAVE_OUT == 5 ? 0 : Cfg::kTileBytesW + 2 * v_rows * Cfg::kRows * 2));
      // NOTE: a tile's end stages D over the stages staged_stage() names: after a tile
      // boundary the next tile's copies go on into the other stages, and wait for the
      // consumers' ring_free before one of those, and before the run's last K tile: the
      // consumers cannot end that run (and complete the next phase) before, so the
      // parity wait never sees two phases.
      int runs_freed = 0;
      int it = 0;
      for (int tile = first_tile, t = 0; it < count; tile += stride, ++t) {
        const Located at = locate(tile);
        if (at.past) break;
        const int kt_begin = t == 0 ? kt0 : 0;
        const int n = min(k_tiles - kt_begin, count - it);
        // Grouped: the expert's rows of X, and its first rows of W (n8 tiles) and of V in
        // the stacked experts.
        const int m0 = (Cfg::kGrouped ? at.g.row0 : 0) + at.token_tile * Cfg::kTokens;
        const int w_row0 = Cfg::kGrouped ? at.g.expert * ((p.N + 7) / 8) : 0;
        const int v_row0 = Cfg::kGrouped ? at.g.expert * 2 * p.groups : 0;
        bool pending = t > 0;
        for (int j = 0; j < n; ++j) {
          const int i = it + j, kt = kt_begin + j;
          const int s = i % kStages;
          if (pending && ((!handoff && Cfg::staged_stage(s)) || kt == k_tiles - 1 || i == count - 1)) {
            mbar_wait(ring_free, static_cast<u32>(runs_freed++) & 1u);
            pending = false;
          }
          mbar_wait(empty(s), (static_cast<u32>(i / kStages) & 1u) ^ 1u);
          if (leader) {
            mbar_arrive_expect_tx(full(s), stage_bytes);
            const int k0 = kt * Cfg::kStageK;
            // X's box is one K tile wide (a 128-byte swizzled row a token): one a K tile.
#pragma unroll
            for (int h = 0; h < Cfg::kKPerStage && GEMM_SM90Q_LEAVE_OUT != 4; ++h)
              tma_load_2d(st.x(s) + h * Cfg::kTileBytesX, tma_x, full(s), k0 + h * Cfg::kCtaK, m0);
            if (GEMM_SM90Q_LEAVE_OUT != 5) {
              tma_load_2d(st.w(s), tma_w, full(s), k0 * Cfg::kWords, w_row0 + at.n0 / 8);
              const int group = v_row0 + (k0 >> p.group_shift);
              tma_load_2d(st.scales(s), tma_v, full(s), at.n0, group);
              tma_load_2d(st.zeros(s), tma_v, full(s), at.n0, p.groups + group);
            }
          }
          __syncwarp();
        }
        it += n;
      }
    } else if (stream_k) {
      // Warp 1 raises the flag of the CTA's one give (its share's first tile, where the
      // share starts inside it); no hand-off in stream-K launches.
      if (GEMM_SM90Q_SK_FENCE == 2 && GEMM_SM90Q_LEAVE_OUT != 7 && threadIdx.x / 32 % 4 == 1 && kt0 > 0 && count > 0)
        stream_k_raise<Cfg::kConsumerThreads>(p, rank, lane);
      // Warp 2 lands the take's tail share.
      if (lands && threadIdx.x / 32 % 4 == 2)
        stream_k_land<kTileFloats>(p, tail_rank(last_tile), st.base + Cfg::kStagedOffset, land_ok, land_full, lane);
    } else if (Cfg::kHandoff && handoff) {
      // The other three warps store the tiles the consumers hand off, in the consumers'
      // order (the persistent walk: no splits here).
      const int id = threadIdx.x - Cfg::kConsumerThreads - 32;
      const int my_tiles =
          k_tiles > 0 && blockIdx.x < tiles ? static_cast<int>((tiles - 1 - blockIdx.x) / gridDim.x + 1) : 0;
      for (int t = 0, tile = static_cast<int>(blockIdx.x); t < my_tiles; ++t, tile += static_cast<int>(gridDim.x)) {
        const Located at = locate(tile);
        if (at.past) break;
        const int m0 = at.token_tile * Cfg::kTokens;
        mbar_wait(handoff_full, static_cast<u32>(t) & 1u);
        if constexpr (Cfg::kHandoff && Cfg::kGrouped) {
          const auto q = expert_problem<Cfg>(p, at.g);
          handoff_tile.store(q, m0, at.n0, min(Cfg::kTokens, q.M - m0), id);
        } else if constexpr (Cfg::kHandoff) {
          handoff_tile.store(p, m0, at.n0, min(Cfg::kTokens, p.M - m0), id);
        }
        mbar_arrive(handoff_empty);
      }
    }
    return;
  }

  // ---- consumer warpgroups ----
  if constexpr (Cfg::kMoveRegisters) setmaxnreg_inc<Cfg::kConsumerRegs>();
  float acc[Cfg::kAcc];
#pragma unroll
  for (int i = 0; i < Cfg::kAcc; ++i) acc[i] = 0.0f;
  const int warp = (threadIdx.x / 32) % 4;  // within the warpgroup
  // The warpgroup's weight rows (of kRowConsumers blocks) and its turn among a run's K
  // tiles (Cfg::kKSplit).
  const int row_wg = Cfg::kKSplit == 1 ? wg : wg % Cfg::kRowConsumers;
  // NOTE: through a shuffle from lane 0, so that ptxas knows k_part is the same in every
  // lane: the K loop's stage, phase and X descriptor, which follow it, then stay on the
  // uniform datapath. Computed from threadIdx alone, they went through vector registers
  // and R2UR, with divergence guards around the barriers (16 R2UR, 5 BSSY a pair of K
  // tiles; 20% more instructions a K tile than the 64x128 tile).
  const int k_part = Cfg::kKSplit == 1 ? 0 : __shfl_sync(0xffffffffu, wg / Cfg::kRowConsumers, 0);
  // NOTE: unsigned: a power-of-two ring's stage and phase are then a mask and a shift.
  auto stage_of = [](int it) { return static_cast<int>(static_cast<u32>(it) % kStages); };
  auto wait_full = [&](int it) { mbar_wait(full(stage_of(it)), (static_cast<u32>(it) / kStages) & 1u); };
  const u32 ring_leader = pin_register(lane == 0 ? 1u : 0u);
  auto release = [&](int it) { mbar_arrive_if(empty(stage_of(it)), ring_leader); };

  // A warpgroup's K tiles in a run: with a K tile a stage, the local indices j = first_j,
  // first_j + kTurn, ... (its turn); with a pair a stage in turn (kPairs), every stage, its
  // half k_part; with a pair a stage and no turns (kWholeStages), both halves of every
  // stage (run_whole_stages).
  constexpr bool kPairs = Cfg::kKPerStage > 1 && Cfg::kKSplit > 1;
  constexpr bool kWholeStages = Cfg::kKPerStage > 1 && Cfg::kKSplit == 1;
  constexpr int kTurn = kPairs ? 1 : Cfg::kKSplit;  // from one of a warpgroup's stages to its next
  const int first_j = kPairs ? 0 : k_part;
  // Stage 0's X tile (with pairs, this warpgroup's half); the others and the k16 steps are
  // offsets of it (smem_desc_advance).
  const u64 x_desc0 = smem_desc_kmajor_sw128(st.x(0) + (kPairs ? k_part * Cfg::kTileBytesX : 0));

  // ---- register A: D^T = W . X^T ----
  // The warp's 16 weight rows of block b (Cfg::kBlocks m64 blocks per warpgroup).
  auto local_row0 = [&](int b) { return 64 * (row_wg * Cfg::kBlocks + b) + 16 * warp; };
  LaneOffsets lane_offs[Cfg::kBlocks];
  // Two groups a K tile (groups of 32); made once (else a parameter load in each K tile).
  const u32 two_groups = pin_register(v_rows == 2 * Cfg::kKPerStage ? 1u : 0u);
  // With pairs, this warpgroup's half of each stage: its K tile's words and first group.
  const int part = kPairs ? k_part : 0, group0 = kPairs ? k_part * v_rows / Cfg::kKPerStage : 0;
#pragma unroll
  for (int b = 0; b < Cfg::kBlocks; ++b) lane_offs[b] = lane_offsets<Cfg>(local_row0(b), lane, part, group0);
  // kWholeStages: the second half's words and groups (groups of 32: its two; of 64: its one;
  // larger: the first half's).
  LaneOffsets second_half[Cfg::kBlocks];
#pragma unroll
  for (int b = 0; b < Cfg::kBlocks; ++b)
    second_half[b] = kWholeStages ? lane_offsets<Cfg>(local_row0(b), lane, 1, v_rows / 2) : lane_offs[b];
  using ARegs = u32[Cfg::kBlocks][2][2][4];  // a K tile's A registers: [block][k32 block][k16 step][register]
  auto fence_a = [](ARegs& a) {
#pragma unroll
    for (int b = 0; b < Cfg::kBlocks; ++b) wgmma_fence_operand(a[b]);
  };
  // K tile j of a tile's run of n, the CTA's K tile it: its wgmma (of `use`, dequantized
  // already) join the one of the previous K tile in flight; once that one is done, its
  // stage goes back and its registers (`fill`) take the next K tile's dequantized
  // weights, under this tile's wgmma. scale-d false on the run's first wgmma starts the
  // tile's sums afresh. A warpgroup's K tiles are j = first_j, first_j + kTurn, ...
  // NOTE: one group in flight, not none: waiting for this tile's own wgmma before
  // issuing the next leaves the tensor cores idle for a wgmma's latency per K tile
  // (H200, W4 128x128 at M = 4096: 3% slower, GEMM_SM90Q_WGMMA_DEPTH=0). Two in flight
  // (three register sets) and 12-16 stages measured no faster than one (NOTES).
  // The A registers of stage it's K tile (kWholeStages: its first or its second half).
  auto dequantize_from = [&](int it, const LaneOffsets (&offs)[Cfg::kBlocks], ARegs& a) {
    if (GEMM_SM90Q_LEAVE_OUT != 3) {
#pragma unroll
      for (int b = 0; b < Cfg::kBlocks; ++b) {
        if (two_groups) {
          quant_a_fragments<Cfg, 2>(st, stage_of(it), offs[b], a[b]);
        } else {
          quant_a_fragments<Cfg, 1>(st, stage_of(it), offs[b], a[b]);
        }
      }
    }
  };
  auto dequantize = [&](int it, ARegs& a) {
    wait_full(it);
    dequantize_from(it, lane_offs, a);
  };
  // A K tile's wgmma on `width` tokens (a TokenWidth), its group committed; `accumulate`
  // false on the run's first K tile starts the tile's sums afresh.
  auto issue = [&](auto width, bool accumulate, const u64 x_desc, ARegs& use) {
    constexpr int kWidth = decltype(width)::value;
#pragma unroll
    for (int b = 0; b < Cfg::kBlocks; ++b)
#pragma unroll
      for (int kb = 0; kb < 2 && GEMM_SM90Q_LEAVE_OUT != 2; ++kb)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float(&d)[Cfg::kBlockAcc] = *reinterpret_cast<float(*)[Cfg::kBlockAcc]>(acc + b * Cfg::kBlockAcc);
          const u64 desc = smem_desc_advance(x_desc, (2 * kb + h) * 32);
          if constexpr (kWidth == Cfg::kTokens) {
            wgmma_rs<kWidth, Mma>(d, use[b][kb][h], desc, accumulate || kb > 0 || h > 0);
          } else {
            wgmma_rs_prefix<kWidth, Mma>(d, use[b][kb][h], desc, accumulate || kb > 0 || h > 0);
          }
        }
    wgmma_commit();
  };
  // A K tile's wgmma on the tile's token width (narrower for a short 256-token tile).
  auto issue_narrow = [&](int narrow, bool accumulate, const u64 x_desc, ARegs& use) {
    // NOTE: orders the A registers' ordinary writes before the wgmma reads them.
    wgmma_fence();
    if constexpr (!Cfg::kSharedB) {
      if (Cfg::kTokens >= 256 && narrow == 2) {
        issue(TokenWidth<Cfg::kTokens >= 256 ? Cfg::kTokens / 4 : Cfg::kTokens>{}, accumulate, x_desc, use);
      } else if (Cfg::kTokens >= 256 && narrow == 1) {
        issue(TokenWidth<Cfg::kTokens >= 256 ? Cfg::kTokens / 2 : Cfg::kTokens>{}, accumulate, x_desc, use);
      } else {
        issue(TokenWidth<Cfg::kTokens>{}, accumulate, x_desc, use);
      }
    } else {
      wgmma_commit();
    }
  };
  auto step = [&](int narrow, int it, int j, int n, ARegs& use, ARegs& fill) {
    issue_narrow(narrow, j > first_j, smem_desc_advance(x_desc0, static_cast<u32>(stage_of(it) * Cfg::kStageBytes)),
                 use);
    if constexpr (GEMM_SM90Q_WGMMA_DEPTH == 1) {
      wgmma_wait<1>();  // the previous K tile's wgmma: its X stage and its A registers are free
      fence_a(fill);
      if (j > first_j) release(it - kTurn);
      if (j + kTurn < n) dequantize(it + kTurn, fill);
    } else {
      if (j + kTurn < n) dequantize(it + kTurn, fill);
      wgmma_wait<0>();
      wgmma_fence_operand(acc);
      fence_a(use);
      release(it);
    }
  };
  // A 256-token tile with at most 128 (64) rows (an expert's last token tile, M's residue)
  // multiplies 128 (64) token columns: the accumulator prefix d[0, W / 2) of an m64nWk16
  // fragment holds tokens 0 .. W - 1 in the layout the full width gives them, and X's
  // first W rows are the tile's first W (the descriptor is the same). The accumulators
  // past the width keep stale sums of tokens no store reads. H200 (bench.experiments.
  // build_ab --bits 4, docs/NOTES.md twenty-second session): Mixtral-like W4 experts at
  // 1024 tokens 4-9% faster, at 8192 2%, Qwen-like gate_up at 8192 3%; a short tile's
  // dequantization, which does not shrink with the tokens, then dominates its time.
  // NOTE: the width is chosen per K tile around its wgmma, each branch committing its
  // own group. Chosen once around the K loop (a loop per width), ptxas serialized every
  // wgmma of the kernel (C7515); with one commit after the join it closed each K tile's
  // group with an extra empty wgmma, so the wait for the previous group waited for this
  // one too (the eleventh session's version, measured slower). 128-token tiles keep one
  // width.
  auto run_register_a = [&](int it, int n, int rows) {
    const int narrow = rows <= Cfg::kTokens / 4 ? 2 : rows <= Cfg::kTokens / 2 ? 1 : 0;
    // NOTE: not with pairs, where every run gives each warpgroup its half of each stage:
    // compiled there, the zeroing (which no run would reach) had ptxas serialize every
    // wgmma of the kernel (C7515).
    if (Cfg::kKSplit > 1 && !kPairs && first_j >= n) {
      // A run of one K tile is the other warpgroup's: this one adds nothing to the tile.
#pragma unroll
      for (int i = 0; i < Cfg::kAcc; ++i) acc[i] = 0.0f;
      return;
    }
    ARegs a0, a1;
    dequantize(it + first_j, a0);
    for (int j = first_j; j < n; j += 2 * kTurn) {
      step(narrow, it + j, j, n, a0, a1);
      if (j + kTurn < n) step(narrow, it + j + kTurn, j + kTurn, n, a1, a0);
    }
    wgmma_wait<0>();
    wgmma_fence_operand(acc);
    if (GEMM_SM90Q_WGMMA_DEPTH == 1) release(it + first_j + (n - 1 - first_j) / kTurn * kTurn);
  };
  // kWholeStages: stage j's two halves one after the other, one wgmma group in flight as
  // in step: the first half's wgmma go out, the previous stage goes back once the group
  // before them is done, and the second half is dequantized under them (its stage landed
  // already); then the second half's wgmma, and the next stage's first half under them.
  // NOTE: GEMM_SM90Q_WGMMA_DEPTH's 0 (no group in flight) is not this form's, nor are
  // the narrower widths of a short 256-token tile (the form takes at most 128 tokens).
  // Making a one-group stage's scales and zeros once for both halves (7 of 198
  // instructions a stage of 64x256 W4) measured level (H100, fifty-seventh session).
  auto run_whole_stages = [&](int it, int n) {
    constexpr int narrow = 0;
    ARegs a0, a1;
    dequantize(it, a0);
    for (int j = 0; j < n; ++j) {
      const u64 x_desc = smem_desc_advance(x_desc0, static_cast<u32>(stage_of(it + j) * Cfg::kStageBytes));
      issue_narrow(narrow, j > 0, x_desc, a0);
      wgmma_wait<1>();
      fence_a(a1);
      if (j > 0) release(it + j - 1);
      dequantize_from(it + j, second_half, a1);
      issue_narrow(narrow, true, smem_desc_advance(x_desc, Cfg::kTileBytesX), a1);
      wgmma_wait<1>();
      fence_a(a0);
      if (j + 1 < n) dequantize(it + j + 1, a0);
    }
    wgmma_wait<0>();
    wgmma_fence_operand(acc);
    release(it + n - 1);
  };

  // ---- shared B: D = X . W^T ----
  // The warpgroup's buffers of dequantized weights: K tile it goes to buffer it % kBBuffers.
  // K tile j of a run: the warpgroup's wgmma read its buffer and X's token slices; once
  // the previous K tile's wgmma are done (its stage goes back), the warps dequantize the
  // next K tile under this one's wgmma into the next buffer.
  // NOTE: a warpgroup barrier after the writes, so that the wgmma read the whole K tile
  // (the fence makes the generic-proxy writes visible to wgmma's async-proxy reads). The
  // buffer written was last read by the wgmma of kBBuffers K tiles before: with three,
  // every warp waited for those before it met the previous K tile's barrier; with two,
  // another barrier before the writes waits for them (wgmma_wait is a warp's own).
  const u32 b_buffers = st.base + static_cast<u32>(Cfg::kRingAligned + Cfg::kBBuffers * wg * Cfg::kBBufferBytes);
  const int wg_barrier = kSplitKBarrier + 1 + wg;
  // NOTE: the register-A form has no buffers (kBBuffers 0): its instantiation of this
  // lambda, which it never calls, must not take a remainder by zero (NVRTC warning 179).
  constexpr int kBBufferRing = Cfg::kBBuffers > 0 ? Cfg::kBBuffers : 1;
  auto buffer = [&](int it) { return b_buffers + static_cast<u32>((it % kBBufferRing) * Cfg::kBBufferBytes); };
  auto fill_shared = [&](int it) {
    wait_full(it);
    if constexpr (Cfg::kSharedB) {
      using W = SharedBWeights<Cfg>;
      typename W::Fragments f;
      const int local_tile0 = W::kTiles * warp;  // the warp's first n8 tile in the warpgroup's rows
      if (GEMM_SM90Q_LEAVE_OUT != 3)
        W::dequantize(st, stage_of(it), wg * Cfg::kConsumerRows / 8 + local_tile0, v_rows, lane, f);
      if (Cfg::kBBuffers == 2 && GEMM_SM90Q_LEAVE_OUT != 6) named_barrier_sync<128>(wg_barrier);
      if (GEMM_SM90Q_LEAVE_OUT != 3) W::store(buffer(it), local_tile0, lane, f);
      if (GEMM_SM90Q_LEAVE_OUT != 6) {
        fence_proxy_async_smem();
        named_barrier_sync<128>(wg_barrier);
      }
    }
  };
  auto run_shared_b = [&](int it, int n) {
    constexpr int kSlice = Cfg::kConsumerRows / 2;
    fill_shared(it);
    for (int j = 0; j < n; ++j) {
      const u64 x_desc = smem_desc_advance(x_desc0, static_cast<u32>(stage_of(it + j) * Cfg::kStageBytes));
      const u64 b_desc = smem_desc_kmajor_sw128(buffer(it + j));
      wgmma_fence();
#pragma unroll
      for (int k16 = 0; k16 < 4 && GEMM_SM90Q_LEAVE_OUT != 2; ++k16)
#pragma unroll
        for (int ts = 0; ts < Cfg::kTokenSlices; ++ts)
          wgmma_ss<Cfg::kConsumerRows, Mma>(*reinterpret_cast<float(*)[kSlice]>(acc + kSlice * ts),
                                            smem_desc_advance(x_desc, ts * 64 * 128 + k16 * 32),
                                            smem_desc_advance(b_desc, k16 * 32), j > 0 || k16 > 0);
      wgmma_commit();
      wgmma_wait<1>();  // the previous K tile's wgmma: its X stage goes back
      if (j > 0) release(it + j - 1);
      if (j + 1 < n) fill_shared(it + j + 1);
    }
    wgmma_wait<0>();
    wgmma_fence_operand(acc);
    release(it + n - 1);
  };

  // The fragment order of the partials: the consumer threads' accumulators as they hold
  // them; row_of(i) is acc[i]'s token among the CTA's.
  auto row_of = [&](int i) {
    if constexpr (Cfg::kSharedB) {
      const int ts = i / (Cfg::kConsumerRows / 2), c = i % (Cfg::kConsumerRows / 2);
      return 64 * ts + 16 * warp + lane / 4 + 8 * ((c / 2) % 2);
    } else {
      const int c = i % Cfg::kBlockAcc;  // the same tokens in every block
      return 8 * (c / 4) + 2 * (lane % 4) + c % 2;
    }
  };
  int it = 0;  // the CTA's K tiles so far
  for (int tile = first_tile, t = 0; it < count; tile += stride, ++t) {
    const Located at = locate(tile);
    if (at.past) break;
    // This tile's run of the CTA's K tiles: [kt_begin, kt_begin + n).
    const int kt_begin = t == 0 ? kt0 : 0;
    const int n = min(k_tiles - kt_begin, count - it);
    // Grouped: m0 counts within the expert's rows, which the epilogue's problem starts at.
    const int m0 = at.token_tile * Cfg::kTokens;
    const int n0 = at.n0;
    const int rows_left = min(Cfg::kTokens, (Cfg::kGrouped ? at.g.rows : p.M) - m0);  // rows of D the tile has

    const bool takes = kt_begin == 0 && n < k_tiles;  // the head of a tile cut among shares
    if (lands && takes) {
      // The staging is free (the last tile's epilogue is done): the landing may begin.
      __syncwarp();
      mbar_arrive_if(land_ok, ring_leader);
    }
    if constexpr (Cfg::kSharedB) {
      run_shared_b(it, n);
    } else if constexpr (kWholeStages) {
      run_whole_stages(it, n);
    } else {
      run_register_a(it, n, rows_left);
    }
    it += n;

    if (handoff) {
      if constexpr (Cfg::kHandoff) {
        // The storers read the previous tile's rows before these overwrite them.
        mbar_wait(handoff_empty, (static_cast<u32>(t) & 1u) ^ 1u);
        if constexpr (Cfg::kGrouped) {
          handoff_tile.write(acc, wg, expert_problem<Cfg>(p, at.g), m0, n0, rows_left);
        } else {
          handoff_tile.write(acc, wg, p, m0, n0, rows_left);
        }
        mbar_arrive(handoff_full);
      }
    } else if (kt_begin > 0) {
      // The tile's head is another rank's: hand the sums over.
      if (GEMM_SM90Q_LEAVE_OUT != 7)
        stream_k_give<Cfg::kConsumerThreads, Cfg::kAcc, kTileFloats>(acc, row_of, p, rank, rows_left, threadIdx.x);
    } else {
      if (takes && GEMM_SM90Q_LEAVE_OUT != 7 && GEMM_SM90Q_LEAVE_OUT != 9) {
        // The tile's rest is the ranks above's (stream_k.cuh); a take is the CTA's last tile.
        const float* landed =
            lands ? reinterpret_cast<const float*>(smem_raw + (st.base - smem_addr(smem_raw)) + Cfg::kStagedOffset)
                  : nullptr;
        stream_k_take<Cfg::kConsumerThreads, Cfg::kAcc, kTileFloats>(acc, row_of, p, sk, rank + 1, tail_rank(tile),
                                                                     rows_left, threadIdx.x, landed, land_full);
      }
      if (GEMM_SM90Q_LEAVE_OUT != 1) {
        // NOTE: the staged stages are free once both warpgroups' last wgmma have read
        // their X stage, and the producer copies nothing into them until ring_free.
        float* const rows = reinterpret_cast<float*>(smem_raw + (st.base - smem_addr(smem_raw)) + Cfg::kStagedOffset);
        auto stage_and_store = [&](const auto& staged) {
          named_barrier_sync<Cfg::kConsumerThreads>(kSplitKBarrier);
          if constexpr (Cfg::kKSplit > 1) {
            // The K halves' sums meet here: the first half's staged, the second's added.
            if (k_part == 0) staged.stage(acc, row_wg);
            named_barrier_sync<Cfg::kConsumerThreads>(kSplitKBarrier);
            if (k_part == 1) staged.add(acc, row_wg);
          } else {
            staged.stage(acc, wg);
          }
          named_barrier_sync<Cfg::kConsumerThreads>(kSplitKBarrier);
          auto store = [&](const Params& ep) {
            if constexpr (!Cfg::kSharedB && sizeof(typename Cfg::TD::Storage) == 2) {
              if (plain_rows<Cfg>(ep)) {
                store_plain_rows<Cfg>(staged, ep, m0, n0);
                return;
              }
            }
            Epilogue<Cfg>::store(staged, ep, m0, n0);
          };
          if constexpr (Cfg::kGrouped) {
            store(expert_problem<Cfg>(p, at.g));
          } else {
            store(p);
          }
        };
        if constexpr (Cfg::kSharedB) {
          stage_and_store(StagedTile<Cfg>{{rows, rows_left}});
        } else {
          stage_and_store(StagedTransposedTile<Cfg>{rows, rows_left});
        }
      }
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(ring_free);
  }
}

}  // namespace gemm
