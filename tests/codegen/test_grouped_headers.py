"""A grouped spec (docs/MOE.md) is its own kernel: named so, refused by ordinary problems,
read back from older manifests as not grouped. (Every grouped kernel of the default set
compiles without spilling: tests/runtime/test_build.py.)"""

from __future__ import annotations

from codegen.spec import KernelSpec
from codegen.vocabulary import BOrder
from gemm_runtime.context import infeasible_reason
from tests.helpers import spec_for


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
