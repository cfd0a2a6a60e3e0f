"""Drop-in replacements for torch.nn.Linear backed by Gemm.

    from gemm_runtime.nn import replace_linear
    replace_linear(model)            # every CUDA fp16/bf16 nn.Linear now runs on Gemm

``Linear`` keeps the original parameters (no copy), so state dicts, optimizers and
weight tying keep working. ``interleave_gate_up`` prepares a fused (gate, up)
projection for the gated-SiLU epilogue.
"""

from __future__ import annotations

import threading
from typing import Callable

import torch

from gemm_runtime.errors import GemmArgumentError
from gemm_runtime.types import Epilogue, Operation

_gemms: dict[int, object] = {}
_gemms_lock = threading.Lock()
_SUPPORTED = (torch.float16, torch.bfloat16)


def default_gemm(device: torch.device):
    """One shared Gemm per CUDA device (created on first use)."""
    from gemm_runtime.gemm import Gemm

    index = torch.device(device).index
    index = torch.cuda.current_device() if index is None else index
    with _gemms_lock:
        g = _gemms.get(index)
        if g is None:
            g = _gemms[index] = Gemm(torch.device("cuda", index))
        return g


class Linear(torch.nn.Module):
    """``y = x @ weight.T + bias`` on this project's kernels; x is (..., in_features)."""

    def __init__(self, weight: torch.nn.Parameter, bias: torch.nn.Parameter | None, gemm=None) -> None:
        super().__init__()
        if not isinstance(weight, torch.Tensor) or weight.dim() != 2:
            raise GemmArgumentError("weight", getattr(weight, "shape", type(weight).__name__), "a 2-D (out, in) tensor")
        if weight.dtype not in _SUPPORTED or not weight.is_cuda:
            raise GemmArgumentError("weight", (weight.dtype, weight.device), "a CUDA float16 or bfloat16 tensor")
        self.weight = weight
        self.bias = bias
        self.in_features, self.out_features = weight.shape[1], weight.shape[0]
        self._gemm = gemm

    @classmethod
    def from_float(cls, linear: torch.nn.Linear, gemm=None) -> "Linear":
        return cls(linear.weight, linear.bias, gemm)

    @property
    def gemm(self):
        return self._gemm if self._gemm is not None else default_gemm(self.weight.device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != self.weight.dtype:
            raise GemmArgumentError("x.dtype", x.dtype, f"{self.weight.dtype} (the layer's weight type)")
        bias = self.bias.detach() if self.bias is not None else None
        return self.gemm.matmul(x, self.weight.detach().t(), bias=bias)

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
    if gate.shape != up.shape or gate.dim() != 2:
        raise GemmArgumentError("gate/up shapes", (tuple(gate.shape), tuple(up.shape)), "two equal (F, K) shapes")
    return torch.stack((gate, up), dim=1).reshape(2 * gate.shape[0], gate.shape[1])


class GatedMLPProjection(torch.nn.Module):
    """``silu(x @ gate.T) * (x @ up.T)`` in one GEMM with the gated-SiLU epilogue."""

    def __init__(self, gate: torch.nn.Linear, up: torch.nn.Linear, gemm=None) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(interleave_gate_up(gate.weight.detach(), up.weight.detach()), requires_grad=False)
        biases = (gate.bias, up.bias)
        self.bias = None
        if any(b is not None for b in biases):
            zero = torch.zeros(gate.out_features, dtype=gate.weight.dtype, device=gate.weight.device)
            g, u = (b.detach() if b is not None else zero for b in biases)
            self.bias = torch.nn.Parameter(torch.stack((g, u), dim=1).reshape(-1), requires_grad=False)
        self._gemm = gemm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gemm = self._gemm if self._gemm is not None else default_gemm(self.weight.device)
        return gemm.matmul(x, self.weight.t(), bias=self.bias, operation=Operation(epilogue=Epilogue.GATED_SILU))


class QuantLinear(torch.nn.Module):
    """``y = x @ dequant(W).T + bias`` with W stored as 4- or 8-bit integers and
    group-wise scales and zeros (weight-only quantization, W4A16 / W8A16).

    Act-order checkpoints (GPTQ with g_idx) are reordered once at load time so groups
    are contiguous; the forward pass then permutes x's features the same way."""

    def __init__(self, packed, bias: torch.Tensor | None = None, perm: torch.Tensor | None = None, gemm=None):
        super().__init__()
        self.packed = packed
        self.register_buffer("qweight", packed.b, persistent=True)
        self.register_buffer("scales_zeros", packed.v, persistent=True)
        self.register_buffer("perm", perm, persistent=True)
        self.bias = bias
        self.in_features, self.out_features = packed.k, packed.n
        self._gemm = gemm

    @classmethod
    def from_quantized(cls, qw, bias: torch.Tensor | None = None, gemm=None) -> "QuantLinear":
        from gemm_runtime.packed_weight import pack_for_gemm

        perm = None
        if qw.g_idx is not None:
            qw, perm = qw.reordered()
        return cls(pack_for_gemm(qw), bias, perm, gemm)

    @classmethod
    def from_float(
        cls, linear: torch.nn.Linear, *, bits: int = 4, group_size: int = 128, symmetric: bool = False, gemm=None
    ) -> "QuantLinear":
        from gemm_runtime.quant import quantize

        qw = quantize(linear.weight.detach(), bits=bits, group_size=group_size, symmetric=symmetric)
        bias = linear.bias.detach() if linear.bias is not None else None
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
        if x.dtype != self.packed.dtype:
            raise GemmArgumentError("x.dtype", x.dtype, f"{self.packed.dtype} (the layer's scale type)")
        if self.perm is not None:
            x = x.index_select(-1, self.perm)
        gemm = self._gemm if self._gemm is not None else default_gemm(self.qweight.device)
        return gemm.matmul(x, self.packed, bias=self.bias)

    def extra_repr(self) -> str:
        p = self.packed
        return f"in_features={p.k}, out_features={p.n}, bits={p.bits}, group_size={p.group_size}"
