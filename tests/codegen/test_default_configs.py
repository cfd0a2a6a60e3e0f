"""The default kernel set (codegen/configs) serves every problem a user can express,
on every arch it targets, and its fallbacks never displace a fast kernel.

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
from gemm_runtime.context import ProblemKey, infeasible_reason
from gemm_runtime.cost_model import DeviceModel, rank
from gemm_runtime.registry import filter_reason
from tests.fuzz_cases import make_cases, problem_key

SHAPES = Path(__file__).resolve().parents[2] / "bench" / "shapes.yaml"
ARCHS = (80, 90)


def _dispatchable(arch: int):
    specs = [k.spec for k in load_configs(default_config_paths())]
    return [s for s in specs if filter_reason(s, arch, ARCH_SMEM_LIMIT[arch], allow_emulated=False) is None]


@pytest.fixture(scope="module", params=ARCHS, ids=lambda a: f"sm_{a}")
def arch_specs(request):
    return request.param, _dispatchable(request.param)


def test_every_fuzz_problem_has_a_kernel(arch_specs):
    arch, specs = arch_specs
    uncovered = []
    for case in make_cases(2000):
        if case.invalid is not None:
            continue
        key = problem_key(case, arch)
        if not any(infeasible_reason(s, key) is None for s in specs):
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
                        if not any(infeasible_reason(s, key) is None for s in specs):
                            missing.append(f"{a_type.value} x {b_type.value} ({b_order.value}) -> {d_type.value}, align {align}")
    assert not missing, f"sm_{arch}: no kernel for " + "; ".join(missing)


def _occupancy(spec) -> int:
    """A stand-in for the driver's occupancy: shared memory and threads only."""
    return max(1, min(ARCH_SMEM_LIMIT[90] // max(spec.smem_bytes, 1), 2048 // spec.threads))


def test_fallbacks_never_win_an_aligned_problem():
    """Lower-alignment kernels are feasible for aligned problems too (they need less);
    the cost model must still rank an aligned kernel first wherever one exists."""
    kernels = [SimpleNamespace(spec=s, name=s.name, ctas_per_sm=_occupancy(s)) for s in _dispatchable(90)]
    device = DeviceModel.of(90, 132, 1980000, 2619000, 6144)  # the H200's attributes
    models = yaml.safe_load(SHAPES.read_text())["models"]
    wins = []
    for layers in models.values():
        for n, k in layers.values():
            for m in (1, 16, 128, 1024, 4096):
                for a_type in (DataType.F16, DataType.BF16):
                    for b_type, quant in ((a_type, "none"), (DataType.U4, "u4g128"), (DataType.U8, "u8g128")):
                        key = ProblemKey(90, a_type, b_type, BOrder.NK, a_type, 8, quant, "none", n, k, m)
                        feasible = [x for x in kernels if infeasible_reason(x.spec, key) is None]
                        best = rank(feasible, key, device, max_splits=8, barriers_bytes=1 << 20,
                                    partials_bytes=32 << 20)[0][1]  # fmt: skip
                        spec = next(x.spec for x in feasible if x.name == best.kernel)
                        if spec.align < 8:
                            wins.append(f"M={m} N={n} K={k} {b_type.value}: {best.kernel}")
    assert not wins, f"{len(wins)} aligned problems go to a fallback kernel, e.g. " + "; ".join(wins[:3])


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
