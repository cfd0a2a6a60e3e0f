"""Fused epilogues (bias, gated SiLU) on every kernel, and the nn drop-ins."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from gemm_runtime import Epilogue, GemmArgumentError, Operation
from gemm_runtime.nn import GatedMLPProjection, Linear, interleave_gate_up, replace_linear
from gemm_runtime.plan import LaunchSpec
from gemm_runtime.types import torch_dtype
from tests.gpu.util import rel_err, shared_gemm

pytestmark = pytest.mark.gpu


def _kernel_names():
    if not torch.cuda.is_available():
        return ["no-gpu"]
    # Quantized kernels take a packed weight: tests/gpu/test_quant_kernels.py covers them.
    return [k.name for k in shared_gemm(allow_emulated=True).kernels if not k.spec.quantized and not k.spec.grouped]


@pytest.mark.parametrize("name", _kernel_names())
def test_bias_and_gated_silu_on_every_kernel(gemm_all, name):
    spec = gemm_all.registry.get(name).spec
    dt, od = torch_dtype(spec.a_type), torch_dtype(spec.d_type)
    m, n, k = 37, 2 * spec.cta[1] + 2 * spec.align, spec.cta[2] + spec.align
    a = torch.randn(m, k, device="cuda", dtype=dt)
    w = torch.randn(n, k, device="cuda", dtype=dt)
    b = w.t() if spec.b_order.value == "nk" else w.t().contiguous()
    bias = torch.randn(n, device="cuda", dtype=od)
    acc = a.float() @ b.float()
    out = torch.full((m, n), float("nan"), device="cuda", dtype=od)
    gemm_all.matmul(a, b, out=out, alpha=0.5, bias=bias, kernel=name)
    assert rel_err(out, 0.5 * acc + bias.float()) < 1e-2, "bias"
    # Split-K where the kernel's family allows it (sm90 cluster kernels do not split).
    splits = min(2, spec.mainloop.max_splits(spec) or 2)
    for plan in (LaunchSpec(name), LaunchSpec(name, splits, 1)):
        c = torch.randn(m, n // 2, device="cuda", dtype=od)
        gated = torch.full((m, n // 2), float("nan"), device="cuda", dtype=od)
        gemm_all.matmul(a, b, out=gated, bias=bias, beta=1.0, c=c, kernel=plan,
                        operation=Operation(epilogue=Epilogue.GATED_SILU))
        v = acc + bias.float()
        ref = F.silu(v[:, 0::2]) * v[:, 1::2] + c.float()
        assert rel_err(gated, ref) < 1e-2, f"gated silu {plan}"


def test_epilogue_errors(gemm):
    a = torch.randn(8, 64, device="cuda", dtype=torch.float16)
    w = torch.randn(30, 64, device="cuda", dtype=torch.float16)
    with pytest.raises(GemmArgumentError, match=r"bias.shape"):
        gemm.matmul(a, w.t(), bias=torch.randn(29, device="cuda", dtype=torch.float16))
    with pytest.raises(GemmArgumentError, match=r"bias.dtype"):
        gemm.matmul(a, w.t(), bias=torch.randn(30, device="cuda", dtype=torch.float32))
    with pytest.raises(GemmArgumentError, match=r"out.shape: got \(8, 30\); accepted: \(8, 15\)"):
        gemm.matmul(a, w.t(), out=torch.empty(8, 30, device="cuda", dtype=torch.float16),
                    operation=Operation(epilogue=Epilogue.GATED_SILU))
    from gemm_runtime import MatrixLayout

    d = torch.empty(8, 30, device="cuda", dtype=torch.float16)
    with pytest.raises(GemmArgumentError, match=r"Ddesc shape.*gated epilogue halves"):
        gemm.run(Operation(epilogue=Epilogue.GATED_SILU), 1.0, a, MatrixLayout.of(a), None, None, w.t(),
                 MatrixLayout.of(w.t()), None, None, 0.0, None, None, d, MatrixLayout.of(d))
    with pytest.raises(GemmArgumentError, match=r"even N"):
        gemm.matmul(a, w[:29].t(), operation=Operation(epilogue=Epilogue.GATED_SILU))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_linear_matches_torch(gemm, dtype):
    lin = torch.nn.Linear(200, 136, device="cuda", dtype=dtype)
    x = torch.randn(3, 5, 200, device="cuda", dtype=dtype)
    ours = Linear.from_float(lin, gemm)
    assert rel_err(ours(x), F.linear(x.float(), lin.weight.float(), lin.bias.float())) < 1e-2
    with pytest.raises(GemmArgumentError, match="x.dtype"):
        ours(x.float())


def test_gated_mlp_projection_matches_two_linears(gemm):
    gate = torch.nn.Linear(128, 96, device="cuda", dtype=torch.float16)
    up = torch.nn.Linear(128, 96, bias=False, device="cuda", dtype=torch.float16)
    x = torch.randn(7, 128, device="cuda", dtype=torch.float16)
    fused = GatedMLPProjection(gate, up, gemm)
    ref = F.silu(F.linear(x.float(), gate.weight.float(), gate.bias.float())) * F.linear(x.float(), up.weight.float())
    assert rel_err(fused(x), ref) < 1e-2
    assert torch.equal(interleave_gate_up(gate.weight, up.weight)[1::2], up.weight)


class _Block(torch.nn.Module):
    """A small pre-norm transformer block: attention + gated MLP, all projections nn.Linear."""

    def __init__(self, d: int = 256, heads: int = 4, ff: int = 512):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.gate, self.up, self.down = torch.nn.Linear(d, ff, bias=False), torch.nn.Linear(d, ff, bias=False), torch.nn.Linear(ff, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        att = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        h = self.norm2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


def test_replace_linear_in_a_small_transformer(gemm):
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[_Block() for _ in range(2)]).cuda().half()
    x = torch.randn(2, 33, 256, device="cuda", dtype=torch.float16)
    with torch.no_grad():
        ref = model.float()(x.float())
        model.half()
        names = replace_linear(model, gemm=gemm)
        out = model(x)
    assert len(names) == 10 and all(isinstance(model.get_submodule(n), Linear) for n in names)
    assert rel_err(out, ref) < 2e-2
