"""The SM90 quantized family: weight-only quantized B on wgmma (issue 16), the transposed
product D^T = W . X^T with the dequantized weights as the register A operand
(templates/include/gemm/sm90/kernel_sm90_quant.cuh).

A kernel's ``cta`` is (tokens, weight rows, 64) of D: cta M, the tokens per CTA, is
wgmma's N (8 to 256, a power of two; 8 to 32 for decode); cta N, the weight rows, is 64
per consumer warpgroup (one to four; three take at most 128 tokens, four 64).
``warps`` are the consumer warps, [1, cta N / 16, 1]; a producer warpgroup comes on top.
[1, rows / 16, 2] on 64 or 128 weight rows gives the tile two consumer warpgroups per 64
rows that take its K tiles in turn (Sm90QuantConfig::kKSplit), their sums meeting in
shared memory: on 64 rows a small layer has twice the tiles of the 128-row tile for as
many warps, so it fills the device with fewer stream-K cuts; on 128 rows the tile has
four consumers' warps with the 64x128 tile's fetches of X.
The packed weight keeps the sm80 layout (gemm_runtime.packed_weight), so a checkpoint
packed once runs on either family.

Split-K here is stream-K (templates/include/gemm/sm90/stream_k.cuh): ``splits`` > 1
launches min(resident CTAs, tiles x splits) CTAs, each taking an equal share of all the
tiles' K tiles, so ``splits`` sets how finely the tiles are cut where they are few, and
every count that fills the device is the same launch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from codegen.families.base import MainloopFamily, TensorMapBox
from codegen.families.sm90 import PRODUCER_THREADS, a_box_rows
from codegen.vocabulary import DataType, MmaAtom

if TYPE_CHECKING:
    from codegen.spec import KernelSpec
    from gemm_runtime.context import ProblemKey

CTA_K = 64
TOKENS = (8, 16, 32, 64, 128, 256)  # cta M: the wgmma_rs widths implemented
ROWS = (64, 128, 192, 256)  # cta N: 64 weight rows per consumer warpgroup
PRODUCER_REGS = 40  # Sm90QuantConfig::kProducerRegs
# Registers a consumer thread needs beside its tokens / 2 accumulators: two K tiles' A
# registers (32) and about 40 for addresses, scales, zeros and the loop's state.
CONSUMER_REGS_BESIDE_ACC = 72
_STREAM_K_COMPUTE_FACTOR = 1.05  # split_compute_factor
_STREAM_K_TURNS_COMPUTE_FACTOR = 1.3  # split_compute_factor, tiles taking K tiles in turn
_STREAM_K_WIDE_FACTOR = 1.2  # split_compute_factor, the 256-token tiles' shares
_STREAM_K_TAKE_S = 2.0e-6  # split_seconds
_TAKE_BY_SIZE = 0.25  # split_seconds: the share of a take that grows with the partial's size
_K_TURNS_FACTOR = 0.85  # dequant_rate of the tiles taking K tiles in turn, one a stage
_K_PAIRS_FACTOR = 0.92  # dequant_rate of the tiles taking K tiles in turn, a pair a stage
_WHOLE_STAGES_FACTOR = 1.03  # mma_efficiency of the tiles taking both halves of a pair stage


def consumer_registers(consumers: int) -> int:
    """Sm90QuantConfig::kConsumerRegs: at one CTA per SM the producer warpgroup gives back
    down to PRODUCER_REGS and the consumers share what it gave, in multiples of 8
    (setmaxnreg); one consumer keeps the 255 its launch bounds allow. setmaxnreg.inc
    draws on the CTA's launch allocation only (launch_registers a thread), never on the
    rest of the register file: a larger request never returns."""
    if consumers < 2:
        return 255
    threads = 128 * (consumers + 1)
    return (launch_registers(threads) * threads - 128 * PRODUCER_REGS) // (128 * consumers) // 8 * 8


def launch_registers(threads: int) -> int:
    """Sm90QuantConfig::kLaunchRegs: the registers a thread launches with under
    __launch_bounds__(threads, 1), which ptxas assigns a kernel that uses setmaxnreg."""
    return 65536 // threads // 8 * 8


def max_tokens(consumers: int, blocks: int = 1) -> int:
    """The most tokens (a power of two) whose accumulators fit a consumer thread beside
    the rest: 256 for one or two consumer warpgroups, 128 for three, 64 for four. With two
    m64 weight blocks per consumer (Sm90QuantConfig::kBlocks), a thread holds both blocks'
    accumulators and A registers: 64 tokens, where the kernel's rule stops."""
    if blocks == 2:
        return 64
    room = consumer_registers(consumers) - CONSUMER_REGS_BESIDE_ACC
    return max(t for t in TOKENS if t // 2 <= room)
V_ROWS = 2  # group rows of scales (and of zeros) a K tile needs at most: groups of 32
STAGED_PAD = 4  # floats beyond the weight rows per staged row of D (kStagedPitch)
HANDOFF_PAD = 8  # 16-bit elements beyond the weight rows per row of the hand-off staging (kHandoffPitch)
SMEM_LIMIT = 227 * 1024  # Sm90QuantConfig::kSmemLimit: both forms' ring, staging and buffers


def v_box_rows(group_size: int, k: int, stage_k: int = CTA_K) -> int:
    """Group rows of V one ring stage (``stage_k`` of K: a K tile, or a pair of them)
    needs: its K over the group size (two or four for groups of 32, two for groups of 64
    over a pair), one from the stage's K up and for one group over all of K (a size of K
    or more, however small K is). The kernel computes the same from group_shift
    (Sm90QuantConfig::v_rows in gemm/sm90/quant_config.cuh: one group has a shift of 30)
    for the bytes its full barriers expect; the two must agree, or a barrier never
    completes."""
    if group_size >= k:
        return 1
    return max(1, stage_k // group_size) if group_size < stage_k else 1


def words_per_lane(spec: KernelSpec) -> int:
    """32-bit words of one lane per n8 x k32 block of packed B."""
    return spec.b_type.bits // 4


class Sm90QuantFamily(MainloopFamily):
    value = "sm90_quant"
    shared_b = False  # the form: Sm90QuantConfig's kSharedB (Sm90QuantSmemFamily)
    min_arch = 90
    atoms = (MmaAtom.M64NK16,)
    header = "gemm/sm90/kernel_sm90_quant.cuh"
    entry = "gemm::gemm_sm90_quant"
    summary = "quantized B on wgmma: D^T = W . X^T, TMA ring, register-A operand"
    template = "kernel_sm90_quant.cu.j2"
    # The tile rules of the form (Sm90QuantSmemFamily has its own).
    tokens = TOKENS
    tokens_rule = "tokens per CTA, wgmma's N"
    rows = ROWS
    rows_rule = "64 per consumer warpgroup"
    staged_pad = STAGED_PAD

    def consumer_warps(self, rows: int) -> tuple[int, str]:
        """The warps a tile of ``rows`` weight rows has, and why."""
        return rows // 16, "the consumer warps, 4 per 64 weight rows"

    def k_split(self, spec: KernelSpec) -> int:
        """Consumer warpgroups per weight row, taking the K tiles in turn
        (Sm90QuantConfig::kKSplit): ``warps``' third entry."""
        return 1 if self.shared_b else spec.warps[2]

    @staticmethod
    def consumers(spec: KernelSpec) -> int:
        """Consumer warpgroups (four warps each)."""
        return spec.warps[1] * spec.warps[2] // 4

    @staticmethod
    def k_per_stage(spec: KernelSpec) -> int:
        """K tiles of 64 per ring stage (Sm90QuantConfig::kKPerStage): 2 for cta K 128,
        where the two warpgroups taking K tiles in turn read each stage at once, each its
        half, or (no turns) each warpgroup takes both halves."""
        return spec.cta[2] // CTA_K

    def blocks(self, spec: KernelSpec) -> int:
        """m64 blocks of weight rows per consumer warpgroup (Sm90QuantConfig::kBlocks): 2
        where the tile has half the usual warps ([1, rows / 32, 1]: 32 rows a warp)."""
        return 1 if self.shared_b else spec.cta[1] // (16 * spec.warps[1])

    # ---- validation -------------------------------------------------------------------
    def tile_error(self, cta, warps, stages, cluster=1):
        m, n, k = cta
        # Two consumer warpgroups per 64 weight rows, taking the K tiles in turn (a pair
        # of them a stage where cta K is 128).
        k_turns = not self.shared_b and n in (64, 128) and tuple(warps) == (1, n // 16, 2)
        # A pair of K tiles a stage for one warpgroup per 64 rows taking both, up to 128
        # tokens: a 256-token stage holds 64 KiB of X, so two stages, and 256x128 ran
        # 1.05-1.12x its one-K-tile form's time (docs/NOTES.md, fifty-sixth session).
        whole_stages = not self.shared_b and k == 2 * CTA_K and tuple(warps) == (1, n // 16, 1) and m <= 128
        if k != CTA_K and not (k_turns and k == 2 * CTA_K) and not whole_stages:
            also = (" (or 128: a pair of K tiles a stage, with warps [1, rows / 16, 2] or, up to 128 tokens, "
                    "[1, rows / 16, 1])") if not self.shared_b else ""  # fmt: skip
            return "cta", f"a K of {CTA_K} (one 128-byte swizzled row of X per token and K tile){also}"
        if m not in self.tokens:
            return "cta", f"an M ({self.tokens_rule}) of {' or '.join(map(str, self.tokens))}"
        if n not in self.rows:
            return "cta", f"an N (weight rows per CTA) of {' or '.join(map(str, self.rows))}: {self.rows_rule}"
        consumer_warps, why = self.consumer_warps(n)
        # Register A also takes two m64 blocks per consumer warpgroup: half the warps, 32
        # weight rows each, for one or two consumers.
        two_blocks = not self.shared_b and n in (128, 256) and tuple(warps) == (1, consumer_warps // 2, 1)
        if tuple(warps) != (1, consumer_warps, 1) and not two_blocks and not k_turns:
            also = ""
            if not self.shared_b and n in (128, 256):
                also = f" (or [1, {consumer_warps // 2}, 1]: two m64 blocks of weight rows per consumer warpgroup)"
            if not self.shared_b and n in (64, 128):
                also += f" (or [1, {n // 16}, 2]: two consumer warpgroups per 64 rows taking the K tiles in turn)"
            return "warps", f"[1, {consumer_warps}, 1] for cta N {n}: {why}{also}"
        blocks = 2 if two_blocks else 1
        consumers = warps[1] * warps[2] // 4
        most = m if self.shared_b else max_tokens(consumers, blocks)
        if k_turns:
            most = min(most, 128)  # 256 tokens in turn spill (Sm90QuantConfig::kKSplit's rule)
        if m > most:
            return "cta", (f"at most {most} tokens (cta M) with {n} weight rows: {consumers} consumer warpgroups "
                           f"of {blocks} m64 block(s) share the registers, and a thread holds tokens / 2 "
                           f"accumulators per block")  # fmt: skip
        if not 2 <= stages <= 8:
            return "stages", "2 to 8"
        return super().tile_error(cta, warps, stages, cluster)

    def kernel_error(self, spec: KernelSpec):
        if not spec.quantized:
            return "b_type", spec.b_type.value, "u4 or u8 (dense B is the sm90 family's)"
        if spec.a_type not in (DataType.F16, DataType.BF16):
            return "a_type", spec.a_type.value, "f16 or bf16"
        if spec.align != 8:
            return "align", spec.align, "8 (TMA needs 16-byte aligned rows of X)"
        if spec.arch_min != 90 or spec.arch_max != 90:
            return "arch", [spec.arch_min, spec.arch_max], "[90, 90] (wgmma is an sm_90a instruction)"
        return None

    def grouped_error(self, spec: KernelSpec) -> str | None:
        """Quantized experts (gemm_runtime.experts.PackedExperts): token tile y of a
        launch is one expert's, its weight and scale tiles found in the stacked experts
        seen as one matrix (kernel_sm90_quant.cuh). The register-A form only."""
        if self.shared_b:
            return f"false (the {self.value} form has no grouped kernels)"
        if self.k_split(spec) > 1:
            return "false (warps [1, rows / 16, 2], the K tiles in turn, have no grouped form)"
        if self.k_per_stage(spec) > 1:
            return "false (cta K 128, a pair of K tiles a stage, has no grouped form)"
        return None

    # ---- what a kernel implies --------------------------------------------------------
    def threads(self, spec: KernelSpec) -> int:
        return super().threads(spec) + PRODUCER_THREADS

    def min_ctas_per_sm(self, spec: KernelSpec) -> int:
        """Two CTAs per SM for one consumer warpgroup (64 weight rows) of 64 tokens: its
        registers then fit twice (__launch_bounds__), so an SM runs a second tile's loads
        and wgmma while one tile fills its ring or stores. 128 tokens' accumulators do
        not fit twice without spilling; two consumers take the SM's registers alone."""
        return 2 if spec.cta[1] == 64 and spec.cta[0] == 64 and self.consumers(spec) == 1 else 1

    def stage_bytes(self, spec: KernelSpec) -> int:
        """Sm90QuantConfig::kStageBytes: X's tile, the packed weight's K tile and the
        scales and zeros of two groups (each of a pair's), rounded up to 1024 bytes (X's
        swizzle atoms)."""
        tokens, rows, k = spec.cta
        x = tokens * k * 2
        w = rows // 8 * (k // 32) * 32 * words_per_lane(spec) * 4
        v = 2 * V_ROWS * self.k_per_stage(spec) * rows * 2
        return -(-(x + w + v) // 1024) * 1024

    def staged_bytes(self, spec: KernelSpec) -> int:
        """The D tile the epilogue stages (fp32, rows of weight rows + staged_pad), or a
        landed give where that is larger (Sm90QuantConfig::kStagedBytes: with k_split, the
        tile once per K half)."""
        tokens, rows, _ = spec.cta
        return max(tokens * (rows + self.staged_pad), tokens * rows * self.k_split(spec)) * 4

    def staged_offset(self, spec: KernelSpec) -> int:
        """Sm90QuantConfig::kStagedOffset: the staging as far up as shared memory allows
        (after the ring where it fits, else on a stage boundary within it), so that a
        persistent CTA's next tile fills the stages below it during the epilogue; at the
        ring's start for one consumer warpgroup (64 weight rows: two CTAs share an SM) and for the
        shared-B form (its buffers follow the ring)."""
        stage, staged = self.stage_bytes(spec), self.staged_bytes(spec)
        room = SMEM_LIMIT - 1024 - staged
        if self.shared_b or self.consumers(spec) == 1 or room < 0:  # one consumer warpgroup
            return 0
        return min(spec.stages * stage, room // stage * stage)

    def handoff_bytes(self, spec: KernelSpec) -> int:
        """Sm90QuantConfig::kHandoffBytes: the hand-off epilogue's 16-bit staging of the D
        tile (rows of weight rows + HANDOFF_PAD), 0 where the kernel has none (kHandoff:
        register A, two or more consumer warpgroups, a 16-bit D, room after the stages)."""
        tokens, rows, _ = spec.cta
        size = tokens * (rows + HANDOFF_PAD) * 2
        fits = spec.stages * self.stage_bytes(spec) + size + 1024 <= SMEM_LIMIT
        if self.shared_b or self.k_split(spec) > 1 or self.consumers(spec) < 2 or spec.d_type.bits != 16 or not fits:
            return 0
        return size

    def ring_bytes(self, spec: KernelSpec) -> int:
        """The ring with the stagings (Sm90QuantConfig::kRingAligned), rounded up to 1024."""
        ring = spec.stages * self.stage_bytes(spec)
        end = max(ring, self.staged_offset(spec) + self.staged_bytes(spec), ring + self.handoff_bytes(spec))
        return -(-end // 1024) * 1024

    def smem_bytes(self, spec: KernelSpec) -> int:
        """Mirrors Sm90QuantConfig::kSmemBytes: the ring and 1024 bytes to align the base."""
        return self.ring_bytes(spec) + 1024

    def nvrtc_target(self, arch: int) -> str:
        return f"sm_{arch}a"

    # ---- the launch -------------------------------------------------------------------
    def tensor_maps(self, spec: KernelSpec, key: ProblemKey | None = None) -> tuple[TensorMapBox, ...]:
        """X's box is the CTA's tokens (only M's rows below them, a_box_rows) x 64 K (a
        pair's stage takes two); the packed weight's is its n8 tiles x one stage's K of
        32-bit words; V's is the weight rows x the groups of one stage (v_box_rows, from
        the key's group size)."""
        tokens, rows, k = spec.cta
        x_rows = tokens if key is None else a_box_rows(tokens, key.m)
        v_rows = 1 if key is None else v_box_rows(key.group_size, key.k, k)
        return (TensorMapBox("a", x_rows, CTA_K), TensorMapBox("b", rows // 8, k * words_per_lane(spec), swizzle=0),
                TensorMapBox("v", v_rows, rows, swizzle=0))  # fmt: skip

    def problem_error(self, spec: KernelSpec, k: int) -> str | None:
        return "K = 0 leaves X and W empty, which TMA cannot describe" if k == 0 else None

    def grid(self, spec: KernelSpec, tiles: tuple[int, int], splits: int, swizzle: int, resident: int):
        """As many CTAs as the device holds at once, or fewer where the tiles (cut
        ``splits`` ways) are fewer: without splits each walks the tiles persistently (CTA
        b takes tiles b, b + grid, ..., weight tiles fastest, so consecutive CTAs share
        X's tile in L2), with them stream-K."""
        return self.stream_k_ctas(tiles, splits, resident), 1, 1

    @staticmethod
    def stream_k_ctas(tiles: tuple[int, int], splits: int, resident: int) -> int:
        return max(1, min(resident, tiles[0] * tiles[1] * splits))

    def split_tiles(self, spec: KernelSpec, tiles: tuple[int, int], splits: int, resident: int) -> int:
        """Stream-K's flags: one per CTA (a CTA hands over at most one tile: the one its
        share starts inside)."""
        return self.stream_k_ctas(tiles, splits, resident) if splits > 1 else 0

    def partial_tiles(self, spec: KernelSpec, tiles: tuple[int, int], splits: int, resident: int) -> int:
        """One fp32 partial tile per CTA, in its own slot (stream_k_give); with k_split
        one per K half (Sm90QuantConfig::kPartialFloats)."""
        return self.split_tiles(spec, tiles, splits, resident) * self.k_split(spec)

    def split_key(self, spec: KernelSpec, tiles: tuple[int, int], k_tiles: int, splits: int, resident: int) -> int:
        """Stream-K launches differ by their CTA count alone, and are offered (to the
        tuner and the cost model) only for fewer tiles than two waves of CTAs.

        NOTE: over many tiles the shares spread the CTAs in flight across the whole
        problem, so their X and W tiles no longer meet in L2 (H200, llama3-8b down at
        M = 4096, 256x128: 2714 us unsplit, 3750 us as stream-K), while the last wave's
        idle SMs cost at most a third of a wave's time there."""
        if splits == 1 or tiles[0] * tiles[1] >= 2 * resident:
            return 0
        return self.stream_k_ctas(tiles, splits, resident)

    def rounds(self, spec: KernelSpec, tiles: int, splits: int, slots: int) -> tuple[float, int]:
        """Stream-K's CTAs each run an equal share of the K tiles: tiles x splits
        slices of 1/splits of a tile over the grid, a fraction of a wave where they do
        not fill it evenly; each CTA hands over at most once."""
        if splits == 1:
            return super().rounds(spec, tiles, splits, slots)
        return max(1.0, tiles * splits / min(slots, tiles * splits)), 1

    # ---- the cost model ---------------------------------------------------------------
    def split_seconds(self, spec: KernelSpec, rows: int) -> float:
        """What each share of a tile beyond the first adds: the tile's taker reads the
        ranks above's partials one after another (stream_k_take), each a flag and a read
        through L2 after its last K tile; a quarter of it grows with the partial's
        floats (the rows that exist x the weight rows x the K halves) beyond 64 x 128's.

        NOTE: fitted to the H100's decode runs (docs/perf/data/dispatch_quant_*_h100,
        M = 1 and 16), where the base family's 1.5 us made every further share look cheaper
        than it ran: 64x128 on llama3-8b o (W4, M = 1) took 15.8 / 15.2 / 16.1 / 17.3 us
        split 2 / 3 / 4 / 5 ways where the model said 16.8 / 14.5 / 13.7 / 15.4, and on 8b
        qkv (W8) three shares ran 20.0 us against 17.5 for two. At 2 us the fp16 decode
        runs' worst picks go from 1.18-1.22 to 1.09-1.11 of the fastest timed plan; no
        file's median moves by more than 0.002 (docs/NOTES.md, forty-sixth session).
        The part by size: 128x64 in turn (two K halves of 128 x 64) took llama3-8b qkv at
        128 tokens in 22.5 us split two ways and 19.4 whole (H100, fifty-fifth session);
        the whole take by size moved 70b down at 128 tokens off 128x192 split three ways,
        its fastest on the H100 and the H200."""
        floats = min(spec.cta[0], rows) * spec.cta[1] * self.k_split(spec)
        return _STREAM_K_TAKE_S * max(1.0, 1.0 - _TAKE_BY_SIZE + _TAKE_BY_SIZE * floats / (64 * 128))

    def split_compute_factor(self, spec: KernelSpec, tiles: int, splits: int, slots: int) -> float:
        """Stream-K shares that cross tiles run slower than whole tiles. Where the tiles
        cut ``splits`` ways outnumber the resident CTAs, each CTA's share starts and ends
        inside tiles (a ring fill and a hand-over at each end) and the CTAs in flight
        spread over all of K, so the weight tiles of one token tile no longer read its X
        tile from L2 together (split_key's NOTE). H200 (docs/perf/dispatch_quant.md, W4
        and W8): two-way stream-K of 256x128 at M = 1024 took 1.05-1.35x the unsplit time
        on llama3-8b o and down and 70b o and down (whole tiles fill 97% of their waves),
        where the model, pricing the shares at the tiles' rate, had predicted it 1-3%
        faster; at M = 128, shares that are whole fractions of a tile (tiles x splits at
        most the resident CTAs: 8b qkv 128x128 k2, 70b down 128x192 k3) ran 4-8% faster
        than the next count, whose shares cross tiles. At 5% the model takes the unsplit
        tiles at M = 1024 and 70b down's three shares; 8b qkv's three it still predicts
        10% faster than two. Larger factors moved decode picks to plans measured slower
        (docs/NOTES.md, thirty-sixth session). The tiles taking K tiles in turn lose more
        where shares cross tiles: 128x64 in turn on llama3-8b qkv at 128 tokens took 22.5
        us split two ways (192 shares on 132 CTAs) against 19.4 whole, o at 256 tokens 25.9
        against 19.6, where its shares that are whole halves (8b down, 128 on 128) were the
        fastest plan (H100, fifty-fifth session, docs/NOTES.md); 1.15-1.4 fit the recorded
        runs alike (1.3 with the L2 bound of cost_model._X_L2_BYTES_PER_CLOCK).
        The 256-token tile's shares run slower than its whole tiles even where they are
        whole fractions of a tile: on an H100, llama3-70b o at 256 tokens took 56.4 us
        split two ways against 84.9 whole (0.66, where the model had 0.56), and the
        model took 256x128 split where unsplit 128-token tiles ran 1.05-1.17x faster
        (8b qkv at 1024, 8b down, 70b qkv and o at 256; W4 and W8, fifty-eighth session,
        docs/perf/dispatch_quant_128x128_whole_h100.md and ..._w8_...). 1.2 takes the
        median and mean of the model's picks over all the recorded runs from 1.0084 /
        1.0251 to 1.0069 / 1.0215 of the fastest timed plans, no run worse; 1.35 is
        worse again (docs/NOTES.md)."""
        if splits == 1:
            return 1.0
        wide = _STREAM_K_WIDE_FACTOR if spec.cta[0] == 256 else 1.0
        if tiles * splits <= slots:
            return wide
        return wide * (_STREAM_K_TURNS_COMPUTE_FACTOR if self.k_split(spec) > 1 else _STREAM_K_COMPUTE_FACTOR)

    def mma_efficiency(self, spec: KernelSpec) -> float:
        """wgmma's rate on this tile against the SM's mma.sync peak: the tokens (wgmma's
        N) set how much of a K tile's time goes to the MMAs rather than to dequantizing
        and to the tile's fixed costs. Fitted to the H200 (bench/experiments/
        sm90_quant_tiles.py, W4 and W8, llama3-8b and 70b layers, M = 1 to 4096): about
        470, 680 and 880 TFLOP/s of MMA time for 64, 128 and 256 tokens. Each consumer
        warpgroup beyond two adds 5%: their warps hide more of each other's latency
        (the 64x256 and 128x192 W4 tiles measured 5-22% faster than the two-consumer
        tiles of as many tokens on the large layers; fitted so that the pick over the
        sixteenth session's sweep is within 8.5% of the best timed, 1.0 in the median).
        A warpgroup taking both halves of a pair stage waits, releases and steps the
        ring once per two K tiles: 64x256 and 128x192 took 0.97-0.99x their one-K-tile
        form's time (H200, fifty-sixth session)."""
        tokens, rows, _ = spec.cta
        consumers = self.consumers(spec)
        whole_stages = _WHOLE_STAGES_FACTOR if self.k_per_stage(spec) > 1 and self.k_split(spec) == 1 else 1.0
        return 2.36 * tokens / (tokens + 110.0) * (1 + 0.05 * max(0, consumers - 2)) * whole_stages

    def dequant_rate(self, spec: KernelSpec) -> float:
        """The sm80 decode kernels' rate (the default): the same Dequant code, each
        weight dequantized once per CTA, under the previous K tile's wgmma. Less where the
        K tiles go in turn on 64 rows: the ring hands a CTA its stages no faster than on
        128 rows, and each of the two warpgroups takes every other one (docs/NOTES.md,
        fifty-third session; fitted so that the pick on llama3's layers follows the H100
        sweep of the fifty-second session, docs/perf/data/sm90_quant_k_turns_h100.txt).
        With a pair of K tiles a stage both warpgroups read every stage and the 64-row
        tile runs nearer 64x128's rate (8b gate_up at 64 tokens: 45 us, 64x128 42, one K
        tile a stage 55; fifty-fourth session)."""
        if self.k_split(spec) == 1 or spec.cta[1] >= 128:
            return 1.0
        return _K_PAIRS_FACTOR if self.k_per_stage(spec) > 1 else _K_TURNS_FACTOR

    def stages_in_flight(self, spec: KernelSpec) -> int:
        """K tiles of 64 in flight: every stage (the producer refills a stage once its
        consumers release it), each of cta K / 64 of them."""
        return spec.stages * self.k_per_stage(spec)

SMEM_TOKENS = (64, 128)  # cta M: wgmma M slices of 64 tokens, one or two
SMEM_ROWS = (128, 256)  # cta N: two consumer warpgroups, each wgmma's N over half of them
SMEM_STAGED_PAD = 8  # floats beyond the weight rows per staged row of D (StagedTile)


class Sm90QuantSmemFamily(Sm90QuantFamily):
    """The same kernel (kernel_sm90_quant.cuh, Sm90QuantConfig's kSharedB) in the other
    form: D = X . W^T with the weights dequantized into shared memory as wgmma_ss's B
    operand. The tokens are wgmma's M, in slices of 64; each of two consumer warpgroups
    dequantizes half the CTA's weight rows (one stmatrix per n8 x k32 block) into its own
    double buffer and runs wgmma over them with N = half the rows.

    NOTE: why a second form: with 64 tokens the register-A form's wgmma is m64n64k16,
    which on the H200 ran at about 370-425 TFLOP/s with no dequantization at all
    (NOTES); here a 64-token tile's wgmma is m64n128k16 (465 TFLOP/s so), at the price
    of the dequantized tile's trip through shared memory and a warpgroup barrier per K
    tile, which made the whole slower."""

    value = "sm90_quant_smem"
    summary = "quantized B on wgmma: D = X . W^T, weights dequantized into shared memory, TMA ring"
    shared_b = True
    # NOTE: slower than the register-A form on every problem timed (docs/NOTES.md), so
    # none of its kernels is in the default set; tests/gpu/test_sm90_quant_kernel.py
    # launches its tiles directly, and bench/experiments/sm90_quant_variants.py times
    # them (tiles ending in "m").
    experimental = True

    tokens = SMEM_TOKENS
    tokens_rule = "tokens per CTA, wgmma M slices of 64"
    rows = SMEM_ROWS
    rows_rule = "two consumer warpgroups, each wgmma's N over half of them"
    staged_pad = SMEM_STAGED_PAD

    def consumer_warps(self, rows: int) -> tuple[int, str]:
        return 8, "the consumer warps, two warpgroups"

    def min_ctas_per_sm(self, spec: KernelSpec) -> int:
        return 1

    def smem_bytes(self, spec: KernelSpec) -> int:
        """Mirrors Sm90QuantConfig::kSmemBytes with kSharedB: the ring, the buffers of
        dequantized weights after it, and 1024 bytes to align the base."""
        _, rows, k = spec.cta
        return self.ring_bytes(spec) + self.b_buffers(spec) * rows * k * 2 + 1024

    def b_buffers(self, spec: KernelSpec) -> int:
        """Sm90QuantConfig::kBBuffers: three K tiles of dequantized weights per consumer
        warpgroup where they fit beside the ring (one warpgroup barrier per K tile), else two."""
        _, rows, k = spec.cta
        return 3 if self.ring_bytes(spec) + 3 * rows * k * 2 + 1024 <= SMEM_LIMIT else 2

    def mma_efficiency(self, spec: KernelSpec) -> float:
        """wgmma's rate on this tile against the SM's mma.sync peak: N is half the weight
        rows whatever the tokens, so 64 tokens run nearer the 128-token register-A tile's
        rate, less the dequantized tile's shared-memory traffic. A first estimate, for
        the tuner to correct."""
        tokens, rows, _ = spec.cta
        return 2.36 * (rows / 2) / (rows / 2 + 110.0) * (0.85 if tokens == 64 else 0.95)

