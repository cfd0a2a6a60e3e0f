"""Tensor parallelism over NCCL, two GPUs (issue 19): two ranks, one process each on its
own GPU, run the tensor-parallel gated MLP (gemm_runtime.parallel: gate_up column-parallel
with the gated epilogue, down row-parallel and one all_reduce) against the same MLP on one
GPU with the single-GPU layers, fp16 and W4A16 with groups of 128, at token counts with
residues; the column- and row-parallel linears with biases; and tuning shared across the
ranks (each tunes half of a plan on its own Gemm, both end with the same cache and rank
0's file). Skips where fewer than two GPUs are visible; tests/runtime/test_parallel.py
runs the same layers over gloo on the CPU."""

from __future__ import annotations

import json
import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

pytestmark = pytest.mark.gpu

WORLD = 2
TOL = 1e-2  # the bound on the TP MLP against one GPU
HIDDEN, INTERMEDIATE = 1024, 2816  # down's K shards: 1408 = 11 groups of 128


def _rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.float() - want.float()).norm() / want.float().norm()).item()


def _mlp_against_one_gpu(rank: int, device: torch.device) -> None:
    from bench.tp_mlp import _mlp, _whole
    from gemm_runtime.parallel import ParallelGatedMLP

    gate, up, down = _mlp(HIDDEN, INTERMEDIATE, torch.float16)  # the same on every rank (seeded)
    for quantize in (None, {"bits": 4, "group_size": 128}):
        tp = ParallelGatedMLP.from_mlp(gate, up, down, quantize=quantize).to(device)
        whole = _whole(gate, up, down, quantize, device)
        for tokens in (1, 16, 130):
            x = torch.randn(tokens, HIDDEN, generator=torch.Generator().manual_seed(tokens), dtype=torch.float16)
            x = x.to(device)
            with torch.no_grad():
                got, want = tp(x), whole(x)
            assert got.device == device and got.shape == (tokens, HIDDEN)
            assert torch.isfinite(got).all()
            err = _rel_err(got, want)
            assert err < TOL, f"rank {rank}, {quantize or 'fp16'}, {tokens} tokens: rel err {err:.2e}"


def _linears(rank: int, device: torch.device) -> None:
    from gemm_runtime.parallel import ColumnParallelLinear, RowParallelLinear

    gen = torch.Generator().manual_seed(1)
    lin = torch.nn.Linear(512, 384, dtype=torch.float16)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(384, 512, generator=gen) * 512**-0.5)
        lin.bias.copy_(torch.randn(384, generator=gen))
    x = torch.randn(33, 512, generator=gen, dtype=torch.float16).to(device)
    want = x.float() @ lin.weight.float().t().to(device) + lin.bias.float().to(device)
    col = ColumnParallelLinear.from_linear(lin, gather_output=True).to(device)
    assert _rel_err(col(x), want) < 2e-3, f"rank {rank}: column-parallel, gathered"
    share = ColumnParallelLinear.from_linear(lin).to(device)(x)
    assert _rel_err(share, want[:, 192 * rank : 192 * (rank + 1)]) < 2e-3, f"rank {rank}: column-parallel share"
    row = RowParallelLinear.from_linear(lin).to(device)
    # The rank's columns of the input; the bias added once, after the all_reduce.
    assert _rel_err(row(x[:, 256 * rank : 256 * (rank + 1)]), want) < 2e-3, f"rank {rank}: row-parallel"


def _tuning_shared(rank: int, device: torch.device, tmp: str) -> None:
    from gemm_runtime import Gemm
    from gemm_runtime.__main__ import PlannedProblem
    from gemm_runtime.shared_tuning import tune_across_ranks

    gemm = Gemm(device)
    plan = [PlannedProblem("toy", layer, m, n, 512) for layer, n in (("qkv", 768), ("o", 512)) for m in (1, 16, 128)]
    out = os.path.join(tmp, "merged.json")
    assert tune_across_ranks(gemm, plan, dtype="f16", out_path=out) == 0
    assert len(gemm.cache) >= len(plan), "the rank's own half and the other rank's, imported"
    texts = [None] * WORLD
    dist.all_gather_object(texts, gemm.cache.to_json_text())
    assert texts[0] == texts[1], "every rank ends with the same cache"
    dist.barrier()
    if rank == 0:
        with open(out) as f:
            assert json.loads(f.read()) == json.loads(texts[0])


def _worker(rank: int, rendezvous: str, tmp: str) -> None:
    device = torch.device("cuda", rank)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", init_method=f"file://{rendezvous}", rank=rank, world_size=WORLD,
                            device_id=device)  # fmt: skip
    try:
        _mlp_against_one_gpu(rank, device)
        _linears(rank, device)
        _tuning_shared(rank, device, tmp)
    finally:
        dist.destroy_process_group()


def test_tensor_parallel_mlp_and_shared_tuning_over_two_gpus(tmp_path) -> None:
    if not torch.cuda.is_available() or torch.cuda.device_count() < WORLD:
        pytest.skip(f"needs {WORLD} GPUs (sees {torch.cuda.device_count() if torch.cuda.is_available() else 0})")
    if not dist.is_nccl_available():
        pytest.skip("this torch has no NCCL")
    mp.spawn(_worker, args=(str(tmp_path / "rendezvous"), str(tmp_path)), nprocs=WORLD, join=True)
