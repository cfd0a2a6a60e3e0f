"""The expert layer on the GPU (gemm_runtime.nn.GroupedExperts, docs/MOE.md): a
transformers sparse MoE block (Mixtral's, Qwen2-MoE's) built from a small config with
random weights gives the same output after replace_experts as before, fp16 and bf16, and
with quantized experts the output of the block holding their dequantized weights; and
the same under torch.compile (inductor, and CUDA graphs through reduce-overhead)."""

from __future__ import annotations

import pytest
import torch

from gemm_runtime.nn import GroupedExperts, replace_experts

pytestmark = pytest.mark.gpu


def _mixtral(dtype):
    from transformers import MixtralConfig
    from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock

    cfg = MixtralConfig(hidden_size=256, intermediate_size=512, num_local_experts=8, num_experts_per_tok=2)
    return MixtralSparseMoeBlock(cfg)


def _qwen2_moe(dtype):
    from transformers import Qwen2MoeConfig
    from transformers.models.qwen2_moe.modeling_qwen2_moe import Qwen2MoeSparseMoeBlock

    cfg = Qwen2MoeConfig(hidden_size=256, moe_intermediate_size=128, shared_expert_intermediate_size=256,
                         num_experts=16, num_experts_per_tok=4)  # fmt: skip
    return Qwen2MoeSparseMoeBlock(cfg)


@pytest.mark.parametrize("tokens", [1, 16, 300])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("make", [_mixtral, _qwen2_moe], ids=["mixtral", "qwen2_moe"])
def test_the_block_computes_the_same_after_replace_experts(gemm, make, dtype, tokens) -> None:
    torch.manual_seed(tokens)
    block = make(dtype)
    with torch.no_grad():
        for p in block.parameters():
            p.normal_(0, p.shape[-1] ** -0.5)
    block = block.to("cuda", dtype).eval()
    x = torch.randn(1, tokens, 256, device="cuda", dtype=dtype)
    with torch.no_grad():
        want = block(x)
        want = want[0] if isinstance(want, tuple) else want
        assert replace_experts(block, gemm=gemm) == ["experts"]
        assert isinstance(block.experts, GroupedExperts)
        got = block(x)
        got = got[0] if isinstance(got, tuple) else got
    err = ((got.float() - want.float()).norm() / want.float().norm()).item()
    assert err < 1e-2, f"rel err {err}"


@pytest.mark.parametrize("tokens", [1, 16, 300])
@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("make", [_mixtral, _qwen2_moe], ids=["mixtral", "qwen2_moe"])
def test_quantized_experts_compute_the_block_with_dequantized_weights(gemm, make, dtype, bits, tokens) -> None:
    """W4A16 / W8A16 experts against the same block whose experts hold the weights the
    quantized layer dequantizes to."""
    import copy

    torch.manual_seed(tokens + bits)
    block = make(dtype)
    with torch.no_grad():
        for p in block.parameters():
            p.normal_(0, p.shape[-1] ** -0.5)
    block = block.to("cuda", dtype).eval()
    reference = copy.deepcopy(block)
    x = torch.randn(1, tokens, 256, device="cuda", dtype=dtype)
    with torch.no_grad():
        assert replace_experts(block, gemm=gemm, quantize={"bits": bits, "group_size": 64}) == ["experts"]
        layer = block.experts
        assert isinstance(layer, GroupedExperts) and layer.quantized
        gate_up, down = (w.dequantize(dtype) for w in layer.weights())
        # The layer's gate_up rows interleave (gate, up); transformers' stack gate, then up.
        reference.experts.gate_up_proj.copy_(torch.cat((gate_up[:, 0::2], gate_up[:, 1::2]), dim=1))
        reference.experts.down_proj.copy_(down)
        want = reference(x)
        want = want[0] if isinstance(want, tuple) else want
        got = block(x)
        got = got[0] if isinstance(got, tuple) else got
    err = ((got.float() - want.float()).norm() / want.float().norm()).item()
    assert err < 1e-2, f"rel err {err}"


@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
@pytest.mark.parametrize("quantized", [False, True], ids=["bf16", "w4"])
def test_the_compiled_block_computes_what_eager_does(gemm, quantized, mode) -> None:
    """torch.compile over the swapped block (inductor; reduce-overhead: CUDA graphs): the
    grouped GEMMs are the custom ops (gemm_runtime.ops), replayed from the graph."""
    torch.manual_seed(3)
    block = _mixtral(torch.bfloat16)
    with torch.no_grad():
        for p in block.parameters():
            p.normal_(0, p.shape[-1] ** -0.5)
    block = block.to("cuda", torch.bfloat16).eval()
    replace_experts(block, gemm=gemm, quantize={"bits": 4, "group_size": 64} if quantized else None)
    x = torch.randn(1, 24, 256, device="cuda", dtype=torch.bfloat16)
    torch._dynamo.reset()
    compiled = torch.compile(block, mode=mode)
    with torch.no_grad():
        want = block(x)
        want = want[0] if isinstance(want, tuple) else want
        for _ in range(3):  # reduce-overhead records on a later call, then replays
            got = compiled(x)
            got = got[0] if isinstance(got, tuple) else got
            err = ((got.float() - want.float()).norm() / want.float().norm()).item()
            assert err < 1e-2, f"rel err {err}"
