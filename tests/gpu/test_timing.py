"""Interleaved timing on the GPU: each function gets its own median, in the right
proportion, whatever its position in the list."""

from __future__ import annotations

import pytest
import torch

from gemm_runtime.timing import interleaved_medians_ms, median_ms

pytestmark = pytest.mark.gpu

SHORT, LONG = 200_000, 600_000  # sleep cycles: ~0.1 and ~0.3 ms


@pytest.fixture(scope="module")
def cuda():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")


@pytest.mark.parametrize("order", ["short first", "long first"])
def test_interleaved_medians_keep_each_function_apart(cuda, order):
    short, long = (lambda: torch.cuda._sleep(SHORT)), (lambda: torch.cuda._sleep(LONG))
    fns = [short, long] if order == "short first" else [long, short]
    times = interleaved_medians_ms(fns, reps=20, flush=False)
    t_short, t_long = times if order == "short first" else times[::-1]
    assert 2.5 < t_long / t_short < 3.5


def test_median_ms_is_the_interleaved_median_of_one(cuda):
    t = median_ms(lambda: torch.cuda._sleep(LONG), reps=10, flush=False)
    ref = interleaved_medians_ms([lambda: torch.cuda._sleep(LONG)], reps=10, flush=False)[0]
    assert abs(t - ref) / ref < 0.1
