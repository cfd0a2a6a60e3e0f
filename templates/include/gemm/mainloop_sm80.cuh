// SM80 mainloop: a ring of `Stages` shared-memory buffers filled by cp.async.
//
//   prologue : tiles 0 .. Stages-2 in flight, one commit group each; wait for
//              tile 0, load its first fragments.
//   tile t   : step s (k16, or k32 for quantized B) loads the fragments of step s+1 while the MMAs of step s
//              run, and issues a slice of the copies of tile t+Stages-1 into the
//              buffer tile t-1 occupied. After the last step's MMAs: commit, wait
//              until tile t+1 landed (<= Stages-2 groups pending), barrier, and load
//              the first fragments of tile t+1, so the MMA pipe never waits on a
//              shared-memory load at a tile boundary.
//   dense tiles (kEarlyBarrier): the commit, wait and barrier come after the MMAs of
//              the step before the last, the copies go out over the steps before it,
//              and the last step loads tile t+1's first fragments before its MMAs.
//
// Direct B (Cfg::kDirectB, quantized decode tiles): B skips the ring. Each warp loads
// its packed words of tile t+1 into registers at the start of tile t (WeightStream),
// and the A and scale/zero tiles alone travel by cp.async, all issued at step 0.
//
// NOTE: the barrier at the end of tile t-1 is what makes refilling tile t-1's
// buffer during tile t safe: every warp has loaded all its fragments by then.
//
// Warps are laid out (WarpsM x WarpsN x WarpsK); a K-slice of warps multiplies its
// own share of every CTA K tile, and the slices are summed after the loop.
#pragma once
#include "gemm/cta_trace.cuh"
#include "gemm/group_rows_copy.cuh"
#include "gemm/operand_copies.cuh"
#include "gemm/warp_mma_of.cuh"
#include "gemm/weight_stream.cuh"

// Experiment knob, 0 in every build (bench/experiments/sm80_variants.py sets it to time
// the pipeline with one part left out; the sums are then wrong): 1 the epilogue
// (gemm/kernel.cuh), 2 the MMAs, 3 the refilling copies, 4 the barrier after each tile,
// 5 the staged tiles' dequantization inside the K loop (run_staged), 6 split-K's hand-over
// and the epilogue (gemm/kernel.cuh), 7 the quantized warps' tensor MMAs, their operands
// XORed into a sink the output takes, so that the loads and dequantization stay
// (gemm/warp_mma_quant.cuh).
#ifndef GEMM_SM80_STAGED_SPLIT
// 0: run_staged's loop dequantizes a step's units between its copies and its MMAs;
// 1: reads their inputs first in the step and converts and stores them after the MMAs;
// 2 (every build): 1 for tiles whose warps have units under some steps only (256x128:
// two units a tile over four steps, +4-8% on the H200), 0 otherwise (128x256, one unit
// every step: 1-2% slower split).
#define GEMM_SM80_STAGED_SPLIT 2
#endif
#ifndef GEMM_SM80_LEAVE_OUT
#define GEMM_SM80_LEAVE_OUT 0
#endif
// 1 in every build: 0 keeps the dense tiles on the general copies (LeanCopies below).
#ifndef GEMM_SM80_LEAN_COPIES
#define GEMM_SM80_LEAN_COPIES 1
#endif
// 1 in every build: 0 keeps "kn" B (K x N) on the general copies (kLeanKN below); 2 (for
// timing) takes the lean copies for the tiles that spill with them too.
#ifndef GEMM_SM80_LEAN_KN
#define GEMM_SM80_LEAN_KN 1
#endif
// 1 in every build: the "kn" decode tiles (CTA M <= 32) copy by the lean copies too (their
// whole-vector copies are "nk"-only); 0 keeps them on the general ones. K loops of 106 /
// 86 instructions against 433 / 365 (32x128x64 s5, 16x64x128 s4, sm_90), 124 registers
// against 96 / 80; H100, llama3-8b qkv / down at M = 1, qkv / o at M = 16: 16x64x128 s4
// 2-19% faster, 32x128x64 s5 6-10% (docs/NOTES.md, thirty-third session).
#ifndef GEMM_SM80_KN_DECODE_LEAN
#define GEMM_SM80_KN_DECODE_LEAN 1
#endif
// 1 in every build: the quantized tiles that copy packed B through the ring (not direct B,
// not staged, not grouped) refill their K tiles by the lean copies, not the whole-vector
// ones (kQuantLean); 0 keeps them there. H100, llama3-8b o / gate_up / down at M = 64, 256
// and 1024: 64x128x64 w1x4 s4 5-9% faster (gate_up M = 1024 932 -> 851 us; docs/NOTES.md,
// thirty-third session), 128x128x64 w2x4 s3 7-13% faster from M = 256 (W4 and W8) and 3-12%
// slower at M = 64, where the 64-row tiles serve (thirty-fourth). 2 (for timing): every
// such tile, grouped too.
#ifndef GEMM_SM80_QUANT_LEAN
#define GEMM_SM80_QUANT_LEAN 1
#endif
// 1 in every build: the direct-B decode loop for M <= 8 (`upper` false, the CTA's rows 8-15
// outside M) issues only the copies of A's rows 0-7 (kLowerItersA); 0 issues all 16 rows'
// (those past M predicated off, but their address arithmetic and LDGSTS still issued).
// The decode tiles are bound by their warps' instruction streams, not by their loads
// (docs/perf/read_order_h100.md, forty-third session).
#ifndef GEMM_SM80_LOWER_A_COPIES
#define GEMM_SM80_LOWER_A_COPIES 1
#endif
// 1 in every build: 0 keeps the dense tiles' barrier after the last step (kEarlyBarrier).
#ifndef GEMM_SM80_EARLY_BARRIER
#define GEMM_SM80_EARLY_BARRIER 1
#endif
// 1 in every build: 0 keeps the grouped dense tiles on the barrier after the last step and
// one loop body (kGroupedEarly).
#ifndef GEMM_SM80_GROUPED_EARLY
#define GEMM_SM80_GROUPED_EARLY 1
#endif
// 1 in every build: 0 rebuilds the early-barrier loop's stage addresses from stage indices.
#ifndef GEMM_SM80_STAGE_BASES
#define GEMM_SM80_STAGE_BASES 1
#endif
// 1 in every build: the early-barrier loop runs the tiles whose refill is lean through
// a copy of its body with no branch; 0: one body for every tile.
#ifndef GEMM_SM80_LEAN_LOOP
#define GEMM_SM80_LEAN_LOOP 1
#endif
// 1 in every build: the same for the decode tiles' whole-vector copies, the tiles whose
// refill lies inside K; 0: one body for every tile.
#ifndef GEMM_SM80_INSIDE_LOOP
#define GEMM_SM80_INSIDE_LOOP 1
#endif

namespace gemm {

// A compile-time flag as a value, for a generic lambda instantiated per flag.
template <bool B>
struct BoolConstant {
  static constexpr bool value = B;
};

// A lane's packed weights per k32 step of a dequantizing warp (one word each when unused).
template <class Warp, bool Direct>
struct DirectShape {
  static constexpr int kNI = 1, kWords = 1;
};
template <class Warp>
struct DirectShape<Warp, true> {
  static constexpr int kNI = Warp::kNI, kWords = Warp::Dq::kWords;
};

// The copies of a dense K tile that lies inside the matrix on every side, the common
// case of a prefill GEMM: whole 16-byte vectors with no predicate, no zero fill and no
// edge arithmetic. Each copy's source is a CTA-wide address (the tile's origin plus a
// multiple of the row step, all warp-uniform: the uniform datapath computes them) plus
// the thread's 32-bit offset inside the tile.
// NOTE: measured on the H200 (bench/experiments/sm80_variants.py, ncu), the general
// copies (TileCopy::issue) cost about 90 instructions per step of a 128x256x64 tile:
// at 254 registers the compiler rebuilds their state from threadIdx and the kernel
// parameters every time, and all 8 warps do so at once, between barriers, while the
// tensor cores wait. These take about 11, and the tiles ran 7-10% faster.
template <class Copy, class Layout>
struct LeanCopies {
  // This thread's first element of the tile at `tile`, and its place in a stage.
  // NOTE: 32-bit offsets: callers check that the tile spans less than 4 GiB (fits()).
  __device__ __forceinline__ static const char* source(const char* tile, i64 ld_bytes) {
    const u32 r = threadIdx.x / Copy::kVecsPerRow, c = threadIdx.x % Copy::kVecsPerRow;
    return tile + (r * static_cast<u32>(ld_bytes) + c * 16);
  }
  __device__ __forceinline__ static u32 offset() {
    const u32 r = threadIdx.x / Copy::kVecsPerRow, c = threadIdx.x % Copy::kVecsPerRow;
    return Layout::offset(r, c * 8);
  }

  // Copies [begin, end) of the tile whose thread element `src` is, into the stage at `dst`.
  __device__ __forceinline__ static void issue(u32 dst, const char* src, i64 ld_bytes, int begin, int end) {
    const u32 to = dst + offset();
#pragma unroll
    for (int i = 0; i < Copy::kIters; ++i) {
      if (i < begin || i >= end) continue;
      if (Copy::kVecs % Copy::kThreads != 0 && threadIdx.x + i * Copy::kThreads >= Copy::kVecs) continue;
      cp_async16(to + i * Copy::kSmemStep, src + i * Copy::kRowStep * ld_bytes);
    }
  }

  __device__ __forceinline__ static bool fits(i64 ld_bytes) { return ld_bytes * Copy::kRows < (i64{1} << 32); }
};

template <class Cfg>
struct MainloopSm80 : OperandCopies<Cfg> {
  using Base = OperandCopies<Cfg>;
  using typename Base::CopyA;
  using typename Base::CopyB;
  static constexpr int kStepK = WarpMma<Cfg>::kStepK;
  static constexpr int kSteps = Cfg::kWarpTileK / kStepK;  // fragment steps per warp per tile
  // "kn" B (K x N: a K tile is kCtaK whole rows of B) copies by LeanCopies on the tiles
  // codegen names (Cfg::kLeanKN, Sm80Family.lean_kn, with the timings). The general
  // copies' refill is a block of ~230 instructions a K tile beside the lean loop's 128
  // (128x128x32 s4, sm_90): ptxas moves it out of the loop and rebuilds each copy's
  // address and predicates from the parameters.
  static constexpr bool kLeanKN = GEMM_SM80_LEAN_KN == 2 || (GEMM_SM80_LEAN_KN == 1 && Cfg::kLeanKN);
  // Quantized tiles whose packed B rides the ring (prefill tiles of the register path)
  // on the lean copies (GEMM_SM80_QUANT_LEAN). Not the grouped ones: correct with them,
  // but bench.moe's routed W4 problems at 128 tokens ran 12-18% slower (at 1024 tokens
  // from 5% faster to 13% slower; H100, docs/perf/sm80_quant_lean.md).
  static constexpr bool kQuantLean = GEMM_SM80_QUANT_LEAN && Cfg::kQuantB && !Cfg::kStagedB && !Cfg::kDirectB &&
                                     !Cfg::kDecodeRing && (GEMM_SM80_QUANT_LEAN == 2 || !Cfg::kGrouped);
  // Copies of K tiles clear of the K edge as whole vectors from pinned per-thread state
  // (TileCopy::issue_inside_cols), for the other quantized tiles and decode tiles (up to
  // 32 rows), whose mainloops issue few MMAs per copy.
  // NOTE: measured on the H200, the prefill tiles ran 8-12% slower at M = 1024 with
  // them (and no faster at M = 128): those copy with LeanCopies (below).
  // Staged B (prefill tiles) copies with LeanCopies like the dense tiles.
  static constexpr bool kWholeVectorCopies =
      Cfg::kAlign > 1 && ((Cfg::kQuantB && !Cfg::kStagedB && !kQuantLean) ||
                          (Cfg::kCtaM <= 32 && !(Cfg::kOrderB == OrderB::kKN && kLeanKN && GEMM_SM80_KN_DECODE_LEAN)));
  // Quantized B straight from global memory into registers, one K tile ahead, for
  // tiles whose weights each feed one warp only (Cfg::kDirectB): no shared-memory
  // round trip, no per-copy address arithmetic, and nothing for other warps to wait for.
  static constexpr bool kDirectB = Cfg::kDirectB;
  using Warp = WarpMma<Cfg>;
  static constexpr int kDirectNI = DirectShape<Warp, kDirectB>::kNI;
  static constexpr int kDirectWords = DirectShape<Warp, kDirectB>::kWords;
  static constexpr int kBlockBytes = Cfg::kQuantBlockUnits * 2;  // one n8 x k32 block of packed B
  using Cursor = WeightCursor<kDirectNI, kDirectWords, kBlockBytes, Cfg::kCtaK / 32>;
  // A 16-row direct-B tile's copies of A that can hold rows 0-7: thread t's copy i is row
  // t / (vectors a row) + i * kRowStep (TileCopy), so the first ceil(8 / kRowStep).
  static constexpr bool kLowerCopiesA = GEMM_SM80_LOWER_A_COPIES && kDirectB && Cfg::kTileARows == 16;
  static constexpr int kLowerItersA = (8 + CopyA::kRowStep - 1) / CopyA::kRowStep < CopyA::kIters
                                          ? (8 + CopyA::kRowStep - 1) / CopyA::kRowStep
                                          : CopyA::kIters;
  using StepWords = typename Cursor::StepWords;
  using TileWords = StepWords[kSteps];

  // Dense 16-byte-aligned tiles, and staged B's (its packed tile a matrix of N / 8 rows
  // and ldb units), copy the K tiles inside the matrix by LeanCopies.
  static constexpr bool kLean = GEMM_SM80_LEAN_COPIES && (!Cfg::kQuantB || Cfg::kStagedB || kQuantLean) && !kDirectB &&
                                !kWholeVectorCopies && Cfg::kAlign == 8 &&
                                (Cfg::kOrderB == OrderB::kNK || kLeanKN);
  using LeanA = LeanCopies<CopyA, typename Cfg::LayoutA>;
  using LeanB = LeanCopies<CopyB, typename Cfg::LayoutB>;
  // Dense tiles wait for the next K tile and pass the barrier one step before the last
  // (after that step's MMAs are issued, so the tensor pipe runs while the warps wait),
  // and load the next tile's first fragments before the last step's MMAs, which hide
  // their latency; the refilling copies go out over the steps before the barrier.
  // NOTE: ncu on the H200 (128x256x64 s3, 4096^3): with the barrier after the last
  // step, the next tile's first LDSM and the address arithmetic before it ran after
  // the barrier with no MMA left to cover them; that LDSM was the kernel's most
  // stalled instruction (7% of samples). An even step count keeps the next tile's first
  // fragments out of the buffer the last step multiplies.
  // Grouped tiles too (their gathered or edge CTAs refill by the general copies, as
  // dense edge CTAs do): H100, bench.moe's routed problems at 128 and 1024 tokens
  // (sm80_variants --grouped, docs/NOTES.md thirty-second session), 128x128x32 s4 2-11%
  // faster, 32x128x64 s5 and 16x64x128 s4 0-6%. Not 256x128x64, which spilled 48 bytes on
  // sm_90 and 324 on sm_80 with the second loop body (NVRTC 13.5), nor two-step tiles
  // of small warp tiles (64x64x32 w2x2: 8 MMAs a step, all the refill in the first), which
  // ran 0-6% slower.
  static constexpr bool kGroupedEarly =
      GEMM_SM80_GROUPED_EARLY && !(Cfg::kWarpTileM >= 64 && Cfg::kWarpTileN >= 64 && Cfg::kCtaK >= 64) &&
      !(kSteps == 2 && Cfg::kWarpTileM * Cfg::kWarpTileN < 64 * 64);
  static constexpr bool kEarlyBarrier = GEMM_SM80_EARLY_BARRIER && !Cfg::kQuantB && !kDirectB &&
                                        (!Cfg::kGrouped || kGroupedEarly) && kSteps >= 2 && kSteps % 2 == 0;
  // The steps of a tile over which its refilling copies are sliced.
  static constexpr int kCopySlices = kEarlyBarrier ? kSteps - 1 : kSteps;
  const char* lean_a;  // kLean: A at (m0, the split's first K), B at (n0, that K)
  const char* lean_b;
  i64 lda_bytes, ldb_bytes;
  bool lean;  // kLean and the CTA's tile lies inside M and N (uniform per CTA)
  const int* gather;  // grouped launches with A gathered: A's row of each row of the problem

  WeightOrigin<kDirectWords, kBlockBytes> weights;  // kDirectB: the CTA's packed weights
  GroupRowsCopy<Base::kGroupRows, Cfg::kCtaN, Cfg::kLdsV, Cfg::kThreads> copy_group_rows;  // quantized B's V rows
  template <class Params>
  __device__ __forceinline__ void init(const Params& p, int m0, int n0, int k0) {
    Base::init(p, m0, n0, k0);
    if constexpr (kWholeVectorCopies) {
      this->copy_a.pin();
      this->copy_b.pin();
    }
    if constexpr (Cfg::kQuantB) copy_group_rows.init(p.V, p.ldv, p.groups, p.N, n0);
    if constexpr (kDirectB) weights.init(p, n0, k0);
    if constexpr (Cfg::kGrouped) gather = static_cast<const int*>(p.gather);
    if constexpr (kLean) {
      lda_bytes = p.lda * 2;
      ldb_bytes = p.ldb * 2;
      lean_a = static_cast<const char*>(p.A) + m0 * lda_bytes + static_cast<i64>(k0) * 2;
      if constexpr (Cfg::kQuantB) {
        lean_b = static_cast<const char*>(p.B) + n0 / 8 * ldb_bytes + static_cast<i64>(Base::b_dcol(k0)) * 2;
      } else {
        lean_b = static_cast<const char*>(p.B) + (Base::kBAlongRows ? k0 * ldb_bytes + static_cast<i64>(n0) * 2
                                                                    : n0 * ldb_bytes + static_cast<i64>(k0) * 2);
      }
      lean = m0 + Cfg::kCtaM <= p.M && n0 + Cfg::kCtaN <= p.N && LeanA::fits(lda_bytes) && LeanB::fits(ldb_bytes);
      if constexpr (Cfg::kGrouped) lean = lean && gather == nullptr;  // gathered rows take the general copies
    }
  }

  // Bytes between the origins of successive K tiles in A and in B.
  __device__ __forceinline__ i64 a_step() const { return Cfg::kCtaK * 2; }
  __device__ __forceinline__ i64 b_step() const {
    if constexpr (Cfg::kQuantB) return Cfg::kCtaK / 32 * Cfg::kQuantBlockUnits * 2;
    return Base::kBAlongRows ? Cfg::kCtaK * ldb_bytes : Cfg::kCtaK * 2;
  }

  // kLean: this thread's sources in the K tile a loop refills next, carried from tile to
  // tile (a loop-carried pointer stays in a register; state rebuilt from the parameters
  // at every copy cost the copies most of their instructions), and `end`: tiles
  // [0, end) of the split go lean (inside K, the CTA's tile inside M and N). One
  // integer, where three live conditions cost the 64-deep prefill tiles a register (a
  // 4-byte spill on sm_90).
  struct LeanCursor {
    const char* a = nullptr;
    const char* b = nullptr;
    int end = 0;
  };

  // The cursor at the first tile a loop refills (S - 1, after the prologue's).
  __device__ __forceinline__ LeanCursor lean_cursor(int k_tiles) const {
    LeanCursor c;
    if constexpr (kLean) {
      c.a = LeanA::source(lean_a + a_step() * (Cfg::kStages - 1), lda_bytes);
      c.b = LeanB::source(lean_b + b_step() * (Cfg::kStages - 1), ldb_bytes);
      const int inside_k = this->k_extent / Cfg::kCtaK;
      c.end = lean ? (inside_k < k_tiles ? inside_k : k_tiles) : 0;
    }
    return c;
  }

  // Slice `slice` of `slices` of the lean copies of K tile `tile` (its sources at `c`)
  // into the stage at `sa`; the first slice brings quantized B's scale and zero rows too.
  __device__ __forceinline__ void issue_lean(u32 sa, const LeanCursor& c, int tile, int slice, int slices) const {
    LeanA::issue(sa, c.a, lda_bytes, slice * CopyA::kIters / slices, (slice + 1) * CopyA::kIters / slices);
    LeanB::issue(sa + Cfg::kStageBytesA, c.b, ldb_bytes, slice * CopyB::kIters / slices,
                 (slice + 1) * CopyB::kIters / slices);
    if (slice == 0) issue_group_rows(sa + Cfg::kStageBytesA, tile * Cfg::kCtaK);
  }

  __device__ __forceinline__ void advance(LeanCursor& c) const {
    if constexpr (kLean) {
      c.a += a_step();
      c.b += b_step();
    }
  }

  // A K tile's end: its refills committed, then the oldest tile in flight landed (all but
  // the `kInFlight` newest groups) and visible to every warp.
  template <int kInFlight>
  __device__ __forceinline__ void ring_barrier() const {
    cp_async_commit();
    cp_async_wait<kInFlight>();
    if (GEMM_SM80_LEAVE_OUT != 4) __syncthreads();
  }

  // Slice `step` of `slices` of the copies of K tile `tile` into ring buffer `stage`;
  // `kInsideK`: the caller knows the tile lies inside K (the branch-free loop bodies).
  // `lower_only`: the CTA's A rows 8-15 lie outside M (direct B, 16-row tiles: only A's
  // copies of rows 0-7 go out; a constant in each of run_registers' two loops).
  template <bool kInsideK = false>
  __device__ __forceinline__ void issue_tile(u32 smem, int stage, int tile, int step, int slices = kSteps,
                                             bool lower_only = false) const {
    const u32 sa = smem + stage * Cfg::kStageBytes;
    const u32 sb = sa + Cfg::kStageBytesA;
    const int k0 = tile * Cfg::kCtaK;
    // NOTE: direct B leaves only A and the scale rows in the stages, a few copies per
    // thread: all of A's go out at the tile's first step, with the scale rows, so
    // the copy set-up (K-edge test, row mask) is paid once per tile, not per step.
    const int a_begin = kDirectB ? (step == 0 ? 0 : CopyA::kIters) : step * CopyA::kIters / slices;
    const int a_end = kDirectB ? (kLowerCopiesA && lower_only ? kLowerItersA : CopyA::kIters)
                               : (step + 1) * CopyA::kIters / slices;
    const int b_begin = step * CopyB::kIters / slices, b_end = (step + 1) * CopyB::kIters / slices;
    // Every tile but the last lies inside K: whole vectors, no per-copy edge arithmetic.
    const bool inside_k = kInsideK || k0 + Cfg::kCtaK <= this->k_extent;
    if constexpr (kLean) {
      if (lean && inside_k) {
        LeanA::issue(sa, LeanA::source(lean_a + a_step() * tile, lda_bytes), lda_bytes, a_begin, a_end);
        LeanB::issue(sb, LeanB::source(lean_b + b_step() * tile, ldb_bytes), ldb_bytes, b_begin, b_end);
        if (step == 0) issue_group_rows(sb, k0);
        return;
      }
    }
    bool a_done = false;
    if constexpr (Cfg::kGrouped) {
      if (gather != nullptr) {
        // The tile's rows start at m0 of the expert's rows, and gather starts at the
        // expert's first row (gemm/grouped.cuh): CopyA's rows count from there.
        this->copy_a.issue_gathered(sa, k0, gather, a_begin, a_end);
        a_done = true;
      }
    }
    if (a_done) {
    } else if constexpr (kWholeVectorCopies) {
      if (inside_k)
        this->copy_a.issue_inside_cols(sa, k0, a_begin, a_end);
      else
        this->copy_a.issue(sa, 0, k0, a_begin, a_end);
    } else {
      this->copy_a.issue(sa, 0, k0, a_begin, a_end);
    }
    if constexpr (kDirectB) {
      // B goes straight to registers (operator(), WeightStream).
    } else if constexpr (kWholeVectorCopies && !Base::kBAlongRows) {
      if (inside_k)
        this->copy_b.issue_inside_cols(sb, Base::b_dcol(k0), b_begin, b_end);
      else
        this->copy_b.issue(sb, 0, Base::b_dcol(k0), b_begin, b_end);
    } else {
      this->copy_b.issue(sb, Base::b_drow(k0), Base::b_dcol(k0), b_begin, b_end);
    }
    if (step == 0) issue_group_rows(sb, k0);
  }

  // Quantized B: the scale and zero rows of the groups the K tile at `k0` touches, into
  // the stage whose B tile is at `sb` (they ride in the same stage).
  __device__ __forceinline__ void issue_group_rows(u32 sb, int k0) const {
    if constexpr (Cfg::kQuantB)
      copy_group_rows.issue(sb + Cfg::kStageBytesB, this->group_of(k0), this->group_end(k0), this->groups);
  }

  // The copies of K tiles 0 .. Stages - 2 into stages 0 .. Stages - 2, a commit group each.
  __device__ __forceinline__ void issue_prologue(u32 smem, int k_tiles, bool lower_only = false) const {
#pragma unroll
    for (int s = 0; s < Cfg::kStages - 1; ++s) {
      if (s < k_tiles) {
#pragma unroll
        for (int step = 0; step < kSteps; ++step) issue_tile(smem, s, s, step, kSteps, lower_only);
      }
      cp_async_commit();  // NOTE: empty groups keep the wait count uniform for short K
    }
  }

  // Fragments of the step at `kk` (K offset inside the tile) of tile `tile` from `stage`.
  __device__ __forceinline__ void load_step(WarpMma<Cfg>& warp, int buf, u32 smem, int stage, int tile, int kk,
                                            int warp_m0, int warp_n0) const {
    this->load_fragments(warp, buf, smem + stage * Cfg::kStageBytes, tile, kk, warp_m0, warp_n0);
  }

  // kDirectB: the same with step `s`'s packed weights from `w`.
  __device__ __forceinline__ void load_step(Warp& warp, int buf, u32 smem, int stage, int tile, int kk, int warp_m0,
                                            int warp_n0, const TileWords& w, int s) const {
    const u32 sa = smem + stage * Cfg::kStageBytes;
    const u32 sv = sa + Cfg::kStageBytesA + Cfg::kStageBytesB;
    const int k0 = tile * Cfg::kCtaK;
    const int group = this->group_of(k0 + kk);
    warp.load(buf, sa, sv, group, group - this->group_of(k0), warp_m0, warp_n0, kk, w[s]);
  }

  __device__ __forceinline__ void operator()(Warp& warp, u32 smem, int k_tiles, int warp_m0, int warp_n0,
                                             int warp_k0) const {
    if constexpr (Cfg::kStagedB) {
      run_staged(warp, smem, k_tiles, warp_m0, warp_n0);
    } else {
      run_registers(warp, smem, k_tiles, warp_m0, warp_n0, warp_k0);
    }
  }

  // Staged B (Cfg::kStagedB, warp_mma_staged.cuh): the ring holds A, the packed B tile
  // and its scale and zero rows as for the other quantized tiles; during K tile t every
  // warp dequantizes its share of tile t + 1's packed weights, a slice per k16 step
  // between its MMAs, into the staged buffer the MMAs of tile t do not read (buffers
  // alternate by tile), and the MMA warps read tile t's from the other.
  //   prologue : tiles 0 .. S-2 in flight; wait for tiles 0 and 1, dequantize tile 0
  //              whole, meet, load the first fragments.
  //   tile t   : per step, the next step's fragments, a slice of the copies of tile
  //              t + S - 1 into the stage tile t - 1 left, a slice of tile t + 1's
  //              dequantization, the step's MMAs. Then commit, wait until tile t + 2
  //              landed (it is dequantized during tile t + 1), meet.
  // NOTE: the barrier at the end of tile t publishes the buffer tile t + 1's MMAs read
  // and frees the one tile t read for tile t + 2's dequantization; the packed weights
  // arrive a tile earlier than A needs to (<= S - 3 copy groups pending, not S - 2), so
  // the ring keeps one tile fewer in flight than the dense loop with as many stages.
  __device__ __forceinline__ void run_staged(Warp& warp, u32 smem, int k_tiles, int warp_m0, int warp_n0) const {
    constexpr int S = Cfg::kStages;
    using Staged = StagedB<Cfg>;
    const int lane = threadIdx.x & 31, warp_id = threadIdx.x >> 5;
    constexpr bool kSplit = GEMM_SM80_STAGED_SPLIT == 2 ? Staged::kUnitsPerWarp < kSteps : GEMM_SM80_STAGED_SPLIT == 1;
    const u32 staged0 = smem + Cfg::kPipelineBytes;
    const typename Staged::Lanes at = Staged::lanes(warp_id, lane);
    auto buffer = [&](int tile) { return staged0 + static_cast<u32>((tile & 1) * Cfg::kStagedBufferBytes); };
    // Step `step`'s share of K tile `tile`'s dequantization, from ring stage `stage`.
    auto dequantize = [&](int tile, int stage, int step) {
      const u32 sb = smem + stage * Cfg::kStageBytes + Cfg::kStageBytesA;
      Staged::dequantize(step, sb, sb + Cfg::kStageBytesB, buffer(tile), at, this->group_shift);
    };
    auto load_inputs = [&](int stage, int step, typename Staged::Inputs& in) {
      const u32 sb = smem + stage * Cfg::kStageBytes + Cfg::kStageBytesA;
      Staged::load(step, sb, sb + Cfg::kStageBytesB, at, this->group_shift, in);
    };
    auto fragments = [&](int buf, int stage, int tile, int step) {
      warp.load(buf, smem + stage * Cfg::kStageBytes, buffer(tile), warp_m0, warp_n0, step * kStepK);
    };
    issue_prologue(smem, k_tiles);
    LeanCursor lean_src = lean_cursor(k_tiles);
    cp_async_wait<S - 3>();
    __syncthreads();
    if (k_tiles > 0) {
#pragma unroll
      for (int step = 0; step < kSteps; ++step) dequantize(0, 0, step);
    }
    __syncthreads();
    int read = 0;
    int write = S - 1;
    if (k_tiles > 0) fragments(0, 0, 0, 0);
    for (int t = 0; t < k_tiles; ++t) {
      const bool refill = t + S - 1 < k_tiles;
      const bool refill_lean = t + S - 1 < lean_src.end;
      const bool ahead = t + 1 < k_tiles;
      const int next = read + 1 == S ? 0 : read + 1;  // tile t + 1's stage
#pragma unroll
      for (int step = 0; step < kSteps; ++step) {
        if (step + 1 < kSteps) fragments((step + 1) & 1, read, t, step + 1);
        typename Staged::Inputs inputs;
        if (kSplit && ahead && GEMM_SM80_LEAVE_OUT != 5) load_inputs(next, step, inputs);
        if (refill_lean && GEMM_SM80_LEAVE_OUT != 3) {
          const u32 sa = smem + write * Cfg::kStageBytes;
          issue_lean(sa, lean_src, t + S - 1, step, kSteps);
        } else if (refill && GEMM_SM80_LEAVE_OUT != 3) {
          issue_tile(smem, write, t + S - 1, step);
        }
        if (!kSplit && ahead && GEMM_SM80_LEAVE_OUT != 5) dequantize(t + 1, next, step);
        if (GEMM_SM80_LEAVE_OUT != 2) warp.mma(step & 1);
        if (kSplit && ahead && GEMM_SM80_LEAVE_OUT != 5)
          Staged::store(step, inputs, buffer(t + 1), at);
        if (step + 1 == kSteps) {
          ring_barrier<S - 3>();
          advance(lean_src);
          read = next;
          write = write + 1 == S ? 0 : write + 1;
          // Step 0 of the next tile reads buffer 0: the last step's MMAs took theirs at issue.
          if (ahead) fragments(0, read, t + 1, 0);
        }
      }
    }
    cp_async_wait<0>();
  }

  __device__ __forceinline__ void run_registers(Warp& warp, u32 smem, int k_tiles, int warp_m0, int warp_n0,
                                                int warp_k0) const {
    this->begin_groups(warp, warp_m0);
    if constexpr (Cfg::kQuantB && (kDirectB || Cfg::kDecodeRing)) {
      if constexpr (Warp::kDeferred) {
        // NOTE: the whole loop twice, once for warps without rows 8-15 (M <= 8: half the
        // MMAs), with `upper` a constant in each copy; once, for rows 0-7, in the tiles
        // for at most 8 rows (Cfg::kRowsUpTo8). Tested per step instead (one loop,
        // a uniform branch around each step's MMAs), the decode kernel ran no faster
        // at M = 1 than the m16 form, and 14% slower at M = 16 (H200).
        if (!Cfg::kRowsUpTo8 && warp.upper) {
          warp.upper = true;
          run(warp, smem, k_tiles, warp_m0, warp_n0, warp_k0);
        } else {
          warp.upper = false;
          run(warp, smem, k_tiles, warp_m0, warp_n0, warp_k0);
        }
        return;
      }
    }
    run(warp, smem, k_tiles, warp_m0, warp_n0, warp_k0);
  }

  __device__ __forceinline__ void run(Warp& warp, u32 smem, int k_tiles, int warp_m0, int warp_n0,
                                      int warp_k0) const {
    constexpr int S = Cfg::kStages;
    // kDirectB: the packed weights of the tile being multiplied and of the next one.
    // NOTE: a tile's loads go out together, a whole run of contiguous blocks per n8 row
    // at once; spread over the tile's steps (one block per row at a time, which would
    // need half the registers) the decode kernels ran 20-40% slower on the H200.
    Cursor cursor;
    TileWords words, next_words;
    auto load_tile = [&](TileWords& w) {
      cursor.load_tile(w);
      cursor.next_tile();
    };
    if constexpr (kDirectB) {
      cursor.init(weights, warp_n0, warp_k0);
      if (k_tiles > 0) load_tile(words);
    }
    // The fragments of step `step` of tile `tile` (from ring buffer `stage`) into `buf`.
    auto fragments = [&](int buf, int stage, int tile, int step) {
      const int kk = warp_k0 + step * kStepK;
      if constexpr (kDirectB) {
        load_step(warp, buf, smem, stage, tile, kk, warp_m0, warp_n0, words, step);
      } else {
        load_step(warp, buf, smem, stage, tile, kk, warp_m0, warp_n0);
      }
    };
    bool lower_only = false;  // `upper` is a constant in each of run_registers' loops, so this is too
    if constexpr (kLowerCopiesA) {  // (direct B: the quantized warps, which have `upper`)
      if constexpr (Warp::kDeferred) lower_only = !warp.upper;
    }
    issue_prologue(smem, k_tiles, lower_only);
    if (GEMM_CTA_TRACE) cta_trace(kTraceIssued, trace_clock());
    cp_async_wait<S - 2>();
    __syncthreads();
    if (GEMM_CTA_TRACE) cta_trace(kTraceFirstTile, trace_clock());

    int read = 0;
    int write = S - 1;
    fragments(0, 0, 0, 0);
    LeanCursor lean_src = lean_cursor(k_tiles);
    if constexpr (kEarlyBarrier) {
      // The read and write stages' addresses, carried from tile to tile (a stage index
      // times the stage's bytes was rebuilt after every barrier).
      const u32 ring_end = smem + S * Cfg::kStageBytes;
      u32 read_base = smem, write_base = smem + (S - 1) * Cfg::kStageBytes;
      // Tile t; `all_lean` (a compile-time flag) when its refill is lean, so the tiles
      // before the last S - 1 of an interior CTA run a body without a branch.
      auto tile = [&](int t, auto all_lean) {
        constexpr bool kAllLean = decltype(all_lean)::value;
        const bool refill = kAllLean || t + S - 1 < k_tiles;
        const bool refill_lean = (kAllLean && kLean) || t + S - 1 < lean_src.end;
#pragma unroll
        for (int step = 0; step < kSteps; ++step) {
          const u32 read_at = GEMM_SM80_STAGE_BASES ? read_base : smem + read * Cfg::kStageBytes;
          // Tile t's next step, or (past the barrier, `read_at` moved on) tile t+1's first.
          if (step + 1 < kSteps) {
            this->load_fragments(warp, (step + 1) & 1, read_at, t, warp_k0 + (step + 1) * kStepK, warp_m0, warp_n0);
          } else if (kAllLean || t + 1 < k_tiles) {
            this->load_fragments(warp, 0, read_at, t + 1, warp_k0, warp_m0, warp_n0);
          }
          if (step + 1 < kSteps && GEMM_SM80_LEAVE_OUT != 3) {
            if constexpr (kAllLean && !kLean) {
              issue_tile<true>(smem, write, t + S - 1, step, kCopySlices);
            } else if (refill_lean) {
              const u32 sa = GEMM_SM80_STAGE_BASES ? write_base : smem + write * Cfg::kStageBytes;
              issue_lean(sa, lean_src, t + S - 1, step, kCopySlices);
            } else if (refill) {
              issue_tile(smem, write, t + S - 1, step, kCopySlices);
            }
          }
          if (GEMM_SM80_LEAVE_OUT != 2) warp.mma(step & 1);
          if (step + 2 == kSteps) {
            ring_barrier<S - 2>();
            advance(lean_src);
            read = read + 1 == S ? 0 : read + 1;
            write = write + 1 == S ? 0 : write + 1;
            read_base = read_base + Cfg::kStageBytes == ring_end ? smem : read_base + Cfg::kStageBytes;
            write_base = write_base + Cfg::kStageBytes == ring_end ? smem : write_base + Cfg::kStageBytes;
          }
        }
      };
      int t = 0;
      // NOTE: the general copies' branches (lean or not, refill or not) split every step
      // into basic blocks: ptxas then issued each step as its next fragments' ldmatrix,
      // the copies, and the step's 32 MMAs in a row, where CUTLASS 2.x's loop (one
      // branch a K tile) interleaves the three. The second body costs registers: no
      // spills with NVRTC 13.5, 40 bytes on 128x128x64 w2x2 s3 with 13.0; the staged loop
      // and the grouped 256x128x64 spilled with it, so they keep one body (docs/NOTES.md).
      if constexpr (GEMM_SM80_LEAN_LOOP && kLean) {
        for (const int lean_tiles = lean_src.end - (S - 1); t < lean_tiles; ++t) tile(t, BoolConstant<true>{});
      } else if constexpr (GEMM_SM80_INSIDE_LOOP && kWholeVectorCopies && !Base::kBAlongRows) {
        // The decode tiles' whole-vector copies: the tiles whose refill lies inside K and
        // inside this split (k_extent runs to the end of K, past a split's own tiles).
        // NOTE: lean_cursor's min, written out: with one helper for both, ptxas put 5 STL
        // and 5 LDL inside 128x128x64 s3's lean loop (NVRTC 13.5, sm_90).
        const int inside_k = this->k_extent / Cfg::kCtaK;
        for (const int inside = (inside_k < k_tiles ? inside_k : k_tiles) - (S - 1); t < inside; ++t)
          tile(t, BoolConstant<true>{});
      }
      for (; t < k_tiles; ++t) tile(t, BoolConstant<false>{});
    } else {
      // NOTE: an else, not code after the branch above's return: NVRTC warned this loop
      // unreachable (128) in every early-barrier kernel.
      for (int t = 0; t < k_tiles; ++t) {
        const bool refill = t + S - 1 < k_tiles;
        const bool refill_lean = t + S - 1 < lean_src.end;
        if constexpr (kDirectB) {
          if (t + 1 < k_tiles) load_tile(next_words);
        }
#pragma unroll
        for (int step = 0; step < kSteps; ++step) {
          if (step + 1 < kSteps) fragments((step + 1) & 1, read, t, step + 1);
          if (refill_lean && GEMM_SM80_LEAVE_OUT != 3) {
            const u32 sa = smem + write * Cfg::kStageBytes;
            issue_lean(sa, lean_src, t + S - 1, step, kSteps);
          } else if (refill && GEMM_SM80_LEAVE_OUT != 3) {
            issue_tile(smem, write, t + S - 1, step, kSteps, lower_only);
          }
          if (GEMM_SM80_LEAVE_OUT != 2) warp.mma(step & 1);
          this->end_group_after(warp, smem + read * Cfg::kStageBytes, t, step, k_tiles, warp_k0, warp_n0);
          if (step + 1 == kSteps) {
            ring_barrier<S - 2>();
            advance(lean_src);
            read = read + 1 == S ? 0 : read + 1;
            write = write + 1 == S ? 0 : write + 1;
            if constexpr (kDirectB) {
#pragma unroll
              for (int s = 0; s < kSteps; ++s)
#pragma unroll
                for (int ni = 0; ni < kDirectNI; ++ni)
#pragma unroll
                  for (int i = 0; i < kDirectWords; ++i) words[s][ni][i] = next_words[s][ni][i];
            }
            // Step 0 of the next tile always reads buffer 0; a finished MMA no longer
            // needs its registers, so this is safe even when kSteps is odd.
            if (t + 1 < k_tiles) fragments(0, read, t + 1, 0);
          }
        }
      }
    }
    cp_async_wait<0>();
    this->end_groups(warp);
  }
};

}  // namespace gemm
