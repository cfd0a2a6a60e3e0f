"""The timing module's host-side rules (its GPU measurements: tests/gpu/test_timing.py)."""

from __future__ import annotations

import pytest

from gemm_runtime.timing import interleaved_medians_ms, round_robin_order


def test_round_robin_alternates_the_order_each_round():
    assert round_robin_order(2, 4) == [0, 1, 1, 0, 0, 1, 1, 0]
    assert round_robin_order(3, 2) == [0, 1, 2, 2, 1, 0]


@pytest.mark.parametrize("count, rounds", [(1, 5), (2, 7), (3, 30)])
def test_round_robin_times_every_function_once_a_round(count, rounds):
    order = round_robin_order(count, rounds)
    assert len(order) == count * rounds
    for r in range(rounds):
        assert sorted(order[r * count:(r + 1) * count]) == list(range(count))


def test_round_robin_puts_no_function_first_more_than_half_the_rounds():
    order = round_robin_order(2, 30)
    firsts = [order[2 * r] for r in range(30)]
    assert firsts.count(0) == firsts.count(1) == 15


def test_interleaved_medians_refuses_an_empty_list():
    with pytest.raises(ValueError, match="fns"):
        interleaved_medians_ms([])


def test_interleaved_medians_refuses_zero_reps():
    with pytest.raises(ValueError, match="reps"):
        interleaved_medians_ms([lambda: None], reps=0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(reps=2.5), r"^reps: got 2.5; accepted: an integer >= 1"),
        (dict(min_reps="3"), r"^min_reps: got '3'"),
        (dict(max_ms=float("nan")), r"^max_ms: got nan"),
        (dict(flush="yes"), r"^flush: got 'yes'"),
        (dict(fns=[None]), r"^fns: got \[None\]"),
    ],
)
def test_interleaved_medians_refuses_malformed_arguments_before_running_anything(kwargs, message):
    # These failed after the warm-up (on the GPU), as a TypeError from range() or a call.
    calls = []
    fns = kwargs.pop("fns", [lambda: calls.append(1)])
    with pytest.raises(ValueError, match=message):
        interleaved_medians_ms(fns, **kwargs)
    assert calls == []
