"""The grouped form of the sm80 kernels (templates/include/gemm/grouped.cuh, docs/MOE.md)
compiles with NVRTC for sm_80 and sm_90 without spilling, and a grouped spec is its own
kernel: named so, refused by ordinary problems, read back from older manifests as not
grouped."""

from __future__ import annotations

import pytest

from codegen.spec import KernelSpec
from codegen.vocabulary import BOrder
from gemm_runtime.context import infeasible_reason
from tests.grouped_kernel import GroupedKernel, compile_report
from tests.helpers import spec_for

# The largest and the smallest tile the GPU test launches (tests/gpu/test_grouped_kernels.py).
SAMPLE = [
    GroupedKernel((256, 128, 64), (4, 2, 1), 3, "bf16"),
    GroupedKernel((16, 64, 128), (1, 2, 2), 4, "f16"),
]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("kernel", SAMPLE, ids=lambda k: k.spec.name)
def test_grouped_kernel_compiles(kernel: GroupedKernel, arch: str) -> None:
    rep = compile_report(kernel, arch)
    assert 0 < rep["registers"] <= 255 and rep["spill_stores"] == rep["spill_loads"] == 0, rep


def test_a_grouped_spec_is_its_own_kernel() -> None:
    plain, grouped = spec_for(), spec_for(grouped=True)
    assert grouped.name == plain.name + "_grouped" and plain.name.endswith("_align8")
    assert infeasible_reason(plain, _key()) is None
    assert "grouped" in infeasible_reason(grouped, _key())
    assert KernelSpec.from_json(grouped.to_json()) == grouped
    older = {f: v for f, v in plain.to_json().items() if f != "grouped"}  # a manifest from before the field
    assert KernelSpec.from_json(older) == plain


def _key():
    from codegen.vocabulary import DataType
    from gemm_runtime.context import ProblemKey

    return ProblemKey(90, DataType.F16, DataType.F16, BOrder.NK, DataType.F16, 8, "none", "none", 256, 256, 256)
