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
#pragma once
// Experiment knobs (bench/experiments/sm90_quant_variants.py; the generated kernels
// leave them at their defaults): GEMM_SM90Q_LEAVE_OUT 1 drops the epilogue, 2 the
// wgmma (commit and waits stay), 3 the dequantization (the A registers keep whatever
// they hold), 4 the X copies, 5 the weight, scale and zero copies (the stages keep
// whatever they hold), 6 the shared-B form's warpgroup barriers and proxy fence around
// the dequantized tile's writes, 7 stream-K's hand-over of partial sums, 8 its flags
// (the partials are written and read without waiting), 9 all of it but the partials'
// writes (wrong sums: timing only); GEMM_SM90Q_WGMMA_DEPTH is the wgmma groups a
// consumer leaves in flight while it dequantizes the next K tile (0 or 1);
// GEMM_SM90Q_SK_FENCE: how a stream-K share's flag follows its partials (stream_k.cuh):
// 2 (default) a producer-warpgroup warp raises it, 1 consumer thread 0 after a fence in
// every consumer thread, 0 thread 0 without the fence. GEMM_SM90Q_SK_LAND 1 (default): a
// take's tail share lands in shared memory during the K loop (stream_k_land) where the
// staging lies after the ring; 0 reads it from L2 after the K loop. GEMM_SM90Q_SK_SKEW
// N > 0 (default 4): where the grid is twice the tiles, a tile's tail share is N K tiles
// short of half the tile (stream_k.cuh's skewed_stream_k); 0: equal shares.
#ifndef GEMM_SM90Q_LEAVE_OUT
#define GEMM_SM90Q_LEAVE_OUT 0
#endif
#ifndef GEMM_SM90Q_SK_FENCE
#define GEMM_SM90Q_SK_FENCE 2
#endif
#ifndef GEMM_SM90Q_SK_LAND
#define GEMM_SM90Q_SK_LAND 1
#endif
#ifndef GEMM_SM90Q_SK_SKEW
#define GEMM_SM90Q_SK_SKEW 4
#endif
#ifndef GEMM_SM90Q_WGMMA_DEPTH
#define GEMM_SM90Q_WGMMA_DEPTH 1
#endif
// (before the includes: stream_k.cuh reads them)

#include "gemm/dequant.cuh"
#include "gemm/epilogue.cuh"
#include "gemm/grouped.cuh"
#include "gemm/numeric.cuh"
#include "gemm/sm90/ptx_sm90.cuh"
#include "gemm/sm90/stream_k.cuh"
#include "gemm/split_k.cuh"

namespace gemm {

template <class TA_, class TD_, int Bits_, int Tokens_, int Rows_, int Stages_, bool SharedB_ = false,
          bool Grouped_ = false, int Blocks_ = 1>
struct Sm90QuantConfig {
  using TA = TA_;
  using TD = TD_;
  static constexpr int kBits = Bits_;
  static constexpr bool kQuantB = true;
  static constexpr bool kGrouped = Grouped_;
  static constexpr int kTokens = Tokens_;  // rows of D per CTA
  static constexpr int kRows = Rows_;      // columns of D (weight rows) per CTA
  static constexpr int kStages = Stages_;
  // The form of the product (the two families: codegen/families/sm90_quant.py):
  //   register A (false): D^T = W . X^T, the weights wgmma's register A operand, the
  //     tokens its N; 64 weight rows per consumer warpgroup;
  //   shared B (true): D = X . W^T, the weights dequantized into shared memory as
  //     wgmma_ss's B operand (N = the warpgroup's weight rows), the tokens its M in
  //     slices of 64; two consumer warpgroups, each with half the weight rows.
  static constexpr bool kSharedB = SharedB_;
  // Register A: m64 blocks of weight rows per consumer warpgroup (1 or 2). With two, each
  // warp dequantizes 32 rows a K tile and issues eight wgmma into two accumulator sets,
  // so the K tile's fixed instructions (barriers, fences, descriptors, the loop) spread
  // over twice the weights.
  static constexpr int kBlocks = Blocks_;
  static constexpr int kCtaK = 64;
  static constexpr int kConsumers = kSharedB ? 2 : kRows / (64 * kBlocks);
  static constexpr int kConsumerRows = kRows / kConsumers;  // weight rows per consumer warpgroup
  static constexpr int kTokenSlices = kTokens / 64;         // shared B: wgmma M slices
  static constexpr int kBlockAcc = kTokens / 2;             // register A: accumulators per block
  static constexpr int kAcc = kSharedB ? kTokenSlices * kConsumerRows / 2 : kBlocks * kBlockAcc;  // per thread
  static constexpr int kConsumerThreads = 128 * kConsumers;
  static constexpr int kThreads = kConsumerThreads + 128;
  static constexpr int kWords = kBits / 4;  // 32-bit words per lane per n8 x k32 block
  static constexpr int kTileBytesX = kTokens * kCtaK * 2;
  static constexpr int kTileWordsW = kRows / 8 * 2 * 32 * kWords;  // n8 tiles x 2 blocks x 32 lanes
  static constexpr int kTileBytesW = kTileWordsW * 4;
  static constexpr int kVRows = 2;  // groups per K tile at most (groups of 32)
  static constexpr int kTileBytesV = 2 * kVRows * kRows * 2;  // scales, then zeros
  // NOTE: the next stage's X tile must start on a 1024-byte boundary (128B swizzle).
  static constexpr int kStageBytes = (kTileBytesX + kTileBytesW + kTileBytesV + 1023) / 1024 * 1024;
  static constexpr int kSmemLimit = 227 * 1024;
  // The epilogue stages the CTA's D tile (fp32, a row of kStagedPitch per token) where the
  // ring was: StagedTransposedTile / StagedTile.
  static constexpr int kStagedPitch = kRows + (kSharedB ? 8 : 4);
  static constexpr int kStagedBytes = kTokens * kStagedPitch * 4;
  // Where the staging starts: as far up as shared memory allows (after the ring where it
  // fits there, else on a stage boundary within it), so that the stages below it take
  // the next tile's copies while the epilogue stores (a persistent CTA's next tile).
  // Two CTAs of one consumer warpgroup share an SM: they keep it at the ring's start.
  // The shared-B form's buffers follow the ring: its staging stays at the start too.
  static constexpr int kStagesBytes = kStages * kStageBytes;
  static constexpr int kStagedRoom = kSmemLimit - 1024 - kStagedBytes;  // the highest start
  static constexpr int kStagedOffset = kSharedB || kConsumers == 1 || kStagedRoom < 0 ? 0
                                       : kStagesBytes <= kStagedRoom ? kStagesBytes
                                                                     : kStagedRoom / kStageBytes * kStageBytes;
  // The hand-off epilogue (plain 16-bit D: alpha, bias, row scales; no splits; see
  // HandoffTile): the consumers write their tile, converted, as rows of D into a 16-bit
  // staging right after the stages and go on with the next tile, while three warps of the
  // producer warpgroup store it. Where that staging fits: two or more consumer warpgroups
  // (one CTA an SM). It may overlap the fp32 staging: a launch uses one of the two.
  static constexpr int kHandoffPitch = kRows + 8;  // 16-bit elements a row: 8 tokens' rows on 32 banks
  static constexpr int kHandoffBytes = kTokens * kHandoffPitch * 2;
  static constexpr int kHandoffOffset = kStagesBytes;
  static constexpr bool kHandoff = !kSharedB && kConsumers >= 2 && sizeof(typename TD::Storage) == 2 &&
                                   kHandoffOffset + kHandoffBytes + 1024 <= kSmemLimit;
  static constexpr int kRingMax =
      kStagesBytes > kStagedOffset + kStagedBytes ? kStagesBytes : kStagedOffset + kStagedBytes;
  static constexpr int kRingBytes =
      kHandoff && kHandoffOffset + kHandoffBytes > kRingMax ? kHandoffOffset + kHandoffBytes : kRingMax;
  // Shared B: buffers per consumer warpgroup of one K tile of its dequantized weights
  // (K-major, 128-byte rows, swizzled as TMA would), after the ring: three where they
  // fit (one warpgroup barrier per K tile), else two (two barriers).
  static constexpr int kBBufferBytes = kConsumerRows * kCtaK * 2;
  static constexpr int kRingAligned = (kRingBytes + 1023) / 1024 * 1024;
  static constexpr int kBBuffers =
      !kSharedB ? 0 : kRingAligned + 3 * kConsumers * kBBufferBytes + 1024 <= kSmemLimit ? 3 : 2;
  static constexpr int kBBytes = kBBuffers * kConsumers * kBBufferBytes;
  static constexpr int kSmemBytes = kRingAligned + kBBytes + 1024;
  // The stages the staging covers: kStagedStageBegin .. kStagedStageEnd - 1 (none when it
  // starts after the ring).
  static constexpr int kStagedStageBegin = kStagedOffset / kStageBytes;
  static constexpr int kStagedStageEnd =
      (kStagedOffset + kStagedBytes + kStageBytes - 1) / kStageBytes < kStages
          ? (kStagedOffset + kStagedBytes + kStageBytes - 1) / kStageBytes
          : kStages;
  __host__ __device__ static constexpr bool staged_stage(int s) { return s >= kStagedStageBegin && s < kStagedStageEnd; }
  // Stream-K: a take's tail share lands in the staging (stream_k_land) where that lies
  // after the ring, so no K tile's copies touch it.
  static constexpr bool kLand = GEMM_SM90Q_SK_LAND && !kSharedB && kStagedOffset >= kStagesBytes;
  // Registers: at one CTA per SM the producer gives back down to 40 and the consumers
  // share what it gave, in multiples of 8. setmaxnreg.inc draws only on the CTA's own
  // launch allocation (kLaunchRegs a thread, what __launch_bounds__(kThreads, 1) allows
  // and ptxas assigns a setmaxnreg kernel), not on the whole register file: asking for
  // more waits forever (640 threads launch with 96, so four consumers get 104, not 112).
  // Two: 232, three: 152, four: 104. One consumer (256 threads) keeps what the launch
  // bounds give: no exchange.
  static constexpr bool kMoveRegisters = kConsumers >= 2;
  static constexpr int kProducerRegs = 40;
  static constexpr int kLaunchRegs = 65536 / kThreads / 8 * 8;
  static constexpr int kConsumerRegs =
      kMoveRegisters ? (kLaunchRegs * kThreads - 128 * kProducerRegs) / kConsumerThreads / 8 * 8 : 0;
  // Bytes of X a stage receives: the tile's tokens, or for an M below them M rounded up
  // to 8 (the host encodes X's box so: codegen/families/sm90_quant.py, a_box_rows; the
  // rows beyond stay stale and feed only accumulators of tokens no store reads).
  __device__ static int x_box_bytes(int M) { return (M >= kTokens ? kTokens : (M + 7) / 8 * 8) * kCtaK * 2; }

  static_assert(sizeof(typename TA::Storage) == 2, "wgmma f16/bf16 operands are 16-bit");
  static_assert(kBits == 4 || kBits == 8, "4- or 8-bit weights");
  static_assert(kSharedB ? (kRows == 128 || kRows == 256) : (kRows % 64 == 0 && kRows >= 64 && kRows <= 256),
                "register A: 64 weight rows per consumer warpgroup, one to four of them; shared B: 128 or 256 "
                "rows over two");
  // A consumer thread holds kTokens / 2 accumulators and two K tiles' A registers (32):
  // three consumers' 152 registers take 128 tokens, four consumers' 104 take 64.
  static_assert(kSharedB || kConsumers <= 2 || kTokens <= (kConsumers == 3 ? 128 : 64),
                "register A with three consumer warpgroups takes up to 128 tokens, with four up to 64");
  static_assert(kBlocks == 1 || (kBlocks == 2 && !kSharedB && kConsumers <= 2 && kTokens <= 64),
                "two weight blocks per consumer: register A, one or two consumers, up to 64 tokens (two sets "
                "of accumulators and twice the A registers)");
  static_assert(kSharedB ? (kTokens == 64 || kTokens == 128)
                         : (kTokens == 8 || kTokens == 16 || kTokens == 32 || kTokens == 64 || kTokens == 128 ||
                            kTokens == 256),
                "the wgmma widths implemented");
  static_assert(kStages >= 2 && kStages <= 8, "2..8 stages");
  static_assert(!kGrouped || !kSharedB, "the grouped form is the register-A one's");
  static_assert(kSmemBytes <= kSmemLimit, "the stages exceed sm_90's 227 KiB of shared memory per block");
};

// Groups per K tile whose scales and zeros a stage holds (the host sizes V's box so:
// codegen/families/sm90_quant.py, v_box_rows): two for groups of 32, else one.
__device__ __forceinline__ int quant_v_rows(int group_shift) { return group_shift < 6 ? 2 : 1; }

// The CTA's accumulators of D^T, staged in shared memory as rows of D, handed to the
// epilogue as pairs of adjacent columns of D in row order: consecutive threads take
// consecutive pairs of a row, so a warp's stores write 32 adjacent pairs of one row of D.
// NOTE: why not the fragment as it is (a neighbour-lane exchange gives each thread pairs
// of adjacent columns of D): a warp's store then writes 16 bytes in each of 8 rows of D;
// on the H200 that epilogue took 40% of a W4 128x128 tile's time at M = 4096 (llama3-8b
// gate_up: 2487 us, 1511 us with no epilogue) and 66% of a 256x128 tile's.
template <class Cfg>
struct StagedTransposedTile {
  float* rows;  // the staging: Cfg::kTokens rows of Cfg::kStagedPitch floats
  int tokens;   // rows of D the tile still has (M - the first token), at most kTokens

  // Each consumer thread writes its accumulators (wgmma_ss's D^T fragment, warpgroup wg).
  // NOTE: the pitch of kRows + 4 floats puts the 8 weight rows x 4 token pairs a warp
  // writes at once on 32 different banks.
  // NOTE: plain C++ stores, not st.shared asm: with asm operands reading the accumulators
  // ptxas serializes the 128- and 256-token tiles' wgmma (C7514).
  __device__ __forceinline__ void stage(const float (&acc)[Cfg::kAcc], int wg) const {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int b = 0; b < Cfg::kBlocks; ++b) {
      const int row = 64 * (wg * Cfg::kBlocks + b) + 16 * ((threadIdx.x / 32) % 4) + lane / 4;
#pragma unroll
      for (int i = 0; i < Cfg::kBlockAcc; ++i) {
        const int token = 8 * (i / 4) + 2 * (lane % 4) + i % 2;
        rows[token * Cfg::kStagedPitch + row + 8 * ((i / 2) % 2)] = acc[b * Cfg::kBlockAcc + i];
      }
    }
  }

  template <class F>
  __device__ __forceinline__ void for_each_pair(int row0, int col0, F&& f) const {
    constexpr int kPairs = Cfg::kRows / 2;  // per row of D
    for (int idx = threadIdx.x; idx < tokens * kPairs; idx += Cfg::kConsumerThreads) {
      const int token = idx / kPairs, pair = idx % kPairs;
      const float2 v = *reinterpret_cast<const float2*>(rows + token * Cfg::kStagedPitch + 2 * pair);
      f(row0 + token, col0 + 2 * pair, v.x, v.y);
    }
  }
};

// The plain epilogue of a 16-bit D (the register-A form's) from the staged rows (alpha, the bias, a grouped
// launch's row scales; no C, no gated SiLU): four columns per thread and one 8-byte
// store, so a warp reads 512 contiguous bytes of a staged row and writes 256 of a row of
// D. The common epilogue's pairs cost about 30 instructions per two values, which with K
// = 1408-2048 (22-32 K tiles a tile) is a large share of a tile's time.
// NOTE: plain_rows is uniform per launch: every thread takes the same path.
template <class Cfg, class Params>
__device__ __forceinline__ bool plain_rows(const Params& p) {
  return p.beta == 0.f && (p.epilogue & kEpilogueGatedSilu) == 0 && p.ldd % 4 == 0 &&
         reinterpret_cast<u64>(p.D) % 8 == 0;
}

template <class Cfg, class Params>
__device__ __forceinline__ void store_plain_rows(const StagedTransposedTile<Cfg>& staged, const Params& p, int row0,
                                                 int col0) {
  using TD = typename Cfg::TD;
  using Storage = typename TD::Storage;
  using PairT = Pair<TD>;
  constexpr int kQuads = Cfg::kRows / 4;  // per row of D
  const bool add_bias = (p.epilogue & kEpilogueBias) != 0;
  const Storage* bias = static_cast<const Storage*>(p.bias);
  Storage* D = static_cast<Storage*>(p.D);
  for (int idx = threadIdx.x; idx < staged.tokens * kQuads; idx += Cfg::kConsumerThreads) {
    const int token = idx / kQuads, c = col0 + 4 * (idx % kQuads), r = row0 + token;
    if (c >= p.N) continue;
    const float4 v = *reinterpret_cast<const float4*>(staged.rows + token * Cfg::kStagedPitch + 4 * (idx % kQuads));
    float o[4] = {p.alpha * v.x, p.alpha * v.y, p.alpha * v.z, p.alpha * v.w};
    const int n = min(4, p.N - c);
    if (add_bias) {
#pragma unroll
      for (int j = 0; j < 4; ++j) o[j] += j < n ? TD::to_f32(bias[c + j]) : 0.f;
    }
    // As the common epilogue: the row scale after the bias.
    const float scale = row_scale<Cfg>(p, r);
#pragma unroll
    for (int j = 0; j < 4; ++j) o[j] *= scale;
    Storage* d = D + static_cast<i64>(r) * p.ldd + c;
    if (n == 4) {
      *reinterpret_cast<uint2*>(d) = make_uint2(PairT::pack(o[0], o[1]), PairT::pack(o[2], o[3]));
    } else {
      for (int j = 0; j < n; ++j) d[j] = TD::from_f32(o[j]);
    }
  }
}

// The hand-off epilogue (Cfg::kHandoff; plain_rows launches without splits): the D tile as
// 16-bit rows in shared memory (kHandoffPitch elements a row, after the stages), written
// by the consumers with alpha, the bias and the row scales applied in fp32 and rounded
// once (as store_plain_rows), and stored by three warps of the producer warpgroup while
// the consumers run the next tile's K loop. Two mbarriers pass it: `full` once every
// consumer thread wrote (kConsumerThreads arrivals), `empty` once the storers read it
// (kHandoffStorers arrivals).
// NOTE: why: with the common epilogue the tensor cores idle while the consumers store,
// 13% of a 256x128 tile's time on the Qwen-MoE-like gate_up at 8192 tokens (K = 2048;
// sm90_quant_variants, no_epilogue), more at K = 1408. H200, against that epilogue
// (bench.experiments.build_ab --bits 4, one call): Qwen-MoE-like W4 experts at 8192 tokens
// down 546 -> 492 us, gate_up 923 -> 865; Mixtral-like 8192 gate_up 5 948 -> 5 649; dense
// llama3-8b gate_up W4 at M = 4096 1 365 -> 1 295. Written with per-element 16-bit stores
// (no stmatrix) it gained half of that and lost 7% on the Qwen-like down.
constexpr int kHandoffStorers = 96;

template <class Cfg>
struct HandoffTile {
  using Storage = typename Cfg::TD::Storage;
  Storage* rows;  // Cfg::kTokens rows of kHandoffPitch elements

  // The consumer thread's accumulators (warpgroup wg) as rows of D: `q` the tile's problem
  // (grouped: its expert's), m0 / n0 its first row and column there, `tokens` its rows.
  // A warp's wgmma fragment of 8 tokens x 16 weight rows is two 8 x 8 matrices whose rows
  // are weight rows; stmatrix_x4_trans stores two such pairs, a token's 8 weight rows
  // (16 bytes of a row of D) at each address. With kHandoffPitch = kRows + 8 the 8 tokens
  // of a matrix land on 8 x 4 different banks.
  template <class Params>
  __device__ __forceinline__ void write(const float (&acc)[Cfg::kAcc], int wg, const Params& q, int m0, int n0,
                                        int tokens) const {
    using TD = typename Cfg::TD;
    using PairT = Pair<TD>;
    const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
    const bool add_bias = (q.epilogue & kEpilogueBias) != 0;
    const bool scaled = Cfg::kGrouped && q.U != nullptr;
    const bool plain = !add_bias && !scaled && q.alpha == 1.f;
    const Storage* bias = static_cast<const Storage*>(q.bias);
    // This lane's address among the four matrices of a store: matrix lane / 8 (token group
    // j + (lane / 16), weight rows + 8 (lane / 8 % 2)), its row (a token) lane % 8.
    const u32 base = smem_addr(rows);
#pragma unroll
    for (int b = 0; b < Cfg::kBlocks; ++b) {
      const int row0 = 64 * (wg * Cfg::kBlocks + b) + 16 * warp;  // the warp's first weight row
      const int mine = row0 + lane / 4;                           // the lane's rows: mine, mine + 8
      float add[2] = {0.f, 0.f};
      if (add_bias) {
#pragma unroll
        for (int h = 0; h < 2; ++h) add[h] = n0 + mine + 8 * h < q.N ? TD::to_f32(bias[n0 + mine + 8 * h]) : 0.f;
      }
      const u32 lane_addr =
          base + static_cast<u32>(((8 * (lane / 16) + lane % 8) * Cfg::kHandoffPitch + row0 + 8 * (lane / 8 % 2)) * 2);
#pragma unroll
      for (int j = 0; j < Cfg::kBlockAcc / 4; j += 2) {
        u32 r[4];  // matrices (j, rows + 0), (j, rows + 8), (j + 1, rows + 0), (j + 1, rows + 8)
#pragma unroll
        for (int m = 0; m < 4; ++m) {
          const int jj = j + m / 2, h = m % 2;
          const float* a = acc + b * Cfg::kBlockAcc + 4 * jj + 2 * h;  // tokens 8 jj + 2 (lane % 4), + 1
          if (plain) {
            r[m] = PairT::pack(a[0], a[1]);
          } else {
            const int token = 8 * jj + 2 * (lane % 4);
            // Row scales past the tile's rows are not read (the next expert's, or past U).
            const float s0 = token < tokens ? row_scale<Cfg>(q, m0 + token) : 0.f;
            const float s1 = token + 1 < tokens ? row_scale<Cfg>(q, m0 + token + 1) : 0.f;
            r[m] = PairT::pack((q.alpha * a[0] + add[h]) * s0, (q.alpha * a[1] + add[h]) * s1);
          }
        }
        stmatrix_x4_trans(lane_addr + static_cast<u32>(8 * j * Cfg::kHandoffPitch * 2), r[0], r[1], r[2], r[3]);
      }
    }
  }

  // A storer thread's share (`id` of kHandoffStorers) of the tile's `tokens` rows, Width
  // elements a store.
  template <int Width, class Params>
  __device__ __forceinline__ void store_rows(const Params& q, int m0, int n0, int tokens, int id) const {
    constexpr int kVecs = Cfg::kRows / Width;  // per row of the tile
    Storage* D = static_cast<Storage*>(q.D);
    for (int idx = id; idx < tokens * kVecs; idx += kHandoffStorers) {
      const int token = idx / kVecs, c = Width * (idx % kVecs), col = n0 + c;
      if (col >= q.N) continue;
      const Storage* src = rows + token * Cfg::kHandoffPitch + c;
      Storage* d = D + static_cast<i64>(m0 + token) * q.ldd + col;
      if (col + Width <= q.N) {
        if constexpr (Width == 8) {
          *reinterpret_cast<uint4*>(d) = *reinterpret_cast<const uint4*>(src);
        } else {
          *reinterpret_cast<uint2*>(d) = *reinterpret_cast<const uint2*>(src);
        }
      } else {
        for (int e = 0; e < q.N - col; ++e) d[e] = src[e];
      }
    }
  }

  // 16 bytes a store where D's rows allow it, else 8 (plain_rows: ldd a multiple of 4, D
  // 8-byte aligned).
  template <class Params>
  __device__ __forceinline__ void store(const Params& q, int m0, int n0, int tokens, int id) const {
    if (q.ldd % 8 == 0 && reinterpret_cast<u64>(q.D) % 16 == 0) {
      store_rows<8>(q, m0, n0, tokens, id);
    } else {
      store_rows<4>(q, m0, n0, tokens, id);
    }
  }
};

// The token columns a register-A K loop multiplies (run_register_a).
template <int W>
struct TokenWidth {
  static constexpr int value = W;
};

template <class Cfg>
struct Sm90QuantStage {
  u32 base;
  __device__ __forceinline__ u32 x(int s) const { return base + static_cast<u32>(s * Cfg::kStageBytes); }
  __device__ __forceinline__ u32 w(int s) const { return x(s) + Cfg::kTileBytesX; }
  __device__ __forceinline__ u32 scales(int s) const { return w(s) + Cfg::kTileBytesW; }
  __device__ __forceinline__ u32 zeros(int s) const { return scales(s) + Cfg::kVRows * Cfg::kRows * 2; }
};

// A consumer lane's byte offsets into a stage for one m64 block (local_row0: the warp's
// first weight row in the CTA): its first packed word (n8 tile local_row0 / 8, k32 block
// 0) and its row's scale and zero (half 0, group 0); the other tiles, blocks and groups
// are constants beyond them.
// NOTE: made once before the K loop and pinned there (pin_register): NVVM otherwise
// re-derives them from threadIdx next to their loads, an S2R and about eight integer
// instructions in every K tile of every consumer warp, which beside a 64- or 128-token
// wgmma cost about an issue slot each (docs/perf/wgmma_rate_kinds.md).
struct LaneOffsets {
  u32 words;
  u32 rows;
};

__device__ __forceinline__ u32 pin_register(u32 v) {
  asm volatile("" : "+r"(v));
  return v;
}

template <class Cfg>
__device__ __forceinline__ LaneOffsets lane_offsets(int local_row0, int lane) {
  const u32 words = static_cast<u32>((local_row0 / 8 * 2 * 32 + lane) * Cfg::kWords * 4);
  const u32 rows = static_cast<u32>(2 * (local_row0 + lane / 4));
  return {pin_register(words), pin_register(rows)};
}

// A warp's A registers of one K tile (stage s): [k32 block][k16 step][register], the two
// n8 tiles of its 16 weight rows dequantized (registers {tile 0 reg 0, tile 1 reg 0,
// tile 0 reg 1, tile 1 reg 1} of each step, see wgmma_rs). A row's scale and zero are
// made once per group: once per K tile, twice for groups of 32 (VRows, quant_v_rows).
template <class Cfg, int VRows>
__device__ __forceinline__ void quant_a_fragments(const Sm90QuantStage<Cfg>& st, int s, LaneOffsets lane,
                                                  u32 (&a)[2][2][4]) {
  using D = Dequant<typename Cfg::TA, Cfg::kBits>;
  static_assert(D::kWords == Cfg::kWords, "the packed words per lane and block");
  typename D::Consts c[VRows][2];  // [group of the K tile][half]
#pragma unroll
  for (int g = 0; g < VRows; ++g)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      // this lane's weight row (B column g): row local_row0 + 8 half + lane / 4 of group g
      const u32 v = lane.rows + static_cast<u32>(2 * (g * Cfg::kRows + 8 * half));
      c[g][half] = D::make(ld_shared_u16(st.scales(s) + v), ld_shared_u16(st.zeros(s) + v));
    }
#pragma unroll
  for (int kb = 0; kb < 2; ++kb) {
    BlockFragments f[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      // n8 tile local_row0 / 8 + half, k32 block kb: 32 lanes of kWords words each
      const u32 words = st.w(s) + lane.words + static_cast<u32>((half * 2 + kb) * 32 * Cfg::kWords * 4);
      u32 w[D::kWords];
      if constexpr (D::kWords == 1) {
        w[0] = ld_shared_u32(words);
      } else {
        ld_shared_v2(w, words);
      }
      D::apply(w, c[VRows == 2 ? kb : 0][half], f[half]);
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      a[kb][h][0] = f[0][h][0];
      a[kb][h][1] = f[1][h][0];
      a[kb][h][2] = f[0][h][1];
      a[kb][h][3] = f[1][h][1];
    }
  }
}

// Shared B: the CTA's accumulators of D (wgmma_ss's fragment: token slice ts of 64, the
// warpgroup's kConsumerRows weight rows as columns), staged as rows of D like
// StagedTransposedTile, whose for_each_pair hands them to the epilogue.
// NOTE: the pitch of kRows + 8 floats puts the 4 tokens x 4 column pairs of a half-warp's
// 8-byte stores on 32 different banks.
template <class Cfg>
struct StagedTile : StagedTransposedTile<Cfg> {
  static constexpr int kSlice = Cfg::kConsumerRows / 2;  // accumulators per token slice
  __device__ __forceinline__ void stage(const float (&acc)[Cfg::kAcc], int wg) const {
    const int lane = threadIdx.x % 32;
    const int token0 = 16 * ((threadIdx.x / 32) % 4) + lane / 4;
    const int col0 = Cfg::kConsumerRows * wg + 2 * (lane % 4);
#pragma unroll
    for (int ts = 0; ts < Cfg::kTokenSlices; ++ts)
#pragma unroll
      for (int i = 0; i < Cfg::kConsumerRows / 2; i += 2) {
        const int token = 64 * ts + token0 + 8 * ((i / 2) % 2), col = col0 + 8 * (i / 4);
        *reinterpret_cast<float2*>(this->rows + token * Cfg::kStagedPitch + col) = make_float2(acc[kSlice * ts + i], acc[kSlice * ts + i + 1]);
      }
  }
};

// Shared B: a warp's part of one K tile's dequantized weights (stage s) for its consumer
// warpgroup's buffer. The warp takes kTiles n8 tiles of weight rows, both k32 blocks of
// each: f[tile][k32 block][k16 step][register], the B fragments the packed layout gives.
// The scales and zeros are made once per row and group (the two blocks share them unless
// groups are 32).
template <class Cfg>
struct SharedBWeights {
  using D = Dequant<typename Cfg::TA, Cfg::kBits>;
  static constexpr int kTiles = Cfg::kConsumerRows / 32;  // n8 tiles per warp
  static_assert(D::kWords == Cfg::kWords, "the packed words per lane and block");
  using Fragments = BlockFragments[kTiles][2];

  // tile0: the warp's first n8 tile among the CTA's weight rows.
  __device__ __forceinline__ static void dequantize(const Sm90QuantStage<Cfg>& st, int s, int tile0, int v_rows,
                                                    int lane, Fragments& f) {
#pragma unroll
    for (int t = 0; t < kTiles; ++t) {
      const int row = (tile0 + t) * 8 + lane / 4;  // this lane's weight row
      typename D::Consts c[2];
      c[0] = D::make(ld_shared_u16(st.scales(s) + 2 * row), ld_shared_u16(st.zeros(s) + 2 * row));
      c[1] = c[0];
      if (v_rows == 2) {
        const int v = Cfg::kRows + row;
        c[1] = D::make(ld_shared_u16(st.scales(s) + 2 * v), ld_shared_u16(st.zeros(s) + 2 * v));
      }
#pragma unroll
      for (int kb = 0; kb < 2; ++kb) {
        const u32 words = st.w(s) + static_cast<u32>((((tile0 + t) * 2 + kb) * 32 + lane) * Cfg::kWords * 4);
        u32 w[D::kWords];
        if constexpr (D::kWords == 1) {
          w[0] = ld_shared_u32(words);
        } else {
          ld_shared_v2(w, words);
        }
        D::apply(w, c[kb], f[t][kb]);
      }
    }
  }

  // The fragments into the warpgroup's buffer: K-major rows of 128 bytes (64 K), the
  // 16-byte chunk j of row n at chunk j ^ (n % 8) (TMA's 128-byte swizzle, as
  // smem_desc_kmajor_sw128 describes it). A block's four registers are four 8 x 8
  // matrices (weight rows x 8 K: chunks 4 kb + 2 h + r), which is stmatrix's fragment:
  // one stmatrix.x4 per block, lane l giving the address of row l % 8 of matrix l / 8,
  // and a matrix's 8 rows fall on 8 different chunks (no bank conflicts).
  // local_tile0: the warp's first n8 tile within the warpgroup's rows.
  __device__ __forceinline__ static void store(u32 buffer, int local_tile0, int lane, const Fragments& f) {
#pragma unroll
    for (int t = 0; t < kTiles; ++t)
#pragma unroll
      for (int kb = 0; kb < 2; ++kb) {
        const int n = (local_tile0 + t) * 8 + lane % 8, chunk = 4 * kb + lane / 8;
        stmatrix_x4(buffer + static_cast<u32>(n * 128 + ((chunk ^ (n % 8)) << 4)), f[t][kb][0][0], f[t][kb][0][1],
                    f[t][kb][1][0], f[t][kb][1][1]);
      }
  }
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
  const int k_tiles = (p.K + Cfg::kCtaK - 1) / Cfg::kCtaK;  // of every output tile
  const int v_rows = quant_v_rows(p.group_shift);
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
  constexpr int kTileFloats = Cfg::kTokens * Cfg::kRows;
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
    init_ring(full_bar, empty_bar, Cfg::kConsumers * 4);
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
          static_cast<u32>((GEMM_SM90Q_LEAVE_OUT == 4 ? 0 : Cfg::x_box_bytes(p.M)) +
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
            const int k0 = kt * Cfg::kCtaK;
            if (GEMM_SM90Q_LEAVE_OUT != 4) tma_load_2d(st.x(s), tma_x, full(s), k0, m0);
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
  // NOTE: unsigned: a power-of-two ring's stage and phase are then a mask and a shift.
  auto stage_of = [](int it) { return static_cast<int>(static_cast<u32>(it) % kStages); };
  auto wait_full = [&](int it) { mbar_wait(full(stage_of(it)), (static_cast<u32>(it) / kStages) & 1u); };
  const u32 ring_leader = pin_register(lane == 0 ? 1u : 0u);
  auto release = [&](int it) { mbar_arrive_if(empty(stage_of(it)), ring_leader); };

  // Stage 0's X tile; the others and the k16 steps are offsets of it (smem_desc_advance).
  const u64 x_desc0 = smem_desc_kmajor_sw128(st.x(0));

  // ---- register A: D^T = W . X^T ----
  // The warp's 16 weight rows of block b (Cfg::kBlocks m64 blocks per warpgroup).
  auto local_row0 = [&](int b) { return 64 * (wg * Cfg::kBlocks + b) + 16 * warp; };
  LaneOffsets lane_offs[Cfg::kBlocks];
  const u32 two_groups = pin_register(v_rows == 2 ? 1u : 0u);  // per K tile (else a parameter load in each)
#pragma unroll
  for (int b = 0; b < Cfg::kBlocks; ++b) lane_offs[b] = lane_offsets<Cfg>(local_row0(b), lane);
  using ARegs = u32[Cfg::kBlocks][2][2][4];  // a K tile's A registers: [block][k32 block][k16 step][register]
  auto fence_a = [](ARegs& a) {
#pragma unroll
    for (int b = 0; b < Cfg::kBlocks; ++b) wgmma_fence_operand(a[b]);
  };
  // K tile j of a tile's run of n, the CTA's K tile it: its wgmma (of `use`, dequantized
  // already) join the one of the previous K tile in flight; once that one is done, its
  // stage goes back and its registers (`fill`) take the next K tile's dequantized
  // weights, under this tile's wgmma. scale-d false on the run's first wgmma starts the
  // tile's sums afresh.
  // NOTE: one group in flight, not none: waiting for this tile's own wgmma before
  // issuing the next leaves the tensor cores idle for a wgmma's latency per K tile
  // (H200, W4 128x128 at M = 4096: 3% slower, GEMM_SM90Q_WGMMA_DEPTH=0). Two in flight
  // (three register sets) and 12-16 stages measured no faster than one (NOTES).
  auto dequantize = [&](int it, ARegs& a) {
    wait_full(it);
    if (GEMM_SM90Q_LEAVE_OUT != 3) {
#pragma unroll
      for (int b = 0; b < Cfg::kBlocks; ++b) {
        if (two_groups) {
          quant_a_fragments<Cfg, 2>(st, stage_of(it), lane_offs[b], a[b]);
        } else {
          quant_a_fragments<Cfg, 1>(st, stage_of(it), lane_offs[b], a[b]);
        }
      }
    }
  };
  // K tile j's wgmma on `width` tokens (a TokenWidth), its group committed.
  auto issue = [&](auto width, int j, const u64 x_desc, ARegs& use) {
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
            wgmma_rs<kWidth, Mma>(d, use[b][kb][h], desc, j > 0 || kb > 0 || h > 0);
          } else {
            wgmma_rs_prefix<kWidth, Mma>(d, use[b][kb][h], desc, j > 0 || kb > 0 || h > 0);
          }
        }
    wgmma_commit();
  };
  auto step = [&](int narrow, int it, int j, int n, ARegs& use, ARegs& fill) {
    const u64 x_desc = smem_desc_advance(x_desc0, static_cast<u32>(stage_of(it) * Cfg::kStageBytes));
    // NOTE: orders the A registers' ordinary writes before the wgmma reads them.
    wgmma_fence();
    if constexpr (!Cfg::kSharedB) {
      if (Cfg::kTokens >= 256 && narrow == 2) {
        issue(TokenWidth<Cfg::kTokens >= 256 ? Cfg::kTokens / 4 : Cfg::kTokens>{}, j, x_desc, use);
      } else if (Cfg::kTokens >= 256 && narrow == 1) {
        issue(TokenWidth<Cfg::kTokens >= 256 ? Cfg::kTokens / 2 : Cfg::kTokens>{}, j, x_desc, use);
      } else {
        issue(TokenWidth<Cfg::kTokens>{}, j, x_desc, use);
      }
    } else {
      wgmma_commit();
    }
    if constexpr (GEMM_SM90Q_WGMMA_DEPTH == 1) {
      wgmma_wait<1>();  // the previous K tile's wgmma: its X stage and its A registers are free
      fence_a(fill);
      if (j > 0) release(it - 1);
      if (j + 1 < n) dequantize(it + 1, fill);
    } else {
      if (j + 1 < n) dequantize(it + 1, fill);
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
    ARegs a0, a1;
    dequantize(it, a0);
    for (int j = 0; j < n; j += 2) {
      step(narrow, it + j, j, n, a0, a1);
      if (j + 1 < n) step(narrow, it + j + 1, j + 1, n, a1, a0);
    }
    wgmma_wait<0>();
    wgmma_fence_operand(acc);
    if (GEMM_SM90Q_WGMMA_DEPTH == 1) release(it + n - 1);
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
          staged.stage(acc, wg);
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
