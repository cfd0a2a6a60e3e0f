"""The library inside PyTorch on the GPU: opcheck on CUDA tensors, torch.compile
(fullgraph and reduce-overhead), CUDA-graph capture and replay, autograd, and a
transformers Llama model end to end."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from gemm_runtime import DispatchPolicy, Operation, ops
from gemm_runtime.errors import GraphCaptureError
from gemm_runtime.nn import Linear, QuantLinear, replace_linear
from gemm_runtime.packed_weight import pack_for_gemm
from gemm_runtime.plan import LaunchSpec
from gemm_runtime.quant import quantize
from tests.gpu.util import rel_err

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("epilogue", ops.EPILOGUES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_opcheck_on_cuda(gemm, epilogue, dtype):
    x = torch.randn(7, 96, device="cuda", dtype=dtype)
    w = torch.randn(64, 96, device="cuda", dtype=dtype) * 0.1
    b = torch.randn(64, device="cuda", dtype=dtype)
    torch.library.opcheck(torch.ops.gemm_runtime.linear.default, (x, w, b, epilogue, 0))
    torch.library.opcheck(torch.ops.gemm_runtime.linear.default, (x.requires_grad_(), w, None, epilogue, 0))
    p = pack_for_gemm(quantize(w, bits=4, group_size=32))
    args = (x.detach(), p.b, p.v, p.bits, p.group_size, p.n, p.k, p.symmetric, b, epilogue, 0)
    torch.library.opcheck(torch.ops.gemm_runtime.linear_packed.default, args)


class _MLP(torch.nn.Module):
    def __init__(self, d=256, ff=512):
        super().__init__()
        self.norm = torch.nn.LayerNorm(d)
        self.up = torch.nn.Linear(d, ff)
        self.down = torch.nn.Linear(ff, d, bias=False)

    def forward(self, x):
        return x + self.down(F.silu(self.up(self.norm(x))))


def _models(quantized: bool):
    torch.manual_seed(0)
    model = torch.nn.Sequential(_MLP(), _MLP()).cuda().half().eval()
    replace_linear(model, quantize={"bits": 4, "group_size": 128} if quantized else None)
    return model


@pytest.mark.parametrize("quantized", [False, True], ids=["dense", "w4"])
def test_compile_fullgraph_has_no_graph_break_and_matches_eager(quantized):
    model = _models(quantized)
    x = torch.randn(3, 17, 256, device="cuda", dtype=torch.float16)
    with torch.no_grad():
        eager = model(x)
        explained = torch._dynamo.explain(model)(x)
        assert explained.graph_break_count == 0, explained.break_reasons
        compiled = torch.compile(model, fullgraph=True)
        got = compiled(x)
    torch.testing.assert_close(got, eager, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("quantized", [False, True], ids=["dense", "w4"])
def test_compile_reduce_overhead_replays_graphs_with_new_inputs(quantized):
    model = _models(quantized)
    compiled = torch.compile(model, mode="reduce-overhead", fullgraph=True)
    with torch.no_grad():
        for step in range(4):  # warm-up, capture, then replays of the captured graph
            x = torch.randn(4, 256, device="cuda", dtype=torch.float16)
            got = compiled(x).clone()
            torch.testing.assert_close(got, model(x), rtol=2e-3, atol=2e-3, msg=f"step {step}")


def _capture(fn):
    graph = torch.cuda.CUDAGraph()
    fn()  # warm-up outside the capture: plans the launch
    torch.cuda.synchronize()
    with torch.cuda.graph(graph):
        out = fn()
    return graph, out


@pytest.mark.parametrize("kind", ["dense", "packed", "split_k"])
def test_cuda_graph_replay_follows_the_input_buffers(gemm, kind):
    gen = torch.Generator(device="cuda").manual_seed(3)
    x = torch.randn(5, 1024, device="cuda", dtype=torch.float16, generator=gen)
    w = torch.randn(768, 1024, device="cuda", dtype=torch.float16, generator=gen) * 0.05
    b = torch.randn(768, device="cuda", dtype=torch.float16, generator=gen)
    kw: dict = {"bias": b}
    if kind == "packed":
        qw = quantize(w, bits=4, group_size=128)
        weight, ref_w = pack_for_gemm(qw), qw.dequantize(torch.float32)
    else:
        weight, ref_w = w.t(), w.float()
        if kind == "split_k":
            name = next(k.name for k in gemm.kernels if k.spec.align == 8 and not k.spec.quantized and not k.spec.grouped
                        and k.spec.b_order.value == "nk" and k.spec.d_type.value == "f16"
                        and k.spec.a_type.value == "f16")  # fmt: skip
            kw["kernel"] = LaunchSpec(name, 4, 0)
    graph, out = _capture(lambda: gemm.matmul(x, weight, **kw))
    for _ in range(3):
        x.copy_(torch.randn(5, 1024, device="cuda", dtype=torch.float16, generator=gen))
        b.copy_(torch.randn(768, device="cuda", dtype=torch.float16, generator=gen))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert rel_err(out, x.float() @ ref_w.t() + b.float()) < 1e-2


def test_measuring_under_capture_is_a_clear_error(gemm):
    x = torch.randn(3, 512, device="cuda", dtype=torch.float16)
    w = torch.randn(384, 512, device="cuda", dtype=torch.float16)
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    with pytest.raises(GraphCaptureError, match="captures a CUDA graph"):
        with torch.cuda.graph(graph, stream=stream):
            gemm.matmul(x, w.t(), operation=Operation(dispatch=DispatchPolicy.MEASURE))
    torch.cuda.synchronize()
    # The library still works afterwards, on the stream it captured on too.
    with torch.cuda.stream(stream):
        out = gemm.matmul(x, w.t())
    torch.cuda.synchronize()
    assert rel_err(out, x.float() @ w.float().t()) < 1e-2


@pytest.mark.parametrize("epilogue", ["none", "gated_silu"])
def test_gradients_match_torch_on_the_gpu(epilogue):
    torch.manual_seed(1)
    lin = torch.nn.Linear(256, 384).cuda().half()
    layer = Linear.from_float(lin)
    x = torch.randn(9, 256, device="cuda", dtype=torch.float16, requires_grad=True)
    out = torch.ops.gemm_runtime.linear(x, layer.weight, layer.bias, epilogue, 0)
    ref_x = x.detach().float().requires_grad_()
    ref_lin = copy.deepcopy(lin).float()
    v = ref_lin(ref_x)
    ref = F.silu(v[:, 0::2]) * v[:, 1::2] if epilogue == "gated_silu" else v
    grad = torch.randn_like(ref)
    out.backward(grad.half())
    ref.backward(grad)
    for got, want in ((x.grad, ref_x.grad), (lin.weight.grad, ref_lin.weight.grad), (lin.bias.grad, ref_lin.bias.grad)):
        assert rel_err(got, want) < 1e-2


def test_quant_linear_moves_and_reloads_on_the_gpu(gemm):
    torch.manual_seed(2)
    lin = torch.nn.Linear(512, 256).half()
    layer = QuantLinear.from_float(lin.cuda(), bits=4, group_size=64)
    x = torch.randn(3, 512, device="cuda", dtype=torch.float16)
    want = layer(x)
    moved = copy.deepcopy(layer).cpu().cuda()
    assert torch.equal(moved(x), want)
    gated = torch.ops.gemm_runtime.linear_packed(x, layer.qweight, layer.scales_zeros, 4, 64, 256, 512, False,
                                                 layer.bias, "gated_silu", 0)  # fmt: skip
    v = layer(x).float()  # x @ W.T + bias
    assert rel_err(gated, F.silu(v[:, 0::2]) * v[:, 1::2]) < 1e-2


# ---- a real client ------------------------------------------------------------------------
def _llama(seed=0):
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128, initializer_range=0.05,
    )  # fmt: skip
    torch.manual_seed(seed)
    return transformers.LlamaForCausalLM(config).cuda().half().eval()


def _generate(model, ids):
    return model.generate(ids, max_new_tokens=12, do_sample=False, pad_token_id=0)


def test_llama_generates_the_same_tokens_with_our_linears():
    ref = _llama()
    ours = copy.deepcopy(ref)
    names = replace_linear(ours)
    assert len(names) == 2 * 7 + 1  # q, k, v, o, gate, up, down per layer, and lm_head
    ids = torch.randint(0, 512, (2, 9), device="cuda", generator=torch.Generator(device="cuda").manual_seed(0))
    with torch.no_grad():
        want = _generate(ref, ids)
        assert torch.equal(_generate(ours, ids), want)
        ours.forward = torch.compile(ours.forward)
        assert torch.equal(_generate(ours, ids), want)


def test_llama_4bit_logits_match_the_dequantized_model():
    ref = _llama(1)
    ours = copy.deepcopy(ref)
    replace_linear(ours, quantize={"bits": 4, "group_size": 64})
    # The reference runs torch with each weight replaced by its dequantized value.
    for name, module in ours.named_modules():
        if isinstance(module, QuantLinear):
            ref.get_submodule(name).weight.data.copy_(module.packed.unpack().dequantize(torch.float16))
    ids = torch.randint(0, 512, (2, 11), device="cuda", generator=torch.Generator(device="cuda").manual_seed(1))
    with torch.no_grad():
        want = ref(ids).logits.float()
        assert rel_err(ours(ids).logits, want) < 1e-2
        compiled = torch.compile(ours)
        assert rel_err(compiled(ids).logits, want) < 1e-2


def test_linear_and_matmul_replays_of_one_square_weight_stay_apart(gemm):
    """x @ W.T (the op) and x @ W (matmul with a K x N B) share every tensor attribute
    when W is square; each replay must still compute its own product."""
    w = torch.randn(512, 512, device="cuda", dtype=torch.float16) * 0.05
    x = torch.randn(3, 512, device="cuda", dtype=torch.float16)
    for _ in range(3):  # plan, then replay, interleaved
        assert rel_err(torch.ops.gemm_runtime.linear(x, w, None, "none", 0), x.float() @ w.float().t()) < 1e-2
        assert rel_err(gemm.matmul(x, w), x.float() @ w.float()) < 1e-2
