// The compile-time description of one kernel: everything a KernelSpec fixes.
// Derived quantities and the legality checks live here, next to the code that
// relies on them, so an illegal spec fails at compile time with a message.
#pragma once
#include "gemm/numeric.cuh"
#include "gemm/smem_layout.cuh"

// Knob GEMM_LEAN_TAIL (the mma.sync kernels' work after the K loop; 1 by default since the
// forty-ninth session: level to 0.8 us less a decode launch on an H100, docs/NOTES.md;
// bench/experiments/decode_variants.py's old_tail is 0): at 1 the K-slice
// reduction moves only the accumulators of rows the tile has (kernel.cuh), and the
// epilogue stores a plain D (no bias, C, gate or routing weight) through a short path of
// its own (epilogue.cuh).
#ifndef GEMM_LEAN_TAIL
#define GEMM_LEAN_TAIL 1
#endif

namespace gemm {

// MMA atoms: the instruction a warp tile is built from.
struct AtomM16N8K16 {};  // sm_80+
struct AtomM16N8K8 {};   // sm_75+ (bf16: sm_80+)
struct AtomM8N8K4 {};    // sm_70/sm_75 native; emulated in software from sm_80 on
struct AtomWgmma {};     // sm_90a: wgmma.mma_async m64nNk16 (gemm/sm90/kernel_sm90.cuh)

// Storage order of B. kNK: N x K row-major (the torch.nn.Linear weight, K contiguous).
// kKN: K x N row-major (N contiguous).
enum class OrderB { kNK, kKN };

template <class Atom_, class TA_, class TB_, class TD_, int CtaM_, int CtaN_, int CtaK_, int WarpsM_, int WarpsN_,
          int WarpsK_, int Stages_, OrderB OrderB_, int Align_, bool DirectB_, bool Grouped_ = false,
          bool StagedB_ = false, bool DecodeRing_ = false, bool XorRows_ = false, bool LeanKN_ = false,
          int RowsA_ = 0>
struct GemmConfig {
  using Atom = Atom_;
  using TA = TA_;
  using TB = TB_;
  using TD = TD_;
  static constexpr int kCtaM = CtaM_, kCtaN = CtaN_, kCtaK = CtaK_;
  static constexpr int kWarpsM = WarpsM_, kWarpsN = WarpsN_, kWarpsK = WarpsK_;
  static constexpr int kStages = Stages_;
  static constexpr OrderB kOrderB = OrderB_;
  // Elements per global access of A and of dense B (and the alignment every row of
  // them has).
  static constexpr int kAlign = Align_;

  static constexpr int kWarps = kWarpsM * kWarpsN * kWarpsK;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kWarpTileM = kCtaM / kWarpsM;
  static constexpr int kWarpTileN = kCtaN / kWarpsN;
  static constexpr int kWarpTileK = kCtaK / kWarpsK;

  // Quantized B (u4/u8) is stored fragment-ordered (gemm_runtime.quant.pack_for_gemm):
  // one row per 8 columns of N, holding for each k32 block the 32 lanes' words in lane
  // order, 8 * 32 * bits / 16 16-bit units per block. Scales and zeros ([groups, N]
  // each) ride along, kGroupRows rows per stage: every group a K tile can touch
  // (groups are 32, 64, 128 or all of K).
  static constexpr int kBitsB = QuantBits<TB>::value;
  static constexpr bool kQuantB = kBitsB > 0;
  static constexpr int kQuantBlockUnits = 16 * kBitsB;  // one n8 x k32 block
  // NOTE: packed B rows are whole n8 x k32 blocks from pack_for_gemm, always 16-byte
  // aligned, so only A's copies narrow with kAlign (activations with K % 8 != 0).
  static constexpr int kAlignB = kQuantB ? 8 : kAlign;
  // Quantized B straight from global memory into registers (MainloopSm80), so no B
  // tile in the stages: for tiles whose weights each feed one warp (codegen/spec.py).
  static constexpr bool kDirectB = DirectB_;
  // One launch over the row groups of E experts with stacked weights (gemm/grouped.cuh).
  static constexpr bool kGrouped = Grouped_;
  // Quantized B dequantized once per CTA tile into shared memory, into two buffers of
  // 16-bit B fragments after the ring (MainloopSm80::run_staged, codegen: sm80_staged).
  static constexpr bool kStagedB = StagedB_;
  // A quantized decode tile (one m16 tile per warp, deferred scaling) whose packed
  // weights ride the ring rather than registers, so a deep ring keeps many K tiles of
  // weights in flight per SM (codegen: sm80_ring); the SM80 mainloop compiles its loop
  // once for rows 0-7 and once for 0-15, as it does for direct B.
  static constexpr bool kDecodeRing = DecodeRing_;
  // A quantized decode tile for at most 8 rows of A (RowsA_ 8; codegen: sm80_rows8): its
  // stages hold A's rows 0-7 only, and the SM80 mainloop compiles its loop once, for
  // them, so a CTA takes about half the shared memory and fewer registers than the
  // 16-row tile, and an SM holds more of them. 0: the CTA's M.
  static constexpr int kTileARows = RowsA_ ? RowsA_ : kCtaM, kTileACols = kCtaK;
  static constexpr bool kRowsUpTo8 = RowsA_ == 8;
  static constexpr int kTileBRows = kQuantB ? kCtaN / 8 : (kOrderB == OrderB::kNK ? kCtaN : kCtaK);
  static constexpr int kTileBCols = kQuantB ? kCtaK / 32 * kQuantBlockUnits : (kOrderB == OrderB::kNK ? kCtaK : kCtaN);
  // Shared rows (gemm/smem_layout.cuh): padded by 16 bytes, or with XorRows_ (codegen:
  // the sm80_xor family) the 64-byte rows of A and of an N x K B unpadded and
  // XOR-swizzled, so that a quarter warp's copies fill whole 128-byte lines.
  static constexpr bool kXorRows = XorRows_;
  // "kn" B's K tiles inside the matrix copy as "nk" B's do, from a pointer carried from
  // tile to tile (MainloopSm80's LeanCopies; codegen: Sm80Family.lean_kn says which tiles).
  static constexpr bool kLeanKN = LeanKN_;
  using LayoutA = typename SmemRowsOf<kTileACols, kXorRows>::Type;
  using LayoutB = typename SmemRowsOf<kTileBCols, kXorRows && kOrderB == OrderB::kNK>::Type;
  using LayoutV = PaddedRows<kCtaN>;
  // Elements from one shared row to the next; what the padded-row fragment loads of
  // m8n8k4, quantized and staged B index by.
  static constexpr int kLdsA = LayoutA::kLd;
  static constexpr int kLdsB = LayoutB::kLd;
  static constexpr int kGroupRows = kQuantB ? (kCtaK / 32 > 1 ? kCtaK / 32 : 1) : 0;
  static constexpr int kLdsV = LayoutV::kLd;
  static constexpr int kStageBytesA = kTileARows * LayoutA::kRowBytes;
  static constexpr int kStageBytesB = kDirectB ? 0 : kTileBRows * LayoutB::kRowBytes;
  static constexpr int kStageBytesV = 2 * kGroupRows * kLdsV * 2;  // scales, then zeros
  static constexpr int kStageBytes = kStageBytesA + kStageBytesB + kStageBytesV;
  static constexpr int kPipelineBytes = kStages * kStageBytes;
  static constexpr int kStagedBufferBytes = kStagedB ? kCtaN * kCtaK * 2 : 0;  // one of the two
  // Warps of K-slices other than the first hand their accumulators over in shared memory.
  static constexpr int kReduceBytes = (kWarpsK - 1) * kCtaM * kCtaN * 4;
  static constexpr int kSmemBytes = kPipelineBytes + 2 * kStagedBufferBytes > kReduceBytes
                                        ? kPipelineBytes + 2 * kStagedBufferBytes
                                        : kReduceBytes;

  static_assert(sizeof(typename TA::Storage) == 2 && sizeof(typename TB::Storage) == 2,
                "A and B are 16-bit types (quantized B in 16-bit units)");
  static_assert(!kQuantB || (kOrderB == OrderB::kNK && kWarpTileK % 32 == 0),
                "quantized B is N x K, dequantized in k32 blocks: the warp tile K must be a multiple of 32");
  static_assert(!kQuantB || !kSame<Atom, AtomM8N8K4>, "quantized B needs an m16n8 atom (m16n8k16 or m16n8k8)");
  static_assert(!kDirectB || (kQuantB && kWarpsM == 1), "direct B loads are for quantized B, one warp along M");
  static_assert(!kStagedB || (kQuantB && !kDirectB && kWarpsK == 1 && kStages >= 3),
                "staged B: quantized B through the ring, no K slices, 3 or more stages");
  static_assert(!kStagedB || (kCtaN / 16 * (kCtaK / 32)) % kWarps == 0,
                "staged B: the tile's k32 blocks of n8-tile pairs split evenly over the warps");
  static_assert(!kDecodeRing || (kQuantB && !kDirectB && !kStagedB && kWarpsM == 1 && kCtaM == 16),
                "decode ring: quantized B through the ring, one m16 tile per warp");
  static_assert(RowsA_ == 0 || (RowsA_ == 8 && kDirectB && kCtaM == 16),
                "A's stages hold fewer rows than the CTA only on direct-B decode tiles: 8 of 16");
  static_assert(!kXorRows || (!kQuantB && !kSame<Atom, AtomM8N8K4> && kCtaK == 32 && kAlign == 8),
                "XOR-swizzled rows: dense B, an m16n8 atom, K tiles of 32 and 16-byte vectors");
  static_assert(kStages >= 2, "the pipeline needs at least 2 stages");
  static_assert(kCtaM % kWarpsM == 0 && kCtaN % kWarpsN == 0 && kCtaK % kWarpsK == 0,
                "CTA tile must split evenly over the warps");
  // NOTE: every atom is driven in k16 steps (m8n8k4 as four k4 MMAs, m16n8k8 as two),
  // and in 16x16 (m8n8k4: four quad pairs) or 16x8 pieces.
  static_assert(kWarpTileM % 16 == 0, "warp tile M must be a multiple of 16");
  static_assert(kWarpTileN % 16 == 0, "warp tile N must be a multiple of 16 (two n8 MMAs per ldmatrix.x4)");
  static_assert(kWarpTileK % 16 == 0, "warp tile K must be a multiple of the MMA's 16");
  static_assert(kThreads <= 1024, "at most 1024 threads per CTA");
  static_assert(kAlign == 1 || kAlign == 2 || kAlign == 4 || kAlign == 8, "alignment is 1, 2, 4 or 8 elements");
  static_assert(kTileACols % kAlign == 0 && kTileBCols % kAlignB == 0, "tile rows must hold whole vectors");
};

}  // namespace gemm
