"""Predicted time of a launch (kernel, split count, swizzle) for ranking candidates:
waves of CTAs on this GPU's SMs at the kernel's occupancy, MMA work per SM, and the
bytes the problem must move through DRAM. A ranking aid, not a stopwatch: the tuner
measures the top of this ranking."""

from __future__ import annotations

import functools
import math
import numbers
import statistics
from dataclasses import dataclass
from typing import Iterable, Protocol

from codegen.spec import KernelSpec
from gemm_runtime.context import ProblemKey
from gemm_runtime.errors import GemmArgumentError
from gemm_runtime.plan import SWIZZLES, LaunchSpec

# mma.sync fp16/bf16 FLOP per clock per SM, by arch (Volta/Turing 1024, Ampere+ 2048).
_MMA_FLOP_PER_CLOCK = {70: 1024, 75: 1024, 80: 2048, 86: 1024, 87: 2048, 89: 1024, 90: 2048}
# Lower-alignment kernels move data in narrower pieces; keep them as a last resort.
_ALIGN_PENALTY = {8: 1.0, 4: 1.5, 2: 3.0, 1: 8.0}
_LAUNCH_S = 3e-6  # fixed cost of a launch
# NOTE: the ranking searches groups of up to 8 N tiles, a subset of plan.SWIZZLES that
# keeps the candidates (and what the tuner refines) few; the wider groups stay valid for
# forced kernels and cache records.
_SEARCHED_SWIZZLES = tuple(s for s in SWIZZLES if s <= 3)
_OVERLAP_LOSS = 0.2
_SMS_TO_SATURATE = 0.3  # fraction of the SMs whose combined loads saturate DRAM
# A copy's round trip from DRAM under a saturating load. Refitted to the H200 under the
# read flush (docs/NOTES.md, twenty-first session: 8 600 timed dense fp16 plans of the
# llama3 layers at M = 1 / 16 / 64 / 128; 2 us, fitted under the written flush, put
# every unsplit decode plan 6-25% above its time and the default's picks at M = 1 at
# 1.07x the best timed plan in the mean, 1.02x with 1.6 us and the sm90 hand-over's).
_DRAM_LATENCY_S = 1.6e-6
# Quantized B: every weight becomes a 16-bit value in the SM's ALUs before its MMA
# (dequant.cuh), a cost per weight rather than per FLOP, and the one decode kernels are
# bound by. Fitted to the H200 decode sweeps (bench.sweep_quant, W4 group 128): w warps
# get 1 - exp(-w / 9) of the SM's rate (the kernels are latency-bound, so a few warps
# leave it mostly idle), and a warp taking s k32 steps per K tile s / (s + 1.2) of it
# (the per-tile copies and barrier); full, an SM turns out about 23 weights per clock
# with 4 steps per tile.
_DEQUANT_WEIGHTS_PER_CLOCK = 30.0
_DEQUANT_WARPS_SCALE = 9.0
_DEQUANT_TILE_STEPS = 1.2
_QUANT_LONE_CTA = 0.85
# The rate above was fitted to decode warps of two pairs of n8 tiles (32 columns; every
# quantized sm80 / sm70 tile of the time). A warp of one pair (the narrow decode tiles,
# 16 columns) pays a k32 step's fixed work, A's fragments and the group test, for half
# the weights: at up to 8 rows that work is about half a pair's (rate x 0.75); at 9-16
# (two token tiles, and A's copies, 16 rows per CTA of 16 columns, several times the
# CTA's weight bytes) the narrow tiles took 1.35-1.73x the two-pair tiles' time (x 0.3).
# Fitted to the H200 (bench.experiments.decode_ring --yaml decode_narrow_tiles.yaml and
# bench.dispatch --bits 4 8 --m 1 16, twentieth session): at M = 1 the narrow tiles took
# 0.75-0.95x the two-pair tiles' time on the small llama3-8b layers and lost on the
# large ones.
_ONE_PAIR_RATE = {False: 0.75, True: 0.3}  # by "more than 8 rows"
# A CTA of 32 columns at 9-16 rows pays the same way at half the ratio (A's 16 rows copied
# for every 32 columns; its warps are two-pair ones, which the fit above does not cover):
# on the H200 at M = 16 the bf16 16x32x512 W4 tile took 1.12-1.54x the 16x128x256 tile's
# best plan on the llama3-8b layers, where the model without this put it 0.81-1.03x
# (docs/perf/register_cap.md, twenty-fourth session; 0.6 gives 1.11-1.58x).
_NARROW_CTA_RATE = 0.6
# A decode loop whose registers were capped below its need reloads spilled words every
# iteration and keeps fewer weight loads in flight. Where the grid has at most a CTA per
# SM the cap's second CTA brings nothing and only that remains: on the H200 (NVRTC 13.0,
# docs/NOTES.md, twenty-fourth session; docs/perf/register_cap.md) the bf16 16x128x256 W4
# tile capped at 128 registers (116-152 bytes of spill stores and loads) took 1.15-1.55x
# its uncapped twin's time on grids of 32-154 CTAs (Qwen-MoE-like one token gate_up 17.5
# against 14.6 us, llama3-8b down at M = 16 split 4 31.0 / 23.2) and 0.70-0.96x on grids of
# 224-2688 (Mixtral-like rows, llama3-8b gate_up): the second CTA's warps, which
# _DEQUANT_WARPS_SCALE prices. A heavier spill costs on every grid in the loop for 9-16
# rows, which spills more: the 16x32x512 tile (204 bytes) took 1.07-1.54x its uncapped
# form's time at M = 16 on 128-768 CTAs, and 0.99-1.09x at M = 1. Smaller spills (16
# bytes stored and 16 loaded, the f16 tiles' 9-16-row loop on sm_80) measured nothing.
_SPILLED_RATE = 0.85
_SPILL_BYTES_PRICED = 64  # spill stores and loads together (build_manifest's spills)
_SPILL_BYTES_ALWAYS_PRICED = 192  # beyond this, priced whatever the grid at more than 8 rows
# Per weight, what the kernels' dequantization of a type pair costs against the fp16 4-bit
# one that _DEQUANT_WEIGHTS_PER_CLOCK was fitted to. bf16 activations with 8-bit codes go
# through fp32 (gemm/dequant.cuh, Dequant<BFloat16, 8>: the codes do not fit bf16's
# mantissa, so no deferred scaling either): about 3.5 instructions a weight in the loop,
# where the others take 1-1.5. Fitted to the H100's bf16 decode run (docs/perf/data/
# dispatch_quant_bf16_decode_h100.json.gz, forty-fourth session): the model's bf16 W8
# picks at M = 1 went from 1.030 of the fastest timed plan in the median (1.32 at worst:
# llama3-70b qkv on the 16x32x512 tile, 51.4 us against 38.9) to 1.008 (1.03), at M = 16
# from 1.065 (1.25) to 1.046 (1.12); 1.2-1.3 fit about as well, the other pairs want 1.
_DEQUANT_TYPE_COST = {("bf16", 8): 1.25}
# A lone token tile's rows of A, read by every CTA of the grid through cp.async (the
# sm80 family; not TMA's boxes): those few lines are hot in L2 and come at about DRAM's
# rate, on top of the weights. H200, dense fp16 at M = 16 against M = 1, the same plans
# (docs/NOTES.md, twenty-first session): the narrow 16x16x256 / 16x32x256 / 16x64x256
# tiles took 2.7-25.7 us longer for 12-126 MB of A reads (4.4-6 TB/s), the sm80
# 16x64x128 tile 9-26 us for 59-235 MB (6-12 TB/s); the sm90 tiles (TMA) none. The
# quantized kernels' fit (_ONE_PAIR_RATE) already holds it.
_HOT_A_RATE = 1.3  # x the DRAM rate
# The quantized kernels that read X (A) by TMA (sm90_quant) read each X tile once per weight
# tile column, from L2 after the first: an SM pulls those bytes faster than the weights
# from DRAM (the per-SM bound counts them at this share), but all the columns' reads
# together pass through L2 at about this many bytes a clock and SM (L2 is the same on the
# H100 and the H200; their DRAM is not), a bound of its own beside the MMAs and DRAM.
# Fitted on the H100 run with 128x64 in turn (docs/perf/data/dispatch_quant_128x64_pairs_
# h100.json.gz, every feasible plan at 128 and 256 tokens; fifty-fifth session, docs/
# NOTES.md): that tile reads X twice as often as 128x128, 1.9 GB on llama3-70b gate_up at
# 128 tokens, which took 215 us (9.8 TB/s from L2) where 128x128 took 205. 32 bytes (8.4
# TB/s) prices it at 253 us, above its time, as it does whole 128x64 tiles on llama3-8b
# down at 256 tokens (60 us for 50); but this model's MMA term is 20-30% high on such
# large layers, and at the measured 36-38 bytes the bound no longer outweighed 128x128's
# last partial wave there. Without the share, whole 128x64 tiles on 96 CTAs (llama3-8b qkv, 19.4 us) were priced above 128x128
# split two ways (21.5); any share in 0.5-0.75 fits alike. The L2 bound inside the
# bandwidth term (and so in the overlap loss) moved X-heavy decode picks on the H200
# (llama3-8b qkv at 32 tokens to 32x128 in turn, 1.13x the fastest).
_X_SM_SHARE = 0.6
_X_L2_BYTES_PER_CLOCK = 32.0  # an SM's share of L2's rate


@dataclass(frozen=True)
class DeviceModel:
    sms: int
    mma_flops_per_sm: float  # FLOP/s of one SM on mma.sync
    dram_bytes_per_s: float  # achievable DRAM bandwidth
    sm_clock_hz: float = 1.5e9

    def __post_init__(self) -> None:
        # NOTE: every term of predict divides by one of these: a 0 raised ZeroDivisionError
        # from inside the ranking, a NaN or negative one ranked by nonsense costs.
        if isinstance(self.sms, bool) or not isinstance(self.sms, numbers.Integral) or self.sms < 1:
            raise GemmArgumentError("DeviceModel.sms", repr(self.sms), "an integer >= 1 (the device's SMs)")
        for name in ("mma_flops_per_sm", "dram_bytes_per_s", "sm_clock_hz"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 < value < math.inf:
                raise GemmArgumentError(f"DeviceModel.{name}", repr(value), "a finite number > 0")

    @classmethod
    def of(cls, arch: int, sms: int, sm_clock_khz: int, mem_clock_khz: int, bus_bits: int) -> "DeviceModel":
        for name, value in (("sms", sms), ("sm_clock_khz", sm_clock_khz), ("mem_clock_khz", mem_clock_khz),
                            ("bus_bits", bus_bits)):  # fmt: skip
            # NOTE: a driver that reports 0 for one (the attributes registry.DeviceInfo reads)
            # is named here rather than as the rate it would zero.
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 < value < math.inf:
                raise GemmArgumentError(name, repr(value), "a finite number > 0, as the device reports it")
        per_clock = _MMA_FLOP_PER_CLOCK.get(arch, 2048 if arch >= 80 else 1024)
        # Double data rate; ~85% of the theoretical peak is what copies reach.
        dram = 2.0 * mem_clock_khz * 1e3 * bus_bits / 8 * 0.85
        return cls(sms, per_clock * sm_clock_khz * 1e3, dram, sm_clock_khz * 1e3)


class _Kernel(Protocol):
    @property
    def spec(self) -> KernelSpec: ...

    @property
    def ctas_per_sm(self) -> int: ...


def tiles_of(spec: KernelSpec, key: ProblemKey) -> tuple[int, int]:
    """(M, N) output tiles of a launch; a grouped launch's M tiles are its bound on the
    experts' tile rows, what its grid and workspace cover (gemm_runtime.grouped.prepare).
    The host knows the rows R and the experts E, not how the rows split: with t <= min(E,
    R) experts holding r_e rows each, the tile rows of CTA M c are
    sum ceil(r_e / c) = sum floor((r_e + c - 1) / c) <= floor((R + t (c - 1)) / c),
    a sum of floors being at most the floor of the sum, so the bound is
    floor((R + min(E, R) (c - 1)) / c). One token's rows, one an expert, are R tile rows
    exactly.

    NOTE: the bound launches CTAs that only find they have nothing to do (and, where
    stream-K shares the bound's K tiles among the CTAs, shares of nothing): the earlier
    ceil(R / c) + E launched 65 tile rows' CTAs for one token's 6 rows over 64 experts,
    and ceil(R / c) + min(E, R) still one tile row too many at every decode width."""
    if key.experts:
        c = spec.cta[0]
        return (key.m + min(key.experts, key.m) * (c - 1)) // c, math.ceil(key.n / spec.cta[1])
    return math.ceil(key.m / spec.cta[0]), math.ceil(key.n / spec.cta[1])


def resident_ctas(device: DeviceModel, ctas_per_sm: int) -> int:
    """CTAs of a kernel the device holds at once, as the cost model and the workspace
    check count them: the slots of its waves (MainloopFamily.rounds) and what a
    persistent family sizes its grid by (MainloopFamily.split_tiles). For kernels
    without clusters, the only ones that split, it is registry.Kernel.resident, which
    sizes the grid actually launched."""
    return max(1, device.sms * ctas_per_sm)


def workspace_bytes(spec: KernelSpec, key: ProblemKey, splits: int, *, resident: int) -> tuple[int, int]:
    """(semaphore bytes, partial bytes) a split-K launch uses: for each tile that hands
    K slices over (the family says which: MainloopFamily.split_tiles; sm90 splits only
    the tiles beyond whole rounds of its grid), an int32 semaphore and the fp32
    partial tiles of all its splits but the last (which sums them). ``resident``: CTAs
    of the kernel the device holds at once (resident_ctas)."""
    tiles = tiles_of(spec, key)
    if not tiles[0] * tiles[1]:
        return 0, 0  # an empty output (M or N = 0) splits nothing
    semaphores = spec.mainloop.split_tiles(spec, tiles, splits, resident)
    partials = spec.mainloop.partial_tiles(spec, tiles, splits, resident)
    return semaphores * 4, partials * spec.cta[0] * spec.cta[1] * 4


def fits_workspace(
    spec: KernelSpec, key: ProblemKey, splits: int, barriers_bytes: int, partials_bytes: int, *, resident: int
) -> bool:
    """Whether split-K's semaphores and fp32 partials (workspace_bytes) fit the workspace."""
    semaphores, partials = workspace_bytes(spec, key, splits, resident=resident)
    return semaphores <= barriers_bytes and partials <= partials_bytes


def split_options(
    spec: KernelSpec, key: ProblemKey, max_splits: int, barriers_bytes: int, partials_bytes: int, *, resident: int
) -> list[int]:
    """Split counts this kernel may use for ``key`` with a workspace of the given sizes:
    each split needs at least one K tile, and the tile semaphores and fp32 partials
    must fit the workspace. ``resident``: as for fits_workspace (the check
    feasibility.launch_error makes of the same launch, with the same count)."""
    k_tiles = max(1, math.ceil(key.k / spec.cta[2]))
    max_splits = min(max_splits, spec.mainloop.max_splits(spec) or max_splits)
    tiles = tiles_of(spec, key)
    options = [1]
    if not tiles[0] * tiles[1]:
        return options  # an empty output: nothing to split (and no grid to split it over)
    # Only counts that change the launch (the family says what does: by default the K
    # tiles per split); others duplicate a smaller count.
    seen = {spec.mainloop.split_key(spec, tiles, k_tiles, 1, resident)}
    for s in range(2, min(max_splits, k_tiles) + 1):
        key_s = spec.mainloop.split_key(spec, tiles, k_tiles, s, resident)
        if key_s not in seen and fits_workspace(spec, key, s, barriers_bytes, partials_bytes, resident=resident):
            seen.add(key_s)
            options.append(s)
    return options


def swizzle_options(spec: KernelSpec, key: ProblemKey) -> list[int]:
    """Rasterization groups that fit the N tiles (a group wider than N does nothing new);
    grouped launches rasterize only in the persistent families (grouped.launch_block)."""
    if spec.grouped and not spec.mainloop.persistent:
        return [0]
    _, tn = tiles_of(spec, key)
    return [s for s in _SEARCHED_SWIZZLES if s == 0 or (1 << s) <= tn]


def expected_experts_touched(rows: int, experts: int) -> float:
    """The experts a routing of ``rows`` rows touches on average when they spread evenly:
    what the host can know without reading the offsets."""
    return experts * (1.0 - (1.0 - 1.0 / experts) ** rows) if rows and experts else 0.0


@functools.lru_cache(maxsize=4096)
def expected_tile_rows(mean_rows: float, experts: int, cta_m: int) -> float:
    """Tile rows of cta_m rows an expert takes on average when its rows fall around
    ``mean_rows`` as a uniform router spreads them (binomial: sd = sqrt(mean (1 - 1/E)),
    here normal, at 16 quantiles): a partial last tile costs a whole one, so an expert
    of 256 +- 16 rows takes 2.5 tiles of 128 rows, one of 200 +- 14 rows two."""
    if mean_rows <= 0:
        return 0.0
    sd = math.sqrt(mean_rows * (1.0 - 1.0 / max(1, experts)))
    normal = statistics.NormalDist()
    quantiles = (normal.inv_cdf((i + 0.5) / 16) for i in range(16))
    return sum(math.ceil(max(1.0, mean_rows + sd * z) / cta_m) for z in quantiles) / 16


def grouped_pricing_key(key: ProblemKey) -> ProblemKey:
    """A dense problem priced like the grouped ``key``: the touched experts' weights side
    by side along N, against the mean rows of an expert. The tiles, the weight bytes
    and the K loop match; A's bytes are counted once rather than per expert (small
    beside the weights where the two differ)."""
    touched = max(1.0, expected_experts_touched(key.m, key.experts))
    return key._replace(n=key.n * math.ceil(touched), m=max(1, round(key.m / touched)), experts=0)


# Grouped TMA (sm90) kernels where an expert has fewer than 16 rows: bench.moe (H200,
# bf16, every grouped kernel forced in one run) measured the best sm80 grouped kernel
# level with or up to 10% faster than the best sm90 one at 1 to 12 rows per expert
# (Mixtral-like at 1 and 16 tokens, Qwen-MoE-like at 1, 16 and 128), where the dense
# pricing below calls the sm90 kernels faster; at 32 rows (Mixtral, 128 tokens) sm90's
# 64x128 was 16-37% faster. Fitted, not explained. Not for quantized experts: there
# the sm90_quant 64x128 kernel was the fastest at one token in both configurations
# (W4A16, bench.moe, H200: 7-19% faster than the sm80 ones), priced as it is.
_GROUPED_TMA_FEW_ROWS = 16
_GROUPED_TMA_FEW_ROWS_FACTOR = 2.0
# A grouped CTA finds its expert before its first copy: ceil(E / 32) rounds of loads of
# the offsets and a warp's prefix sum (gemm/grouped.cuh), every CTA of the launch's bound
# on the tile rows, per split, the empty ones included. Priced only where a split adds
# waves of such CTAs: bench.moe (H200, one run, Qwen-MoE-like E = 64) measured sm80's
# 16x64 W4 at one token 21.3 us split 2 (616 CTAs) against 18.8 unsplit (308), which the
# model called 0.9 us faster, and 16x128 W4 at 16 tokens 72.4 split 2 against 62.0.
# Fitted to quantized experts and priced for them only: priced per wave of every grouped
# launch, the term turned dense decode from 16x64 to 32x128 tiles that ran 4-30% slower,
# and priced per added wave for dense kernels too, Mixtral-like one-token down from
# 16x64 split 2 (70.9 us) to 32x128 split 2 (92.9): the dense kernels' latency term
# already prices their short slices.
_GROUPED_SCAN_ROUND_S = 1.5e-6


def grouped_scan_seconds(spec: KernelSpec, key: ProblemKey, splits: int, slots: int) -> float:
    """Seconds the waves a split adds to a grouped grid of quantized experts (the bound's
    tiles times the splits, ``slots`` at a time) spend finding their experts; 0 unsplit
    and for dense experts."""
    if not spec.quantized:
        return 0.0
    tm, tn = tiles_of(spec, key)
    added = math.ceil(tm * tn * splits / max(1, slots)) - math.ceil(tm * tn / max(1, slots))
    return added * math.ceil(key.experts / 32) * _GROUPED_SCAN_ROUND_S


def predict(
    spec: KernelSpec, ctas_per_sm: int, device: DeviceModel, key: ProblemKey, splits: int = 1, *, spills: int = 0
) -> float:
    """Predicted seconds for one launch; ``spills``: the cubin's bytes of register spill
    (registry.Kernel.spills)."""
    if key.experts:
        priced = grouped_pricing_key(key)
        # Partial last tiles: where the experts' rows straddle tile boundaries, the
        # expected tile rows exceed the mean's; the extra share widens N (tiles and the
        # weights they read again) rather than M, which would round to whole tile rows.
        # bench.experiments.grouped_overhead (H200): Mixtral-like down at 1024 tokens,
        # 128x256 as routed 450 TFLOP/s against 702 with every expert's rows whole tiles.
        whole = math.ceil(priced.m / spec.cta[0])
        tile_rows = expected_tile_rows(key.m / max(1.0, expected_experts_touched(key.m, key.experts)), key.experts,
                                       spec.cta[0])  # fmt: skip
        if tile_rows > whole:
            priced = priced._replace(n=round(priced.n * tile_rows / whole))
        t = predict(spec, ctas_per_sm, device, priced, splits, spills=spills)
        if spec.mainloop.reads_a_by_tma(spec) and not spec.quantized and priced.m < _GROUPED_TMA_FEW_ROWS:
            t *= _GROUPED_TMA_FEW_ROWS_FACTOR
        return t + grouped_scan_seconds(spec, key, splits, resident_ctas(device, ctas_per_sm))
    cm, cn, ck = spec.cta
    tm, tn = tiles_of(spec, key)
    if not tm * tn:
        # An empty output (M or N = 0): no CTA computes anything (Gemm launches nothing
        # for it); every term below would divide by the empty grid.
        return _LAUNCH_S
    k_tiles = max(1, math.ceil(key.k / ck))
    per_split = math.ceil(k_tiles / splits)
    ctas = tm * tn * splits
    resident = max(1, ctas_per_sm)
    # Waves of 1/splits-long units (the family knows which tiles split: sm90 splits only
    # those beyond whole rounds of its persistent grid), and the waves that hand over.
    slots = resident_ctas(device, ctas_per_sm)
    waves, handover_waves = spec.mainloop.rounds(spec, tm * tn, splits, slots)
    # MMA time: the resident CTAs of a wave share their SM, at the rate the family's
    # mainloop sustains on this tile (codegen.families: MainloopFamily.mma_efficiency).
    per_sm = min(resident, math.ceil(ctas / device.sms))
    # CTA-lengths of work on the busiest SM. Where several CTAs share an SM, the next wave's
    # start as this wave's end, one by one, so a grid of several waves costs the busiest
    # SM's CTAs, not whole waves of resident CTAs (H100, sm80 128x128x32 s5 at two CTAs an
    # SM: llama3-70b qkv at M = 1024, 640 CTAs, 2.42 waves of 264, ran in 0.91 of one CTA an
    # SM's 128x256 over 2.42 waves of 132; docs/NOTES.md, thirty-first session). Persistent
    # and stream-K grids keep their family's rounds.
    busiest = waves * per_sm
    if resident > 1 and not spec.mainloop.persistent and isinstance(waves, int):
        busiest = min(busiest, math.ceil(ctas / device.sms))
    efficiency = spec.mainloop.mma_efficiency(spec) * spec.mainloop.shared_sm_rate(spec, per_sm)
    if spec.quantized and resident == 1:
        # A lone CTA's tile-end barrier idles its SM, and the dequantizing warps' uneven
        # progress makes those waits long (W4, M = 128 on the H200: 128x128x64 at one
        # CTA per SM 15-18% slower than 64x128x64 at two, with the same warp tiles).
        efficiency *= _QUANT_LONE_CTA
    efficiency /= _ALIGN_PENALTY[spec.align]
    t_mma = busiest * 2.0 * cm * cn * per_split * ck / (device.mma_flops_per_sm * efficiency)
    # Every warp along M dequantizes the same weights for its own rows.
    t_deq = dequant_time(spec, ctas, resident, device, spec.warps[0] * cn * per_split * ck, rows=key.m,
                         spills=spills)  # fmt: skip
    # Stream-K's waves may be a fraction (MainloopFamily.rounds): its CTAs share the
    # tiles' K tiles evenly, where dequant_time counts whole CTAs per SM.
    t_deq *= waves / math.ceil(waves)
    # NOTE: the dequantization rate was fitted to whole decode kernels (one m16 tile per
    # warp), MMAs included; the thin-tile MMA estimate above overstates them by 15-30%.
    t_compute = t_deq if spec.quantized and spec.warp_tile[0] == 16 else max(t_mma, t_deq)
    t_compute *= spec.mainloop.split_compute_factor(spec, tm * tn, splits, slots)
    # Memory time, the larger of two bounds: every operand byte once through DRAM,
    # and each SM fetching its CTAs' tiles at what one SM can pull (about a third of
    # the SMs together saturate DRAM), which is what limits grids of few CTAs.
    a_bits, b_bits = key.a_type.bits, key.b_type.bits  # b: 4 or 8 for quantized weights
    unique = (key.m * a_bits + key.n * b_bits) * key.k // 8 + key.m * key.n * key.d_type.bits // 8
    # The fp32 partials each split tile writes and its last slice reads back (the family
    # says which tiles split: MainloopFamily.split_tiles), of D's rows only (split_k.cuh).
    split_tiles = spec.mainloop.split_tiles(spec, (tm, tn), splits, slots)
    unique += spec.mainloop.partial_tiles(spec, (tm, tn), splits, slots) * min(cm, key.m) * cn * 4 * 2
    t_dram = unique / device.dram_bytes_per_s
    sm_bytes_per_s = device.dram_bytes_per_s / (_SMS_TO_SATURATE * device.sms)
    cta_bytes = (cm * a_bits + cn * b_bits) * per_split * ck / 8  # one CTA's A and B tiles
    x_from_l2 = spec.quantized and spec.mainloop.reads_a_by_tma(spec)
    x_share = _X_SM_SHARE if x_from_l2 else 1.0
    t_sm = waves * per_sm * (cm * a_bits * x_share + cn * b_bits) * per_split * ck / 8 / sm_bytes_per_s
    # A CTA's first K loop streams cold operands: a slice, or whole tiles where the
    # family runs some unsplit (sm90's whole rounds).
    first = per_split if split_tiles == tm * tn else k_tiles
    hot_a = hot_a_seconds(spec, key, ctas * per_split * ck, device)
    t_l2 = 0.0
    if x_from_l2:
        l2_bytes = (tn * tm * cm * a_bits + key.n * b_bits) * key.k / 8
        t_l2 = l2_bytes / (device.sms * device.sm_clock_hz * _X_L2_BYTES_PER_CLOCK)
    t_bandwidth = max(t_dram, t_sm) + hot_a
    t_latency = latency_time(spec, first, waves * per_split * min(1.0, unique / (ctas * cta_bytes)))
    t_mem = max(t_bandwidth, t_latency + hot_a)
    # NOTE: copies and MMAs overlap, but not perfectly: the smaller term's bytes still
    # show, which also ranks the leaner kernel first among memory-bound ties. Not its
    # round trips: where the MMAs are the longer term they hide the ring's latency (the
    # latency bound had split K where one-wave tiles ran faster unsplit: H100, sm80 at
    # M = 1024, llama3-8b qkv and o; docs/NOTES.md, thirty-first session).
    # NOTE: a persistent kernel's CTAs hand their K slices over once per round of the
    # grid, so its split cost recurs per wave (sm90, H200: llama3-8b qkv at M = 1024 ran
    # 2 splits of 128x256 over 3 rounds at 0.6x the unsplit 128x192).
    handovers = (splits - 1) * handover_waves
    handover = spec.mainloop.split_seconds(spec, min(cm, key.m))
    fixed = _LAUNCH_S + spec.mainloop.fixed_seconds(spec) + handovers * handover
    fixed += (ring_fills(spec, key, splits, device, ctas_per_sm) - 1) * _DRAM_LATENCY_S
    return max(t_compute, t_mem, t_l2) + _OVERLAP_LOSS * min(t_compute, t_bandwidth) + fixed


def ring_fills(spec: KernelSpec, key: ProblemKey, splits: int, device: DeviceModel, ctas_per_sm: int) -> int:
    """How many times the busiest SM waits for a quantized kernel's ring to fill: once
    per round of the CTAs it runs, where the launch gives it more than it holds at once
    (1 for dense kernels, whose latency_time prices their first K loop).

    NOTE: a CTA's first packed weights and A tile are a DRAM round trip away, which the
    SM's other resident CTAs hide only while they run: a CTA that starts when one of the
    first round exits finds the others finishing. The dequantization term counts CTAs,
    not rounds, so without this a split that makes a second round looked as cheap as
    one round of the same work (H100, bf16 W4 llama3-70b qkv at M = 1: 16x32x512 split
    two ways, 640 CTAs at three an SM, was picked and ran 26.3 us, where plans of one
    round ran 23.7-24.0; docs/NOTES.md, forty-fourth session)."""
    if not spec.quantized:
        return 1
    grid = spec.mainloop.grid(spec, tiles_of(spec, key), splits, 0, resident_ctas(device, ctas_per_sm))
    per_sm = math.ceil(grid[0] * grid[1] * grid[2] / device.sms)
    return max(1, math.ceil(per_sm / max(1, ctas_per_sm)))


def hot_a_seconds(spec: KernelSpec, key: ProblemKey, k_read: int, device: DeviceModel) -> float:
    """Seconds the grid's CTAs spend reading a lone token tile's rows of A (M within one
    tile: every CTA reads the same rows) through cp.async, beyond the weights' time;
    ``k_read``: the K elements all CTAs read together (CTAs x K per CTA). Dense kernels
    only (the quantized ones' fitted dequantization term holds it), none for TMA's A."""
    if spec.quantized or key.m > spec.cta[0] or spec.mainloop.reads_a_by_tma(spec):
        return 0.0
    return key.m * k_read * key.a_type.bits / 8 / (device.dram_bytes_per_s * _HOT_A_RATE)


def latency_time(spec: KernelSpec, first_k_tiles: int, cold_k_tiles: float) -> float:
    """Seconds the busiest CTA spends on K tiles whose operands come from DRAM rather
    than L2, when each stage waits one DRAM round trip and the ring keeps
    MainloopFamily.stages_in_flight of them going (Little's law): its first K loop
    (``first_k_tiles``), or, where later waves find no more in L2 than the first, the
    share of all its K tiles that are new bytes (``cold_k_tiles``: unique / loaded).
    What this bounds is decode, where every weight byte is new and a shallow ring
    starves its SM (H200, llama3-8b o at M = 64: sm80's 64x64x32 with 6 stages and 2
    splits took 30 us where the bandwidth terms said 17). Quantized kernels are left
    to their fitted dequantization term."""
    if spec.quantized:
        return 0.0
    return max(first_k_tiles, cold_k_tiles) * _DRAM_LATENCY_S / spec.mainloop.stages_in_flight(spec)


def dequant_time(
    spec: KernelSpec,
    ctas: int,
    resident: int,
    device: DeviceModel,
    weights_per_cta: int,
    *,
    rows: int = 1,
    spills: int = 0,
) -> float:
    """Seconds the busiest SM spends turning quantized weights into MMA operands (0 for
    dense B): it runs ceil(ctas / SMs) CTAs, with the warps of up to ``resident`` of
    them at a time; ``weights_per_cta`` counts a weight once per warp that dequantizes it;
    ``rows``: the problem's M (a one-pair warp's rate depends on it); ``spills``: the
    cubin's bytes of register spill."""
    if not spec.quantized:
        return 0.0
    per_sm = math.ceil(ctas / device.sms)
    steps = spec.warp_tile[2] / 32
    rate = device.sm_clock_hz * _DEQUANT_WEIGHTS_PER_CLOCK * steps / (steps + _DEQUANT_TILE_STEPS)
    rate *= spec.mainloop.dequant_rate(spec)
    rate /= _DEQUANT_TYPE_COST.get((spec.a_type.value, spec.b_type.bits), 1.0)
    if spec.warp_tile[0] == 16 and spec.warp_tile[1] == 16:
        rate *= _ONE_PAIR_RATE[rows > 8]
    if spec.cta[1] == 32 and rows > 8:
        rate *= _NARROW_CTA_RATE
    if (spills >= _SPILL_BYTES_ALWAYS_PRICED and rows > 8) or (spills >= _SPILL_BYTES_PRICED and per_sm <= 1):
        rate *= _SPILLED_RATE
    # NOTE: CTAs beyond whole rounds of the resident ones run with fewer warps beside
    # them, at their own warps' rate: a launch that gives the busiest SM one CTA past a
    # round pays it at a lone CTA's rate (H100, fp16 W8 llama3-70b gate_up at M = 16:
    # 16x128x128 unsplit, four CTAs an SM at three resident, 212 us, where split four
    # ways, 13.6 an SM, it took 169; docs/NOTES.md, forty-fifth session).
    cta_warps = spec.threads // 32
    full, tail = divmod(per_sm, resident)
    cta_seconds = full * resident / _warps_share(resident * cta_warps)
    if tail:
        cta_seconds += tail / _warps_share(tail * cta_warps)
    return cta_seconds * weights_per_cta / rate


def _warps_share(warps: int) -> float:
    """The share of an SM's dequantization rate that ``warps`` resident warps reach."""
    return 1.0 - math.exp(-warps / _DEQUANT_WARPS_SCALE)


def rank(
    kernels: Iterable[_Kernel],
    key: ProblemKey,
    device: DeviceModel,
    *,
    max_splits: int,
    barriers_bytes: int,
    partials_bytes: int,
) -> list[tuple[float, LaunchSpec]]:
    """Every (kernel, splits, swizzle) candidate, cheapest first (ties: smaller splits,
    the swizzle nearest the family's preferred one, smaller swizzle, name)."""
    # Ties (the model does not see rasterization) go to fewer splits, then to the
    # swizzle the kernel's family measured best, then by name.
    keyed = []
    for kern in kernels:
        spec = kern.spec
        preferred = spec.mainloop.preferred_swizzle
        resident = resident_ctas(device, kern.ctas_per_sm)
        for splits in split_options(spec, key, max_splits, barriers_bytes, partials_bytes, resident=resident):
            cost = predict(spec, kern.ctas_per_sm, device, key, splits, spills=getattr(kern, "spills", 0))
            for swizzle in swizzle_options(spec, key):
                order = (cost, splits, abs(swizzle - preferred), swizzle, spec.name)
                keyed.append((order, LaunchSpec(spec.name, splits, swizzle)))
    keyed.sort(key=lambda item: item[0])
    return [(order[0], plan) for order, plan in keyed]
