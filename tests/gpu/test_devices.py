"""One Gemm per device (docs/PARALLEL.md): two instances on one GPU keep their own
dispatch caches, the shared default is one per device index, and a device the process
cannot see is refused by name."""

from __future__ import annotations

import pytest
import torch

from gemm_runtime import DispatchPolicy, Gemm, GemmArgumentError
from gemm_runtime.ops import default_gemm
from gemm_runtime.types import Operation
from tests.gpu.util import rel_err

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def two(gemm):
    return Gemm(0), Gemm(torch.device("cuda", 0))


def test_two_gemms_on_one_device_keep_their_own_state(two) -> None:
    first, second = two
    assert first.cache is not second.cache and first.registry is not second.registry
    x = torch.randn(33, 200, device="cuda", dtype=torch.float16)
    w = torch.randn(200, 72, device="cuda", dtype=torch.float16)
    want = x.float() @ w.float()
    before = len(second.cache)
    got = first.matmul(x, w, operation=Operation(dispatch=DispatchPolicy.MEASURE))
    assert rel_err(got, want) < 1e-2
    assert len(first.cache) >= 1 and len(second.cache) == before  # the tuned decision stays with its Gemm
    assert rel_err(second.matmul(x, w), want) < 1e-2


def test_the_shared_gemm_is_one_per_device_index(gemm) -> None:
    assert default_gemm(0) is default_gemm("cuda:0") is default_gemm(torch.device("cuda", 0))


def test_a_device_this_process_cannot_see_is_refused(gemm) -> None:
    count = torch.cuda.device_count()
    with pytest.raises(GemmArgumentError, match=rf"device: got cuda:{count}; accepted: one of cuda:0"):
        Gemm(count)
