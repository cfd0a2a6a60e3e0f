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


def test_a_handle_is_of_a_gemm_or_none():
    """The ops' 0 (or a device) was kept as "the Gemm" of a layer (nn.Linear(..., gemm=0)),
    taken on the CPU and failing inside at the first call on a GPU ('int' object has no
    attribute 'linear')."""
    for gemm in (0, True, "cuda:0", torch.device("cuda", 0)):
        with pytest.raises(GemmArgumentError, match="^gemm: got .*; accepted: a gemm_runtime.Gemm, or None"):
            ops.handle_of(gemm)


# ---- grouped (mixture-of-experts) ----------------------------------------------------------
def _grouped(dtype=torch.float16, experts=4, n=24, k=64, tokens=7, seed=2):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(tokens, k, generator=g) * 0.5).to(dtype)
    w = (torch.randn(experts, n, k, generator=g) * 0.2).to(dtype)
    offsets = torch.tensor([0, 3, 3, 8, 10], dtype=torch.int32)
    index = torch.randint(0, tokens, (11,), generator=g, dtype=torch.int32)
    scale = torch.rand(11, generator=g)
    return x, w, offsets, index, scale


def test_grouped_ops_are_registered():
    assert hasattr(torch.ops.gemm_runtime, "grouped_matmul") and hasattr(torch.ops.gemm_runtime, "grouped_matmul_packed")


@pytest.mark.parametrize("gated", [False, True])
def test_grouped_op_computes_the_reference_on_cpu(gated):
    from gemm_runtime.experts import Routing, grouped_reference

    x, w, offsets, index, scale = _grouped()
    bias = torch.randn(4, 24).half()
    out = torch.ops.gemm_runtime.grouped_matmul(x, w, offsets, index, scale, bias, gated, 0)
    ref = grouped_reference(x, w, Routing(offsets, index, scale), bias=bias, gated=gated)
    assert out.shape == (11, 12 if gated else 24) and out.dtype == torch.float16
    torch.testing.assert_close(out.float(), ref, rtol=2e-3, atol=2e-3)
    # The routing is checked like Gemm.grouped_matmul's: values too, on the CPU.
    with pytest.raises(GemmArgumentError, match=r"offsets\[2\]"):
        torch.ops.gemm_runtime.grouped_matmul(x, w, torch.tensor([0, 3, 2, 8, 10], dtype=torch.int32), index)


def test_grouped_packed_op_matches_the_dequantized_experts():
    from gemm_runtime.experts import Routing, grouped_reference, pack_experts

    x, w, offsets, index, scale = _grouped()
    packed = pack_experts([quantize(we, bits=4, group_size=32) for we in w])
    meta = (4, 32, 24, 64, False)
    out = torch.ops.gemm_runtime.grouped_matmul_packed(x, packed.b, packed.v, offsets, *meta, index, scale, None, True)
    ref = grouped_reference(x, packed.dequantize(torch.float32), Routing(offsets, index, scale), gated=True)
    torch.testing.assert_close(out.float(), ref, rtol=2e-3, atol=2e-3)
    assert ops.packed_experts(packed.b, packed.v, *meta).unpack()[2].q.equal(packed.unpack()[2].q)


def test_grouped_fakes_give_the_grouped_rows_and_columns():
    from torch._subclasses.fake_tensor import FakeTensorMode

    from gemm_runtime.experts import pack_experts

    x, w, offsets, index, scale = _grouped(torch.bfloat16)
    packed = pack_experts([quantize(we, bits=8, group_size=32) for we in w])
    with FakeTensorMode() as mode:
        fx, fw, fo, fi, fs, fb, fv = (mode.from_tensor(t) for t in (x, w, offsets, index, scale, packed.b, packed.v))
        gathered = torch.ops.gemm_runtime.grouped_matmul(fx, fw, fo, fi, fs, None, True)
        sorted_rows = torch.ops.gemm_runtime.grouped_matmul(fx, fw, fo)
        quant = torch.ops.gemm_runtime.grouped_matmul_packed(fx, fb, fv, fo, 8, 32, 24, 64, False, fi)
        with pytest.raises(GemmArgumentError, match="K of the experts"):
            torch.ops.gemm_runtime.grouped_matmul_packed(fx, fb, fv, fo, 8, 32, 24, 128, False)
    assert gathered.shape == (11, 12) and gathered.dtype == torch.bfloat16
    assert sorted_rows.shape == (7, 24) and quant.shape == (11, 24)


def test_opcheck_grouped():
    from gemm_runtime.experts import pack_experts

    x, w, offsets, index, scale = _grouped(torch.float32)
    torch.library.opcheck(torch.ops.gemm_runtime.grouped_matmul.default, (x, w, offsets, index, scale, None, True, 0))
    x16, w16, *_ = _grouped(torch.float16)
    packed = pack_experts([quantize(we, bits=4, group_size=32) for we in w16])
    torch.library.opcheck(torch.ops.gemm_runtime.grouped_matmul_packed.default,
                          (x16, packed.b, packed.v, offsets, 4, 32, 24, 64, False, index, scale, None, False, 0))  # fmt: skip


@pytest.mark.parametrize("quantized", [False, True], ids=["dense", "w4"])
def test_the_expert_layer_compiles_into_one_graph(quantized):
    """GroupedExperts under torch.compile(fullgraph=True): the routing, both grouped
    GEMMs (as the custom ops) and the combine in one graph, as eager computes them."""
    from transformers import MixtralConfig
    from transformers.models.mixtral.modeling_mixtral import MixtralExperts

    from gemm_runtime.nn import GroupedExperts

    torch.manual_seed(0)
    module = MixtralExperts(MixtralConfig(hidden_size=64, intermediate_size=32, num_local_experts=4,
                                          num_experts_per_tok=2))  # fmt: skip
    with torch.no_grad():
        module.gate_up_proj.normal_(0, 0.1)
        module.down_proj.normal_(0, 0.1)
    layer = GroupedExperts.from_experts(module, quantize={"bits": 4, "group_size": 32} if quantized else None)
    x = torch.randn(9, 64)
    weights, index = torch.topk(torch.softmax(torch.randn(9, 4), -1), 2, dim=-1)
    torch._dynamo.reset()
    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
    with torch.no_grad():
        torch.testing.assert_close(compiled(x, index, weights), layer(x, index, weights))


def test_cpu_ops_check_the_shapes_the_gemm_checks():
    """The torch reference refuses what the GEMM refuses, with the same kind of error,
    rather than broadcasting (a silent wrong answer) or failing inside torch."""
    x, w, _ = _dense()
    cases = [
        # A bias of one value was broadcast over every column.
        ((x, w, torch.ones(1).half(), "none"), r"bias.shape: got \(1,\); accepted: \(24,\)"),
        # A 1-D weight gave a (5,) output.
        ((x, w[0], None, "none"), r"weight.shape: got \(40,\); accepted: a 2-D \(N, K\)"),
        ((x[:, :39], w, None, "none"), r"x.shape: got \(5, 39\); accepted: \(\.\.\., 40\)"),
        ((x, w[:23], None, "gated_silu"), "weight: got N = 23; accepted: an even N"),
    ]
    for args, match in cases:
        with pytest.raises(GemmArgumentError, match=match):
            torch.ops.gemm_runtime.linear(*args, 0)


def test_cpu_packed_op_checks_n_and_k_against_the_packed_tensors():
    _, p, packed = _packed(n=24, k=64)
    x = torch.randn(3, 64).half()
    # N = 32 for a 24-column weight: the reference used to return 24 columns where the
    # fake (torch.compile) promises 32.
    with pytest.raises(GemmArgumentError, match=r"qweight: got torch.uint8 \(3, 256\); accepted: a uint8 tensor \(4, 256\)"):
        torch.ops.gemm_runtime.linear_packed(x, p.b, p.v, 4, 32, 32, 64, False, None, "none", 0)
    with pytest.raises(GemmArgumentError, match=r"qweight: got torch.uint8 \(3, 256\); accepted: a uint8 tensor \(3, 512\)"):
        torch.ops.gemm_runtime.linear_packed(torch.randn(3, 128).half(), p.b, p.v, 4, 32, 24, 128, False, None, "none", 0)
    with pytest.raises(GemmArgumentError, match=r"scales_zeros.shape: got \(4, 24\); accepted: \(2, N = 24 or more\)"):
        torch.ops.gemm_runtime.linear_packed(x, p.b, p.v, 4, 64, 24, 64, False, None, "none", 0)
    with pytest.raises(GemmArgumentError, match="bits: got 3"):
        torch.ops.gemm_runtime.linear_packed(x, p.b, p.v, 3, 32, 24, 64, False, None, "none", 0)
    from gemm_runtime.experts import pack_experts

    xg, wg, offsets, index, scale = _grouped()
    stacked = pack_experts([quantize(we, bits=4, group_size=32) for we in wg])
    with pytest.raises(GemmArgumentError, match=r"qweight: got torch.uint8 \(3, 256\); accepted: a uint8 tensor \(4, 256\)"):
        torch.ops.gemm_runtime.grouped_matmul_packed(xg, stacked.b, stacked.v, offsets, 4, 32, 32, 64, False, index)


def test_cpu_grouped_op_refuses_a_bias_of_one_row():
    x, w, offsets, index, scale = _grouped()
    # [N] instead of [E, N]: each expert's "row" was one value, added to every column.
    with pytest.raises(GemmArgumentError, match=r"bias: got shape \(24,\); accepted: \(4, 24\): one row per expert"):
        torch.ops.gemm_runtime.grouped_matmul(x, w, offsets, index, scale, torch.randn(24).half(), False, 0)
    with pytest.raises(GemmArgumentError, match="an even N"):
        torch.ops.gemm_runtime.grouped_matmul(x, w[:, :23], offsets, index, scale, None, True, 0)
