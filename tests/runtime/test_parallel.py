"""Tensor-parallel layers and shared tuning over torch.distributed, on the CPU: two gloo
ranks run the layers' CPU implementations (gemm_runtime.ops), so the sharding, the
collectives and the bias handling are checked against the single-process layer; the GPU
kernels under them are the ones the rest of the suite checks."""

from __future__ import annotations

import os
import types

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from gemm_runtime.errors import GemmArgumentError
from gemm_runtime.plan import LaunchSpec

WORLD = 2


def _close(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    err = ((got.float() - want.float()).norm() / want.float().norm()).item()
    assert err < 2e-3, f"{what}: rel err {err}"


def _layers(rank: int) -> None:
    from gemm_runtime.parallel import ColumnParallelLinear, ParallelGatedMLP, RowParallelLinear
    from gemm_runtime.quant import quantize

    torch.manual_seed(0)  # every rank builds the same whole layers
    h, f = 64, 128
    dtype = torch.float16
    lin = torch.nn.Linear(h, 96, dtype=dtype)
    gate, up = torch.nn.Linear(h, f, bias=False, dtype=dtype), torch.nn.Linear(h, f, bias=False, dtype=dtype)
    down = torch.nn.Linear(f, h, dtype=dtype)
    x = torch.randn(5, h, dtype=dtype)
    w, b = lin.weight.float(), lin.bias.float()

    col = ColumnParallelLinear.from_linear(lin, gather_output=True)
    _close(col(x), x.float() @ w.t() + b, "column-parallel, gathered")
    mine = ColumnParallelLinear.from_linear(lin)(x)
    _close(mine, (x.float() @ w.t() + b)[:, 48 * rank : 48 * (rank + 1)], "column-parallel, the rank's share")

    row = RowParallelLinear.from_linear(down)
    xf = torch.randn(5, f, dtype=dtype)
    # The rank's share of the inputs; the bias added once after the all_reduce.
    _close(row(xf[:, 64 * rank : 64 * (rank + 1)]), xf.float() @ down.weight.float().t() + down.bias.float(),
           "row-parallel with a bias")  # fmt: skip

    def mlp(g, u, d, db):
        a = x.float() @ g.t()
        return (a * torch.sigmoid(a) * (x.float() @ u.t())) @ d.t() + db

    dense = ParallelGatedMLP.from_mlp(gate, up, down)
    _close(dense(x), mlp(gate.weight.float(), up.weight.float(), down.weight.float(), down.bias.float()), "gated MLP")
    q = {"bits": 4, "group_size": 32}
    quant = ParallelGatedMLP.from_mlp(gate, up, down, quantize=q)
    deq = [quantize(m.weight.detach(), **q).dequantize(torch.float32) for m in (gate, up, down)]
    _close(quant(x), mlp(*deq, down.bias.float()), "quantized gated MLP against the dequantized whole")
    # A whole imported QuantizedWeight, sharded along K by the layer.
    qw = quantize(down.weight.detach(), bits=4, group_size=64)
    row_q = RowParallelLinear.from_quantized(qw, down.bias)
    _close(row_q(xf[:, 64 * rank : 64 * (rank + 1)]), xf.float() @ qw.dequantize(torch.float32).t() + down.bias.float(),
           "row-parallel from a quantized weight")  # fmt: skip
    # A loaded act-order QuantLinear (groups within each half of K), sharded both ways.
    from gemm_runtime.nn import QuantLinear
    from gemm_runtime.quant import QuantizedWeight

    k, size = 256, 32
    order = torch.cat([torch.randperm(128), 128 + torch.randperm(128)])
    g_idx = torch.empty(k, dtype=torch.int32)
    g_idx[order] = (torch.arange(k) // size).to(torch.int32)
    act = QuantizedWeight(torch.randint(0, 16, (16, k), dtype=torch.uint8), torch.rand(8, 16, dtype=dtype) + 0.5,
                          torch.full((8, 16), 8.0, dtype=dtype), 4, size, False, g_idx)  # fmt: skip
    layer = QuantLinear.from_quantized(act, torch.randn(16, dtype=dtype))
    xa = torch.randn(3, k, dtype=dtype)
    want = layer(xa)
    _close(ColumnParallelLinear.from_quant_linear(layer, gather_output=True)(xa), want, "column-parallel act-order")
    _close(RowParallelLinear.from_quant_linear(layer)(xa[:, 128 * rank : 128 * (rank + 1)]), want,
           "row-parallel act-order")  # fmt: skip
    bad = quantize(torch.randn(8, 3 * 128, dtype=dtype), bits=4, group_size=128)  # 192-column shards cut groups
    with pytest.raises(GemmArgumentError, match="groups of 128"):
        RowParallelLinear.from_quantized(bad)


def _tuning(rank: int) -> None:
    from codegen.vocabulary import BOrder, DataType
    from gemm_runtime.__main__ import PlannedProblem
    from gemm_runtime.context import make_key
    from gemm_runtime.dispatch_cache import DispatchCache
    from gemm_runtime.shared_tuning import share_of, tune_across_ranks

    cache = DispatchCache(90, "NVIDIA H200")
    measured = []

    def matmul(a, b, out=None, operation=None):  # what a tuning call leaves: a decision for its key
        m, k = a.shape
        measured.append((m, b.shape[1], k))
        cache.put(make_key(DataType.F16, BOrder.NK, DataType.F16, m, b.shape[1], k, arch=90),
                  LaunchSpec("k_rank1" if rank else "k_rank0"))  # fmt: skip

    gemm = types.SimpleNamespace(device=torch.device("cpu"), cache=cache, matmul=matmul,
                                 export_cache=cache.export,
                                 import_cache=lambda f: cache.import_(f, {"k_rank0", "k_rank1"}))  # fmt: skip
    plan = [PlannedProblem("toy", layer, m, n, 64) for layer, n in (("qkv", 96), ("o", 64)) for m in (1, 16, 128)]
    assert share_of(plan, rank, WORLD) == plan[rank::WORLD]
    out = os.path.join(os.environ["GEMM_TEST_TMP"], "merged.json")
    assert tune_across_ranks(gemm, plan, dtype="f16", out_path=out) == 0
    assert len(measured) == 3  # its half of the six problems
    assert len(cache) == 6  # and the other rank's half, imported
    texts = [None] * WORLD
    dist.all_gather_object(texts, cache.to_json_text())
    assert texts[0] == texts[1], "every rank ends with the same cache"
    dist.barrier()
    if rank == 0:
        with open(out) as f:
            assert f.read() == texts[0]


def _worker(rank: int, path: str) -> None:
    os.environ["GEMM_TEST_TMP"] = os.path.dirname(path)
    dist.init_process_group("gloo", init_method=f"file://{path}", rank=rank, world_size=WORLD)
    try:
        _layers(rank)
        _tuning(rank)
    finally:
        dist.destroy_process_group()


def test_tensor_parallel_layers_and_shared_tuning_over_two_gloo_ranks(tmp_path) -> None:
    mp.spawn(_worker, args=(str(tmp_path / "rendezvous"),), nprocs=WORLD, join=True)


def test_a_parallel_layer_needs_a_process_group() -> None:
    from gemm_runtime.parallel import ColumnParallelLinear

    if dist.is_available() and dist.is_initialized():
        pytest.skip("a process group is already set up")
    with pytest.raises(GemmArgumentError, match="init_process_group"):
        ColumnParallelLinear.from_linear(torch.nn.Linear(8, 8, dtype=torch.float16))


def test_shared_tuning_checks_the_dtype_before_the_process_group() -> None:
    # Every rank refuses it by name before any collective (was a KeyError inside run_tuning).
    from gemm_runtime.shared_tuning import tune_across_ranks

    if dist.is_available() and dist.is_initialized():
        pytest.skip("a process group is already set up")
    with pytest.raises(GemmArgumentError, match=r"^dtype: got fp16; accepted: 'f16' or 'bf16'$"):
        tune_across_ranks(types.SimpleNamespace(), [], dtype="fp16")


@pytest.fixture
def one_rank(tmp_path):
    """A gloo group of this process alone, for what a layer refuses before it communicates."""
    if dist.is_available() and dist.is_initialized():
        pytest.skip("a process group is already set up")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize(
    ("bias", "pattern"),
    [
        (torch.ones(1, dtype=torch.float16), r"^bias: got \(1,\); accepted: None or a 1-D \(64,\) tensor"),  # broadcast
        (torch.ones(3, 64, dtype=torch.float16), r"^bias: got \(3, 64\)"),  # added to 3 rows, silently
        (torch.ones(128, dtype=torch.float16), r"^bias: got \(128,\)"),  # a RuntimeError at the first call
        (torch.ones(64), r"^bias.dtype: got torch.float32; accepted: torch.float16"),  # promoted the output
        ("bias", r"^bias: got str"),  # an AttributeError
    ],
)
def test_a_row_parallel_bias_is_n_values_of_the_output_type(one_rank, bias, pattern) -> None:
    from gemm_runtime.parallel import RowParallelLinear
    from gemm_runtime.quant import quantize

    qw = quantize(torch.randn(64, 128, dtype=torch.float16), bits=4, group_size=32)
    with pytest.raises(GemmArgumentError, match=pattern):
        RowParallelLinear.from_quantized(qw, bias)
    lin = torch.nn.Linear(128, 64, dtype=torch.float16)
    with pytest.raises(GemmArgumentError, match=pattern):
        RowParallelLinear(RowParallelLinear.from_linear(lin).local, bias)


def test_parallel_layers_name_what_they_were_given(one_rank) -> None:
    from gemm_runtime.parallel import ColumnParallelLinear, ParallelGatedMLP, RowParallelLinear

    with pytest.raises(GemmArgumentError, match=r"^linear: got NoneType; accepted: a torch.nn.Linear"):
        ColumnParallelLinear.from_linear(None)
    with pytest.raises(GemmArgumentError, match=r"^linear: got ReLU"):
        RowParallelLinear.from_linear(torch.nn.ReLU())
    gate, up = (torch.nn.Linear(64, 128, bias=False, dtype=torch.float16) for _ in range(2))
    down = torch.nn.Linear(96, 64, dtype=torch.float16)  # reads 96 features, the MLP has 128
    with pytest.raises(GemmArgumentError, match=r"^down.in_features: got 96; accepted: 128"):
        ParallelGatedMLP.from_mlp(gate, up, down)


def test_from_quant_linear_takes_a_plain_quant_linear(one_rank) -> None:
    """A gated projection became a plain QuantLinear: the un-gated product, twice the
    columns, silently; anything else failed inside with AttributeError ('packed')."""
    from gemm_runtime.nn import QuantGatedMLPProjection
    from gemm_runtime.parallel import ColumnParallelLinear, RowParallelLinear

    gate, up = torch.randn(16, 64, dtype=torch.float16), torch.randn(16, 64, dtype=torch.float16)
    gated = QuantGatedMLPProjection.from_gate_up(gate, up, group_size=32)
    for cls in (ColumnParallelLinear, RowParallelLinear):
        with pytest.raises(GemmArgumentError, match=r"^layer: got QuantGatedMLPProjection; accepted: a gemm_runtime.nn"):
            cls.from_quant_linear(gated)
        with pytest.raises(GemmArgumentError, match=r"^layer: got Linear"):
            cls.from_quant_linear(torch.nn.Linear(64, 16, dtype=torch.float16))


def test_gather_output_is_a_bool(one_rank) -> None:
    from gemm_runtime.parallel import ColumnParallelLinear

    lin = torch.nn.Linear(64, 48, dtype=torch.float16)
    with pytest.raises(GemmArgumentError, match=r"^gather_output: got 'False'; accepted: True or False"):
        ColumnParallelLinear.from_linear(lin, gather_output="False")  # truthy: it gathered


def test_an_fp32_linear_quantizes_its_bias_to_the_output_type(one_rank) -> None:
    """The shard's scales are fp16 (quantize's default for fp32 weights); the bias stayed
    fp32: a column-parallel layer the GEMM refuses at every call on a GPU, a row-parallel
    one refused when made, for a bias the caller never gave."""
    from gemm_runtime.parallel import ColumnParallelLinear, RowParallelLinear

    lin = torch.nn.Linear(64, 48)
    col = ColumnParallelLinear.from_linear(lin, quantize={"group_size": 32})
    row = RowParallelLinear.from_linear(lin, quantize={"group_size": 32})
    assert col.local.bias.dtype == row.bias.dtype == torch.float16
    x = torch.randn(3, 64, dtype=torch.float16)
    torch.testing.assert_close(row(x).float(), col(x).float(), rtol=3e-3, atol=3e-3)
