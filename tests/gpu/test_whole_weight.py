"""Whole-weight plans on the GPU (gemm_runtime/whole_weight.py): a packed weight unpacked
into a dense buffer, then a dense kernel. Every dense kernel of the registry that can
serve a packed weight's dense problem, through a whole-weight plan, against the fp32
product with the dequantized weight; fp16 and bf16, 4 and 8 bits, groups of 32 and 128
and one over K, symmetric weights; the epilogues, split-K, C; a side stream; a CUDA
graph; and the tuner with whole-weight candidates in its ranking. Outputs NaN-poisoned,
residues on M, N and K."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from gemm_runtime import Epilogue, Operation, whole_weight
from gemm_runtime.context import make_problem
from gemm_runtime.fast_path import FastPlan
from gemm_runtime.gemm import _packed_layouts, _packed_operands
from gemm_runtime.packed_weight import pack_for_gemm
from gemm_runtime.plan import LaunchSpec
from gemm_runtime.quant import quantize
from gemm_runtime.types import DispatchPolicy, MatrixLayout, torch_dtype
from tests.gpu.util import rel_err, shared_gemm

pytestmark = pytest.mark.gpu


def _dense_nk_kernels():
    if not torch.cuda.is_available():
        return ["no-gpu"]
    return [k.name for k in shared_gemm().kernels
            if not k.spec.quantized and not k.spec.grouped and k.spec.b_order.value == "nk"]  # fmt: skip


def _weight(n, k, dtype, bits, group_size, seed, symmetric=False):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    w = torch.randn(n, k, device="cuda", generator=gen).to(dtype) * 0.05
    return quantize(w, bits=bits, group_size=group_size, symmetric=symmetric)


def _poisoned(m, n, dtype):
    return torch.full((m, n), float("nan"), device="cuda", dtype=dtype)


@pytest.mark.parametrize("name", _dense_nk_kernels())
def test_every_dense_kernel_serves_a_whole_weight_plan(gemm, name):
    spec = gemm.registry.get(name).spec
    dt, out_dt = torch_dtype(spec.a_type), torch_dtype(spec.d_type)
    bits = 4 if hash(name) % 2 else 8
    n, k = spec.cta[1] + 27, 3 * 128 + 72  # N: a residue against the CTA tile and 8; K: against 32 and the K tile
    qw = _weight(n, k, dt, bits, 128, seed=hash(name) % 2**31)
    packed = pack_for_gemm(qw)
    ref_w = qw.dequantize().float()
    gen = torch.Generator(device="cuda").manual_seed(7)
    for m in (1, 33, 517):
        a = torch.randn(m, k, device="cuda", dtype=dt, generator=gen)
        out = _poisoned(m, n, out_dt)
        gemm.matmul(a, packed, out=out, kernel=LaunchSpec(name, unpack=True))
        assert rel_err(out, a.float() @ ref_w.t()) < 1e-2, f"M={m} {bits}-bit"


def _best_whole_weight_plan(gemm, a, packed, out, operation=None):
    """The cost model's best whole-weight plan for this call (ranked at M >= MIN_M)."""
    ranking = gemm.ranked(_key(gemm, a, packed, out, operation))
    return next(plan for _, plan in ranking if plan.unpack)


def _key(gemm, a, packed, out, operation=None):
    """The call's ProblemKey, as matmul makes it."""
    ops = _packed_operands(a, packed, operation or Operation())
    bdesc, vdesc = _packed_layouts(packed)
    problem = make_problem(ops.operation, ops.a, MatrixLayout.of(ops.a, "a"), ops.b, bdesc, 0.0, None, None, out,
                           MatrixLayout.of(out, "out"), gemm.device, gemm.registry.device.arch, None, packed.v,
                           vdesc)  # fmt: skip
    return problem.key


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("group_size, symmetric", [(32, False), (128, True), (-1, False)])
def test_the_ranked_whole_weight_plan_matches_the_reference(gemm, dtype, bits, group_size, symmetric):
    n, k, m = 520, 7392 if group_size == 32 else 1000, whole_weight.MIN_M + 13
    qw = _weight(n, k, dtype, bits, group_size, seed=bits * 100 + k, symmetric=symmetric)
    packed = pack_for_gemm(qw)
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    out = _poisoned(m, n, dtype)
    plan = _best_whole_weight_plan(gemm, a, packed, out)
    gemm.matmul(a, packed, out=out, kernel=plan)
    assert rel_err(out, a.float() @ qw.dequantize().float().t()) < 1e-2, plan


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_epilogues_split_k_and_c_through_a_whole_weight_plan(gemm, dtype):
    n, k, m = 392, 1536, 600
    qw = _weight(n, k, dtype, 4, 64, seed=11)
    packed = pack_for_gemm(qw)
    gen = torch.Generator(device="cuda").manual_seed(12)
    a = torch.randn(m, k, device="cuda", dtype=dtype, generator=gen)
    bias = torch.randn(n, device="cuda", dtype=dtype, generator=gen)
    c = torch.randn(m, n, device="cuda", dtype=dtype, generator=gen)
    v = a.float() @ qw.dequantize().float().t()
    plan = _best_whole_weight_plan(gemm, a, packed, _poisoned(m, n, dtype))
    split = LaunchSpec(plan.kernel, 3, plan.swizzle, unpack=True)
    out = gemm.matmul(a, packed, bias=bias, alpha=0.5, beta=2.0, c=c, kernel=split, out=_poisoned(m, n, dtype))
    assert rel_err(out, 0.5 * v + bias.float() + 2.0 * c.float()) < 1e-2
    gated_op = Operation(epilogue=Epilogue.GATED_SILU)
    gated_plan = _best_whole_weight_plan(gemm, a, packed, _poisoned(m, n // 2, dtype), gated_op)
    gated = gemm.matmul(a, packed, kernel=gated_plan, operation=gated_op, out=_poisoned(m, n // 2, dtype))
    assert rel_err(gated, F.silu(v[:, 0::2]) * v[:, 1::2]) < 1e-2


def test_a_whole_weight_plan_on_a_side_stream_and_in_a_cuda_graph(gemm):
    n, k, m = 1024, 2048, 640
    qw = _weight(n, k, torch.float16, 4, 128, seed=21)
    packed = pack_for_gemm(qw)
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    ref = a.float() @ qw.dequantize().float().t()
    plan = _best_whole_weight_plan(gemm, a, packed, _poisoned(m, n, torch.float16))
    side = torch.cuda.Stream()
    out = _poisoned(m, n, torch.float16)
    side.wait_stream(torch.cuda.current_stream())
    gemm.matmul(a, packed, out=out, kernel=plan, stream=side)
    torch.cuda.current_stream().wait_stream(side)
    assert rel_err(out, ref) < 1e-2
    graph = torch.cuda.CUDAGraph()
    captured = _poisoned(m, n, torch.float16)
    gemm.matmul(a, packed, out=captured, kernel=plan)  # warm-up outside the capture
    captured.fill_(float("nan"))
    torch.cuda.synchronize()
    with torch.cuda.graph(graph):
        gemm.matmul(a, packed, out=captured, kernel=plan)
    a.copy_(torch.randn_like(a))
    graph.replay()
    torch.cuda.synchronize()
    assert rel_err(captured, a.float() @ qw.dequantize().float().t()) < 1e-2


def test_tuning_with_whole_weight_candidates_in_the_ranking(gemm):
    n, k, m = 2048, 2048, 1024
    qw = _weight(n, k, torch.float16, 4, 128, seed=31)
    packed = pack_for_gemm(qw)
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    out = _poisoned(m, n, torch.float16)
    key = _key(gemm, a, packed, out)
    assert any(plan.unpack for _, plan in gemm.ranked(key))
    gemm.matmul(a, packed, out=out, operation=Operation(dispatch=DispatchPolicy.MEASURE))
    assert rel_err(out, a.float() @ qw.dequantize().float().t()) < 1e-2
    assert gemm.cache.get(key) is not None


def test_replays_of_a_whole_weight_plan_take_the_fast_path(gemm):
    """The second call of a signature replays the remembered launch (fast_path.FastPlan
    with its unpack step): new activations and another weight of the same geometry."""
    n, k, m = 776, 1536, 600
    weights = [_weight(n, k, torch.bfloat16, 4, 128, seed=41 + i) for i in range(2)]
    packed = [pack_for_gemm(qw) for qw in weights]
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    plan = _best_whole_weight_plan(gemm, a, packed[0], _poisoned(m, n, torch.bfloat16))
    gemm.matmul(a, packed[0], kernel=plan)
    # The session's Gemm also holds the grouped tests' plans (GroupedFastPlan, no unpack).
    dense_plans = [p for p in gemm._fast._plans.values() if isinstance(p, FastPlan)]
    assert any(p.unpack is not None for p in dense_plans)
    for qw, p in zip(weights, packed):
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        out = _poisoned(m, n, torch.bfloat16)
        gemm.matmul(x, p, out=out, kernel=plan)
        assert rel_err(out, x.float() @ qw.dequantize().float().t()) < 1e-2
        fresh = gemm.matmul(x, p, kernel=plan)  # matmul allocates the output
        assert rel_err(fresh, x.float() @ qw.dequantize().float().t()) < 1e-2


def test_a_first_whole_weight_call_inside_a_cuda_graph_capture(gemm):
    """No warm-up: the unpack kernels were loaded when the Gemm was made, and the plan's
    step and buffer are made inside the capture (the buffer from the graph's pool)."""
    from gemm_runtime import unpack

    assert all((gemm.device.index, entry) in unpack._loaded for entry in unpack.ENTRIES.values())
    n, k, m = 904, 1664, 520  # a geometry no other test uses
    qw = _weight(n, k, torch.float16, 8, 32, seed=51)
    packed = pack_for_gemm(qw)
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    plan = _best_whole_weight_plan(gemm, a, packed, _poisoned(m, n, torch.float16))
    out = _poisoned(m, n, torch.float16)
    graph = torch.cuda.CUDAGraph()
    torch.cuda.synchronize()
    with torch.cuda.graph(graph):
        gemm.matmul(a, packed, out=out, kernel=plan)
    graph.replay()
    torch.cuda.synchronize()
    assert rel_err(out, a.float() @ qw.dequantize().float().t()) < 1e-2
