"""The default kernel set (codegen/configs) serves every problem a user can express,
on every arch it targets (Volta to Hopper, the shared-memory sizes of sm_86 / sm_89
included), but for what the GPU itself cannot run (context.arch_limit: bf16 before
sm_80, ...), and its fallbacks never displace a fast kernel.

Pure CPU: the kernels a GPU of each arch would dispatch (registry.filter_reason) are
checked against the keys of the GPU fuzz's problems (tests/fuzz_cases.py), so a kernel
set that leaves a problem without a kernel fails here, before any GPU run."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from codegen.config import default_config_paths, load_configs
from codegen.vocabulary import ARCH_SMEM_LIMIT, BOrder, DataType
from gemm_runtime.context import ProblemKey, arch_limit, infeasible_reason
from gemm_runtime.cost_model import DeviceModel, rank
from gemm_runtime.registry import filter_reason
from tests.fuzz_cases import make_cases, problem_key

SHAPES = Path(__file__).resolve().parents[2] / "bench" / "shapes.yaml"
ARCHS = (70, 75, 80, 86, 89, 90)


def _dispatchable(arch: int):
    specs = [k.spec for k in load_configs(default_config_paths())]
    return [s for s in specs if filter_reason(s, arch, ARCH_SMEM_LIMIT[arch], allow_emulated=False) is None]


@pytest.fixture(scope="module", params=ARCHS, ids=lambda a: f"sm_{a}")
def arch_specs(request):
    return request.param, _dispatchable(request.param)


def _served(specs, key: ProblemKey) -> bool:
    """A default kernel serves ``key``; where none does, the GPU's own limit must say why
    (and must not claim a problem a kernel serves: its words lead the error's message)."""
    served = any(infeasible_reason(s, key) is None for s in specs)
    assert not (served and arch_limit(key)), f"arch_limit refuses a served problem: {arch_limit(key)}"
    return served or arch_limit(key) is not None


def test_every_fuzz_problem_has_a_kernel(arch_specs):
    arch, specs = arch_specs
    uncovered = []
    for case in make_cases(2000):
        if case.invalid is not None:
            continue
        if not _served(specs, problem_key(case, arch)):
            uncovered.append(case.describe())
    assert not uncovered, f"{len(uncovered)} problems without a kernel on sm_{arch}, e.g.\n" + "\n".join(uncovered[:5])


def test_every_type_order_and_alignment_has_a_kernel(arch_specs):
    arch, specs = arch_specs
    missing = []
    for a_type in (DataType.F16, DataType.BF16):
        for b_type, quant, orders in ((a_type, "none", tuple(BOrder)), (DataType.U4, "u4g128", (BOrder.NK,)),
                                      (DataType.U8, "u8g128", (BOrder.NK,))):  # fmt: skip
            for b_order in orders:
                for d_type in (a_type, DataType.F32):
                    for align in (1, 2, 4, 8):
                        key = ProblemKey(arch, a_type, b_type, b_order, d_type, align, quant, "none", 4096, 4096, 1)
                        if not _served(specs, key):
                            missing.append(f"{a_type.value} x {b_type.value} ({b_order.value}) -> {d_type.value}, align {align}")
    assert not missing, f"sm_{arch}: no kernel for " + "; ".join(missing)


def _occupancy(spec, arch: int = 90) -> int:
    """A stand-in for the driver's occupancy: shared memory and threads only."""
    return max(1, min(ARCH_SMEM_LIMIT[arch] // max(spec.smem_bytes, 1), 2048 // spec.threads))


# (arch, DeviceModel.of's attributes): the H200, an A10 (100 KB an SM), a T4 (sm70 family only)
_DEVICES = {90: (132, 1980000, 2619000, 6144), 86: (72, 1695000, 6251000, 384), 75: (40, 1590000, 5001000, 256)}


@pytest.mark.parametrize("arch", sorted(_DEVICES), ids=lambda a: f"sm_{a}")
def test_fallbacks_never_win_an_aligned_problem(arch):
    """Lower-alignment kernels are feasible for aligned problems too (they need less);
    the cost model must still rank an aligned kernel first wherever one exists."""
    kernels = [SimpleNamespace(spec=s, name=s.name, ctas_per_sm=_occupancy(s, arch)) for s in _dispatchable(arch)]
    device = DeviceModel.of(arch, *_DEVICES[arch])
    models = yaml.safe_load(SHAPES.read_text())["models"]
    wins = []
    for layers in models.values():
        for n, k in layers.values():
            for m in (1, 16, 128, 1024, 4096):
                for a_type in (DataType.F16, DataType.BF16):
                    for b_type, quant in ((a_type, "none"), (DataType.U4, "u4g128"), (DataType.U8, "u8g128")):
                        key = ProblemKey(arch, a_type, b_type, BOrder.NK, a_type, 8, quant, "none", n, k, m)
                        if arch_limit(key):
                            continue
                        feasible = [x for x in kernels if infeasible_reason(x.spec, key) is None]
                        best = rank(feasible, key, device, max_splits=8, barriers_bytes=1 << 20,
                                    partials_bytes=32 << 20)[0][1]  # fmt: skip
                        spec = next(x.spec for x in feasible if x.name == best.kernel)
                        if spec.align < 8:
                            wins.append(f"M={m} N={n} K={k} {b_type.value}: {best.kernel}")
    assert not wins, f"{len(wins)} aligned problems go to a fallback kernel, e.g. " + "; ".join(wins[:3])


def _prefill_tiles(specs) -> set[tuple]:
    """(A type, B order) of the dense tiles of at least 8 warps, 3 stages and 128x256."""
    return {(s.a_type, s.b_order) for s in specs
            if not (s.quantized or s.grouped) and s.align == 8
            and s.threads >= 256 and s.stages >= 3 and s.cta[0] * s.cta[1] >= 128 * 256}  # fmt: skip


def test_gpus_of_100_kb_get_8_warp_prefill_tiles():
    """sm_86 / sm_89 (A10, L4, L40S, RTX 30 / 40) hold 99 KB a CTA: the padded K-64
    prefill tiles do not fit there, so the ``*_100k`` families give them 8 warps and 3
    stages in 90 KB, for both types and B orders (the swizzled 128x256x32 s4 of the
    sm80_xor family, 96 KB, serves them too), and only them (elsewhere the K-64 tiles
    serve); and the cost model takes one of them for prefill on such a GPU (one like an
    L40S: 142 SMs, 100 KB an SM, 1536 threads)."""
    every = {(t, o) for t in (DataType.F16, DataType.BF16) for o in BOrder}
    for arch in (86, 89):
        specs = _dispatchable(arch)
        assert _prefill_tiles(specs) == every
        assert _prefill_tiles([s for s in specs if not s.family.endswith("_100k")]) == every
        assert _prefill_tiles([s for s in specs if s.family.endswith("_100k")]) == every
    for arch in (80, 90):
        assert not any(s.family.endswith("_100k") for s in _dispatchable(arch))

    def ctas(spec) -> int:
        return max(1, min(102400 // (spec.smem_bytes + 1024), 1536 // spec.threads))

    kernels = [SimpleNamespace(spec=s, name=s.name, ctas_per_sm=ctas(s)) for s in _dispatchable(89)]
    device = DeviceModel.of(89, 142, 2520000, 9001000, 384)
    models = yaml.safe_load(SHAPES.read_text())["models"]
    for n, k in [*models["llama3-8b"].values(), *models["llama3-70b"].values()]:
        for a_type in (DataType.F16, DataType.BF16):
            key = ProblemKey(89, a_type, a_type, BOrder.NK, a_type, 8, "none", "none", n, k, 4096)
            feasible = [x for x in kernels if infeasible_reason(x.spec, key) is None]
            best = rank(feasible, key, device, max_splits=8, barriers_bytes=1 << 20, partials_bytes=32 << 20)[0][1]
            assert best.kernel.startswith((f"gemm_sm80_{a_type.value}_100k_", f"gemm_sm80_{a_type.value}_xor_")), best


def test_fuzz_cases_cover_every_alignment_and_feature():
    """The fuzz would prove little if its generator missed a class of problem."""
    cases = make_cases(2000)
    keys = [problem_key(c, 90) for c in cases if c.invalid is None]
    assert {k.align for k in keys} == {1, 2, 4, 8}
    assert {k.align for k in keys if k.quant != "none"} == {1, 2, 4, 8}
    assert {k.epilogue for k in keys} == {"none", "bias", "gated_silu", "bias_gated_silu"}
    assert {k.d_type for k in keys} == {DataType.F16, DataType.BF16, DataType.F32}
    assert {c.c_mode for c in cases} == {"none", "separate", "alias"}
    assert sum(c.splits > 1 for c in cases) > 200
    assert {c.invalid for c in cases} >= {None, "gated_odd_n", "out_aliases_a"}
    assert max(c.m for c in cases) > 1000 and min(c.m for c in cases) == 1
    assert {c.k % 8 for c in cases} == {0, 1, 2, 4} and max(c.n for c in cases) > 4096
    assert math.isclose(sum(c.quant is not None for c in cases) / len(cases), 0.35, abs_tol=0.05)
