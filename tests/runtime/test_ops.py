"""The custom ops on CPU tensors: registration, fake implementations (shapes, dtypes,
epilogues), the torch reference they compute there, gradients, and opcheck."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from gemm_runtime import ops
from gemm_runtime.errors import GemmArgumentError
from gemm_runtime.packed_weight import pack_for_gemm
from gemm_runtime.quant import quantize


def _dense(dtype=torch.float16, m=5, n=24, k=40, bias=True, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(m, k, generator=g) * 0.5).to(dtype)
    w = (torch.randn(n, k, generator=g) * 0.2).to(dtype)
    b = (torch.randn(n, generator=g) * 0.1).to(dtype) if bias else None
    return x, w, b


def _packed(dtype=torch.float16, n=24, k=64, bits=4, group_size=32):
    g = torch.Generator().manual_seed(1)
    qw = quantize((torch.randn(n, k, generator=g) * 0.1).to(dtype), bits=bits, group_size=group_size)
    p = pack_for_gemm(qw)
    return qw, p, (p.b, p.v, p.bits, p.group_size, p.n, p.k, p.symmetric)


def test_ops_are_registered():
    assert hasattr(torch.ops.gemm_runtime, "linear") and hasattr(torch.ops.gemm_runtime, "linear_packed")


@pytest.mark.parametrize("epilogue", ops.EPILOGUES)
@pytest.mark.parametrize("bias", [False, True])
def test_dense_op_computes_the_reference_on_cpu(epilogue, bias):
    x, w, b = _dense(bias=bias)
    out = torch.ops.gemm_runtime.linear(x, w, b, epilogue, 0)
    v = F.linear(x.float(), w.float(), None if b is None else b.float())
    ref = F.silu(v[:, 0::2]) * v[:, 1::2] if epilogue == "gated_silu" else v
    assert out.dtype == x.dtype and out.shape == ref.shape
    torch.testing.assert_close(out.float(), ref, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("epilogue", ops.EPILOGUES)
def test_fake_implementations_give_shape_dtype_device(epilogue):
    from torch._subclasses.fake_tensor import FakeTensorMode

    x, w, b = _dense(torch.bfloat16)
    _, _, packed = _packed(torch.bfloat16)
    with FakeTensorMode() as mode:
        fx, fw, fb = (mode.from_tensor(t) for t in (x, w, b))
        out = torch.ops.gemm_runtime.linear(fx.reshape(1, 5, 40), fw, fb, epilogue, 0)
        fp = tuple(mode.from_tensor(t) if isinstance(t, torch.Tensor) else t for t in packed)
        xq = mode.from_tensor(torch.randn(3, 7, 64, dtype=torch.bfloat16))
        outq = torch.ops.gemm_runtime.linear_packed(xq, *fp, None, epilogue, 0)
    n = 12 if epilogue == "gated_silu" else 24
    assert out.shape == (1, 5, n) and out.dtype == torch.bfloat16 and out.device.type == "cpu"
    assert outq.shape == (3, 7, n) and outq.dtype == torch.bfloat16


def test_bad_epilogue_is_an_argument_error():
    x, w, b = _dense()
    with pytest.raises(GemmArgumentError, match="epilogue"):
        torch.ops.gemm_runtime.linear(x, w, b, "bias", 0)


def test_packed_op_matches_the_dequantized_weight():
    qw, _, packed = _packed(n=40, k=96, bits=8, group_size=32)
    x = torch.randn(3, 96).half()
    out = torch.ops.gemm_runtime.linear_packed(x, *packed, None, "none", 0)
    ref = x.float() @ qw.dequantize(torch.float32).t()
    torch.testing.assert_close(out.float(), ref, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("epilogue", ops.EPILOGUES)
def test_dense_gradients_match_torch(epilogue):
    x, w, b = (t.float().requires_grad_() for t in _dense())
    out = torch.ops.gemm_runtime.linear(x, w, b, epilogue, 0)
    v = F.linear(x, w, b)
    ref = F.silu(v[:, 0::2]) * v[:, 1::2] if epilogue == "gated_silu" else v
    grad = torch.randn_like(ref)
    got = torch.autograd.grad(out, (x, w, b), grad)
    want = torch.autograd.grad(ref, (x, w, b), grad)
    for g, r in zip(got, want):
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-4)


def test_packed_input_gradient_uses_the_dequantized_weight():
    qw, _, packed = _packed(torch.float16, n=16, k=64)
    x = torch.randn(4, 64).half().requires_grad_()
    out = torch.ops.gemm_runtime.linear_packed(x, *packed, None, "none", 0)
    (gx,) = torch.autograd.grad(out.float().sum(), (x,))
    ref = torch.ones(4, 16) @ qw.dequantize(torch.float32)
    torch.testing.assert_close(gx.float(), ref, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("epilogue", ops.EPILOGUES)
def test_opcheck_dense(epilogue):
    x, w, b = _dense(torch.float32)
    torch.library.opcheck(torch.ops.gemm_runtime.linear.default, (x, w, b, epilogue, 0))
    torch.library.opcheck(torch.ops.gemm_runtime.linear.default, (x.requires_grad_(), w, None, epilogue, 0))


def test_opcheck_packed():
    _, _, packed = _packed(torch.float16)
    x = torch.randn(3, 64).half()
    torch.library.opcheck(torch.ops.gemm_runtime.linear_packed.default, (x, *packed, None, "none", 0))


def test_handles_name_their_gemm():
    marker = object()
    handle = ops.handle_of(marker)
    assert ops.handle_of(None) == 0 and ops._gemm(handle, torch.device("cpu")) is marker
    with pytest.raises(GemmArgumentError, match="gemm"):
        ops._gemm(12345, torch.device("cpu"))
