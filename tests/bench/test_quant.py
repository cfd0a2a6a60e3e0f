"""bench/quant.py's parts that need no GPU: the tensor cores' ceiling it prints beside the
measured medians, and how it finds and describes a problem's plan in the dispatch cache
(which --plans carries between runs)."""

from __future__ import annotations

import pytest

from bench.quant import ceiling_speedup, describe_launch, plan_for, plans_to_import
from codegen.config import default_config_paths, load_configs
from codegen.vocabulary import BOrder, DataType
from gemm_runtime.context import ProblemKey
from gemm_runtime.plan import LaunchSpec


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


def _key(a_type: str, b_type: str, quant: str, m: int, n: int, k: int) -> ProblemKey:
    a = DataType(a_type)
    return ProblemKey(90, a, DataType(b_type), BOrder.NK, a, 8, quant, "none", n, k, m)


def test_the_plan_of_a_problem_is_the_entry_of_its_activations_bits_and_exact_shape():
    dense, w4, w8 = LaunchSpec("dense kernel"), LaunchSpec("w4 kernel", 2, 1), LaunchSpec("w8 kernel", 3, 0)
    entries = [
        (_key("f16", "f16", "none", 128, 6144, 4096), dense),  # the same shape, unquantized
        (_key("f16", "u4", "u4_g128", 64, 6144, 4096), LaunchSpec("another M")),
        (_key("bf16", "u4", "u4_g128", 128, 6144, 4096), LaunchSpec("bf16 activations")),
        (_key("f16", "u4", "u4_g128", 128, 6144, 4096), w4),
        (_key("f16", "u8", "u8_g128", 128, 6144, 4096), w8),
    ]
    assert plan_for(entries, "f16", 4, 128, 6144, 4096) is w4
    assert plan_for(entries, "f16", 8, 128, 6144, 4096) is w8
    assert plan_for(entries, "f16", 0, 128, 6144, 4096) is dense
    assert plan_for(entries, "bf16", 4, 128, 6144, 4096).kernel == "bf16 activations"
    assert plan_for(entries, "f16", 4, 256, 6144, 4096) is None
    assert plan_for(entries, "f16", 4, 128, 4096, 4096) is None


def test_a_launch_is_described_by_its_tile_warps_stages_splits_and_swizzle():
    spec = next(c.spec for c in load_configs(default_config_paths())
                if c.spec.mainloop.value == "sm90_quant" and c.spec.cta == (128, 128, 64))  # fmt: skip
    text = describe_launch(spec, LaunchSpec(spec.name, 2, 1))
    assert text == f"sm90_quant 128x128x64 w{'x'.join(map(str, spec.warps))} s{spec.stages} (2, z1)"
    assert describe_launch(spec, LaunchSpec(spec.name, unpack=True)).startswith("unpack + sm90_quant 128x128x64")


def test_retune_leaves_the_named_token_counts_out_of_the_imported_plans(tmp_path):
    """--retune M: the plans file's records at those token counts are not imported (so the
    tuner times them again, with kernels the file's run did not have); the others are, and
    the file on disk is left as it was until the run exports it."""
    from gemm_runtime.dispatch_cache import DispatchCache

    cache = DispatchCache(90, "test")
    spec = next(k.spec for k in load_configs(default_config_paths())
                if k.spec.family == "sm90_quant_f16_w4" and k.spec.d_type is DataType.F16)
    for m in (64, 128, 256):
        cache.put(_key("f16", "u4", "u4g128", m, 4096, 4096), LaunchSpec(spec.name, 1, 0))
    path = tmp_path / "plans.json"
    cache.export(path)
    before = path.read_text()
    assert plans_to_import(path, []) == path
    back = DispatchCache(90, "back")
    report = back.import_(plans_to_import(path, [128, 256]), {spec.name: spec})
    assert [key.m for key, _ in back.entries()] == [64] and report.added == 1
    assert path.read_text() == before
