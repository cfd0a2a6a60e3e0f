"""Drop-in replacements for torch.nn.Linear backed by Gemm.

    from gemm_runtime.nn import replace_linear
    replace_linear(model)            # every CUDA fp16/bf16 nn.Linear now runs on Gemm

``Linear`` keeps the original parameters (no copy), so state dicts, optimizers and
weight tying keep working. ``interleave_gate_up`` prepares a fused (gate, up)
projection for the gated-SiLU epilogue.
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Callable

import torch
import torch.nn.functional as F

from gemm_runtime import ops
from gemm_runtime.errors import GemmArgumentError
from gemm_runtime.experts import PackedExperts, _shape_or_type, pack_experts
from gemm_runtime.packed_weight import PackedWeight

_SUPPORTED = (torch.float16, torch.bfloat16)
default_gemm = ops.default_gemm  # one shared Gemm per CUDA device (created on first use)


def _parameter(t: torch.Tensor | None) -> torch.nn.Parameter | None:
    """A parameter as given, or a tensor wrapped as one (no copy, no gradient)."""
    if t is None or isinstance(t, torch.nn.Parameter):
        return t
    return torch.nn.Parameter(t, requires_grad=False)


def _check_linear(argument: str, linear: object) -> torch.nn.Linear:
    """A builder's float layer (any other module's weight may be laid out otherwise, and
    anything without one failed inside with AttributeError)."""
    if not isinstance(linear, torch.nn.Linear):
        raise GemmArgumentError(argument, type(linear).__name__, "a torch.nn.Linear")
    return linear


def _check_bias(argument: str, bias: object, n: int, dtype: torch.dtype, device: torch.device) -> None:
    """A layer's bias: None or n values of the layer's output type on its device. Checked
    when the layer is made: a bias of another type was taken, worked on the CPU and was
    refused by the GEMM at every call on a GPU; one of another shape was refused only at
    the first call; a list failed inside with AttributeError."""
    if bias is None:
        return
    if not isinstance(bias, torch.Tensor) or tuple(bias.shape) != (n,):
        raise GemmArgumentError(argument, _shape_or_type(bias), f"None or a ({n},) tensor: one value per output")
    if bias.dtype != dtype:
        raise GemmArgumentError(f"{argument}.dtype", bias.dtype, f"{dtype} (the layer's output type)")
    if bias.device != device:
        raise GemmArgumentError(f"{argument}.device", bias.device, f"{device} (the weight's device)")


def _refuse_input(x: object, dtype: torch.dtype, what: str):
    """A forward's x that is not a tensor of the layer's type (a NumPy array's dtype read
    "got float16; accepted: torch.float16", a list failed inside with AttributeError)."""
    if not isinstance(x, torch.Tensor):
        raise GemmArgumentError("x", type(x).__name__, f"a torch.Tensor of {dtype}")
    raise GemmArgumentError("x.dtype", x.dtype, f"{dtype} ({what})")


# quantize()'s arguments that the layers pass on (replace_linear: QuantLinear.from_float's).
_QUANTIZE_KEYS = ("bits", "group_size", "symmetric")


def _check_quantize(quantize: object, keys: tuple[str, ...] = _QUANTIZE_KEYS) -> None:
    """``quantize`` as the layers take it: None, or a dict of quantize() arguments. Checked
    before any layer is touched (a model's first CUDA layer would otherwise raise
    TypeError from inside, and a model without one say nothing)."""
    if quantize is None:
        return
    accepted = f'None or a dict of quantize() arguments ({", ".join(keys)}), e.g. {{"bits": 4, "group_size": 128}}'
    if not isinstance(quantize, dict):
        raise GemmArgumentError("quantize", type(quantize).__name__, accepted)
    for key in quantize:
        if key not in keys:
            close = difflib.get_close_matches(str(key), keys, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise GemmArgumentError(f"quantize[{key!r}]", f"an unknown key{hint}", accepted)


class Linear(torch.nn.Module):
    """``y = x @ weight.T + bias`` on this project's kernels; x is (..., in_features).

    Runs as ``torch.ops.gemm_runtime.linear`` (gemm_runtime.ops): torch.compile and
    CUDA graphs see one op, and gradients flow to x, the weight and the bias."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, gemm=None) -> None:
        super().__init__()
        if not isinstance(weight, torch.Tensor) or weight.dim() != 2:
            raise GemmArgumentError("weight", getattr(weight, "shape", type(weight).__name__), "a 2-D (out, in) tensor")
        if weight.dtype not in _SUPPORTED:
            raise GemmArgumentError("weight.dtype", weight.dtype, "torch.float16 or torch.bfloat16")
        _check_bias("bias", bias, weight.shape[0], weight.dtype, weight.device)
        self.weight = _parameter(weight)
        self.bias = _parameter(bias)
        self.in_features, self.out_features = weight.shape[1], weight.shape[0]
        self._gemm = gemm
        self._handle = ops.handle_of(gemm)

    @classmethod
    def from_float(cls, linear: torch.nn.Linear, gemm=None) -> "Linear":
        _check_linear("linear", linear)
        return cls(linear.weight, linear.bias, gemm)

    @property
    def gemm(self):
        return self._gemm if self._gemm is not None else default_gemm(self.weight.device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not isinstance(x, torch.Tensor) or x.dtype != self.weight.dtype:
            _refuse_input(x, self.weight.dtype, "the layer's weight type")
        return ops.call_linear(x, self.weight, self.bias, "none", self._handle)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


def replace_linear(
    model: torch.nn.Module,
    *,
    gemm=None,
    predicate: Callable[[str, torch.nn.Linear], bool] | None = None,
    quantize: dict | None = None,
) -> list[str]:
    """Swap, in place, every ``torch.nn.Linear`` of ``model`` whose weight is a CUDA
    fp16/bf16 tensor (and for which ``predicate(name, module)`` holds) for ``Linear``,
    or for ``QuantLinear`` quantized with ``quantize`` (e.g. ``{"bits": 4,
    "group_size": 128}``). Returns the qualified names of the replaced modules."""
    _check_quantize(quantize)
    if predicate is not None and not callable(predicate):
        # NOTE: else taken, and called (TypeError from inside) only at the first CUDA layer.
        raise GemmArgumentError("predicate", type(predicate).__name__,
                                "None or a callable (name, module) -> bool: whether to replace that module")  # fmt: skip
    replaced = []
    for parent_name, parent in list(model.named_modules()):
        for child_name, child in list(parent.named_children()):
            if type(child) is not torch.nn.Linear:
                continue  # subclasses (e.g. attention's out_proj) may be used by weight, not by call
            if child.weight.dtype not in _SUPPORTED or not child.weight.is_cuda:
                continue
            name = f"{parent_name}.{child_name}" if parent_name else child_name
            if predicate is not None and not predicate(name, child):
                continue
            if quantize is not None:
                setattr(parent, child_name, QuantLinear.from_float(child, gemm=gemm, **quantize))
            else:
                setattr(parent, child_name, Linear.from_float(child, gemm))
            replaced.append(name)
    return replaced


def interleave_gate_up(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """(gate, up) weights of shape (F, K) -> one (2F, K) weight whose rows alternate
    gate_0, up_0, gate_1, up_1, ...: the layout the gated-SiLU epilogue expects."""
    if not isinstance(gate, torch.Tensor) or not isinstance(up, torch.Tensor) or gate.shape != up.shape or gate.dim() != 2:
        raise GemmArgumentError("gate/up shapes", (_shape_or_type(gate), _shape_or_type(up)), "two equal (F, K) shapes")
    if up.dtype != gate.dtype or up.device != gate.device:
        # NOTE: torch.stack promoted fp16 and bf16 to fp32, a layer that then refused its own inputs.
        raise GemmArgumentError("up", f"{up.dtype} on {up.device}", f"{gate.dtype} on {gate.device}, as gate")
    return torch.stack((gate, up), dim=1).reshape(2 * gate.shape[0], gate.shape[1])


class GatedMLPProjection(torch.nn.Module):
    """``silu(x @ gate.T) * (x @ up.T)`` in one GEMM with the gated-SiLU epilogue
    (``torch.ops.gemm_runtime.linear`` with ``epilogue="gated_silu"``)."""

    def __init__(self, gate: torch.nn.Linear, up: torch.nn.Linear, gemm=None) -> None:
        super().__init__()
        _check_linear("gate", gate)
        _check_linear("up", up)
        self._set(gate.weight, up.weight, gate.bias, up.bias, gemm)

    @classmethod
    def from_weights(cls, gate: torch.Tensor, up: torch.Tensor, gemm=None, gate_bias: torch.Tensor | None = None,
                     up_bias: torch.Tensor | None = None) -> "GatedMLPProjection":
        """The projection of gate and up weights ([F, K] each), e.g. one rank's shards."""
        layer = cls.__new__(cls)
        torch.nn.Module.__init__(layer)
        layer._set(gate, up, gate_bias, up_bias, gemm)
        return layer

    def _set(self, gate, up, gate_bias, up_bias, gemm) -> None:
        weight = interleave_gate_up(gate, up).detach()  # checks gate and up
        if weight.dtype not in _SUPPORTED:
            raise GemmArgumentError("gate.dtype", weight.dtype, "torch.float16 or torch.bfloat16")
        for name, b in (("gate_bias", gate_bias), ("up_bias", up_bias)):
            _check_bias(name, b, gate.shape[0], gate.dtype, gate.device)
        self.weight = torch.nn.Parameter(weight, requires_grad=False)
        self.bias = None
        if gate_bias is not None or up_bias is not None:
            zero = torch.zeros(gate.shape[0], dtype=gate.dtype, device=gate.device)
            g, u = (b.detach() if b is not None else zero for b in (gate_bias, up_bias))
            self.bias = torch.nn.Parameter(torch.stack((g, u), dim=1).reshape(-1), requires_grad=False)
        self._gemm = gemm
        self._handle = ops.handle_of(gemm)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not isinstance(x, torch.Tensor) or x.dtype != self.weight.dtype:
            _refuse_input(x, self.weight.dtype, "the layer's weight type")
        return ops.call_linear(x, self.weight, self.bias, "gated_silu", self._handle)


_QUANT_META = ("bits", "group_size", "symmetric", "in_features", "out_features")


class QuantLinear(torch.nn.Module):
    """``y = x @ dequant(W).T + bias`` with W stored as 4- or 8-bit integers and
    group-wise scales and zeros (weight-only quantization, W4A16 / W8A16).

    Every tensor is a registered buffer (``qweight``, ``scales_zeros``, ``bias``,
    ``perm``) and the packed weight the forward reads is rebuilt from them, so
    ``.to()``, ``state_dict`` / ``load_state_dict``, ``torch.save`` and ``deepcopy``
    keep the layer whole; the quantization parameters travel as the module's extra
    state. Runs as ``torch.ops.gemm_runtime.linear_packed`` (gemm_runtime.ops).

    Act-order checkpoints (GPTQ with g_idx) are reordered once at load time so groups
    are contiguous; the forward pass then permutes x's features the same way."""

    _epilogue = "none"  # QuantGatedMLPProjection: "gated_silu"

    def __init__(self, packed, bias: torch.Tensor | None = None, perm: torch.Tensor | None = None, gemm=None):
        super().__init__()
        if not isinstance(packed, PackedWeight):
            raise GemmArgumentError("packed", type(packed).__name__, "a gemm_runtime.packed_weight.PackedWeight "
                                    "(pack_for_gemm()); QuantLinear.from_quantized takes a QuantizedWeight, "
                                    "from_float an nn.Linear")  # fmt: skip
        _check_bias("bias", bias, packed.n, packed.dtype, packed.b.device)
        self.register_buffer("qweight", packed.b)
        self.register_buffer("scales_zeros", packed.v)
        self.register_buffer("bias", None if bias is None else bias.detach())
        self.register_buffer("perm", perm)
        self.bits, self.group_size, self.symmetric = packed.bits, packed.group_size, packed.symmetric
        self.in_features, self.out_features = packed.k, packed.n
        self._gemm = gemm
        self._handle = ops.handle_of(gemm)

    @property
    def packed(self):
        """The packed_weight.PackedWeight of the current buffers."""
        return ops.packed_weight(self.qweight, self.scales_zeros, self.bits, self.group_size, self.out_features,
                                 self.in_features, self.symmetric)  # fmt: skip

    @classmethod
    def empty(
        cls, in_features: int, out_features: int, *, bits: int = 4, group_size: int = 128, symmetric: bool = False,
        bias: bool = False, act_order: bool = False, dtype: torch.dtype = torch.float16, device=None, gemm=None,
    ) -> "QuantLinear":  # fmt: skip
        """A layer of the given geometry with zero buffers, to load a state dict into
        (no weight is quantized)."""
        from gemm_runtime.packed_weight import BLOCK_K, BLOCK_N, PackedWeight, group_shift
        from gemm_runtime.quant import SCALE_DTYPES, _check_bits, _resolve_group_size

        bits = _check_bits(bits)
        for name, value in (("in_features", in_features), ("out_features", out_features)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise GemmArgumentError(name, repr(value), "an integer >= 1")
        if dtype not in SCALE_DTYPES:
            raise GemmArgumentError("dtype", dtype, "torch.float16 or torch.bfloat16 (the scales' and activations' type)")
        for name, value in (("symmetric", symmetric), ("bias", bias), ("act_order", act_order)):
            if not isinstance(value, bool):
                raise GemmArgumentError(name, repr(value), "True or False")
        k, n = in_features, out_features
        size = _resolve_group_size(group_size, k)
        groups = -(-k // size)
        n8, kp = -(-n // BLOCK_N), -(-k // BLOCK_K) * BLOCK_K
        b = torch.zeros(n8, kp * bits, dtype=torch.uint8, device=device)
        v = torch.zeros(2 * groups, n8 * BLOCK_N, dtype=dtype, device=device)
        packed = PackedWeight(b, v, bits, size, k, n, groups, group_shift(size, groups), symmetric)
        bias_t = torch.zeros(n, dtype=dtype, device=device) if bias else None
        perm = torch.arange(k, device=device) if act_order else None
        return cls(packed, bias_t, perm, gemm)

    def get_extra_state(self) -> dict:
        return {name: getattr(self, name) for name in _QUANT_META}

    def set_extra_state(self, state: dict) -> None:
        if not isinstance(state, dict) or set(state) != set(_QUANT_META):
            raise GemmArgumentError("QuantLinear extra state", state, f"a dict with keys {', '.join(_QUANT_META)}")
        for name in _QUANT_META:
            setattr(self, name, state[name])

    @classmethod
    def from_quantized(cls, qw, bias: torch.Tensor | None = None, gemm=None) -> "QuantLinear":
        from gemm_runtime.packed_weight import pack_for_gemm
        from gemm_runtime.quant import QuantizedWeight

        if not isinstance(qw, QuantizedWeight):
            raise GemmArgumentError("qw", type(qw).__name__, "a gemm_runtime.quant.QuantizedWeight (quantize(), "
                                    "from_awq(), from_gptq()); QuantLinear.from_float takes an nn.Linear")  # fmt: skip
        perm = None
        if qw.g_idx is not None:
            qw, perm = qw.reordered()
        return cls(pack_for_gemm(qw), bias, perm, gemm)

    @classmethod
    def from_float(
        cls, linear: torch.nn.Linear, *, bits: int = 4, group_size: int = 128, symmetric: bool = False, gemm=None
    ) -> "QuantLinear":
        from gemm_runtime.quant import quantize

        _check_linear("linear", linear)
        qw = quantize(linear.weight.detach(), bits=bits, group_size=group_size, symmetric=symmetric)
        # The layer's output type is the scales' (fp16 for an fp32 Linear): the bias's too.
        bias = linear.bias.detach().to(qw.scales.dtype) if linear.bias is not None else None
        return cls.from_quantized(qw, bias, gemm)

    @classmethod
    def from_awq(cls, qweight, qzeros, scales, *, group_size: int, bias=None, gemm=None) -> "QuantLinear":
        from gemm_runtime.quant import from_awq

        return cls.from_quantized(from_awq(qweight, qzeros, scales, group_size=group_size), bias, gemm)

    @classmethod
    def from_gptq(
        cls, qweight, qzeros, scales, g_idx=None, *, bits: int = 4, group_size: int = 128, zero_point_offset: int = 1,
        bias=None, gemm=None,
    ) -> "QuantLinear":  # fmt: skip
        from gemm_runtime.quant import from_gptq

        qw = from_gptq(qweight, qzeros, scales, g_idx, bits=bits, group_size=group_size,
                       zero_point_offset=zero_point_offset)
        return cls.from_quantized(qw, bias, gemm)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not isinstance(x, torch.Tensor) or x.dtype != self.scales_zeros.dtype:
            _refuse_input(x, self.scales_zeros.dtype, "the layer's scale type")
        if self.perm is not None:
            x = x.index_select(-1, self.perm)
        return ops.call_linear_packed(
            x, self.qweight, self.scales_zeros, self.bits, self.group_size, self.out_features, self.in_features,
            self.symmetric, self.bias, self._epilogue, self._handle,
        )

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, bits={self.bits}, "
                f"group_size={self.group_size}")  # fmt: skip


class QuantGatedMLPProjection(QuantLinear):
    """``silu(x @ gate.T) * (x @ up.T)`` with the gate and up weights interleaved
    (interleave_gate_up) and quantized as one (2F, K) weight: one GEMM with the
    gated-SiLU epilogue (``torch.ops.gemm_runtime.linear_packed``), F outputs."""

    _epilogue = "gated_silu"

    @classmethod
    def from_gate_up(
        cls, gate: torch.Tensor, up: torch.Tensor, *, bits: int = 4, group_size: int = 128, symmetric: bool = False,
        bias: torch.Tensor | None = None, gemm=None,
    ) -> "QuantGatedMLPProjection":  # fmt: skip
        """From float gate and up weights (F, K), quantized along K (rows are quantized
        one by one, so interleaving first changes nothing); ``bias``: (2F,), interleaved."""
        from gemm_runtime.quant import quantize

        weight = interleave_gate_up(gate, up).detach()
        return cls.from_quantized(quantize(weight, bits=bits, group_size=group_size, symmetric=symmetric), bias, gemm)

    def extra_repr(self) -> str:
        return super().extra_repr() + ", gated_silu"


def from_quantized_state_dict(model: torch.nn.Module, state_dict: dict, *, gemm=None) -> list[str]:
    """Load a state dict saved from a model with QuantLinear layers into ``model`` (the
    same architecture with plain nn.Linear layers there), without quantizing anything:
    every ``torch.nn.Linear`` whose name has a ``qweight`` entry becomes an empty
    QuantLinear of the saved geometry, then ``model.load_state_dict(state_dict)``.
    Returns the names of the replaced modules."""
    replaced = []
    for name, module in list(model.named_modules()):
        prefix = f"{name}." if name else ""
        if type(module) is not torch.nn.Linear or f"{prefix}qweight" not in state_dict:
            continue
        meta = state_dict.get(f"{prefix}_extra_state")
        if not isinstance(meta, dict) or set(meta) != set(_QUANT_META):
            raise GemmArgumentError(f"state_dict[{prefix}_extra_state]", type(meta).__name__,
                                    f"the QuantLinear extra state (keys {', '.join(_QUANT_META)})")  # fmt: skip
        scales = state_dict.get(f"{prefix}scales_zeros")
        if not isinstance(scales, torch.Tensor):
            raise GemmArgumentError(f"state_dict[{prefix}scales_zeros]", type(scales).__name__,
                                    f"the tensor of scales and zeros saved beside {prefix}qweight")  # fmt: skip
        layer = QuantLinear.empty(
            meta["in_features"], meta["out_features"], bits=meta["bits"], group_size=meta["group_size"],
            symmetric=meta["symmetric"], bias=f"{prefix}bias" in state_dict, act_order=f"{prefix}perm" in state_dict,
            dtype=scales.dtype, device=module.weight.device, gemm=gemm,
        )  # fmt: skip
        parent, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, child, layer)
        replaced.append(name)
    model.load_state_dict(state_dict)
    return replaced


# ---- mixture of experts (docs/MOE.md) -------------------------------------------------


def _is_silu(act: object) -> bool:
    """``act`` computes SiLU (torch's module or, e.g., transformers' SiLUActivation)."""
    if not callable(act):
        return False
    probe = torch.linspace(-6.0, 6.0, 25)
    try:
        out = act(probe)
    except Exception:  # noqa: BLE001 - anything that cannot take a tensor is not SiLU
        return False
    return isinstance(out, torch.Tensor) and out.shape == probe.shape and torch.allclose(out, F.silu(probe))


def route_rows(top_k_index: torch.Tensor, top_k_weights: torch.Tensor, experts: int):
    """The grouped GEMMs' routing from a top-k router's output ([T, k] expert ids and
    weights): the T * k rows sorted by expert as (offsets [E + 1] int32, each row's token
    [T * k] int32, each row's weight [T * k]). All on the device, no host synchronization
    (no bincount, whose output size would need one). The ids' values are checked where
    that costs no synchronization (on the CPU) and with GEMM_CHECK_ROUTING=1 (as the
    grouped GEMMs check theirs), not while torch.compile traces."""
    _check_route(top_k_index, top_k_weights, experts)
    flat = top_k_index.reshape(-1)
    order = torch.argsort(flat, stable=True)
    counts = torch.zeros(experts, dtype=torch.int32, device=flat.device)
    counts.scatter_add_(0, flat.long(), torch.ones_like(flat, dtype=torch.int32))
    offsets = torch.cat((counts.new_zeros(1), counts.cumsum(0, dtype=torch.int32)))
    tokens = torch.div(order, top_k_index.shape[-1], rounding_mode="floor").to(torch.int32)
    return offsets, tokens, top_k_weights.reshape(-1)[order]


def _check_route(top_k_index: object, top_k_weights: object, experts: object) -> None:
    """route_rows' arguments. A float index was truncated to expert ids, a [T] one taken
    for one token of T choices, weights of another shape read out of step with the ids
    (all silently); an id out of range failed inside scatter_add_ (on a GPU: a device-side
    assert, which ends the process's CUDA context)."""
    if isinstance(experts, bool) or not isinstance(experts, int) or experts < 1:
        raise GemmArgumentError("experts", repr(experts), "an integer >= 1")
    if not isinstance(top_k_index, torch.Tensor) or top_k_index.dim() != 2:
        raise GemmArgumentError("top_k_index", _shape_or_type(top_k_index),
                                "a [T, k] tensor: each token's k expert ids")  # fmt: skip
    if top_k_index.dtype.is_floating_point or top_k_index.dtype.is_complex or top_k_index.dtype is torch.bool:
        raise GemmArgumentError("top_k_index.dtype", top_k_index.dtype, "an integer dtype (torch.int64, as topk gives)")
    if not isinstance(top_k_weights, torch.Tensor) or top_k_weights.shape != top_k_index.shape:
        raise GemmArgumentError("top_k_weights", _shape_or_type(top_k_weights),
                                f"a tensor of top_k_index's shape {tuple(top_k_index.shape)}: each id's weight")  # fmt: skip
    if not top_k_weights.dtype.is_floating_point:
        raise GemmArgumentError("top_k_weights.dtype", top_k_weights.dtype, "a floating-point dtype")
    if top_k_weights.device != top_k_index.device:
        raise GemmArgumentError("top_k_weights.device", top_k_weights.device, f"{top_k_index.device} (top_k_index's)")
    if torch.compiler.is_compiling() or top_k_index.numel() == 0:
        return
    from gemm_runtime.settings import settings

    if top_k_index.device.type == "cpu" or settings().check_routing:
        low, high = int(top_k_index.min()), int(top_k_index.max())
        if low < 0 or high >= experts:
            raise GemmArgumentError("top_k_index", f"an expert id {low if low < 0 else high}",
                                    f"ids of the {experts} experts, 0 .. {experts - 1}")  # fmt: skip


_EXPERT_QUANTIZE_KEYS = (*_QUANTIZE_KEYS, "scale_dtype")  # GroupedExperts calls quantize() itself


class GroupedExperts(torch.nn.Module):
    """A mixture-of-experts layer's experts on grouped GEMMs: ``forward(hidden_states [T,
    H], top_k_index [T, k], top_k_weights [T, k])`` -> the combined hidden states [T, H],
    as transformers' stacked-expert modules (MixtralExperts, Qwen2MoeExperts) compute
    them: per row, ``down(silu(gate(x)) * up(x)) * weight``, summed over the token's k
    experts. Two launches (gate_up with the gated SiLU, down with the routing weights as
    row scales) and one index_add.

    ``quantize`` (e.g. ``{"bits": 4, "group_size": 128}``, gemm_runtime.quant.quantize's
    arguments) keeps the experts' weights as 4- or 8-bit integers with group scales and
    zeros instead (W4A16 / W8A16; experts.PackedExperts), in buffers: ``gate_up_q``,
    ``gate_up_sz``, ``down_q``, ``down_sz``."""

    def __init__(self, gate_up: torch.Tensor, down: torch.Tensor, gemm=None, *, quantize: dict | None = None) -> None:
        super().__init__()
        if not isinstance(gate_up, torch.Tensor) or gate_up.dim() != 3 or gate_up.shape[1] % 2:
            raise GemmArgumentError("gate_up", getattr(gate_up, "shape", type(gate_up).__name__),
                                    "an [E, 2I, H] tensor: gate rows, then up rows")  # fmt: skip
        experts, two_i, hidden = gate_up.shape
        if not isinstance(down, torch.Tensor) or tuple(down.shape) != (experts, hidden, two_i // 2):
            raise GemmArgumentError("down", getattr(down, "shape", type(down).__name__), f"[{experts}, {hidden}, {two_i // 2}]")
        # NOTE: experts of two types (devices) were taken, and refused only by the second
        # grouped GEMM of each call on a GPU, as its "w". Quantized, the scales' types count.
        if down.device != gate_up.device:
            raise GemmArgumentError("down.device", down.device, f"{gate_up.device}, as gate_up")
        if quantize is None and down.dtype != gate_up.dtype:
            raise GemmArgumentError("down.dtype", down.dtype, f"{gate_up.dtype}, as gate_up")
        gate, up = gate_up.detach().chunk(2, dim=1)
        # Rows alternate gate_0, up_0, gate_1, ...: the gated-SiLU epilogue's pairs.
        interleaved = torch.stack((gate, up), dim=2).reshape(experts, two_i, hidden).contiguous()
        self.experts = experts
        self._gemm = gemm
        self._handle = ops.handle_of(gemm)
        self._layouts = None  # quantized: the gate_up and down experts' PackedWeight layouts
        if quantize is None:
            self.gate_up = torch.nn.Parameter(interleaved, requires_grad=False)
            self.down = torch.nn.Parameter(down.detach().contiguous(), requires_grad=False)
            return
        _check_quantize(quantize, _EXPERT_QUANTIZE_KEYS)
        packed = [_quantize_experts(w, quantize) for w in (interleaved, down.detach())]
        if packed[1].dtype != packed[0].dtype:
            raise GemmArgumentError("down.dtype", f"{down.dtype} (scales of {packed[1].dtype})",
                                    f"{gate_up.dtype} as gate_up, or quantize's scale_dtype for both")  # fmt: skip
        for name, p in zip(("gate_up", "down"), packed):
            self.register_buffer(f"{name}_q", p.b)
            self.register_buffer(f"{name}_sz", p.v)
        # Views of the stacked buffers rather than pack_experts' own expert-0 tensors (held twice otherwise).
        self._layouts = tuple(dataclasses.replace(p.layout, b=p.b[0], v=p.v[0]) for p in packed)

    @classmethod
    def from_experts(cls, module: torch.nn.Module, gemm=None, *, quantize: dict | None = None) -> "GroupedExperts":
        """From a transformers stacked-expert module (``gate_up_proj`` [E, 2I, H] with gate
        then up, ``down_proj`` [E, H, I], SiLU), quantized with ``quantize`` if given."""
        act = getattr(module, "act_fn", None)
        if not _is_silu(act):
            raise GemmArgumentError(f"{type(module).__name__}.act_fn", type(act).__name__,
                                    "SiLU (the gated epilogue computes silu(gate) * up)")  # fmt: skip
        return cls(module.gate_up_proj, module.down_proj, gemm, quantize=quantize)

    @property
    def quantized(self) -> bool:
        return self._layouts is not None

    def weights(self):
        """(gate_up, down) as grouped_matmul takes them: the stacked tensors, or
        PackedExperts over the current buffers (so ``.to()`` and loaded state hold)."""
        if not self.quantized:
            return self.gate_up, self.down
        return tuple(PackedExperts(q, sz, dataclasses.replace(layout, b=q[0], v=sz[0])) for q, sz, layout in
                     ((self.gate_up_q, self.gate_up_sz, self._layouts[0]), (self.down_q, self.down_sz, self._layouts[1])))  # fmt: skip

    @property
    def gemm(self):
        device = self.down_q.device if self.quantized else self.down.device
        return self._gemm if self._gemm is not None else default_gemm(device)

    def forward(self, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor) -> torch.Tensor:
        offsets, tokens, weights = route_rows(top_k_index, top_k_weights, self.experts)
        if not isinstance(hidden_states, torch.Tensor) or hidden_states.dim() != 2:
            # NOTE: a [B, T, H] batch was refused as a top_k_index of the wrong number of tokens.
            raise GemmArgumentError("hidden_states", _shape_or_type(hidden_states),
                                    "a [T, H] tensor, a row per token (flatten the batch dimensions first)")  # fmt: skip
        if hidden_states.shape[0] != top_k_index.shape[0]:
            # NOTE: the ids of more tokens than there are rows index past them (unchecked on a GPU).
            raise GemmArgumentError("top_k_index.shape", tuple(top_k_index.shape),
                                    f"({hidden_states.shape[0]}, k): a row of ids per token of hidden_states")  # fmt: skip
        gate_up, down = self.weights()
        # Through the custom ops (gemm_runtime.ops): torch.compile sees one node per GEMM.
        h = ops.call_grouped(hidden_states, gate_up, offsets, tokens, None, None, True, self._handle)
        y = ops.call_grouped(h, down, offsets, None, weights, None, False, self._handle)
        return torch.zeros_like(hidden_states).index_add_(0, tokens.long(), y)

    def extra_repr(self) -> str:
        if not self.quantized:
            return f"experts={self.experts}"
        layout = self._layouts[0]
        return f"experts={self.experts}, bits={layout.bits}, group_size={layout.group_size}"


def _quantize_experts(weights: torch.Tensor, quantize: dict) -> PackedExperts:
    """Each expert of ``weights`` [E, N, K] quantized with ``quantize``'s arguments, stacked."""
    from gemm_runtime.quant import quantize as quantize_weight

    return pack_experts([quantize_weight(w, **quantize) for w in weights])


def replace_experts(model: torch.nn.Module, *, gemm=None, quantize: dict | None = None) -> list[str]:
    """Swap, in place, every transformers stacked-expert module (one with 3-D
    ``gate_up_proj`` and ``down_proj`` on a CUDA device, fp16 or bf16, and a SiLU) for
    ``GroupedExperts``, its weights quantized with ``quantize`` if given (e.g.
    ``{"bits": 4, "group_size": 128}``). Returns the qualified names of the replaced modules."""
    _check_quantize(quantize, _EXPERT_QUANTIZE_KEYS)
    replaced = []
    for parent_name, parent in list(model.named_modules()):
        for child_name, child in list(parent.named_children()):
            w = getattr(child, "gate_up_proj", None)
            if not isinstance(w, torch.Tensor) or w.dim() != 3 or not isinstance(getattr(child, "down_proj", None), torch.Tensor):
                continue
            if w.dtype not in _SUPPORTED or not w.is_cuda or not _is_silu(getattr(child, "act_fn", None)):
                continue
            setattr(parent, child_name, GroupedExperts.from_experts(child, gemm, quantize=quantize))
            replaced.append(f"{parent_name}.{child_name}" if parent_name else child_name)
    return replaced
