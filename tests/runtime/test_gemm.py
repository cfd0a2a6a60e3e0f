"""What Gemm checks before it touches the GPU: alpha / beta, and the activations' dtype
against a packed weight (CPU tensors; the facade is built without a device)."""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np
import pytest
import torch

from gemm_runtime import GemmArgumentError, MatrixLayout, Operation
from gemm_runtime.gemm import Gemm, _packed_operands, _scalar


def _bare_gemm() -> Gemm:
    # alpha and beta are checked first, before anything of the instance is used.
    return object.__new__(Gemm)


@pytest.mark.parametrize("name", ["alpha", "beta"])
@pytest.mark.parametrize("value", ["x", "1.0", True, None, torch.tensor(1.0), [1.0], 1 + 2j, 1e39, -1e300])
def test_alpha_and_beta_must_be_real_numbers_in_fp32_range(name, value):
    a = torch.zeros(2, 4, dtype=torch.float16)
    b = torch.zeros(4, 3, dtype=torch.float16)
    with pytest.raises(GemmArgumentError, match=rf"^{name}: got ") as info:
        _bare_gemm().matmul(a, b, **{name: value})
    assert info.value.argument == name
    scalars = {"alpha": 1.0, "beta": 0.0, name: value}
    layout = MatrixLayout.of(a)
    with pytest.raises(GemmArgumentError, match=rf"^{name}: got "):
        _bare_gemm().run(Operation(), scalars["alpha"], a, layout, None, None, b, MatrixLayout.of(b), None, None,
                         scalars["beta"], None, None, a, layout)  # fmt: skip


@pytest.mark.parametrize("value", [1, 0, -2.5, np.float32(0.5), np.float16(2), np.int64(3), math.inf, math.nan, 3.4e38])
def test_real_numbers_are_accepted_as_floats(value):
    got = _scalar("alpha", value)
    assert type(got) is float and (got == float(value) or math.isnan(value))


def test_activations_must_match_the_weights_scales():
    from gemm_runtime.packed_weight import pack_for_gemm
    from gemm_runtime.quant import quantize

    w = pack_for_gemm(quantize(torch.randn(16, 64), bits=4, group_size=32, scale_dtype=torch.float16))
    a = torch.randn(3, 64, dtype=torch.bfloat16)
    message = (
        "a.dtype: got torch.bfloat16; accepted: torch.float16: this weight's scales are torch.float16"
        " (quantize and pack it for torch.bfloat16 activations, or cast a)"
    )
    with pytest.raises(GemmArgumentError, match=re.escape(message)):
        _packed_operands(a, w, Operation())
    assert _packed_operands(a.half(), w, Operation()).operation.quant_b.group_size == 32


def test_a_shorter_workspace_at_the_same_address_is_a_different_replay_signature():
    """The replay signature must tell a workspace from a shorter view of it: a plan
    validated against the longer one would let split-K write past the shorter's end."""
    from gemm_runtime.gemm import _workspace_signature
    from gemm_runtime.types import Workspace

    barriers, partials = torch.zeros(64, dtype=torch.int32), torch.zeros(4096)
    full = _workspace_signature(Workspace(barriers, partials))
    assert full == _workspace_signature(Workspace(barriers, partials))
    assert full != _workspace_signature(Workspace(barriers, partials[:4000]))
    assert full != _workspace_signature(Workspace(barriers[:32], partials))


def test_tuning_searches_with_the_settings_top_k_and_confirmation():
    from gemm_runtime import settings as settings_module
    from gemm_runtime.plan import LaunchSpec
    from gemm_runtime.tuner import Measurer

    times = {LaunchSpec("a", 1, 0): 1.0, LaunchSpec("b", 1, 0): 0.99, LaunchSpec("c", 1, 0): 0.98}
    timed: list[LaunchSpec] = []

    def make_call(spec):
        return lambda: timed.append(spec) or times[spec]

    gemm = _bare_gemm()
    gemm.measurer = Measurer(timer=lambda fn, reps, max_seconds: fn())
    tune = settings_module.settings().tune
    with settings_module.override(tune=dataclasses.replace(tune, top_k=2, confirm=2)):
        result = gemm._tune(list(times), make_call)
    a, b, c = times
    # a and b (top_k), c (diversity); then the two finalists, fastest first, and reversed
    assert timed == [a, b, c, c, b, b, c]
    assert result.best == c and set(result.confirmed) == {b, c}


@pytest.mark.parametrize("gated", ["False", 1])
def test_a_grouped_call_whose_gated_is_not_a_bool_is_never_replayed(gated):
    # 1 == True and "False" is truthy: a replay signature holding bool(gated) would replay a
    # gated=True plan for what the validating path refuses (grouped.grouped_operands).
    from gemm_runtime.types import DispatchPolicy

    x, w = torch.zeros(4, 8, dtype=torch.float16), torch.zeros(2, 8, 8, dtype=torch.float16)
    offsets = torch.tensor([0, 2, 4], dtype=torch.int32)
    assert _bare_gemm()._grouped_signature(x, w, offsets, None, None, None, None, None, gated, DispatchPolicy.DEFAULT,
                                           None, None, None) is None  # fmt: skip
