"""feasibility.launch_error, the one answer to "can this launch serve this problem", branch
by branch on CPU (the dispatcher's and the cost model's tests reach it through forced
launches, cache hits and split options)."""

from __future__ import annotations

import pytest
import torch

from codegen.vocabulary import BOrder, DataType
from gemm_runtime.context import make_key
from gemm_runtime.feasibility import grid_of, launch_error
from gemm_runtime.grouped import grouped_key, grouped_operands
from gemm_runtime.plan import LaunchSpec
from tests.helpers import spec_for

DENSE = spec_for()  # sm80 128x128x32 w2x2 s4, fp16 "nk"
GROUPED_SM80 = spec_for(cta=(16, 64, 128), warps=(1, 2, 2), grouped=True)
KEY = make_key(DataType.F16, BOrder.NK, DataType.F16, 100, 4096, 4096, arch=90)


def _grouped_key():
    gen = torch.Generator().manual_seed(0)
    ops = grouped_operands(torch.randn(10, 32, generator=gen).half(), torch.randn(4, 48, 32, generator=gen).half(),
                           torch.tensor([0, 3, 3, 7, 9], dtype=torch.int32))  # fmt: skip
    return grouped_key(ops, 80)


@pytest.mark.parametrize(
    "spec, plan, key, argument, accepted",
    [
        (None, LaunchSpec("gone"), KEY, "kernel", "a kernel name from Gemm.kernels"),
        (DENSE, LaunchSpec(DENSE.name), KEY._replace(a_type=DataType.BF16, b_type=DataType.BF16), "kernel",
         "a kernel that can serve"),
        (DENSE, LaunchSpec(DENSE.name, swizzle=-1), KEY, "kernel.swizzle", "0..5"),
        (DENSE, LaunchSpec(DENSE.name, splits=0), KEY, "kernel.splits", "1..64"),
        (DENSE, LaunchSpec(DENSE.name, unpack=True), KEY, "kernel.unpack", "nothing to unpack"),
        # A grouped launch of a family that is not persistent walks its tiles in order.
        (GROUPED_SM80, LaunchSpec(GROUPED_SM80.name, swizzle=1), None, "kernel.swizzle",
         "0 (grouped launches of this family take tiles in order)"),
    ],
)  # fmt: skip
def test_each_reason_names_the_argument_and_what_it_accepts(spec, plan, key, argument, accepted):
    error = launch_error(spec, plan, key if key is not None else _grouped_key())
    assert error is not None and error.argument == argument and accepted in error.accepted


def test_a_launch_that_serves_the_problem_has_no_error_and_its_grid_is_the_familys():
    plan = LaunchSpec(DENSE.name, splits=2, swizzle=1)
    assert launch_error(DENSE, plan, KEY, (1 << 20, 1 << 30), 132) is None
    assert grid_of(DENSE, KEY, plan) == (1 * 2, 32 // 2, 2)  # 100 rows: one tile row, 2 CTAs in x per swizzle group
    assert launch_error(GROUPED_SM80, LaunchSpec(GROUPED_SM80.name), _grouped_key()) is None


def test_a_workspace_check_needs_the_resident_ctas():
    with pytest.raises(TypeError, match="needs resident"):
        launch_error(DENSE, LaunchSpec(DENSE.name, splits=2), KEY, (1 << 20, 1 << 30))
    # One split needs no workspace, so no residency either.
    assert launch_error(DENSE, LaunchSpec(DENSE.name), KEY, (0, 0)) is None


def test_a_split_that_does_not_fit_the_workspace_says_what_it_needs():
    error = launch_error(DENSE, LaunchSpec(DENSE.name, splits=4), KEY, (0, 0), 132)
    assert error is not None and error.argument == "kernel.splits"
    assert "4 splits need" in error.accepted and "the workspace has 0 and 0" in error.accepted

