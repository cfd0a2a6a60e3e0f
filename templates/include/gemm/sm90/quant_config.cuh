// The SM90 quantized kernel's compile-time configuration (kernel_sm90_quant.cuh): the
// tile and its form, the shared-memory layout of the ring, the stagings and the shared-B
// buffers, the registers each warpgroup keeps (Sm90QuantConfig), and the groups of scales
// and zeros a stage holds (Sm90QuantConfig::v_rows).
#pragma once
#include "gemm/sm90/quant_knobs.cuh"

namespace gemm {

template <class TA_, class TD_, int Bits_, int Tokens_, int Rows_, int Stages_, bool SharedB_ = false,
          bool Grouped_ = false, int Blocks_ = 1, int KSplit_ = 1, int KPerStage_ = 1>
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
  // Register A: consumer warpgroups per weight row (1 or 2). With two, both hold the same
  // weight rows and take a run's K tiles in turn (warpgroup w those of local index j with
  // j % 2 == w); their sums meet in shared memory before the epilogue. A tile of 64 rows
  // then has two consumers' warps, and a layer twice the tiles of the 128-row tile: a small
  // layer fills the device with fewer stream-K cuts, whose hand-overs are its largest
  // fixed cost (docs/NOTES.md, thirty-ninth to forty-first sessions); a tile of 128 rows
  // has four consumers with the two-consumer tile's fetches of X (fifty-second session).
  static constexpr int kKSplit = KSplit_;
  // K tiles of 64 per ring stage (1, or kKSplit: cta K 128). With two, a stage holds the
  // pair of K tiles the two warpgroups of a row block take at once, each its own half, so
  // a CTA on 64 rows gets its stages at the rate of one on 128 rows, with the same copies
  // a stage (X's two boxes, one weight box twice as wide): on 64 rows with a K tile a
  // stage, each warpgroup waited for every other stage (docs/NOTES.md, fifty-third
  // session). Without turns (kKSplit 1) every warpgroup takes both halves of each stage:
  // one full-barrier wait, one release and one stage step per two K tiles.
  static constexpr int kKPerStage = KPerStage_;
  static constexpr int kCtaK = 64;                      // a K tile: one 128-byte swizzled row of X
  static constexpr int kStageK = kCtaK * kKPerStage;    // K per ring stage
  static constexpr int kRowConsumers = kSharedB ? 2 : kRows / (64 * kBlocks);  // warpgroups along the weight rows
  static constexpr int kConsumers = kRowConsumers * kKSplit;
  // Consumer warpgroups that read (and release) each stage: those of one row block, or
  // with a pair a stage every consumer.
  static constexpr int kStageReaders = kKPerStage > 1 ? kConsumers : kRowConsumers;
  static constexpr int kConsumerRows = kRows / kRowConsumers;  // weight rows per consumer warpgroup
  static constexpr int kTokenSlices = kTokens / 64;         // shared B: wgmma M slices
  static constexpr int kBlockAcc = kTokens / 2;             // register A: accumulators per block
  static constexpr int kAcc = kSharedB ? kTokenSlices * kConsumerRows / 2 : kBlocks * kBlockAcc;  // per thread
  static constexpr int kConsumerThreads = 128 * kConsumers;
  static constexpr int kThreads = kConsumerThreads + 128;
  // A stream-K give's fp32 partials: every consumer thread's accumulators, in its own slot
  // (the tile, or with kKSplit each K half's sums apart: the take adds them thread by thread).
  static constexpr int kPartialFloats = kConsumerThreads * kAcc;
  static constexpr int kWords = kBits / 4;  // 32-bit words per lane per n8 x k32 block
  static constexpr int kTileBytesX = kTokens * kCtaK * 2;  // one K tile's; a stage has kKPerStage
  // A stage's packed weights: n8 tiles x (the stage's K tiles x 2 k32 blocks) x 32 lanes.
  static constexpr int kTileWordsW = kRows / 8 * kKPerStage * 2 * 32 * kWords;
  static constexpr int kTileBytesW = kTileWordsW * 4;
  static constexpr int kVRows = 2 * kKPerStage;  // groups per stage at most (groups of 32)
  static constexpr int kTileBytesV = 2 * kVRows * kRows * 2;  // scales, then zeros
  // NOTE: the next stage's X tile must start on a 1024-byte boundary (128B swizzle).
  static constexpr int kStageBytes =
      (kKPerStage * kTileBytesX + kTileBytesW + kTileBytesV + 1023) / 1024 * 1024;
  static constexpr int kSmemLimit = 227 * 1024;
  // The epilogue stages the CTA's D tile (fp32, a row of kStagedPitch per token) where the
  // ring was: StagedTransposedTile / StagedTile.
  // It also takes a landed give (stream_k_land), which with kKSplit is twice the tile.
  static constexpr int kStagedPitch = kRows + (kSharedB ? 8 : 4);
  static constexpr int kStagedBytes =
      kTokens * kStagedPitch * 4 > kPartialFloats * 4 ? kTokens * kStagedPitch * 4 : kPartialFloats * 4;
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
  // Not with kKSplit: the two K halves' sums would have to meet first.
  static constexpr bool kHandoff = !kSharedB && kKSplit == 1 && kConsumers >= 2 && sizeof(typename TD::Storage) == 2 &&
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
  // Groups of scales and zeros a stage holds: its K over the group size, at least one
  // (groups of 32 are the smallest; one group over all of K has a shift of 30). The host
  // sizes V's box so (codegen/families/sm90_quant.py, v_box_rows); were the two to differ,
  // a full barrier would never complete.
  __device__ __forceinline__ static int v_rows(int group_shift) {
    if constexpr (kKPerStage == 1) {
      return group_shift < 6 ? 2 : 1;  // groups of 32, the rest
    } else {
      return group_shift < 6 ? 4 : group_shift < 7 ? 2 : 1;  // groups of 32, of 64, the rest
    }
  }

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
  // NOTE: 256 tokens in turn spilled (412 bytes) and had their wgmma serialized (C7515).
  static_assert(kKSplit == 1 ||
                    (kKSplit == 2 && !kSharedB && !kGrouped && kBlocks == 1 && kRows <= 128 && kTokens <= 128),
                "K tiles in turn: two consumer warpgroups on one m64 block of register A, up to 128 tokens, no "
                "experts");
  static_assert(kSharedB ? (kTokens == 64 || kTokens == 128)
                         : (kTokens == 8 || kTokens == 16 || kTokens == 32 || kTokens == 64 || kTokens == 128 ||
                            kTokens == 256),
                "the wgmma widths implemented");
  static_assert(kStages >= 2 && kStages <= 8, "2..8 stages");
  static_assert(kKPerStage == 1 ||
                    (kKPerStage == 2 && !kSharedB && !kGrouped && (kKSplit == 2 || (kBlocks == 1 && kTokens <= 128))),
                "a pair of K tiles a stage is the register-A form's: for two warpgroups taking them in turn, or "
                "for one m64 block a warpgroup taking both, up to 128 tokens; no experts");
  static_assert(!kGrouped || !kSharedB, "the grouped form is the register-A one's");
  static_assert(kSmemBytes <= kSmemLimit, "the stages exceed sm_90's 227 KiB of shared memory per block");
};

}  // namespace gemm
