"""Every quantized kernel against the fp32 product with the dequantized weight; group
boundaries at and across the CTA K tile; act-order GPTQ; fused epilogues; QuantLinear."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from gemm_runtime import GemmArgumentError
from gemm_runtime.nn import QuantLinear, replace_linear
from gemm_runtime.packed_weight import pack_for_gemm
from gemm_runtime.quant import QuantizedWeight, quantize
from gemm_runtime.types import torch_dtype
from tests.gpu.util import check_quant_epilogues_and_split_k, rel_err, shared_gemm

pytestmark = pytest.mark.gpu


def _quant_kernels():
    if not torch.cuda.is_available():
        return ["no-gpu"]
    return [k.name for k in shared_gemm().kernels if k.spec.quantized and not k.spec.grouped]  # grouped: test_grouped_kernels.py


def _weight(n, k, dtype, bits, group_size, gen, symmetric=False):
    w = torch.randn(n, k, device="cuda", generator=gen).to(dtype) * 0.05
    return quantize(w, bits=bits, group_size=group_size, symmetric=symmetric)


# The kernel's own error against the fp32 product with the dequantized weight is the
# output's rounding plus fp32 accumulation order: (norm-wise, max over max |ref|).
_TOLERANCE = {torch.float16: (1e-3, 2e-3), torch.bfloat16: (6e-3, 1e-2)}


def _errors(out: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    if torch.isnan(out).any():
        return float("nan"), float("nan")
    diff = (out.float() - ref).abs()
    return (diff.norm() / ref.norm()).item(), (diff.max() / ref.abs().max()).item()


# 64: groups of exactly one warp's K slice on the 16x16x512 w1x1x8 and 16x64x128 tiles, whose
# decode loops fold a group's sums at the end of every slice.
@pytest.mark.parametrize("group_size", [32, 64, 128, -1])
@pytest.mark.parametrize("name", _quant_kernels())
def test_quant_kernel_matches_dequantized_reference(gemm, name, group_size):
    spec = gemm.registry.get(name).spec
    dt, out_dt = torch_dtype(spec.a_type), torch_dtype(spec.d_type)
    rel_tol, max_tol = _TOLERANCE[dt]
    gen = torch.Generator(device="cuda").manual_seed(hash((name, group_size)) % 2**31)
    cm, cn, ck = spec.cta
    failures = []
    # K: a group boundary inside and across CTA K tiles, and a K tail that is not a
    # multiple of the CTA K tile (nor of 32; A rows stay 16-byte aligned); N with a residue against the CTA N tile
    # and against 8; asymmetric and symmetric weights. Lower-alignment kernels also
    # get the K their alignment allows (A's rows then start off 16-byte boundaries).
    shapes = [(2 * cn + 8, 2 * ck + 32, False), (cn + 27, 3 * 128 + 72, True)]
    if spec.align < 8:
        shapes.append((cn + 5, 2 * 128 + 40 + spec.align, False))
    for n, k, symmetric in shapes:
        qw = _weight(n, k, dt, spec.b_type.bits, group_size, gen, symmetric)
        packed = pack_for_gemm(qw)
        ref_w = qw.dequantize().float()
        # M: decode tiles run one loop up to 8 rows per tile and another for 9-16
        # (MainloopSm80); 8 and 9 sit on that edge, 33 and 257 end on a 1-row tile. The
        # sm80_rows8 tiles serve at most 8 rows (test_quant_kernel_refuses_rows_it_cannot_serve).
        for m in (m for m in (1, 7, 8, 9, 33, 257) if spec.mainloop.rows_error(spec, m) is None):
            a = torch.randn(m, k, device="cuda", dtype=dt, generator=gen)
            out = torch.full((m, n), float("nan"), device="cuda", dtype=out_dt)
            gemm.matmul(a, packed, out=out, kernel=name)
            rel, worst = _errors(out, a.float() @ ref_w.t())
            if not (rel < rel_tol and worst < max_tol):
                failures.append(f"M={m} N={n} K={k} symmetric={symmetric}: rel {rel:.2e} max {worst:.2e}")
    assert not failures, f"{name} group {group_size}: " + "; ".join(failures)


@pytest.mark.parametrize("name", _quant_kernels())
def test_quant_kernel_epilogues_and_split_k(gemm, name):
    spec = gemm.registry.get(name).spec
    # 5 rows too: at most 8, the K-sliced decode tiles sum and transpose rows 0-7 only.
    for rows in (19, 5) if spec.mainloop.rows_error(spec, 19) is None else (7,):
        check_quant_epilogues_and_split_k(gemm, name, rows=rows)


def _wgmma_quant_kernels():
    if not torch.cuda.is_available():
        return ["no-gpu"]
    return [k.name for k in shared_gemm().kernels if k.spec.mainloop.value == "sm90_quant" and not k.spec.grouped] or [
        "none on this GPU"]


@pytest.mark.parametrize("name", _wgmma_quant_kernels())
def test_wgmma_kernels_with_act_order_prefill_and_k7392(gemm, name):
    """Each sm90_quant kernel (D^T = W . X^T on wgmma) beyond the shapes above: an
    act-order GPTQ weight (groups shuffled over K; reordered, the activations permuted the
    same way) at M = 4099 (a prefill with a residue against every token tile), 356 (100
    rows in the last 256-token tile: its wgmma run 128 tokens wide) and 1,
    and K = 7392 in groups of 32 (qwen2-72b down at 4-way tensor parallelism: not a
    multiple of the 64-wide K tile, two groups per K tile) at M = 300."""
    if name == "none on this GPU":
        pytest.skip("no sm90_quant kernel loads on this GPU")
    spec = gemm.registry.get(name).spec
    dt, out_dt = torch_dtype(spec.a_type), torch_dtype(spec.d_type)
    rel_tol, max_tol = _TOLERANCE[dt]
    gen = torch.Generator(device="cuda").manual_seed(hash(name) % 2**31)
    base = _weight(264, 640, dt, spec.b_type.bits, 128, gen)
    g_idx = (torch.arange(640, device="cuda") // 128)[torch.randperm(640, device="cuda", generator=gen)].int()
    act_order = QuantizedWeight(base.q, base.scales, base.zeros, base.bits, 128, base.symmetric, g_idx)
    reordered, perm = act_order.reordered()
    cases = [(act_order, pack_for_gemm(reordered), perm, m) for m in (4099, 356, 1)]
    k7392 = _weight(392, 7392, dt, spec.b_type.bits, 32, gen)
    cases.append((k7392, pack_for_gemm(k7392), None, 300))
    failures = []
    for qw, packed, perm, m in cases:
        n, k = qw.q.shape
        a = torch.randn(m, k, device="cuda", dtype=dt, generator=gen)
        out = torch.full((m, n), float("nan"), device="cuda", dtype=out_dt)
        gemm.matmul(a if perm is None else a[:, perm], packed, out=out, kernel=name)
        rel, worst = _errors(out, a.float() @ qw.dequantize().float().t())
        if not (rel < rel_tol and worst < max_tol):
            failures.append(f"M={m} N={n} K={k} act_order={perm is not None}: rel {rel:.2e} max {worst:.2e}")
    assert not failures, f"{name}: " + "; ".join(failures)


def test_qwen2_72b_tp4_down_projection_k7392_group32(gemm):
    """K = 7392 (qwen2-72b down under 4-way tensor parallelism) is not a multiple of 128."""
    qw = _weight(1024, 7392, torch.float16, 4, 32, torch.Generator(device="cuda").manual_seed(1))
    a = torch.randn(5, 7392, device="cuda", dtype=torch.float16)
    out = gemm.matmul(a, pack_for_gemm(qw))
    assert rel_err(out, a.float() @ qw.dequantize().float().t()) < 1e-2


def test_replayed_calls_use_each_weights_own_scales(gemm):
    """The matmul fast path replays a launch for a repeated signature: a second weight
    of the same shape must bring its own B and V pointers, not the first one's."""
    gen = torch.Generator(device="cuda").manual_seed(4)
    first, second = (_weight(384, 1024, torch.float16, 4, 128, gen) for _ in range(2))
    second = QuantizedWeight(second.q, second.scales * 3, second.zeros, 4, 128, second.symmetric)
    p1, p2 = pack_for_gemm(first), pack_for_gemm(second)
    a = torch.randn(3, 1024, device="cuda", dtype=torch.float16, generator=gen)
    for _ in range(3):  # the first call validates and dispatches, the others replay
        for qw, packed in ((first, p1), (second, p2)):
            out = torch.full((3, 384), float("nan"), device="cuda", dtype=torch.float16)
            gemm.matmul(a, packed, out=out)
            assert _errors(out, a.float() @ qw.dequantize().float().t())[0] < 1e-3


def test_act_order_weights_match_the_dequantized_reference(gemm):
    gen = torch.Generator(device="cuda").manual_seed(2)
    base = _weight(256, 512, torch.float16, 4, 128, gen)
    # An act-order checkpoint: each K row belongs to a shuffled group.
    g_idx = (torch.arange(512, device="cuda") // 128)[torch.randperm(512, device="cuda", generator=gen)].int()
    qw = QuantizedWeight(base.q, base.scales, base.zeros, 4, 128, base.symmetric, g_idx)
    layer = QuantLinear.from_quantized(qw, gemm=gemm)
    a = torch.randn(9, 512, device="cuda", dtype=torch.float16)
    assert rel_err(layer(a), a.float() @ qw.dequantize().float().t()) < 1e-2


def test_quant_errors(gemm):
    qw = _weight(64, 128, torch.float16, 4, 32, torch.Generator(device="cuda").manual_seed(3))
    packed = pack_for_gemm(qw)
    with pytest.raises(GemmArgumentError, match="a.shape"):
        gemm.matmul(torch.randn(3, 96, device="cuda", dtype=torch.float16), packed)
    with pytest.raises(GemmArgumentError, match=r"^a.dtype: got torch.bfloat16; accepted: torch.float16: this weight's"):
        gemm.matmul(torch.randn(3, 128, device="cuda", dtype=torch.bfloat16), packed)


class _MLP(torch.nn.Module):
    def __init__(self, d=512, ff=1024):
        super().__init__()
        self.gate, self.up = torch.nn.Linear(d, ff, bias=False), torch.nn.Linear(d, ff, bias=False)
        self.down = torch.nn.Linear(ff, d)
        self.norm = torch.nn.LayerNorm(d)

    def forward(self, x):
        h = self.norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


@pytest.mark.parametrize("bits,tol", [(8, 2e-2), (4, 0.12)])
def test_replace_linear_with_quantized_layers(gemm, bits, tol):
    torch.manual_seed(0)
    model = torch.nn.Sequential(_MLP(), _MLP()).cuda().half()
    x = torch.randn(2, 17, 512, device="cuda", dtype=torch.float16)
    with torch.no_grad():
        ref = model.float()(x.float())
        model.half()
        names = replace_linear(model, gemm=gemm, quantize={"bits": bits, "group_size": 128})
        out = model(x)
    assert len(names) == 6 and all(isinstance(model.get_submodule(n), QuantLinear) for n in names)
    assert rel_err(out, ref) < tol
