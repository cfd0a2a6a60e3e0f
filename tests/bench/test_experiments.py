"""The experiments under bench/experiments/ are run by hand on the GPU machine, rarely:
each must still import against today's runtime and offer its entry point, so that a
renamed helper breaks CI rather than the next device session."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

EXPERIMENTS = sorted(p.stem for p in (Path(__file__).resolve().parents[2] / "bench" / "experiments").glob("*.py")
                     if p.stem != "__init__")  # fmt: skip


def test_there_are_experiments():
    assert "sm90_quant_decode" in EXPERIMENTS and "build_ab" in EXPERIMENTS


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_experiment_imports_and_has_main(name):
    module = importlib.import_module(f"bench.experiments.{name}")
    assert callable(getattr(module, "main", None)), f"bench/experiments/{name}.py has no main()"


def test_the_wgmma_rate_probes_compile_for_sm90a_without_spills():
    """bench/experiments/wgmma_rate.py's probe kernels, both operand forms and both kinds of
    instruction beside them (no GPU needed)."""
    from bench.experiments.wgmma_rate import compile_probes
    from gemm_runtime.compiler import CompileError

    try:
        built = compile_probes([(64, True, 64, 2, False, "lop3"), (256, True, 0, 1, True, "lop3"),
                                (128, False, 64, 2, False, "hfma2"), (64, True, 32, 1, False, "hfma2")])
    except CompileError as err:
        pytest.fail(str(err))
    for cfg, result in built:
        assert result.cubin and result.spill_stores == result.spill_loads == 0, (cfg, result.log)
    with pytest.raises(ValueError, match="op: got 'iadd'"):
        compile_probes([(64, True, 8, 1, False, "iadd")])
