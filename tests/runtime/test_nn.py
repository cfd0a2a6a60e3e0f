"""The layers as torch modules, on CPU: registered tensors, state dicts, deepcopy,
save/load, .to(), loading a quantized state dict without quantizing, gradients."""

from __future__ import annotations

import copy
import io

import pytest
import torch
import torch.nn.functional as F

from gemm_runtime.errors import GemmArgumentError
from gemm_runtime.nn import GatedMLPProjection, Linear, QuantLinear, from_quantized_state_dict
from gemm_runtime.quant import QuantizedWeight, quantize


def _float_linear(k=64, n=48, bias=True, seed=0):
    torch.manual_seed(seed)
    return torch.nn.Linear(k, n, bias=bias).half()


def _quant_layer(bias=True, act_order=False, bits=4):
    lin = _float_linear(bias=bias)
    qw = quantize(lin.weight.detach(), bits=bits, group_size=32)
    if act_order:
        g_idx = (torch.arange(64) // 32)[torch.randperm(64, generator=torch.Generator().manual_seed(3))].int()
        qw = QuantizedWeight(qw.q, qw.scales, qw.zeros, bits, 32, qw.symmetric, g_idx)
    return QuantLinear.from_quantized(qw, lin.bias.detach() if bias else None), qw


def test_quant_linear_registers_every_tensor():
    layer, _ = _quant_layer(act_order=True)
    names = set(dict(layer.named_buffers()))
    assert names == {"qweight", "scales_zeros", "bias", "perm"}
    state = layer.state_dict()
    assert {"qweight", "scales_zeros", "bias", "perm", "_extra_state"} <= set(state)
    assert state["_extra_state"] == {"bits": 4, "group_size": 32, "symmetric": False, "in_features": 64,
                                     "out_features": 48}  # fmt: skip


def test_quant_linear_forward_matches_the_dequantized_weight():
    layer, qw = _quant_layer(act_order=True)
    x = torch.randn(3, 64).half()
    ref = x.float() @ qw.dequantize(torch.float32).t() + layer.bias.float()
    torch.testing.assert_close(layer(x).float(), ref, rtol=3e-3, atol=3e-3)


@pytest.mark.parametrize("how", ["deepcopy", "save_load", "state_dict"])
def test_quant_linear_survives_copies(how):
    layer, _ = _quant_layer(act_order=True)
    x = torch.randn(2, 64).half()
    want = layer(x)
    if how == "deepcopy":
        other = copy.deepcopy(layer)
    elif how == "save_load":
        buf = io.BytesIO()
        torch.save(layer, buf)
        buf.seek(0)
        other = torch.load(buf, weights_only=False)
    else:
        other = QuantLinear.empty(64, 48, bits=4, group_size=32, bias=True, act_order=True)
        other.load_state_dict(layer.state_dict())
    assert torch.equal(other(x), want)


def test_to_moves_every_buffer_and_dtype_of_state_is_kept():
    layer, _ = _quant_layer()
    moved = layer.to(torch.device("meta"))
    assert all(t.device.type == "meta" for t in moved.buffers())


def test_a_quantized_model_loads_without_quantizing():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 48), torch.nn.ReLU(), torch.nn.Linear(48, 32, bias=False)).half()
    for i in (0, 2):
        qw = quantize(model[i].weight.detach(), bits=8 if i else 4, group_size=32)
        model[i] = QuantLinear.from_quantized(qw, model[i].bias.detach() if model[i].bias is not None else None)
    x = torch.randn(5, 64).half()
    want = model(x)
    fresh = torch.nn.Sequential(torch.nn.Linear(64, 48), torch.nn.ReLU(), torch.nn.Linear(48, 32, bias=False)).half()
    names = from_quantized_state_dict(fresh, model.state_dict())
    assert names == ["0", "2"] and isinstance(fresh[2], QuantLinear) and fresh[2].bits == 8
    assert torch.equal(fresh(x), want)


def test_bad_extra_state_is_named():
    layer, _ = _quant_layer()
    state = layer.state_dict()
    state["_extra_state"] = {"bits": 4}
    with pytest.raises(GemmArgumentError, match="extra state"):
        layer.load_state_dict(state)


def test_linear_keeps_parameters_and_gradients():
    lin = _float_linear()
    layer = Linear.from_float(lin)
    assert layer.weight is lin.weight and layer.bias is lin.bias
    assert set(dict(layer.named_parameters())) == {"weight", "bias"}
    x = torch.randn(4, 64).half().requires_grad_()
    layer(x).float().sum().backward()
    ref_x = x.detach().float().requires_grad_()
    ref_lin = copy.deepcopy(lin).float()
    ref_lin(ref_x).sum().backward()
    for got, want in ((x.grad, ref_x.grad), (lin.weight.grad, ref_lin.weight.grad), (lin.bias.grad, ref_lin.bias.grad)):
        torch.testing.assert_close(got.float(), want, rtol=3e-3, atol=3e-3)


def test_linear_wraps_plain_tensors_as_parameters():
    w = torch.randn(8, 16).half()
    layer = Linear(w, None)
    assert isinstance(layer.weight, torch.nn.Parameter) and not layer.weight.requires_grad
    assert "weight" in layer.state_dict()


def test_gated_projection_matches_two_linears():
    torch.manual_seed(1)
    gate, up = torch.nn.Linear(32, 16).half(), torch.nn.Linear(32, 16, bias=False).half()
    proj = GatedMLPProjection(gate, up)
    x = torch.randn(3, 32).half()
    ref = F.silu(gate(x).float()) * up(x).float()
    torch.testing.assert_close(proj(x).float(), ref, rtol=5e-3, atol=5e-3)


def test_gated_projection_from_weights_equals_the_one_from_linears():
    torch.manual_seed(2)
    gate, up = torch.nn.Linear(32, 16).half(), torch.nn.Linear(32, 16, bias=False).half()
    want = GatedMLPProjection(gate, up)
    got = GatedMLPProjection.from_weights(gate.weight, up.weight, gate_bias=gate.bias)
    assert torch.equal(got.weight, want.weight) and torch.equal(got.bias, want.bias)
    assert GatedMLPProjection.from_weights(gate.weight, up.weight).bias is None
    assert set(got.state_dict()) == {"weight", "bias"}


def test_dtype_mismatch_is_named():
    layer, _ = _quant_layer()
    with pytest.raises(GemmArgumentError, match="x.dtype"):
        layer(torch.randn(2, 64))


# ---- the expert layer (docs/MOE.md) ----------------------------------------------------


def _mixtral_experts(experts=4, hidden=32, intermediate=24, seed=0):
    from transformers import MixtralConfig
    from transformers.models.mixtral.modeling_mixtral import MixtralExperts

    torch.manual_seed(seed)
    cfg = MixtralConfig(hidden_size=hidden, intermediate_size=intermediate, num_local_experts=experts,
                        num_experts_per_tok=2)  # fmt: skip
    module = MixtralExperts(cfg)
    with torch.no_grad():
        module.gate_up_proj.normal_(0, hidden**-0.5)
        module.down_proj.normal_(0, intermediate**-0.5)
    return module


def test_route_rows_sorts_each_tokens_k_rows_by_expert() -> None:
    from gemm_runtime.nn import route_rows

    index = torch.tensor([[2, 0], [2, 3], [0, 1]])
    weights = torch.tensor([[0.7, 0.3], [0.6, 0.4], [0.9, 0.1]])
    offsets, tokens, w = route_rows(index, weights, experts=5)
    assert offsets.dtype == torch.int32 and offsets.tolist() == [0, 2, 3, 5, 6, 6]
    assert tokens.dtype == torch.int32 and tokens.tolist() == [0, 2, 2, 0, 1, 1]
    assert torch.equal(w, torch.tensor([0.3, 0.9, 0.1, 0.7, 0.6, 0.4]))


_IDS = torch.tensor([[2, 0], [2, 3], [0, 1]])
_WEIGHTS = torch.tensor([[0.7, 0.3], [0.6, 0.4], [0.9, 0.1]])


@pytest.mark.parametrize(
    "index, weights, experts, argument, needle",
    [
        (_IDS.float(), _WEIGHTS, 5, "top_k_index.dtype", "an integer dtype"),  # truncated to ids, silently
        (_IDS.reshape(-1), _WEIGHTS.reshape(-1), 5, "top_k_index", "[T, k]"),  # one token of 6 choices, silently
        (_IDS, torch.rand(3, 3), 5, "top_k_weights", "(3, 2)"),  # read out of step with the ids, silently
        (_IDS, _WEIGHTS[:2], 5, "top_k_weights", "(3, 2)"),  # IndexError from inside
        (_IDS, _IDS, 5, "top_k_weights.dtype", "floating-point"),
        (_IDS.tolist(), _WEIGHTS, 5, "top_k_index", "[T, k]"),
        (_IDS, _WEIGHTS, 3, "top_k_index", "0 .. 2"),  # scatter_add_'s RuntimeError (a device assert on a GPU)
        (_IDS - 1, _WEIGHTS, 5, "top_k_index", "0 .. 4"),
        (_IDS, _WEIGHTS, 0, "experts", ">= 1"),
        (_IDS, _WEIGHTS, 5.0, "experts", ">= 1"),
    ],
)
def test_route_rows_refuses_what_it_would_misroute(index, weights, experts, argument, needle) -> None:
    from gemm_runtime.nn import route_rows

    with pytest.raises(GemmArgumentError) as info:
        route_rows(index, weights, experts)
    assert info.value.argument == argument and needle in info.value.accepted


def test_grouped_experts_refuse_ids_for_other_tokens() -> None:
    from gemm_runtime.nn import GroupedExperts

    layer = GroupedExperts.from_experts(_mixtral_experts())
    with pytest.raises(GemmArgumentError) as info, torch.no_grad():
        layer(torch.randn(2, 32), _IDS, _WEIGHTS)  # 3 tokens' ids for 2 rows
    assert info.value.argument == "top_k_index.shape"


def test_grouped_experts_interleave_gate_and_up_rows() -> None:
    from gemm_runtime.nn import GroupedExperts

    module = _mixtral_experts()
    layer = GroupedExperts.from_experts(module)
    gate, up = module.gate_up_proj.detach().chunk(2, dim=1)
    assert torch.equal(layer.gate_up[:, 0::2], gate) and torch.equal(layer.gate_up[:, 1::2], up)
    assert torch.equal(layer.down, module.down_proj.detach())


def test_grouped_experts_compute_what_transformers_experts_compute() -> None:
    from gemm_runtime.nn import GroupedExperts

    module = _mixtral_experts()
    # On the CPU the layer's grouped GEMMs are the custom ops' torch reference (gemm_runtime.ops).
    layer = GroupedExperts.from_experts(module)
    x = torch.randn(7, 32)
    scores = torch.softmax(torch.randn(7, 4), -1)
    weights, index = torch.topk(scores, 2, dim=-1)
    with torch.no_grad():
        want = module(x, index, weights)
        got = layer(x, index, weights)
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-5), (got - want).abs().max()


@pytest.mark.parametrize("bits", [4, 8])
def test_quantized_grouped_experts_compute_the_dequantized_experts(bits: int) -> None:
    from gemm_runtime.experts import PackedExperts
    from gemm_runtime.nn import GroupedExperts
    from gemm_runtime.quant import quantize

    module = _mixtral_experts(hidden=64, intermediate=48)
    layer = GroupedExperts.from_experts(module, quantize={"bits": bits, "group_size": 32})
    assert layer.quantized and "gate_up" not in dict(layer.named_parameters())
    assert {"gate_up_q", "gate_up_sz", "down_q", "down_sz"} <= set(layer.state_dict())
    gate_up, down = layer.weights()
    assert isinstance(gate_up, PackedExperts) and gate_up.b.data_ptr() == layer.gate_up_q.data_ptr()
    # The interleaved (gate, up) rows, quantized expert by expert.
    gate, up = module.gate_up_proj.detach().chunk(2, dim=1)
    for e in range(4):
        want = quantize(torch.stack((gate[e], up[e]), dim=1).reshape(96, 64), bits=bits, group_size=32)
        assert torch.equal(gate_up.expert(e).unpack().q, want.q)
    # The same layer computes what the transformers module does with the dequantized weights.
    reference = _mixtral_experts(hidden=64, intermediate=48)
    with torch.no_grad():
        deq_gate_up = gate_up.dequantize(torch.float32)
        reference.gate_up_proj.copy_(torch.cat((deq_gate_up[:, 0::2], deq_gate_up[:, 1::2]), dim=1))
        reference.down_proj.copy_(down.dequantize(torch.float32))
    x = torch.randn(9, 64)
    weights, index = torch.topk(torch.softmax(torch.randn(9, 4), -1), 2, dim=-1)
    with torch.no_grad():
        got, want = layer(x, index, weights), reference(x, index, weights)
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-5), (got - want).abs().max()
    assert f"bits={bits}, group_size=32" in repr(layer)


def test_grouped_experts_quantize_must_be_a_dict() -> None:
    from gemm_runtime.nn import GroupedExperts

    with pytest.raises(GemmArgumentError, match="quantize: got int"):
        GroupedExperts(torch.randn(4, 48, 32), torch.randn(4, 32, 24), quantize=4)
    with pytest.raises(GemmArgumentError, match="bits"):
        GroupedExperts(torch.randn(4, 48, 32), torch.randn(4, 32, 24), quantize={"bits": 3})


def test_grouped_experts_need_silu_and_matching_shapes() -> None:
    from gemm_runtime.nn import GroupedExperts

    module = _mixtral_experts()
    module.act_fn = torch.nn.GELU()
    with pytest.raises(GemmArgumentError, match="act_fn: got GELU"):
        GroupedExperts.from_experts(module)
    with pytest.raises(GemmArgumentError, match=r"down: got torch.Size\(\[4, 32, 23\]\)"):
        GroupedExperts(torch.randn(4, 48, 32), torch.randn(4, 32, 23))


def test_replace_experts_swaps_only_cuda_16_bit_experts() -> None:
    from gemm_runtime.nn import replace_experts

    model = torch.nn.Sequential(_mixtral_experts().half())
    assert replace_experts(model) == []  # CPU weights stay as they are


# ---- bad arguments ----------------------------------------------------------------------


def test_quantize_arguments_are_checked_before_any_layer() -> None:
    """A mistyped key of ``quantize`` used to raise TypeError from quantize() (the expert
    layer) or from the first CUDA layer replaced; a model with none said nothing."""
    from gemm_runtime.nn import GroupedExperts, replace_experts, replace_linear

    with pytest.raises(GemmArgumentError, match=r"quantize\['bit'\]: got an unknown key \(did you mean 'bits'\?\)"):
        GroupedExperts(torch.randn(4, 48, 32), torch.randn(4, 32, 24), quantize={"bit": 4})
    model = torch.nn.Sequential(torch.nn.Linear(64, 48).half())
    with pytest.raises(GemmArgumentError, match=r"quantize\['group'\]: got an unknown key \(did you mean 'group_size'"):
        replace_linear(model, quantize={"bits": 4, "group": 128})
    with pytest.raises(GemmArgumentError, match="quantize: got int; accepted: None or a dict"):
        replace_linear(model, quantize=4)
    # QuantLinear.from_float takes no scale_dtype; the expert layer passes it to quantize().
    with pytest.raises(GemmArgumentError, match=r"quantize\['scale_dtype'\]"):
        replace_linear(model, quantize={"scale_dtype": torch.bfloat16})
    with pytest.raises(GemmArgumentError, match="quantize: got str"):
        replace_experts(model, quantize="w4")
    assert replace_linear(model, quantize={"bits": 4}) == [] and isinstance(model[0], torch.nn.Linear)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(in_features=0), "in_features: got 0; accepted: an integer >= 1"),
        (dict(out_features=-8), "out_features: got -8"),
        (dict(in_features="64"), "in_features: got '64'"),
        (dict(in_features=64.0), "in_features: got 64.0"),
        (dict(dtype=torch.float32), "dtype: got torch.float32; accepted: torch.float16 or torch.bfloat16"),
        (dict(symmetric="no"), "symmetric: got 'no'; accepted: True or False"),
    ],
    ids=["zero", "negative", "str", "float", "fp32", "symmetric-str"],
)
def test_empty_quant_linear_checks_its_geometry(kwargs, match) -> None:
    args = {"in_features": 64, "out_features": 48, **kwargs}
    with pytest.raises(GemmArgumentError, match=match):
        QuantLinear.empty(args.pop("in_features"), args.pop("out_features"), **args)


def test_a_quantized_state_dict_without_its_scales_is_named() -> None:
    layer, _ = _quant_layer()
    state = {f"0.{k}": v for k, v in layer.state_dict().items() if k != "scales_zeros"}
    with pytest.raises(GemmArgumentError, match=r"state_dict\[0.scales_zeros\]: got NoneType"):
        from_quantized_state_dict(torch.nn.Sequential(torch.nn.Linear(64, 48).half()), state)
    state = {f"0.{k}": v for k, v in layer.state_dict().items()}
    state["0._extra_state"] = {**state["0._extra_state"], "in_features": "64"}
    with pytest.raises(GemmArgumentError, match="in_features: got '64'"):
        from_quantized_state_dict(torch.nn.Sequential(torch.nn.Linear(64, 48).half()), state)


def test_from_quantized_takes_a_quantized_weight() -> None:
    with pytest.raises(GemmArgumentError, match="qw: got Tensor; accepted: a gemm_runtime.quant.QuantizedWeight"):
        QuantLinear.from_quantized(torch.randn(48, 64).half())


def test_a_layers_bias_is_checked_when_it_is_made() -> None:
    """A bias of another type was taken (the CPU computed with it, the GEMM refused it at
    every call on a GPU), one of another shape refused only at the first call, a list
    failed inside with AttributeError; gate_bias's wrong shape failed in torch.stack."""
    w = torch.randn(8, 16).half()
    with pytest.raises(GemmArgumentError, match=r"^bias.dtype: got torch.float32; accepted: torch.float16 \(the layer"):
        Linear(w, torch.zeros(8))
    with pytest.raises(GemmArgumentError, match=r"^bias: got \(3,\); accepted: None or a \(8,\) tensor"):
        Linear(w, torch.zeros(3).half())
    with pytest.raises(GemmArgumentError, match=r"^bias: got list"):
        Linear(w, [0.0] * 8)
    _, qw = _quant_layer()
    with pytest.raises(GemmArgumentError, match=r"^bias.dtype: got torch.bfloat16; accepted: torch.float16"):
        QuantLinear.from_quantized(qw, torch.zeros(48, dtype=torch.bfloat16))
    with pytest.raises(GemmArgumentError, match=r"^bias: got \(64,\); accepted: None or a \(48,\) tensor"):
        QuantLinear.from_quantized(qw, torch.zeros(64).half())
    with pytest.raises(GemmArgumentError, match=r"^gate_bias: got \(3,\); accepted: None or a \(8,\) tensor"):
        GatedMLPProjection.from_weights(w, w, gate_bias=torch.zeros(3).half())
    with pytest.raises(GemmArgumentError, match=r"^up_bias.dtype: got torch.float32"):
        GatedMLPProjection.from_weights(w, w, up_bias=torch.zeros(8))


def test_an_fp32_linear_quantizes_its_bias_to_the_output_type() -> None:
    """quantize() gives an fp32 weight fp16 scales, the layer's output type; the bias stayed
    fp32, which the GEMM refuses at every call on a GPU."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 48)
    layer = QuantLinear.from_float(lin, group_size=32)
    assert layer.bias.dtype == layer.scales_zeros.dtype == torch.float16
    x = torch.randn(3, 64)
    ref = x @ quantize(lin.weight.detach(), group_size=32).dequantize(torch.float32).t() + lin.bias.detach()
    torch.testing.assert_close(layer(x.half()).float(), ref, rtol=3e-3, atol=3e-3)


def test_gate_and_up_must_agree_in_type_and_device() -> None:
    """fp16 gate and bf16 up were stacked into an fp32 weight: a layer that refused its own
    inputs ("x.dtype: got torch.float16; accepted: torch.float32")."""
    from gemm_runtime.nn import QuantGatedMLPProjection, interleave_gate_up

    gate = torch.randn(16, 64).half()
    with pytest.raises(GemmArgumentError, match=r"^up: got torch.bfloat16 on cpu; accepted: torch.float16 on cpu, as gate"):
        GatedMLPProjection.from_weights(gate, gate.bfloat16())
    with pytest.raises(GemmArgumentError, match="^up: got torch.float32"):
        QuantGatedMLPProjection.from_gate_up(gate, gate.float(), group_size=32)
    with pytest.raises(GemmArgumentError, match="^up: got torch.float16 on meta"):
        interleave_gate_up(gate, gate.to("meta"))
    with pytest.raises(GemmArgumentError, match=r"^gate/up shapes: got \('list', 'list'\)"):
        QuantGatedMLPProjection.from_gate_up([1.0], [1.0])
    # Linear refuses fp32 (and integer) weights; the fused projection took them.
    with pytest.raises(GemmArgumentError, match="^gate.dtype: got torch.float32; accepted: torch.float16 or torch.bfloat16"):
        GatedMLPProjection.from_weights(gate.float(), gate.float())


def test_builders_name_what_they_were_given() -> None:
    """Each raised AttributeError from inside ('Tensor' object has no attribute 'weight',
    'QuantizedWeight' object has no attribute 'b')."""
    w = torch.randn(48, 64).half()
    with pytest.raises(GemmArgumentError, match="^linear: got Tensor; accepted: a torch.nn.Linear"):
        QuantLinear.from_float(w)
    with pytest.raises(GemmArgumentError, match="^linear: got NoneType"):
        Linear.from_float(None)
    with pytest.raises(GemmArgumentError, match="^gate: got Tensor; accepted: a torch.nn.Linear"):
        GatedMLPProjection(w, w)
    with pytest.raises(GemmArgumentError, match="^packed: got QuantizedWeight; accepted: a gemm_runtime.packed_weight"):
        QuantLinear(quantize(w, group_size=32))


def test_forward_names_an_input_that_is_no_tensor() -> None:
    """A list failed inside with AttributeError; a NumPy array's dtype read "got float16;
    accepted: torch.float16"."""
    layers = [Linear(torch.randn(8, 16).half(), None), _quant_layer()[0],
              GatedMLPProjection.from_weights(torch.randn(8, 16).half(), torch.randn(8, 16).half())]  # fmt: skip
    for layer in layers:
        with pytest.raises(GemmArgumentError, match="^x: got ndarray; accepted: a torch.Tensor of torch.float16"):
            layer(torch.randn(2, layer.in_features if hasattr(layer, "in_features") else 16).half().numpy())
        with pytest.raises(GemmArgumentError, match="^x: got list"):
            layer([1.0])


def test_replace_linear_needs_a_callable_predicate() -> None:
    """A model without CUDA layers took any predicate; one with them raised TypeError
    ('str' object is not callable) from inside."""
    from gemm_runtime.nn import replace_linear

    with pytest.raises(GemmArgumentError, match=r"^predicate: got str; accepted: None or a callable \(name, module\)"):
        replace_linear(torch.nn.Sequential(torch.nn.Linear(4, 4)), predicate="0")


def test_grouped_experts_name_hidden_states_of_the_wrong_rank() -> None:
    """[B, T, H] hidden states were refused as a top_k_index of the wrong number of tokens."""
    from gemm_runtime.nn import GroupedExperts

    layer = GroupedExperts.from_experts(_mixtral_experts())
    with pytest.raises(GemmArgumentError, match=r"^hidden_states: got \(1, 3, 32\); accepted: a \[T, H\] tensor"), \
            torch.no_grad():  # fmt: skip
        layer(torch.randn(1, 3, 32), _IDS, _WEIGHTS)


def test_grouped_experts_refuse_experts_of_two_types() -> None:
    """Taken, and refused only by the second grouped GEMM of each call on a GPU, as its
    "w"; quantized, only the scales' types must agree."""
    from gemm_runtime.nn import GroupedExperts

    gate_up, down = torch.randn(4, 48, 32).half(), torch.randn(4, 32, 24)
    with pytest.raises(GemmArgumentError, match=r"^down.dtype: got torch.float32; accepted: torch.float16, as gate_up"):
        GroupedExperts(gate_up, down)
    with pytest.raises(GemmArgumentError, match=r"^down.device: got meta"):
        GroupedExperts(gate_up, down.half().to("meta"))
    with pytest.raises(GemmArgumentError, match=r"^down.dtype: got torch.bfloat16 \(scales of torch.bfloat16\)"):
        GroupedExperts(gate_up, down.bfloat16(), quantize={"bits": 4, "group_size": 32})
    # fp32 experts quantize to fp16 scales: the same type as fp16 ones'.
    assert GroupedExperts(gate_up, down, quantize={"bits": 4, "group_size": 32}).quantized
