"""Measured dispatch on the GPU: the tuner against an exhaustive oracle, the
policies, and a dispatch cache carried from one process to another."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from gemm_runtime import DispatchPolicy, Gemm, Operation
from gemm_runtime.tuner import Measurer
from tests.gpu.util import rel_err

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[2]


def test_tuned_choice_matches_exhaustive_oracle(gemm, monkeypatch):
    """A synthetic timer (the candidates still run for real) makes the exhaustive
    argmin known exactly: a per-kernel part that the cost model knows nothing about,
    plus a small per-variant part whose optimum is 2 splits and swizzle 1. The tuner
    must find it without measuring everything."""
    import gemm_runtime.gemm as gemm_module
    from gemm_runtime import tuner as tuner_module

    g = Gemm(measurer=Measurer(timer=lambda fn, reps, max_s: fn(), reps=1, max_time=1.0))
    order = {name: i for i, name in enumerate(sorted((k.name for k in g.kernels), reverse=True))}

    def synthetic(plan):
        return 1.0 + order[plan.kernel] + 0.001 * abs(plan.splits - 2) + 0.0001 * abs(plan.swizzle - 1)

    measured = []

    def tracking(ranking, make_call, **kw):
        def make(plan):
            call = make_call(plan)

            def run():
                call()
                torch.cuda.synchronize()
                measured.append(plan)
                return synthetic(plan)

            return run

        return tuner_module.tune(ranking, make, **kw)

    monkeypatch.setattr(gemm_module, "tune", tracking)
    a = torch.randn(48, 1024, device="cuda", dtype=torch.float16)
    w = torch.randn(1536, 1024, device="cuda", dtype=torch.float16)
    out = torch.empty(48, 1536, device="cuda", dtype=torch.float16)
    g.matmul(a, w.t(), out=out, operation=Operation(dispatch=DispatchPolicy.MEASURE))
    assert rel_err(out, a.float() @ w.float().t()) < 1e-2
    (key, chosen), = g.cache.entries()
    everything = [plan for _, plan in g.ranked(key)]
    assert chosen == min(everything, key=synthetic)
    assert len(set(measured)) < len(everything)


def test_policies(gemm):
    calls = []

    def counting_timer(fn, reps, max_seconds):
        calls.append(1)
        fn()
        torch.cuda.synchronize()
        return float(len(calls))  # later candidates look slower: the first measured wins

    g = Gemm(measurer=Measurer(timer=counting_timer, reps=1, max_time=1.0))
    w = torch.randn(512, 256, device="cuda", dtype=torch.float16)
    for m in (8, 64):
        a = torch.randn(m, 256, device="cuda", dtype=torch.float16)
        out = g.matmul(a, w.t(), operation=Operation(dispatch=DispatchPolicy.MEASURE))
        assert rel_err(out, a.float() @ w.float().t()) < 1e-2
    assert len(g.cache) == 2 and calls
    # APPEND does not measure a problem that has an entry.
    n_calls = len(calls)
    a8 = torch.randn(8, 256, device="cuda", dtype=torch.float16)
    g.matmul(a8, w.t(), operation=Operation(dispatch=DispatchPolicy.APPEND))
    assert len(calls) == n_calls
    # REUSE takes the nearest tuned M at or above: M = 20 reuses M = 64's entry.
    keys = {k.m: (k, plan) for k, plan in g.cache.entries()}
    key20 = keys[64][0]._replace(m=20)
    assert g.select(key20, DispatchPolicy.REUSE) == keys[64][1]
    # DEFAULT uses only exact hits; M = 20 falls back to the cost model.
    assert g.select(key20) == g.predicted(key20)
    a20 = torch.randn(20, 256, device="cuda", dtype=torch.float16)
    out = g.matmul(a20, w.t(), operation=Operation(dispatch=DispatchPolicy.REUSE))
    assert rel_err(out, a20.float() @ w.float().t()) < 1e-2 and len(calls) == n_calls


def test_measuring_never_touches_the_callers_output(gemm):
    g = Gemm()
    a = torch.randn(33, 512, device="cuda", dtype=torch.float16)
    w = torch.randn(256, 512, device="cuda", dtype=torch.float16)
    c = torch.randn(33, 256, device="cuda", dtype=torch.float16)
    acc = c.clone()
    g.matmul(a, w.t(), out=acc, beta=1.0, c=acc, operation=Operation(dispatch=DispatchPolicy.MEASURE))
    assert rel_err(acc, a.float() @ w.float().t() + c.float()) < 1e-2


def test_cache_exported_in_one_process_reproduces_choices_in_another(tmp_path):
    cache = tmp_path / "cache.json"
    shapes = [(1, 1024, 512), (77, 768, 1024), (300, 512, 256)]
    producer = textwrap.dedent(f"""
        import json, torch
        from gemm_runtime import Gemm, Operation, DispatchPolicy
        g = Gemm()
        for m, n, k in {shapes!r}:
            a = torch.randn(m, k, device="cuda", dtype=torch.float16)
            w = torch.randn(n, k, device="cuda", dtype=torch.float16)
            g.matmul(a, w.t(), operation=Operation(dispatch=DispatchPolicy.MEASURE))
        g.export_cache({str(cache)!r})
        print(json.dumps([[k.m, k.n, k.k, p.to_json()] for k, p in g.cache.entries()]))
    """)
    consumer = textwrap.dedent(f"""
        import json, torch
        from gemm_runtime import Gemm
        from gemm_runtime.tuner import Measurer
        def refuse(fn, reps, max_seconds):
            raise AssertionError("measured although the cache was imported")
        g = Gemm(measurer=Measurer(timer=refuse))
        report = g.import_cache({str(cache)!r})
        out = []
        for m, n, k in {shapes!r}:
            a = torch.randn(m, k, device="cuda", dtype=torch.float16)
            w = torch.randn(n, k, device="cuda", dtype=torch.float16)
            g.matmul(a, w.t())
        print(json.dumps([[k.m, k.n, k.k, g.select(k).to_json()] for k, _ in g.cache.entries()]))
    """)
    env = {"PYTHONPATH": str(ROOT)}
    import os

    env = {**os.environ, **env}
    made = subprocess.run([sys.executable, "-c", producer], capture_output=True, text=True, env=env, timeout=300)
    assert made.returncode == 0, made.stderr
    used = subprocess.run([sys.executable, "-c", consumer], capture_output=True, text=True, env=env, timeout=300)
    assert used.returncode == 0, used.stderr
    assert json.loads(made.stdout.strip().splitlines()[-1]) == json.loads(used.stdout.strip().splitlines()[-1])
