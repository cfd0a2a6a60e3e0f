"""gemm_runtime.cost_model with the families' rate terms (MainloopFamily.mma_efficiency):
on sm_90 the SM90 kernels of the default set rank first for large problems, and moving
the tile-shape term out of cost_model.predict into the families (tile_efficiency) left
the sm80 and sm70 predictions as they were. Fake kernels (real specs), no GPU."""

from __future__ import annotations

import dataclasses

import functools
import math
import statistics
from pathlib import Path
from types import SimpleNamespace

import pytest

import gemm_runtime.cost_model as cost_model
from codegen.config import default_config_paths, load_configs
from codegen.families import Mainloop
from codegen.families.sm90 import _HANDOVER_LATENCY_S
from codegen.vocabulary import ARCH_SMEM_LIMIT, BOrder, DataType, MmaAtom
from gemm_runtime.context import ProblemKey, infeasible_reason, make_key
from gemm_runtime.cost_model import (
    _DRAM_LATENCY_S, DeviceModel, dequant_time, fits_workspace, hot_a_seconds, latency_time, predict, rank,
    ring_fills, split_options, tiles_of, workspace_bytes,
)
from gemm_runtime.errors import GemmArgumentError
from gemm_runtime.feasibility import launch_error
from gemm_runtime.plan import LaunchSpec
from gemm_runtime.registry import filter_reason
from tests.helpers import spec_for

H200 = DeviceModel.of(90, 132, 1980000, 3201000, 6144)
WORKSPACE = dict(max_splits=8, barriers_bytes=1 << 20, partials_bytes=32 << 20)


@functools.cache
def _default_specs() -> tuple:
    return tuple(k.spec for k in load_configs(default_config_paths()))


def _occupancy(spec) -> int:
    """A stand-in for the driver's occupancy: shared memory and threads only."""
    return max(1, min(ARCH_SMEM_LIMIT[90] // spec.smem_bytes, 2048 // spec.threads))


@functools.cache
def _kernels(arch: int) -> tuple:
    return tuple(
        SimpleNamespace(spec=s, name=s.name, ctas_per_sm=_occupancy(s))
        for s in _default_specs()
        if filter_reason(s, arch, ARCH_SMEM_LIMIT[arch], allow_emulated=False) is None
    )


@pytest.mark.parametrize("a_type", [DataType.F16, DataType.BF16])
@pytest.mark.parametrize("b_order", list(BOrder))
@pytest.mark.parametrize("f32_out", [False, True])
@pytest.mark.parametrize("mnk", [(8192, 8192, 8192), (4096, 4096, 4096), (2048, 11008, 4096)])
def test_sm90_kernels_rank_first_for_large_problems_on_sm90(a_type, b_order, f32_out, mnk) -> None:
    m, n, k = mnk
    key = make_key(a_type, b_order, DataType.F32 if f32_out else a_type, m, n, k, arch=90)
    feasible = [x for x in _kernels(90) if infeasible_reason(x.spec, key) is None]
    families = {x.spec.mainloop for x in feasible}
    assert {Mainloop.SM80, Mainloop.SM90} <= families  # a real contest
    ranking = rank(feasible, key, H200, **WORKSPACE)
    best = next(x.spec for x in feasible if x.name == ranking[0][1].kernel)
    assert best.mainloop is Mainloop.SM90, ranking[0]
    # ... and by a margin like the wgmma rate's, not a tie-break.
    best_sm80 = next(c for c, p in ranking if "_sm80_" in p.kernel)
    assert ranking[0][0] < 0.75 * best_sm80


def test_sm90_kernels_are_not_candidates_on_sm80() -> None:
    assert _kernels(80) and all(x.spec.mainloop is not Mainloop.SM90 for x in _kernels(80))
    assert any(x.spec.mainloop is Mainloop.SM90 for x in _kernels(90))


def test_the_sm90_rate_term() -> None:
    """wgmma's rate beside mma.sync's: every 128-row sm90 tile above every sm80 or sm70
    tile of the default set, 128 rows (two consumer warpgroups) above 64, and no
    narrower N above a wider one."""
    specs = _default_specs()
    sm90 = [s for s in specs if s.mainloop is Mainloop.SM90]
    older = max(s.mainloop.mma_efficiency(s) for s in specs if s.mainloop in (Mainloop.SM70, Mainloop.SM80))
    rate = {(s.cta[0], s.cta[1], s.stages): Mainloop.SM90.mma_efficiency(s) for s in sm90}
    assert all(r > older for (m, _, _), r in rate.items() if m == 128), (rate, older)
    assert rate[128, 256, 4] > rate[64, 256, 5] and rate[128, 128, 6] > rate[64, 128, 8]
    for m in (64, 128):
        by_n = [r for (mm, n, _), r in sorted(rate.items(), key=lambda item: item[0][1]) if mm == m]
        assert by_n == sorted(by_n), m


def _old_efficiency(spec) -> float:
    """cost_model.predict's tile term before it moved into the families, times the
    family factor of then (sm80: 0.7 at 2 stages, else 1; sm70: 0.85), and since the
    thirtieth session 0.8 for a dense sm80 tile of K 32 on padded rows and 1.04 for the
    sm80_xor family's swizzled rows."""
    cm, cn, ck = spec.cta
    rows_per_b = spec.warp_tile[0] if spec.quantized else cm
    intensity = rows_per_b * cn / (rows_per_b + cn)
    tile = intensity / (intensity + 48.0)
    if spec.mainloop is Mainloop.SM70:
        return tile * 0.85
    padded_k32 = 0.8 if spec.mainloop is Mainloop.SM80 and ck == 32 and not spec.quantized else 1.0
    swizzled = 1.04 if spec.mainloop is Mainloop.SM80_XOR else 1.0
    return tile * (0.7 if spec.stages < 3 else 1.0) * padded_k32 * swizzled


def test_sm80_and_sm70_rates_are_unchanged() -> None:
    specs = [s for s in _default_specs() if s.mainloop in (Mainloop.SM80, Mainloop.SM70, Mainloop.SM80_XOR)]
    assert {s.mainloop for s in specs} == {Mainloop.SM80, Mainloop.SM70, Mainloop.SM80_XOR}
    assert any(s.quantized for s in specs) and any(s.stages == 2 for s in specs if s.mainloop is Mainloop.SM80)
    for s in specs:
        assert s.mainloop.mma_efficiency(s) == pytest.approx(_old_efficiency(s), rel=1e-12), s.name
    # Hand-checked values: 128 x 128 at 3 stages, the same at 2, and sm70's; K 32 padded, K 64.
    assert Mainloop.SM80.mma_efficiency(spec_for(stages=3)) == pytest.approx(64 / 112 * 0.8)
    assert Mainloop.SM80.mma_efficiency(spec_for(stages=2)) == pytest.approx(64 / 112 * 0.7 * 0.8)
    assert Mainloop.SM80.mma_efficiency(spec_for(cta=(128, 128, 64), stages=3)) == pytest.approx(64 / 112)
    assert Mainloop.SM80_XOR.mma_efficiency(spec_for(mainloop=Mainloop.SM80_XOR, stages=3)) == pytest.approx(
        64 / 112 * 1.04)
    assert Mainloop.SM70.mma_efficiency(spec_for(mainloop=Mainloop.SM70, stages=2)) == pytest.approx(64 / 112 * 0.85)


def test_an_sm80_prediction_is_the_formula_of_before() -> None:
    """One whole prediction against the formula of before the move (compute-bound), with
    the thirty-first session's terms: the busiest SM's CTAs, ceil(16384 / 132) = 125 for
    two resident CTAs where whole waves of 264 counted 126, and the swizzled tile's rate
    where two of its CTAs share an SM."""
    spec = spec_for(mainloop=Mainloop.SM80_XOR, cta=(128, 128, 32), warps=(2, 2, 1), stages=3)
    key = make_key(DataType.F16, BOrder.NK, DataType.F16, 16384, 16384, 16384, arch=90)
    tiles, k_tiles = (16384 // 128) ** 2, 16384 // 32
    busiest = math.ceil(tiles / 132)
    assert busiest == 125 < math.ceil(tiles / (132 * 2)) * 2
    intensity = 128 * 128 / (128 + 128)
    shared = Mainloop.SM80_XOR.shared_sm_rate(spec, 2)
    t_mma = busiest * 2.0 * 128 * 128 * k_tiles * 32 / (
        H200.mma_flops_per_sm * intensity / (intensity + 48) * 1.04 * shared)
    t_dram = (3 * 16384 * 16384 * 2) / H200.dram_bytes_per_s
    t_sm = math.ceil(tiles / (132 * 2)) * 2 * (128 * 16 + 128 * 16) * k_tiles * 32 / 8 / (
        H200.dram_bytes_per_s / (0.3 * 132))
    assert t_mma > max(t_dram, t_sm)
    assert predict(spec, 2, H200, key) == pytest.approx(t_mma + 0.2 * max(t_dram, t_sm) + 3e-6, rel=1e-12)
    # The padded twin: the MMA term at 0.8 of the padded K-64 rate, the swizzled one at 1.04
    # and its shared-SM factor.
    padded = dataclasses.replace(spec, mainloop=Mainloop.SM80)
    t_padded = t_mma * 1.04 * shared / 0.8
    assert predict(padded, 2, H200, key) == pytest.approx(t_padded + 0.2 * max(t_dram, t_sm) + 3e-6, rel=1e-12)


def test_swizzled_ctas_sharing_an_sm_run_at_the_wide_tiles_rate() -> None:
    """sm80_xor's 128x128 at two CTAs an SM ran as fast as its 128x256 at one (H100,
    thirtieth session); alone, or on the padded rows, the tile keeps its own rate."""
    narrow = spec_for(mainloop=Mainloop.SM80_XOR, cta=(128, 128, 32), warps=(2, 2, 1), stages=5)
    wide = spec_for(mainloop=Mainloop.SM80_XOR, cta=(128, 256, 32), warps=(2, 4, 1), stages=4)
    rate = Mainloop.SM80_XOR.mma_efficiency
    assert rate(narrow) * Mainloop.SM80_XOR.shared_sm_rate(narrow, 2) / rate(wide) == pytest.approx(0.96, abs=0.005)
    assert Mainloop.SM80_XOR.shared_sm_rate(narrow, 1) == 1.0
    assert Mainloop.SM80_XOR.shared_sm_rate(wide, 1) == Mainloop.SM80_XOR.shared_sm_rate(wide, 2) == 1.0
    padded = dataclasses.replace(narrow, mainloop=Mainloop.SM80)
    assert Mainloop.SM80.shared_sm_rate(padded, 2) == 1.0


def test_a_persistent_kernels_split_cost_recurs_per_round(monkeypatch: pytest.MonkeyPatch) -> None:
    """A persistent CTA hands a K slice over in every round of the grid it splits in,
    and the sm90 kernel splits only the tiles beyond whole rounds; a one-CTA-per-tile
    sm80 grid of prefill tiles (128 rows or more) hands over in each wave (thirty-first
    session), one of decode tiles once."""
    from codegen.vocabulary import MmaAtom

    sm90 = spec_for(mainloop=Mainloop.SM90, mma=MmaAtom.M64NK16, cta=(128, 256, 64), warps=(8, 1, 1), stages=4,
                    arch_min=90, arch_max=90)  # fmt: skip
    sm80 = spec_for()
    # 8 x 24 = 192 tiles of 128 x 256 on 132 SMs, 2 splits: 132 tiles whole, then 60 x 2
    # half-tile units in one round (1.5 rounds of whole tiles in all, one hand-over).
    assert Mainloop.SM90.rounds(sm90, 192, 2, 132) == (3, 1)
    # 100 tiles, 3 splits: fewer tiles than SMs, so all split: 300 units, 3 rounds.
    assert Mainloop.SM90.rounds(sm90, 100, 3, 132) == (3, 3)
    assert Mainloop.SM90.rounds(sm90, 192, 1, 132) == (2, 2)  # unsplit: plain waves
    decode = spec_for(cta=(16, 64, 128), warps=(1, 2, 2))
    assert Mainloop.SM80.rounds(sm80, 100, 3, 264) == (2, 2)
    assert Mainloop.SM80.rounds(sm80, 100, 1, 264) == (1, 1)
    assert Mainloop.SM80.rounds(decode, 100, 3, 264) == (2, 1)
    cases = (
        (sm90, make_key(DataType.F16, BOrder.NK, DataType.F16, 1024, 6144, 4096, arch=90), 2, 1),
        (sm90, make_key(DataType.F16, BOrder.NK, DataType.F16, 1280, 2560, 4096, arch=90), 3, 3),
        # 8 x 48 tiles of 128 x 128, 3 splits: 1152 CTAs in 9 waves of 132.
        (sm80, make_key(DataType.F16, BOrder.NK, DataType.F16, 1024, 6144, 4096, arch=90), 3, 9),
        (decode, make_key(DataType.F16, BOrder.NK, DataType.F16, 16, 6144, 4096, arch=90), 3, 1),
    )
    for spec, key, splits, handovers in cases:
        monkeypatch.setattr(type(spec.mainloop), "split_seconds", lambda self, s, rows: 1.0)
        # Everything but the hand-overs takes far less than a second.
        assert predict(spec, 1, H200, key, splits) == pytest.approx(handovers * (splits - 1), abs=0.01), spec.mainloop


# ---- split-K's workspace counts the tiles that hand over (MainloopFamily.split_tiles) ----

# llama3-70b qkv at M = 1024: 8 x 40 = 320 tiles of 128 x 256 on 132 SMs, so 264 tiles of
# two whole rounds and 56 that split.
QKV_70B = make_key(DataType.BF16, BOrder.NK, DataType.BF16, 1024, 10240, 8192, arch=90)
_BF16 = dict(a_type=DataType.BF16, b_type=DataType.BF16, d_type=DataType.BF16)
SM90_128X256 = spec_for(mainloop=Mainloop.SM90, mma=MmaAtom.M64NK16, cta=(128, 256, 64), warps=(8, 1, 1), stages=4,
                        arch_min=90, arch_max=90, **_BF16)  # fmt: skip
SM80_128X256 = spec_for(cta=(128, 256, 32), warps=(2, 4, 1), stages=3, **_BF16)
DEFAULT_WORKSPACE = (1 << 20, 32 << 20)


def test_sm90_splits_a_big_problem_within_the_default_workspace() -> None:
    """Only the 56 split tiles' partials (7.3 MB for 2 splits) are written, so the
    default 32 MiB admit 2 splits; an sm80 kernel of the same tile hands all 320 tiles
    over (41.9 MB) and may not split."""
    assert workspace_bytes(SM90_128X256, QKV_70B, 2, resident=132) == (56 * 4, 56 * 128 * 256 * 4)
    assert workspace_bytes(SM80_128X256, QKV_70B, 2, resident=264) == (320 * 4, 320 * 128 * 256 * 4)
    assert 2 in split_options(SM90_128X256, QKV_70B, 8, *DEFAULT_WORKSPACE, resident=132)
    assert split_options(SM80_128X256, QKV_70B, 8, *DEFAULT_WORKSPACE, resident=264) == [1]
    # ... and the ranking offers it (residency from the device model: 132 SMs x 1 CTA).
    fakes = [SimpleNamespace(spec=SM90_128X256, ctas_per_sm=1), SimpleNamespace(spec=SM80_128X256, ctas_per_sm=1)]
    offered = {(p.kernel, p.splits) for _, p in rank(fakes, QKV_70B, H200, **WORKSPACE)}
    assert (SM90_128X256.name, 2) in offered and (SM80_128X256.name, 2) not in offered


def test_split_options_and_feasibility_give_one_answer() -> None:
    """A split count is offered by split_options exactly where feasibility.launch_error
    accepts it with the same workspace and residency (at K = 8192 no count repeats
    another's K tiles per split, so the workspace is the only reason to drop one)."""
    for spec, resident in ((SM90_128X256, 132), (SM90_128X256, 114), (SM80_128X256, 264)):
        for partials in (0, 7 << 20, 16 << 20, 32 << 20, 64 << 20):
            workspace = (1 << 20, partials)
            offered = split_options(spec, QKV_70B, 8, *workspace, resident=resident)
            for splits in range(2, 9):
                error = launch_error(spec, LaunchSpec(spec.name, splits), QKV_70B, workspace, resident)
                fits = fits_workspace(spec, QKV_70B, splits, *workspace, resident=resident)
                assert (error is None) == fits == (splits in offered), (spec.name, resident, partials, splits)


def test_feasibility_refuses_split_tiles_whose_partials_do_not_fit() -> None:
    semaphores, partials = workspace_bytes(SM90_128X256, QKV_70B, 2, resident=132)
    plan = LaunchSpec(SM90_128X256.name, 2)
    assert launch_error(SM90_128X256, plan, QKV_70B, (semaphores, partials), 132) is None  # exactly enough
    for workspace in ((semaphores, partials - 1), (semaphores - 1, partials)):
        error = launch_error(SM90_128X256, plan, QKV_70B, workspace, 132)
        assert isinstance(error, GemmArgumentError) and error.argument == "kernel.splits" and error.given == 2
        assert "fit the workspace" in error.accepted and "for the 56 tiles that split" in error.accepted
        assert f"the workspace has {workspace[0]} and {workspace[1]}" in error.accepted
    # The workspace check needs the residency the grid is sized by.
    with pytest.raises(TypeError, match="resident"):
        launch_error(SM90_128X256, plan, QKV_70B, DEFAULT_WORKSPACE)
    # An import (no workspace known yet) does not check it.
    assert launch_error(SM90_128X256, plan, QKV_70B) is None


def test_a_split_count_that_splits_no_sm90_tile_costs_what_no_split_costs() -> None:
    """sm90 splits only the tiles beyond whole rounds of its grid: with the tiles exactly
    two rounds (1 x 264 on 132 SMs) no tile splits, so neither hand-overs nor partial
    traffic may be charged (cost_model.predict asks the family, MainloopFamily.split_tiles).
    The weight (1.1 GB) makes the DRAM term the one that counts."""
    spec = next(s for s in _default_specs() if s.mainloop is Mainloop.SM90 and s.cta[:2] == (128, 256) and s.cluster == 1)
    key = make_key(spec.a_type, spec.b_order, spec.d_type, 128, 264 * 256, 8192, arch=90)
    assert spec.mainloop.split_tiles(spec, (1, 264), 2, 132) == 0
    assert predict(spec, 1, H200, key, 2) == pytest.approx(predict(spec, 1, H200, key, 1), rel=1e-9)


# ---- decode: memory latency and the hand-over of D's rows --------------------------------

DECODE_O_8B = make_key(DataType.F16, BOrder.NK, DataType.F16, 16, 4096, 4096, arch=90)


def test_a_shallow_ring_is_latency_bound_at_decode_and_not_at_prefill() -> None:
    """Little's law (cost_model.latency_time): at decode every weight byte comes from
    DRAM, so a CTA whose ring keeps few K tiles in flight waits out a round trip for
    each few; with many tiles of large problems the operands are in L2 and the ring's
    depth is the MMA rate's business alone."""
    deep, shallow = spec_for(cta=(64, 64, 32), warps=(2, 2, 1), stages=6), spec_for(cta=(64, 64, 32), warps=(2, 2, 1), stages=3)
    k_tiles = 4096 // 32
    # sm80 keeps all but the stage being read in flight: 5 and 2 K tiles; 64 tiles, 1 wave.
    assert Mainloop.SM80.stages_in_flight(deep) == 5 and Mainloop.SM80.stages_in_flight(shallow) == 2
    assert predict(shallow, 1, H200, DECODE_O_8B) == pytest.approx(k_tiles * _DRAM_LATENCY_S / 2 + 3e-6, rel=0.1)
    assert predict(deep, 1, H200, DECODE_O_8B) < predict(shallow, 1, H200, DECODE_O_8B) / 2
    # 16384^3: 256 waves of these tiles find their operands in L2 after the first.
    big = make_key(DataType.F16, BOrder.NK, DataType.F16, 16384, 16384, 16384, arch=90)
    assert predict(shallow, 1, H200, big) == pytest.approx(predict(deep, 1, H200, big), rel=1e-9)
    # The sm90 producer refills a stage as soon as it is released: the whole ring.
    sm90 = spec_for(mainloop=Mainloop.SM90, mma=MmaAtom.M64NK16, cta=(64, 128, 64), warps=(4, 1, 1), stages=8,
                    arch_min=90, arch_max=90)  # fmt: skip
    assert Mainloop.SM90.stages_in_flight(sm90) == 8
    # Quantized kernels keep their fitted dequantization term alone.
    assert latency_time(spec_for(b_type=DataType.U4, cta=(64, 128, 64), warps=(1, 4, 1)), 100, 100) == 0.0


def test_the_sm90_hand_over_moves_d_rows_only() -> None:
    """split_k.cuh hands over only D's rows of a tile: 16 of a 64-row decode tile cost
    a quarter of the bytes, so a decode split is cheap where a prefill one is not."""
    spec = spec_for(mainloop=Mainloop.SM90, mma=MmaAtom.M64NK16, cta=(128, 256, 64), warps=(8, 1, 1), stages=4,
                    arch_min=90, arch_max=90)  # fmt: skip
    whole = Mainloop.SM90.split_seconds(spec, 128)
    assert whole == pytest.approx(_HANDOVER_LATENCY_S + 2 * 128 * 256 * 4 / 50e9)
    assert Mainloop.SM90.split_seconds(spec, 16) == pytest.approx(_HANDOVER_LATENCY_S + (whole - _HANDOVER_LATENCY_S) / 8)
    # The model asks for min(tile rows, M): at M = 16 the hand-over costs the 16 rows'.
    key = make_key(DataType.F16, BOrder.NK, DataType.F16, 16, 8192, 8192, arch=90)
    split, unsplit = predict(spec, 1, H200, key, 2), predict(spec, 1, H200, key, 1)
    assert split - unsplit < whole


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("m", [128, 256, 1024, 4096])
@pytest.mark.parametrize("nk", [(6144, 4096), (28672, 4096), (4096, 14336), (8192, 28672)])
def test_quantized_batches_go_to_wgmma(bits, m, nk) -> None:
    """Quantized B from M = 128 up on sm_90: the sm90_quant family first (H200, groups of
    128: 1.5-3x faster than the sm80 quantized kernels there, bench/experiments/
    sm90_quant_tiles.py), with the 256-token tile for prefill but on llama3-8b qkv at
    M = 1024, whose 192 tiles of 256x128 fill 1.45 waves: there whole 128x192 tiles
    (256 of them) are the fastest plan (H200, docs/perf/dispatch_quant.md: 80.2 us against
    85.4 for 256x128 split two ways, W4; H100, docs/perf/dispatch_quant_128x128_whole_
    h100.md: 73.8 against 85.9)."""
    n, k = nk
    key = make_key(DataType.F16, BOrder.NK, DataType.F16, m, n, k, arch=90)._replace(
        b_type=DataType(f"u{bits}"), quant=f"u{bits}g128")
    feasible = [x for x in _kernels(90) if infeasible_reason(x.spec, key) is None]
    assert {Mainloop.SM80, Mainloop.SM90_QUANT} <= {x.spec.mainloop for x in feasible}
    ranking = rank(feasible, key, H200, **WORKSPACE)
    best = next(x.spec for x in feasible if x.name == ranking[0][1].kernel)
    assert best.mainloop is Mainloop.SM90_QUANT, ranking[0]
    if m >= 1024:
        wide = best.cta[0] == 256 or ((m, n, k) == (1024, 6144, 4096) and best.cta[:2] == (128, 192))
        assert wide, ranking[0]


@pytest.mark.parametrize("a_type", [DataType.F16, DataType.BF16])
def test_llama3_8b_qkv_at_1024_rows_takes_128x192_unsplit(a_type) -> None:
    """Measured (bench/experiments/dense_plans.py, H200): 192 tiles of 128x256 fill 1.45
    rounds of 132 SMs, and splitting the last round (77.6 us, once 97) lost to 256 tiles
    of 128x192, which stage their whole tile for the stores (70.6 us)."""
    key = make_key(a_type, BOrder.NK, a_type, 1024, 6144, 4096, arch=90)
    feasible = [x for x in _kernels(90) if infeasible_reason(x.spec, key) is None]
    _, best = rank(feasible, key, H200, **WORKSPACE)[0]
    spec = next(x.spec for x in feasible if x.name == best.kernel)
    assert (spec.mainloop, spec.cta[:2], spec.cluster, best.splits) == (Mainloop.SM90, (128, 192), 1, 1), best


@functools.cache
def _staged_kernels() -> tuple:
    from tests.sm80_staged_kernels import YAML

    return tuple(SimpleNamespace(spec=s, name=s.name, ctas_per_sm=_occupancy(s))
                 for s in (k.spec for k in load_configs([YAML])))  # fmt: skip


# W4 / fp16 time of the staged f16 tiles against the best sm80 fp16 tile, measured on the
# H200 (docs/perf/sm80_quant_vs_dense.md, each tile forced unsplit, medians over the
# llama3 layers at M = 4096).
STAGED_MEASURED = {((256, 128, 64), 4): 1.25, ((128, 256, 64), 4): 1.41, ((128, 256, 64), 3): 1.60,
                   ((256, 128, 64), 3): 1.51}  # fmt: skip


@pytest.mark.parametrize("mnk", [(4096, 28672, 4096), (4096, 8192, 8192), (1024, 8192, 8192)])
def test_staged_tiles_are_priced_as_measured_against_the_sm80_fp16_tile(mnk) -> None:
    m, n, k = mnk
    dense_key = make_key(DataType.F16, BOrder.NK, DataType.F16, m, n, k, arch=90)
    quant_key = dense_key._replace(b_type=DataType.U4, quant="u4g128")
    dense = min(predict(x.spec, x.ctas_per_sm, H200, dense_key) for x in _kernels(90)
                if x.spec.mainloop is Mainloop.SM80 and infeasible_reason(x.spec, dense_key) is None)  # fmt: skip
    seen = set()
    for x in _staged_kernels():
        shape = (x.spec.cta, x.spec.stages)
        if x.spec.a_type is DataType.F16 and x.spec.b_type is DataType.U4 and shape in STAGED_MEASURED:
            ratio = predict(x.spec, x.ctas_per_sm, H200, quant_key) / dense
            assert ratio == pytest.approx(STAGED_MEASURED[shape], rel=0.1), (shape, ratio)
            seen.add(shape)
    assert seen == set(STAGED_MEASURED)


@pytest.mark.parametrize("m", [1024, 4096])
def test_staged_256x128_leads_the_sm80_class_w4_kernels_and_wgmma_still_wins_on_sm90(m) -> None:
    """Measured on the H200: the staged 256x128 s4 tile 1.25-1.3x fp16's time, the
    register-dequantizing sm80 W4 tiles 1.7-1.8x; sm90_quant 0.97-0.99x of cuBLAS."""
    key = make_key(DataType.F16, BOrder.NK, DataType.F16, m, 28672, 4096, arch=90)._replace(
        b_type=DataType.U4, quant="u4g128")
    feasible = [x for x in _kernels(90) + _staged_kernels() if infeasible_reason(x.spec, key) is None]
    specs = {x.name: x.spec for x in feasible}
    assert Mainloop.SM80_STAGED in {s.mainloop for s in specs.values()}
    _, best = rank(feasible, key, H200, **WORKSPACE)[0]
    assert specs[best.kernel].mainloop is Mainloop.SM90_QUANT, best
    sm80_class = [x for x in feasible if x.spec.mainloop in (Mainloop.SM80, Mainloop.SM80_STAGED)]
    _, best = rank(sm80_class, key, H200, **WORKSPACE)[0]
    assert (specs[best.kernel].mainloop, specs[best.kernel].cta, specs[best.kernel].stages) == \
        (Mainloop.SM80_STAGED, (256, 128, 64), 4), best  # fmt: skip


def _quant_key(bits: int, m: int, n: int, k: int) -> ProblemKey:
    """fp16 activations and output, packed weights of ``bits`` in groups of 128, sm_90."""
    return make_key(DataType.F16, BOrder.NK, DataType.F16, m, n, k, arch=90)._replace(
        b_type=DataType(f"u{bits}"), quant=f"u{bits}g128")


def _quant_pick(bits: int, m: int, n: int, k: int):
    """The model's first plan over the default set's fp16 kernels of ``bits`` (not
    grouped) on the H200: (its kernel's spec, the plan)."""
    key = _quant_key(bits, m, n, k)
    kernels = [kk for kk in _kernels(90) if kk.spec.b_type.bits == bits and kk.spec.a_type is DataType.F16
               and kk.spec.d_type is DataType.F16 and not kk.spec.grouped
               and infeasible_reason(kk.spec, key) is None]  # fmt: skip
    plan = rank(kernels, key, H200, **WORKSPACE)[0][1]
    return next(kk.spec for kk in kernels if kk.name == plan.kernel), plan


def _w4_ranking(m: int, n: int, k: int) -> list:
    key = _quant_key(4, m, n, k)
    kernels = [kk for kk in _kernels(90) if kk.spec.b_type is DataType.U4 and kk.spec.a_type is DataType.F16
               and not kk.spec.grouped]  # fmt: skip
    return [plan for _, plan in rank(kernels, key, H200, **WORKSPACE)]


def _narrow(plan) -> bool:
    return "_16x16x" in plan.kernel


def test_narrow_decode_tiles_rank_where_they_measured_faster() -> None:
    # H200 (twentieth session): at M = 1 the 16-column tiles took 0.75x the two-pair
    # tiles' time on llama3-8b o (4096 x 4096) and lost on 70b gate_up (57344 x 8192);
    # a one-pair warp's rate falls further at M > 8, where they lost on the large layers.
    assert _narrow(_w4_ranking(1, 4096, 4096)[0])
    assert not _narrow(_w4_ranking(1, 57344, 8192)[0])
    assert not _narrow(_w4_ranking(16, 57344, 8192)[0])
    assert not _narrow(_w4_ranking(16, 4096, 4096)[0])  # 1.35x the 16x128 tile's time there
    # The same tile is cheaper at one row than at sixteen, by the one-pair term alone.
    narrow = next(kk for kk in _kernels(90) if kk.spec.cta == (16, 16, 1024) and kk.spec.b_type is DataType.U4
                  and kk.spec.a_type is DataType.F16)  # fmt: skip
    one, sixteen = (dequant_time(narrow.spec, 256, 2, H200, 16 * 4096, rows=r) for r in (1, 16))
    assert sixteen == pytest.approx(one * 0.75 / 0.3)


def test_a_quantized_grid_pays_a_ring_fill_per_round_of_ctas_on_an_sm() -> None:
    """bf16 W4 llama3-70b qkv at M = 1 (10240 x 8192): 16x32x512 makes 320 CTAs unsplit
    and 640 split two ways; at three CTAs an SM the first is one round on 132 SMs, the
    second two (five CTAs on the busiest SM). Only quantized mma.sync kernels count
    rounds: the sm90_quant grid never exceeds the CTAs the device holds, and dense
    kernels price their first K loop in latency_time."""
    key = make_key(DataType.BF16, BOrder.NK, DataType.BF16, 1, 10240, 8192, arch=90)._replace(
        b_type=DataType.U4, quant="u4g128")
    narrow = next(kk.spec for kk in _kernels(90) if kk.spec.cta == (16, 32, 512) and kk.spec.b_type is DataType.U4
                  and kk.spec.a_type is DataType.BF16 and kk.spec.mainloop is Mainloop.SM80)  # fmt: skip
    assert [ring_fills(narrow, key, s, H200, 3) for s in (1, 2, 4)] == [1, 2, 4]  # 3, 5, 10 CTAs an SM
    assert ring_fills(narrow, key, 2, H200, 5) == 1
    # Each round beyond the first adds a DRAM round trip to the launch's fixed time.
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cost_model, "ring_fills", lambda *args: 1)
        one_round = predict(narrow, 3, H200, key, 2)
    assert predict(narrow, 3, H200, key, 2) - one_round == pytest.approx(_DRAM_LATENCY_S)
    wgmma = next(kk.spec for kk in _kernels(90) if kk.spec.mainloop is Mainloop.SM90_QUANT
                 and kk.spec.b_type is DataType.U4 and kk.spec.a_type is DataType.BF16)  # fmt: skip
    assert ring_fills(wgmma, key, 8, H200, 1) == 1
    dense = next(kk.spec for kk in _kernels(90) if kk.spec.cta[0] == 16 and not kk.spec.quantized)
    assert ring_fills(dense, key._replace(b_type=DataType.BF16, quant="none"), 8, H200, 1) == 1


def _dense_f16(m: int, n: int, k: int):
    return make_key(DataType.F16, BOrder.NK, DataType.F16, m, n, k, arch=90)


def test_dense_narrow_tiles_stream_all_of_k_and_pay_for_a_lone_token_tile() -> None:
    # H200 (twenty-first session): a narrow dense tile's best plan was unsplit on every
    # llama3 layer at M = 1, and at M = 16 each of its CTAs reading the same 16 rows of A
    # by cp.async cost 2.7-25.7 us more; the sm90 tiles' TMA reads of A cost nothing.
    narrow = next(kk.spec for kk in _kernels(90) if kk.spec.cta == (16, 16, 256) and kk.spec.a_type is DataType.F16
                  and not kk.spec.quantized)  # fmt: skip
    wide = next(kk.spec for kk in _kernels(90) if kk.spec.mainloop is Mainloop.SM90 and kk.spec.cta[0] == 64
                and kk.spec.a_type is DataType.F16 and not kk.spec.grouped)  # fmt: skip
    o = _dense_f16(1, 4096, 4096)
    assert split_options(narrow, o, 8, 1 << 20, 32 << 20, resident=4) == [1]
    error = launch_error(narrow, LaunchSpec(narrow.name, 2), o, None, None)
    assert error is not None and "kernel.splits: got 2; accepted: 1 (this kernel takes no split-K)" in str(error)
    assert hot_a_seconds(narrow, _dense_f16(1, 4096, 4096), 256 * 4096, H200) > 0
    one, sixteen = (hot_a_seconds(narrow, _dense_f16(m, 4096, 4096), 256 * 4096, H200) for m in (1, 16))
    assert sixteen == pytest.approx(16 * one)
    assert hot_a_seconds(narrow, _dense_f16(17, 4096, 4096), 256 * 4096, H200) == 0.0  # two token tiles
    assert hot_a_seconds(wide, _dense_f16(16, 4096, 4096), 64 * 4096, H200) == 0.0  # A by TMA
    assert predict(narrow, 4, H200, _dense_f16(16, 4096, 4096)) > predict(narrow, 4, H200, o)


def _dense_ranking(m: int, n: int, k: int) -> list:
    key = _dense_f16(m, n, k)
    kernels = [kk for kk in _kernels(90) if not kk.spec.quantized and not kk.spec.grouped
               and infeasible_reason(kk.spec, key) is None]  # fmt: skip
    return [plan for _, plan in rank(kernels, key, H200, **WORKSPACE)]


def test_dense_narrow_tiles_rank_where_they_measured_faster() -> None:
    # H200 (twenty-first session, perf/dispatch_dense_decode.md): at M = 1 the 16x16x256
    # tile was the oracle's plan on llama3-8b o (13.3 us; sm90 64x64 split 2 16.3), and at
    # M = 16 a narrow tile lost on 8b qkv and gate_up (sm90 64x64 / 64x256 unsplit best).
    assert "_16x16x256_" in _dense_ranking(1, 4096, 4096)[0].kernel
    for n, k in ((6144, 4096), (28672, 4096)):
        assert "_w1x1x4_" not in _dense_ranking(16, n, k)[0].kernel
        assert "_w1x2x4_" not in _dense_ranking(16, n, k)[0].kernel


def test_a_spilled_register_cap_ranks_below_its_uncapped_twin_only_where_one_wave_holds_the_grid() -> None:
    """The bf16 16x128x256 W4 tile, capped at 128 registers on sm_90 (two CTAs of 8 warps
    an SM, spilled) beside its uncapped twin (one CTA an SM, no spills): H200, twenty-third
    session, Qwen-MoE-like one token gate_up (132 CTAs) 17.5 us capped against 14.4, and
    Mixtral-like one token down (256 CTAs) 28.7 against 35.7."""
    bf16 = dict(a_type=DataType.BF16, b_type=DataType.U4, d_type=DataType.BF16, arch_min=90, arch_max=90)
    capped = spec_for(cta=(16, 128, 256), warps=(1, 4, 2), stages=3, grouped=True, **bf16)
    twin = spec_for(cta=(16, 128, 256), warps=(1, 4, 2), stages=3, grouped=True, ctas_per_sm=1, **bf16)
    assert capped.min_ctas_per_sm_hopper == 2 and twin.min_ctas_per_sm_hopper == 1
    kernels = [SimpleNamespace(spec=capped, name=capped.name, ctas_per_sm=2, spills=152),
               SimpleNamespace(spec=twin, name=twin.name, ctas_per_sm=1, spills=0)]  # fmt: skip

    def first(n: int, k: int, rows: int, experts: int, splits: int) -> str:
        key = _grouped_w4_key(n, k, rows, experts)
        ranked = [(cost, plan) for cost, plan in rank(kernels, key, H200, **WORKSPACE) if plan.splits == splits]
        return ranked[0][1].kernel

    assert first(2816, 2048, 6, 64, 1) == twin.name  # 22 x 6 tiles: a wave at one CTA an SM
    assert first(4096, 14336, 2, 8, 4) == capped.name  # 32 x 2 tiles x 4 splits
    # Without the spills priced the two tie at one wave (the capped kernel's second CTA
    # has nothing to run).
    one_wave = [predict(k.spec, k.ctas_per_sm, H200, _grouped_w4_key(2816, 2048, 6, 64), 1) for k in kernels]
    assert one_wave[0] == pytest.approx(one_wave[1], rel=1e-9)
    assert predict(capped, 2, H200, _grouped_w4_key(2816, 2048, 6, 64), 1, spills=152) > one_wave[1]
    # Beyond a wave only a heavy spill is priced, and only in the loop for 9-16 rows (the
    # 16x32x512 tile's 204 bytes lost on every grid at M = 16, not at M = 1; docs/NOTES.md,
    # twenty-fourth session).
    few, many = _grouped_w4_key(4096, 14336, 2, 8), _grouped_w4_key(4096, 14336, 256, 8)
    for key in (few, many):
        assert predict(capped, 2, H200, key, 4, spills=152) == pytest.approx(predict(capped, 2, H200, key, 4))
    assert predict(capped, 2, H200, few, 4, spills=204) == pytest.approx(predict(capped, 2, H200, few, 4))
    assert predict(capped, 2, H200, many, 4, spills=204) > predict(capped, 2, H200, many, 4)


def _grouped_w4_key(n: int, k: int, rows: int, experts: int) -> ProblemKey:
    return ProblemKey(90, DataType.BF16, DataType.U4, BOrder.NK, DataType.BF16, 8, "u4g128", "none", n, k, rows,
                      experts=experts)  # fmt: skip


def test_a_32_column_cta_pays_for_its_copies_of_a_beyond_8_rows() -> None:
    """bf16 W4 on llama3-8b o (4096 x 4096), the 16x32x512 tile against 16x128x256 at their
    best splits: at M = 16 the narrow CTA took 1.34x the wide one's time (H200, twenty-fourth
    session), where the model without _NARROW_CTA_RATE put it at 0.83x; at M = 1 unchanged."""
    bf16 = dict(a_type=DataType.BF16, b_type=DataType.U4, d_type=DataType.BF16)
    narrow = spec_for(cta=(16, 32, 512), warps=(1, 1, 4), stages=3, **bf16)
    wide = spec_for(cta=(16, 128, 256), warps=(1, 4, 2), stages=3, **bf16)

    def best(spec, ctas_per_sm: int, m: int) -> float:
        key = ProblemKey(90, DataType.BF16, DataType.U4, BOrder.NK, DataType.BF16, 8, "u4g128", "none", 4096, 4096, m)
        return min(predict(spec, ctas_per_sm, H200, key, s) for s in (1, 2, 3, 4))

    assert best(narrow, 4, 16) > best(wide, 2, 16)
    rows_16 = dequant_time(narrow, 256, 4, H200, 32 * 512, rows=16)
    assert rows_16 == pytest.approx(dequant_time(narrow, 256, 4, H200, 32 * 512, rows=8) / 0.6)
    assert dequant_time(wide, 256, 2, H200, 128 * 256, rows=16) == dequant_time(wide, 256, 2, H200, 128 * 256, rows=8)


def _splits(rows: int, experts: int):
    """Every way ``rows`` rows fall on ``experts`` experts (in order)."""
    if experts == 1:
        yield (rows,)
        return
    for r in range(rows + 1):
        for rest in _splits(rows - r, experts - 1):
            yield (r, *rest)


@pytest.mark.parametrize("cta_m", [1, 2, 3, 5, 16])
def test_a_grouped_launch_covers_every_routing_of_its_rows_and_no_more(cta_m) -> None:
    """tiles_of's bound on a grouped launch's tile rows is the most tile rows any split of
    its rows over its experts takes: never fewer (a CTA would skip work), and for every
    rows and experts some routing takes all of it (from rows and E alone, no tighter
    bound exists)."""
    spec = SimpleNamespace(cta=(cta_m, 64, 64))
    for experts in range(1, 6):
        for rows in range(13):
            key = make_key(DataType.F16, BOrder.NK, DataType.F16, rows, 128, 64, arch=90)._replace(experts=experts)
            most = max(sum(math.ceil(r / cta_m) for r in split) for split in _splits(rows, experts))
            assert tiles_of(spec, key)[0] == most, (rows, experts)
    # Decode: one row an expert takes a tile row each, nothing past them.
    key = make_key(DataType.F16, BOrder.NK, DataType.F16, 6, 2048, 1408, arch=90)._replace(experts=64)
    assert tiles_of(SimpleNamespace(cta=(16, 128, 256)), key) == (6, 16)


def _sm80_class_kernels(arch: int, keep) -> list:
    """The default set's sm80-class kernels (sm80 and sm80_xor families, not grouped) that
    ``keep`` takes and a build for ``arch`` holds. Occupancy stands in for the driver's
    with the registers: 255 a thread for 64x64 warp tiles, 168 otherwise."""

    def occupancy(spec) -> int:
        regs = 255 if spec.warp_tile[0] * spec.warp_tile[1] >= 64 * 64 else 168
        return max(1, min(ARCH_SMEM_LIMIT[arch] // spec.smem_bytes, 65536 // (spec.threads * regs),
                          2048 // spec.threads))

    return [SimpleNamespace(spec=s, name=s.name, ctas_per_sm=occupancy(s)) for s in _default_specs()
            if s.name.startswith("gemm_sm80_") and not s.grouped and keep(s)
            and filter_reason(s, arch, ARCH_SMEM_LIMIT[arch], allow_emulated=False) is None]  # fmt: skip


def _sm80_class_kernels_h100(order: BOrder) -> list:
    """The dense sm80-class kernels with B in ``order`` that an sm_90 build holds."""
    return _sm80_class_kernels(90, lambda s: s.b_order is order)


def test_sm80_prefill_dispatch_takes_a_timed_plan_at_m_1024() -> None:
    """On an H100 device model, default dispatch over the sm80-class "nk" kernels of the
    default set (the build of `sm80_xor_device.sh cutlass-shipped`) picks, for every llama3
    problem at M = 1024 in docs/perf/cutlass_sm80_shipped.json, a tile and split that call
    timed (its default or tuned plan), at most 2% slower than the faster of them. The
    thirtieth session's model split three one-wave problems there, 10-16% slower than the
    tuner's unsplit 128x128x32 s5 (docs/NOTES.md, thirty-first session)."""
    import json
    from pathlib import Path

    h100 = DeviceModel.of(90, 132, 1980000, 2619000, 5120)
    table = json.loads((Path(__file__).resolve().parents[2] / "docs/perf/cutlass_sm80_shipped.json").read_text())
    assert table["device"].startswith("NVIDIA H100")

    kernels = _sm80_class_kernels_h100(BOrder.NK)
    problems = [r for r in table["results"] if r["m"] == 1024]
    assert len(problems) == 16
    for r in problems:
        dtype = {"fp16": DataType.F16, "bf16": DataType.BF16}[r["dtype"]]
        key = make_key(dtype, BOrder.NK, dtype, r["m"], r["n"], r["k"], arch=90)
        feasible = [x for x in kernels if infeasible_reason(x.spec, key) is None]
        pick = rank(feasible, key, h100, **WORKSPACE)[0][1]
        timed = {(r[p]["plan"]["kernel"], r[p]["plan"]["splits"]): r["interleaved"][p]["ms"]
                 for p in ("ours", "ours_tuned")}  # fmt: skip
        assert (pick.kernel, pick.splits) in timed, (r["n"], r["k"], pick)
        assert timed[pick.kernel, pick.splits] <= 1.02 * min(timed.values()), (r["n"], r["k"], pick)


def test_sm80_kn_prefill_dispatch_takes_a_swizzled_tile() -> None:
    """On an H100 device model, default dispatch over the sm80-class "kn" kernels of the
    default set picks a swizzled K-32 tile, unsplit, for every problem of
    docs/perf/sm80_kn_xor.md (llama3 shapes at M = 1024 and 4096, 4096^3), where the best
    swizzled tile ran 15-31% above the best padded one on each (thirty-third session, H100,
    unsplit as timed there)."""
    h100 = DeviceModel.of(90, 132, 1980000, 2619000, 5120)
    kernels = _sm80_class_kernels_h100(BOrder.KN)
    assert sum(x.spec.mainloop is Mainloop.SM80_XOR for x in kernels) == 6
    problems = [(4096, 4096, 4096), (4096, 28672, 4096), (1024, 8192, 8192), (1024, 6144, 4096),
                (1024, 4096, 14336), (1024, 10240, 8192)]  # fmt: skip
    for dtype in (DataType.F16, DataType.BF16):
        for m, n, k in problems:
            key = make_key(dtype, BOrder.KN, dtype, m, n, k, arch=90)
            feasible = [x for x in kernels if infeasible_reason(x.spec, key) is None]
            pick = rank(feasible, key, h100, **WORKSPACE)[0][1]
            spec = next(x.spec for x in kernels if x.name == pick.kernel)
            assert spec.mainloop is Mainloop.SM80_XOR and pick.splits == 1, (m, n, k, pick)


def test_sm80_w8_prefill_dispatch_takes_the_64_and_32_row_tiles() -> None:
    """On an A100 device model, default dispatch over the default set's sm80 W8 fp16
    kernels picks 64x128x64 w1x4 s4 for llama3-8b o, gate_up and down at M = 64, 256 and
    1024: the fastest W8 plan of the register path on each of those nine problems, where
    the one W8 prefill tile before it, 128x128x64 w2x4 s3, took 1.07-2.6x its time; and
    32x128x64 w1x4 s4 for gate_up at M = 24 and 32, 11-13% faster there than the best
    16-row decode plan (H100, docs/perf/sm80_w8_prefill.md, thirty-fourth session)."""
    a100 = DeviceModel.of(80, 108, 1410000, 1593000, 5120)
    kernels = _sm80_class_kernels(80, lambda s: s.b_type is DataType.U8 and s.a_type is DataType.F16)
    for m in (64, 256, 1024):
        for n, k in ((4096, 4096), (28672, 4096), (4096, 14336)):
            key = make_key(DataType.F16, BOrder.NK, DataType.F16, m, n, k, arch=80)._replace(
                b_type=DataType.U8, quant="u8g128")
            feasible = [x for x in kernels if infeasible_reason(x.spec, key) is None]
            pick = rank(feasible, key, a100, **WORKSPACE)[0][1]
            spec = next(x.spec for x in kernels if x.name == pick.kernel)
            assert (spec.cta, spec.warps, spec.stages) == ((64, 128, 64), (1, 4, 1), 4), (m, n, k, pick)
    for m in (24, 32):
        key = make_key(DataType.F16, BOrder.NK, DataType.F16, m, 28672, 4096, arch=80)._replace(
            b_type=DataType.U8, quant="u8g128")
        pick = rank([x for x in kernels if infeasible_reason(x.spec, key) is None], key, a100, **WORKSPACE)[0][1]
        spec = next(x.spec for x in kernels if x.name == pick.kernel)
        assert (spec.cta, spec.warps, spec.stages) == ((32, 128, 64), (1, 4, 1), 4), (m, pick)


def test_sm80_bf16_w4_dispatch_takes_the_32_row_tile() -> None:
    """On an A100 device model, default dispatch over the default set's sm80 W4 bf16
    kernels picks 32x128x64 w1x4 s4 (new to bf16 W4 in the thirty-fifth session) for
    llama3-8b qkv, down and gate_up at M = 24 and 32, where it was 1.15-1.27x the best
    16-row decode plan on an H100 (qkv 20.5 -> 17.7 us at M = 24, down 36.8 -> 30.8,
    gate_up 59.8 -> 49.0; docs/perf/sm80_w8_prefill.md, section 5)."""
    a100 = DeviceModel.of(80, 108, 1410000, 1593000, 5120)
    kernels = _sm80_class_kernels(80, lambda s: s.b_type is DataType.U4 and s.a_type is DataType.BF16)
    for m in (24, 32):
        for n, k in ((6144, 4096), (4096, 14336), (28672, 4096)):
            key = make_key(DataType.BF16, BOrder.NK, DataType.BF16, m, n, k, arch=80)._replace(
                b_type=DataType.U4, quant="u4g128")
            pick = rank([x for x in kernels if infeasible_reason(x.spec, key) is None], key, a100, **WORKSPACE)[0][1]
            spec = next(x.spec for x in kernels if x.name == pick.kernel)
            assert (spec.cta, spec.warps, spec.stages) == ((32, 128, 64), (1, 4, 1), 4), (m, n, k, pick)


@pytest.mark.parametrize("bits", [4, 8])
def test_sm90_quant_stream_k_only_where_whole_tiles_leave_sms_idle(bits) -> None:
    """H200, 256x128 at M = 1024 (docs/perf/dispatch_quant.md): two-way stream-K took
    1.05-1.35x the unsplit time on llama3-8b o and down and 70b o and down (whole tiles
    fill 97% of their waves: 128 and 256 tiles on 132 SMs), where the model, pricing the
    shares at the tiles' rate, once picked it (split_compute_factor). 8b qkv at M = 1024
    (192 tiles of 256x128, 1.45 waves) goes to whole 128x192 tiles, the oracle's plan on
    the H200 and on an H100, rather than 256x128 split two ways (1.06x and 1.17x slower;
    the 256-token tile's shares are priced 1.2x since the fifty-eighth session). Where
    whole tiles leave SMs idle the 128-token tiles still split at M = 128, with shares
    that are whole fractions of a tile where that fills the SMs (70b down, 43 tiles of
    128x192: three shares on 129 CTAs measured 7-8% faster than four on 132)."""

    def pick(m: int, n: int, k: int):
        spec, plan = _quant_pick(bits, m, n, k)
        return spec, plan.splits

    for n, k in ((4096, 4096), (4096, 14336), (8192, 8192), (8192, 28672)):
        spec, splits = pick(1024, n, k)
        assert (spec.mainloop, spec.cta, splits) == (Mainloop.SM90_QUANT, (256, 128, 64), 1), (n, k)
    spec, splits = pick(1024, 6144, 4096)
    assert (spec.mainloop, spec.cta[:2], splits) == (Mainloop.SM90_QUANT, (128, 192), 1)
    spec, splits = pick(128, 10240, 8192)
    assert spec.mainloop is Mainloop.SM90_QUANT and spec.cta[0] == 128 and splits > 1
    # Where 128-row tiles need stream-K to fill the SMs, whole 128x64 tiles in turn do it
    # (H100, llama3-8b qkv at 128 tokens: 19.4 us, 128x128 split two ways 21.5).
    spec, splits = pick(128, 6144, 4096)
    assert (spec.cta, spec.warps, splits) == ((128, 64, 128), (1, 4, 2), 1)
    spec, splits = pick(128, 8192, 28672)
    assert (spec.cta, splits) == ((128, 192, 128), 3)


def _dispatch_table(path: Path) -> list[dict]:
    """The rows of a bench.dispatch table: problem, and the time of each plan it names
    (oracle, tuned, model), by (tile, splits)."""
    rows = []
    for line in path.read_text().splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) < 17 or not cells[4].isdigit():
            continue
        times = {}
        for plan, us in ((cells[14], cells[8]), (cells[15], cells[9]), (cells[16], cells[11])):
            family, tile, splits = plan.split()[:3]
            times.setdefault((family, tile, int(splits[1:])), float(us))
        rows.append(dict(label=f"{cells[1]} {cells[2]} {cells[3]} M={cells[4]}", bits=int(cells[3][1]),
                         m=int(cells[4]), n=int(cells[5]), k=int(cells[6]), oracle=float(cells[8]), times=times))  # fmt: skip
    return rows


# The default tiles taking a pair of K tiles a stage whole, by the one-K-tile form they
# replaced (64x256, 128x192; fifty-sixth session) or sit beside (128x128, 4-bit only;
# fifty-seventh), for runs before them (codegen/configs/sm90_quant.yaml).
WHOLE_STAGE_PREDECESSORS = {"64x256x128_w1x16x1_s4": "64x256x64_w1x16x1_s8",
                            "128x192x128_w1x12x1_s3": "128x192x64_w1x12x1_s6",
                            "128x128x128_w1x8x1_s4": "128x128x64_w1x8x1_s6"}


def test_quantized_picks_at_prefill_sizes_stay_near_the_h200_oracle() -> None:
    """The model's W4 / W8 picks at M = 128 and 1024 against the H200 oracle run of
    docs/perf/dispatch_quant.md (its SM90 tiles' occupancy is the spec's own, so the
    stand-in does not decide them): each pick is a plan the table timed, at most 1.12x the
    oracle (8b o W4 at M = 128 is 1.11), 1.01 in the median (1.005 since the stream-K
    price; 1.048 before it, worst 1.35). The 64-row tile taking a pair of K tiles a stage
    in turn, newer than that run, is the model's pick for 8b o at M = 128; the H200 run of
    the fifty-fourth session timed it there at 1.00x (W4) and 1.008x (W8) the fastest plan
    (tests/bench/test_dispatch_timings.py), so those two rows are left out here, and so
    are those where it takes 128x64 in turn (fifty-fifth session; 8b qkv whole, 8b down split
    two ways: the H100's fastest plans there, tests/bench/test_dispatch_timings.py). The
    tiles taking a pair of K tiles a stage whole (64x256, 128x192; fifty-sixth session) are
    priced with their one-K-tile form's time from that run: on the H200 they took 0.97-0.99x
    of it in the median, 1.035 at most (docs/NOTES.md); so is the 4-bit 128x128 one
    (fifty-seventh session: level with 128x128 s6 at 128 tokens on an H100, 0.964 at 1024)."""
    table = Path(__file__).resolve().parents[2] / "docs" / "perf" / "dispatch_quant.md"
    ratios = []
    for row in _dispatch_table(table):
        if row["m"] < 128:
            continue
        spec, plan = _quant_pick(row["bits"], row["m"], row["n"], row["k"])
        if spec.mainloop is Mainloop.SM90_QUANT and spec.cta in ((64, 64, 128), (128, 64, 128)):
            assert row["m"] == 128 and (row["n"], row["k"]) in ((4096, 4096), (6144, 4096), (4096, 14336)), row["label"]
            continue
        family = "sm90" if spec.mainloop is Mainloop.SM90_QUANT else spec.mainloop.value
        tile = "x".join(map(str, spec.cta)) + "_w" + "x".join(map(str, spec.warps)) + f"_s{spec.stages}"
        tile = WHOLE_STAGE_PREDECESSORS.get(tile, tile)
        t = row["times"].get((family, tile, plan.splits))
        assert t is not None, f"{row['label']}: the model picks {family} {tile} k{plan.splits}, which the table did not time"
        ratios.append(t / row["oracle"])
        assert t / row["oracle"] <= 1.12, (row["label"], family, tile, plan.splits)
    assert len(ratios) >= 26 and statistics.median(ratios) <= 1.01


@pytest.mark.parametrize("mnk", [(0, 4096, 4096), (16, 0, 4096), (0, 0, 0)])
def test_an_empty_output_is_priced_as_a_launch_not_a_division_by_zero(mnk) -> None:
    """M or N = 0 (Gemm launches nothing; Gemm.ranked / predicted take such keys): every
    term divided by the empty grid (ZeroDivisionError from inside rank). Grouped keys
    with N = 0 are priced through the dense one."""
    sm90 = spec_for(mainloop=Mainloop.SM90, mma=MmaAtom.M64NK16, cta=(128, 256, 64), warps=(8, 1, 1), stages=4,
                    arch_min=90, arch_max=90)  # fmt: skip
    key = make_key(DataType.F16, BOrder.NK, DataType.F16, *mnk, arch=90)
    for spec in (spec_for(), sm90):
        for splits in (1, 2):
            cost = predict(spec, 2, H200, key, splits)
            assert math.isfinite(cost) and cost > 0
    kernels = [SimpleNamespace(spec=s, name=s.name, ctas_per_sm=2) for s in (spec_for(), sm90)]
    costs = [c for c, _ in rank(kernels, key, H200, **WORKSPACE)]
    assert costs and all(math.isfinite(c) and c > 0 for c in costs)
    grouped = spec_for(grouped=True)
    empty_n = ProblemKey(90, DataType.F16, DataType.F16, BOrder.NK, DataType.F16, 8, "none", "none", 0, 4096, 64, 8)
    assert math.isfinite(predict(grouped, 2, H200, empty_n)) and predict(grouped, 2, H200, empty_n) > 0


@pytest.mark.parametrize(
    "fields, argument",
    [
        (dict(sms=0), "DeviceModel.sms"),
        (dict(sms=132.0), "DeviceModel.sms"),
        (dict(sms=True), "DeviceModel.sms"),
        (dict(mma_flops_per_sm=0.0), "DeviceModel.mma_flops_per_sm"),
        (dict(mma_flops_per_sm=float("nan")), "DeviceModel.mma_flops_per_sm"),
        (dict(dram_bytes_per_s=-1.0), "DeviceModel.dram_bytes_per_s"),
        (dict(dram_bytes_per_s=math.inf), "DeviceModel.dram_bytes_per_s"),
        (dict(dram_bytes_per_s="3e12"), "DeviceModel.dram_bytes_per_s"),
        (dict(sm_clock_hz=0), "DeviceModel.sm_clock_hz"),
    ],
)
def test_a_device_model_that_would_divide_by_zero_or_rank_by_nan_is_refused(fields, argument) -> None:
    """Recorded models (bench.experiments.dispatch_regret reads them from files) and the
    driver's attributes: a 0 raised ZeroDivisionError from inside predict, a NaN or a
    negative rate gave every launch a NaN or negative cost that rank sorted arbitrarily."""
    with pytest.raises(GemmArgumentError) as info:
        dataclasses.replace(H200, **fields)
    assert info.value.argument == argument


@pytest.mark.parametrize("position, name", [(1, "sms"), (2, "sm_clock_khz"), (3, "mem_clock_khz"), (4, "bus_bits")])
def test_a_device_reporting_no_clock_or_bus_width_is_named(position, name) -> None:
    args = [90, 132, 1980000, 3201000, 6144]
    args[position] = 0
    with pytest.raises(GemmArgumentError) as info:
        DeviceModel.of(*args)
    assert info.value.argument == name
    assert DeviceModel(**dataclasses.asdict(H200)) == H200  # a recorded model reads back as it was
