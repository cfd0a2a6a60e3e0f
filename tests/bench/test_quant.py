"""bench/quant.py's arithmetic that needs no GPU: the tensor cores' ceiling it prints
beside the measured medians."""

from __future__ import annotations

import pytest

from bench.quant import ceiling_speedup


def test_a_problem_run_at_the_peers_own_rate_with_no_floor_has_no_headroom():
    flops = 2.0 * 256 * 28672 * 4096
    rate = flops / 99.7e-6  # the peer's own rate on this problem
    assert ceiling_speedup(99.7, flops, rate, 0.0) == pytest.approx(1.0)


def test_the_launch_floor_lowers_the_ceiling_most_where_the_problem_is_small():
    rate = 760e12
    small, large = 2.0 * 256 * 4096 * 4096, 2.0 * 256 * 57344 * 8192
    # H200, fp16 cuBLAS at M = 256 (docs/perf/quant.md): 8b o 18.0 us, 70b gate_up 336.1 us.
    free_small, free_large = ceiling_speedup(18.0, small, rate, 0.0), ceiling_speedup(336.1, large, rate, 0.0)
    floored_small, floored_large = ceiling_speedup(18.0, small, rate, 3.4), ceiling_speedup(336.1, large, rate, 3.4)
    assert free_small == pytest.approx(18.0 / (small / rate * 1e6))
    assert floored_small < free_small and floored_large < free_large
    assert free_small / floored_small > 1.2 > free_large / floored_large


@pytest.mark.parametrize("args", [(0.0, 1e9, 1e12, 1.0), (10.0, 0.0, 1e12, 1.0), (10.0, 1e9, 0.0, 1.0),
                                  (10.0, 1e9, 1e12, -1.0)])  # fmt: skip
def test_meaningless_inputs_are_refused_by_name(args):
    with pytest.raises(ValueError, match="peer_us"):
        ceiling_speedup(*args)
