"""The SM80 family: an N-stage cp.async ring (templates/include/gemm/mainloop_sm80.cuh),
on Ampere, Ada and Hopper."""

from __future__ import annotations

from typing import TYPE_CHECKING

from codegen.families.base import MainloopFamily
from codegen.vocabulary import BOrder, DataType, MmaAtom

# A dense K-32 tile's MMA rate on padded shared rows against XOR-swizzled ones (Sm80Family.
# padded_k32): between the measured 0.66 and 0.85, so that the model takes a swizzled tile
# over its padded twin and over the padded K-64 tiles, as the tuner did on every llama3
# problem at M = 1024 and 4096 (docs/NOTES.md, thirtieth session).
_PADDED_K32_RATE = 0.8
# A swizzled tile's rate against the padded K-64 tile of its CTA shape (Sm80XorRowsFamily.
# mma_efficiency): the few percent the tuner's plans gained (same docs).
_XOR_RATE = 1.04
# The swizzled tiles' knee of the intensity curve where CTAs share an SM (Sm80XorRowsFamily.
# shared_sm_rate): 128x128 at 0.96 of 128x256's rate, as measured within a few percent.
_XOR_SHARED_SM_KNEE = 12.0
# The staged tiles' MMA rate against the dense tile's (Sm80StagedFamily.mma_efficiency):
# NORM / (1 + ROWS / CTA M).
_STAGED_DEQUANT_ROWS = 37.6
_STAGED_DEQUANT_NORM = 1.048
# An SM's rate through L2 for split-K partials (Sm80Family.split_seconds; sm90's value).
_HANDOVER_BYTES_PER_S = 50e9

if TYPE_CHECKING:
    from codegen.spec import KernelSpec


class Sm80Family(MainloopFamily):
    value = "sm80"
    min_arch = 80
    atoms = (MmaAtom.M16N8K16, MmaAtom.M16N8K8)
    header = "gemm/kernel_sm80.cuh"
    entry = "gemm::gemm_sm80"
    summary = "multi-stage cp.async pipeline"

    def grouped_error(self, spec: KernelSpec) -> str | None:
        """Stacked nn.Linear weights ([E, N, K], "nk"), dense or packed
        (gemm_runtime.experts.PackedExperts)."""
        if spec.b_order is not BOrder.NK:
            return "false for b_order 'kn' (grouped weights are stacked [E, N, K]: 'nk')"
        if spec.align == 1:
            # TileCopy::issue_gathered: gathered rows of A are copied by cp.async only.
            return "false for align 1 (a grouped kernel gathers A's rows by cp.async: align 8, 4 or 2)"
        return None

    def max_splits(self, spec: KernelSpec) -> int | None:
        """Grouped kernels split K as the others do (serial split-K through the workspace,
        a slot per tile of the launch's bound on the tile rows): decode's few experts
        otherwise leave most SMs a single CTA streaming a long K.
        Dense narrow decode tiles (one warp along M, four or more along K: they exist to
        stream all of K per CTA) take none: on the H200 every llama3 layer's best narrow
        plan at M = 1 was unsplit, and splits cost them 2.8-19 us, several times the
        handover the model charges (docs/NOTES.md, twenty-first session)."""
        if not spec.quantized and spec.warps[0] == 1 and spec.warps[2] >= 4:
            return 1
        return None

    def lean_kn(self, spec: KernelSpec) -> bool:
        """Dense "kn" tiles but the four-warp 64x64 ones of K 64 (128x128x64 w2x2). H100,
        two runs (bench.experiments.sm80_variants --order kn, TFLOP/s on M = 1024 llama3
        shapes and 4096^3, lean against general copies): 128x256x64 s3 301-402 against
        237-332 and 256x128x64 s3 297-398 against 250-351, though both spill on sm_90
        (spill_budget); 128x128x64 w2x4 s2 209-218 against 167-172; 128x128x32 s4 3-5%
        faster on four problems, 7% slower on 1024 x 6144 x 4096. 128x128x64 w2x2 s3 spills
        80 bytes with them, ten stores and ten loads a K tile at two CTAs an SM, and ran
        3-16% slower (docs/NOTES.md, thirty-second session). The decode tiles (CTA M <= 32)
        among them, on the lean copies since the thirty-third session (GEMM_SM80_KN_DECODE_LEAN):
        16x64x128 s4 2-19% and 32x128x64 s5 6-10% faster on llama3-8b layers at M = 1 and 16."""
        if spec.quantized or spec.b_order is not BOrder.KN:
            return False
        return not (self._warp_tile_64x64_k64(spec) and spec.threads == 128)

    @staticmethod
    def _warp_tile_64x64_k64(spec: KernelSpec) -> bool:
        m, n, k = spec.cta
        return m // spec.warps[0] >= 64 and n // spec.warps[1] >= 64 and k >= 64

    def direct_b(self, spec: KernelSpec) -> bool:
        """Tiles whose quantized weights each feed one warp (one warp along M, <= 32
        rows) load them straight into registers, one K tile ahead (weight_stream.cuh)."""
        return spec.quantized and spec.warps[0] == 1 and spec.cta[0] <= 32

    def min_ctas_per_sm(self, spec: KernelSpec) -> int:
        """Direct-B kernels hide the weights' latency with warps: 16 warps per SM cap a
        thread at 65536 / (16 * 32) = 128 registers, two CTAs of 8 warps or four of 4.
        Four of 4 only for 4-bit weights: their decode loop is compiled twice (with and
        without rows 8-15, MainloopSm80), which NVRTC 13 allocates at 142 registers
        uncapped against 128 and 116 for either loop alone. Not asked of 8-bit 4-warp
        CTAs nor 32-row ones (they spill at 128), nor of bf16 activations (their 4-bit
        8-warp tile spills 4 bytes at 128 on sm_80; NVRTC 13), nor of grouped kernels
        (the expert's shifted pointers and the gather index cost registers the cap
        does not leave)."""
        if not spec.direct_b or spec.a_type is not DataType.F16 or spec.grouped:
            return 1
        if spec.threads == 256:
            return 2
        if spec.threads == 128 and spec.b_type.bits == 4 and spec.cta[0] == 16:
            return 4
        return 1

    def min_ctas_per_sm_hopper(self, spec: KernelSpec) -> int:
        """On sm_90 the 4-bit 16-row direct-B tiles take min_ctas_per_sm's cap whatever
        their activations, grouped or not: there the bf16 and grouped decode loops fit
        128 registers with 40-116 bytes of spill (none for the grouped f16 ones), and a
        second CTA of 8 warps per SM (fourth of 4) hides more of the weights' latency than
        the spills cost wherever the grid holds more than a wave. Measured on the H200
        (twenty-third session, same call, the tree's plan forced in both builds): grouped
        bf16 W4 Mixtral-like one token gate_up 54.3 -> 47.0 us, down 35.7 -> 28.7, 16 tokens
        down 106.1 -> 84.5; dense bf16 W4 8b gate_up M = 1 32.1 -> 27.2, M = 16 53.1 -> 39.9.
        Slower where one wave holds the grid: Qwen-MoE-like one token gate_up 14.4 -> 17.5,
        dense 8b down M = 16 27.9 -> 31.6 (docs/NOTES.md). On sm_80 the same cap spills
        hundreds of bytes (NVRTC 13), so there only min_ctas_per_sm's tiles take it."""
        if self.direct_b(spec) and spec.b_type.bits == 4 and spec.cta[0] == 16:
            return {256: 2, 128: 4}.get(spec.threads, 1)
        return self.min_ctas_per_sm(spec)

    def spill_budget(self, spec: KernelSpec, arch: int) -> int:
        """The register-capped 4-bit direct-B tiles (min_ctas_per_sm) spill 16 bytes on
        sm_80 (NVRTC 13): the row-sum MMA's constant operand, in the loop for 9-16 rows
        only; the loop for at most 8 rows, which decode runs, spills nothing. Uncapped,
        sm_80 would run 3 (4-warp) or 1 (8-warp) CTAs per SM instead of 4 or 2. The
        8-warp 64x64 "kn" tiles of K 64 spill with their lean copies (lean_kn) and ran
        13-23% faster with them than without."""
        capped_w4 = spec.min_ctas_per_sm > 1 and spec.b_type.bits == 4
        if arch >= 90 and spec.min_ctas_per_sm_hopper > spec.min_ctas_per_sm:
            return 128  # min_ctas_per_sm_hopper: up to 92 / 116 bytes (bf16 16x32x512, NVRTC 13.5)
        if self.lean_kn(spec) and self._warp_tile_64x64_k64(spec):
            return 72  # lean "kn" copies, 128x256x64 on sm_90: 64 bytes (NVRTC 13.5), 72 (13.0)
        return 16 if capped_w4 and arch < 90 else 0

    def rounds(self, spec: KernelSpec, tiles: int, splits: int, slots: int) -> tuple[int, int]:
        """A split grid of prefill tiles (128 rows or more) hands over in each of its waves:
        a slice's CTA holds its slot while it waits for the slice before it and its 64-128
        KiB of partials (H100, llama3-8b qkv at M = 1024: 128x256x32 split 2 over 2.9 waves
        ran in 1.11x the time of the unsplit 128x128x32 that the model, charging one
        hand-over, put 3% behind; docs/NOTES.md, thirty-first session). Decode tiles keep
        one hand-over a grid, what the base split_seconds was fitted to."""
        waves, handover_waves = super().rounds(spec, tiles, splits, slots)
        if splits > 1 and spec.cta[0] >= 128:
            return waves, waves
        return waves, handover_waves

    def split_seconds(self, spec: KernelSpec, rows: int) -> float:
        """The base hand-over, fitted to decode tiles of at most 16 rows with their
        partials, plus the fp32 partials of the rows beyond, out and back in at an SM's L2
        rate (the sm90 family's): 4.6 us more for a whole 128x256 tile."""
        beyond_decode = max(0, rows - 16)
        return super().split_seconds(spec, rows) + 2 * beyond_decode * spec.cta[1] * 4 / _HANDOVER_BYTES_PER_S

    def mma_efficiency(self, spec: KernelSpec) -> float:
        # Two stages leave no copy in flight across the wait.
        rate = self.tile_efficiency(spec) * (0.7 if spec.stages < 3 else 1.0)
        if self.padded_k32(spec):
            rate *= _PADDED_K32_RATE
        return rate

    def padded_k32(self, spec: KernelSpec) -> bool:
        """A dense tile of K 32 on padded 80-byte rows, whose copies take 3.75 times the
        ideal shared-memory wavefronts (docs/NOTES.md, twenty-eighth session): the
        sm80_xor family's swizzled rows of the same tile ran in 0.66 (128x128x32 s5) and
        0.85 (128x256x32 s3) of its time (H100, thirtieth session)."""
        return not spec.quantized and spec.cta[2] == 32 and not self.xor_rows(spec)


def _decode_tile_error(cta: tuple[int, int, int], warps: tuple[int, int, int]) -> tuple[str, str] | None:
    """The deferred decode form's tile: 16 rows on one warp along M."""
    if cta[0] != 16 or warps[0] != 1:
        return "cta", f"16 rows on one warp along M (the deferred decode form; got {cta[0]} on {warps[0]})"
    return None


def _packed_only_error(family: Sm80Family, spec: KernelSpec) -> tuple[str, object, str] | None:
    if not spec.quantized:
        return "b_type", spec.b_type.value, f"u4 or u8 (the {family.value} family is for packed weights)"
    return None


class _Sm80PackedRingFamily(Sm80Family):
    """What the SM80 mainloop's variants with the packed weights in the cp.async ring
    (not loaded straight into registers) share: quantized kernels only, not grouped yet,
    and no register cap (the ring, not warps, keeps the weights in flight)."""

    def kernel_error(self, spec: KernelSpec) -> tuple[str, object, str] | None:
        return _packed_only_error(self, spec)

    def grouped_error(self, spec: KernelSpec) -> str | None:
        return f"false (the {self.value} family has no grouped kernels yet)"

    def direct_b(self, spec: KernelSpec) -> bool:
        return False

    def min_ctas_per_sm(self, spec: KernelSpec) -> int:
        return 1


class Sm80RingFamily(_Sm80PackedRingFamily):
    """The SM80 mainloop for quantized decode (one m16 tile per warp, deferred scaling)
    with the packed weights riding the cp.async ring (GemmConfig::kDecodeRing) instead
    of the sm80 family's direct loads into registers, so that a deep ring keeps S - 1 K
    tiles of weights in flight per CTA where a direct-B warp keeps one (weight_stream.cuh).
    Measured on the H200 (bench/experiments/decode_ring.py, twentieth session) against
    the default set's tuned plans on the llama3 layers at M = 1 and 16: 1.09-1.81x their
    time, so the weights in flight were not what the small layers lacked; the narrow
    direct-B tiles (16 columns, all of K per CTA) were (codegen/configs/sm80_quant.yaml)."""

    value = "sm80_ring"
    summary = "multi-stage cp.async pipeline, quantized decode tiles with the weights in the ring"
    # NOTE: measured slower than the default decode tiles, so no default kernels;
    # bench/experiments/decode_ring_tiles.yaml lists the tiles timed.
    experimental = True

    def tile_error(
        self, cta: tuple[int, int, int], warps: tuple[int, int, int], stages: int, cluster: int = 1
    ) -> tuple[str, str] | None:
        error = super().tile_error(cta, warps, stages, cluster) or _decode_tile_error(cta, warps)
        if error:
            return error
        if stages < 3:
            return "stages", "3 or more (the ring is what keeps weights in flight)"
        return None

    def decode_ring(self, spec: KernelSpec) -> bool:
        return True

    def spill_budget(self, spec: KernelSpec, arch: int) -> int:
        return 0


class Sm80StagedFamily(_Sm80PackedRingFamily):
    """The SM80 mainloop with quantized B dequantized once per CTA tile into shared
    memory (GemmConfig::kStagedB, mainloop_sm80.cuh's run_staged): during K tile t every
    warp dequantizes a share of tile t + 1's packed weights into the second of two
    buffers of 16-bit B fragments, between its MMAs of tile t, and the MMA warps read
    their B fragments from the first (one 16-byte load a lane per pair of n8 tiles and
    k16 step) as a dense kernel's would. For prefill tiles with several warps along M,
    where the sm80 family's quantized kernels dequantize every weight once per warp
    along M (issue 17: W4 took 1.7-1.9x the time of fp16 at M >= 1024)."""

    value = "sm80_staged"
    summary = "multi-stage cp.async pipeline, quantized B dequantized once per CTA into shared memory"
    # NOTE: measured slower than the sm90_quant kernels on the H200 and than the register-
    # dequantizing W4 tile on sm_80's three-stage budget (docs/NOTES.md, eighteenth
    # session), so no default kernels; bench/experiments/sm80_staged.yaml lists the tiles.
    experimental = True

    def tile_error(
        self, cta: tuple[int, int, int], warps: tuple[int, int, int], stages: int, cluster: int = 1
    ) -> tuple[str, str] | None:
        error = super().tile_error(cta, warps, stages, cluster)
        if error:
            return error
        m, n, k = cta
        if warps[2] != 1:
            return "warps", "[wm, wn, 1] (the staged form has no K slices)"
        if stages < 3:
            return "stages", "3 or more (tile t + 1's packed weights are read during tile t)"
        if k % 32 or k & (k - 1) or n % 16:
            return "cta", f"n a multiple of 16 and k a power of two from 32 (got n = {n}, k = {k})"
        # A warp writes whole pairs of n8 tiles, every k32 block of each (warp_mma_staged.cuh).
        units, count = (n // 16) * (k // 32), warps[0] * warps[1]
        if units % count or (units // count) % (k // 32):
            return "cta", (f"n / 16 x k / 32 (k32 blocks of n8-tile pairs) whole pairs per warp "
                           f"(got {units} over {count} warps)")
        return None

    def staged_b(self, spec: KernelSpec) -> bool:
        return True

    def smem_bytes(self, spec: KernelSpec) -> int:
        """The ring, and two buffers of the CTA tile's dequantized 16-bit weights."""
        _, n, k = spec.cta
        return super().smem_bytes(spec) + 2 * n * k * 2

    def dequant_rate(self, spec: KernelSpec) -> float:
        """cost_model.dequant_time counts each weight once per warp along M; here every
        weight is dequantized once per CTA."""
        return float(spec.warps[0])

    def tile_efficiency(self, spec: KernelSpec) -> float:
        """The dense tile's: the MMA warps read their B fragments from the staged buffer,
        each serving the CTA's rows, not only the warp's."""
        cm, cn, _ = spec.cta
        intensity = cm * cn / (cm + cn)
        return intensity / (intensity + 48.0)

    def mma_efficiency(self, spec: KernelSpec) -> float:
        """The dense tile's rate, less what the in-loop dequantization takes from it: its
        instructions issue beside the MMAs of the same two warps per scheduler (254
        registers) and hide poorly, so the loss goes with the weights per MMA, 1 / CTA M;
        and with three stages the ring has one K tile in flight (stages_in_flight).
        Fitted to the H200 (docs/NOTES.md, seventeenth session: W4 / fp16 time of the
        sm80 fp16 tile, 1.25 for 256x128 s4, 1.41 for 128x256 s4, 1.51 / 1.60 for s3)."""
        ring = 0.88 if self.stages_in_flight(spec) < 2 else 1.0
        return self.tile_efficiency(spec) * ring * _STAGED_DEQUANT_NORM / (1.0 + _STAGED_DEQUANT_ROWS / spec.cta[0])

    def stages_in_flight(self, spec: KernelSpec) -> int:
        """The packed weights land a K tile before A (they are dequantized a tile ahead),
        so the ring keeps one tile fewer in flight than the dense one."""
        return max(1, spec.stages - 2)


class Sm80XorRowsFamily(Sm80Family):
    """The sm80 mainloop with the shared rows of K tiles of 32 unpadded and XOR-swizzled
    (GemmConfig::kXorRows, gemm/smem_layout.cuh's XorRows64): A's rows and "nk" B's are
    64 bytes, 16-byte unit u of row r stored at u ^ ((r / 2) % 4), so a quarter warp's
    cp.async copies (two rows) fill one 128-byte line and the ldmatrix phases stay free
    of bank conflicts. The padded 80-byte rows of the sm80 family cost a 128x128x32 tile
    15 shared-memory wavefronts per copy instruction against 4 ideal, and CUTLASS 2.x's
    same tile 7.9 (ncu on the H200, docs/NOTES.md, twenty-eighth session): the MIO
    throttle its K-32 tiles stall on. The ring shrinks to CUTLASS's size (80 KiB for
    128x128x32 at five stages, not 100).

    Dense kernels with 16-byte vectors only (quantized B keeps its fragment-ordered rows;
    m8n8k4 reads rows by 8-byte loads)."""

    value = "sm80_xor"
    summary = "multi-stage cp.async pipeline, K tiles of 32 in XOR-swizzled shared rows"
    # NOTE: the default set's prefill tiles of K 32 (sm80_f16.yaml, sm80_bf16.yaml): on the
    # H100 (thirtieth session) 128x128x32 s5 ran in 0.66 of its padded twin's time and
    # 128x256x32 s3 in 0.85 ("nk" B), and the tuner's plans over them reached CUTLASS 2.x's
    # best SM80 tile per llama3 problem (1.01 in the median). "kn" B (rows of N, padded;
    # A swizzled) on the lean "kn" copies: 128x256x32 s4 and 256x128x32 s4 13-18% above the
    # best padded "kn" tile (thirty-third session). bench/experiments/sm80_xor.yaml keeps
    # the other tiles measured beside their twins.

    def tile_error(
        self, cta: tuple[int, int, int], warps: tuple[int, int, int], stages: int, cluster: int = 1
    ) -> tuple[str, str] | None:
        error = super().tile_error(cta, warps, stages, cluster)
        if error:
            return error
        if cta[2] != 32:
            return "cta", f"k = 32 (the swizzle is of 64-byte rows; got k = {cta[2]})"
        return None

    def kernel_error(self, spec: KernelSpec) -> tuple[str, object, str] | None:
        if spec.quantized:
            return "b_type", spec.b_type.value, f"f16 or bf16 (the {self.value} family is for dense B)"
        if spec.align != 8:
            return "align", spec.align, f"8 (the {self.value} family copies whole 16-byte units)"
        return None

    def xor_rows(self, spec: KernelSpec) -> bool:
        return True

    def shared_sm_rate(self, spec: KernelSpec, resident: int) -> float:
        """Where CTAs of 4 warps share an SM in twos or more, the SM's rate, not the
        CTA's: the intensity curve's knee at _XOR_SHARED_SM_KNEE, not 48, the two curves
        meeting at 128x256. On swizzled rows 128x128 at two CTAs an SM ran as fast as
        128x256 at one where both filled their waves (H100, thirtieth session: 443 TFLOP/s
        each at 4096^3, 445 / 450 on llama3-8b gate_up at M = 1024); alone, 4 warps an SM
        do not (not measured; the padded curve is kept)."""
        if resident * spec.threads < 256:
            return 1.0
        cm, cn, _ = spec.cta
        intensity, anchor = cm * cn / (cm + cn), 128 * 256 / (128 + 256)

        def curve(x: float, knee: float) -> float:
            return x / (x + knee)

        shared = curve(intensity, _XOR_SHARED_SM_KNEE) / curve(anchor, _XOR_SHARED_SM_KNEE)
        return max(1.0, shared / (curve(intensity, 48.0) / curve(anchor, 48.0)))

    def mma_efficiency(self, spec: KernelSpec) -> float:
        """The sm80 tile's rate, a little above it: on the H100 the tuner took these tiles
        over the padded K-64 ones of the same CTA shape on every llama3 problem at M = 1024
        and 4096, and its plans went from 0.97 of CUTLASS 2.x's best (padded, H200) to 1.01."""
        return super().mma_efficiency(spec) * _XOR_RATE


class Sm80Rows8Family(Sm80Family):
    """The sm80 family's 4- and 8-bit decode tiles (16 rows, one warp along M, the weights
    straight into registers) for at most 8 rows of A (GemmConfig's RowsA_ 8): A's stages
    hold rows 0-7 only and the decode loop is compiled once, for them, where the 16-row
    tile compiles it for rows 0-7 and again for 0-15. A CTA then takes about half the
    shared memory (the 16-row ring of 16x16x1024 s3 is 96 KiB, 15 rows of it zeros at
    M = 1) and fewer registers (96 against 122 uncapped; 80 without spills under a
    three-CTA cap, sm_90, NVRTC 13.5), so an SM holds more warps. Our M = 1 decode plans
    issue on 45-53% of an H100's scheduler cycles with 13-15 warps an SM, waiting on
    fixed-latency results rather than memory (docs/perf/read_order_h100.md), where
    torch's int4 kernel runs at twice the warps.

    Serves M <= 8 only (rows_error); the 16-row tiles take the rest.

    Measured on an H100 at M = 1, W4, against the default set's tuned plans, same run
    (docs/perf/data/decode_rows8_h100.txt, forty-seventh session): llama3-8b qkv 11.2 ->
    10.6 us (16x16x1024 s3, three CTAs an SM) and 70b qkv 23.6 -> 21.7 (16x16x512 w1x1x4
    s4, five), level within 2% on the other six layers. The loop for rows 0-7 compiles
    28-50 instructions longer here than in the 16-row kernel (sass_loops: 475-497
    against 447), and the phase stamps (docs/perf/data/decode_trace_h100.txt) find the
    16-row loop no faster with the weights in L2: it is bound by its instructions, which
    more warps an SM do not shorten."""

    value = "sm80_rows8"
    summary = "multi-stage cp.async pipeline, quantized decode tiles for at most 8 rows of A"
    # NOTE: not in the default set: it gains on two of eight llama3 layers only (above).
    experimental = True

    def tile_error(
        self, cta: tuple[int, int, int], warps: tuple[int, int, int], stages: int, cluster: int = 1
    ) -> tuple[str, str] | None:
        return super().tile_error(cta, warps, stages, cluster) or _decode_tile_error(cta, warps)

    def kernel_error(self, spec: KernelSpec) -> tuple[str, object, str] | None:
        return _packed_only_error(self, spec)

    def grouped_error(self, spec: KernelSpec) -> str | None:
        return f"false (the {self.value} family has no grouped kernels yet)"

    def a_rows(self, spec: KernelSpec) -> int:
        return 8

    def rows_error(self, spec: KernelSpec, m: int) -> str | None:
        if m > 8:
            return f"serves at most 8 rows of A (M = {m}; the {self.value} family's decode tiles)"
        return None

    def min_ctas_per_sm(self, spec: KernelSpec) -> int:
        """Registers for three CTAs of 8 warps an SM (80 a thread: the loop for rows 0-7
        of 16x16x1024 fits without spills) or five of 4."""
        return {256: 3, 128: 5}.get(spec.threads, 1)

    def min_ctas_per_sm_hopper(self, spec: KernelSpec) -> int:
        return self.min_ctas_per_sm(spec)

    def spill_budget(self, spec: KernelSpec, arch: int) -> int:
        return 0
