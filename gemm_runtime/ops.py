"""The library's GEMMs as PyTorch custom operators, so ``torch.compile`` (fullgraph,
and ``mode="reduce-overhead"``'s CUDA graphs) and autograd see them as single ops:

    torch.ops.gemm_runtime.linear(x, weight, bias, epilogue, gemm)
        x @ weight.T (+ bias), weight the (N, K) nn.Linear weight
    torch.ops.gemm_runtime.linear_packed(x, qweight, scales_zeros, bits, group_size, n, k,
                                          symmetric, bias, epilogue, gemm)
        x @ dequant(W).T (+ bias), W a packed_weight.PackedWeight's tensors
    torch.ops.gemm_runtime.grouped_matmul(x, w, offsets, index, row_scale, bias, gated, gemm)
    torch.ops.gemm_runtime.grouped_matmul_packed(x, qweight, scales_zeros, offsets, bits,
                                                  group_size, n, k, symmetric, index,
                                                  row_scale, bias, gated, gemm)
        Gemm.grouped_matmul over stacked experts [E, N, K], or quantized ones (an
        experts.PackedExperts' tensors); inference only (no backward)

``epilogue`` is an ``Epilogue`` value without the bias part ("none" or "gated_silu");
a bias switches to the bias form. ``gemm`` is 0 for the device's shared ``Gemm``
(``default_gemm``) or a handle from ``handle_of(gemm)``.

The layers (gemm_runtime.nn) call the ops through ``call_linear`` /
``call_linear_packed``: in eager mode with no gradient to record they run the op's
CUDA body directly, skipping only the dispatcher's round trip (about 4 us of host
time); anything that traces (torch.compile, export) or records gradients sees the op.

Each op has a fake implementation (output shape, dtype and device only; no GPU), a
CPU implementation in plain torch (the reference, and what lets opcheck run without
a GPU), and a backward: the input's gradient runs on this library's GEMM where the
weight is dense (the K x N order of the same weight), the weight's and the bias's
in torch. Packed weights are buffers and get no gradient; the input's goes through
the dequantized weight.
"""

from __future__ import annotations

import threading

import torch
import torch.nn.functional as F

from gemm_runtime.errors import GemmArgumentError
from gemm_runtime.types import Epilogue, Operation

_OPERATIONS = {(e.value, has_bias): Operation(epilogue=e.with_bias() if has_bias else e)
               for e in (Epilogue.NONE, Epilogue.GATED_SILU) for has_bias in (False, True)}  # fmt: skip
EPILOGUES = ("none", "gated_silu")

_handles: dict[int, object] = {}
_handles_lock = threading.Lock()


def handle_of(gemm) -> int:
    """The ``gemm`` argument of the ops for a ``Gemm`` of your own (0 for None)."""
    if gemm is None:
        return 0
    if isinstance(gemm, (int, str, torch.device)):
        # NOTE: the ops' own 0 (or a device) was kept as "the Gemm", taken on the CPU and
        # failing inside at the first call on a GPU ('int' object has no attribute 'linear').
        raise GemmArgumentError("gemm", repr(gemm), "a gemm_runtime.Gemm, or None for the device's shared one")
    with _handles_lock:
        _handles[id(gemm)] = gemm  # kept alive: a compiled graph may call it any time
    return id(gemm)


_shared: dict[int, object] = {}  # device index -> its shared Gemm
_shared_lock = threading.Lock()


def default_gemm(device: torch.device | int | str | None = None):
    """One shared Gemm per CUDA device (created on first use); ``device`` is a CUDA
    device, its index, or None for the current one."""
    index = device if type(device) is int else (None if device is None else torch.device(device).index)
    index = torch.cuda.current_device() if index is None else index
    gemm = _shared.get(index)  # NOTE: read without the lock: the ops ask once per call
    if gemm is None:
        with _shared_lock:
            gemm = _shared.get(index)
            if gemm is None:
                from gemm_runtime.gemm import Gemm

                gemm = _shared[index] = Gemm(torch.device("cuda", index))
    return gemm


def _gemm(handle: int, device: torch.device | int):
    """The Gemm of a handle; ``device`` (a CUDA device or its index) picks the shared one."""
    if handle == 0:
        return default_gemm(device)
    gemm = _handles.get(handle)
    if gemm is None:
        raise GemmArgumentError("gemm", handle, "0 or a handle from gemm_runtime.ops.handle_of(gemm)")
    return gemm


def _operation(epilogue: str, has_bias: bool) -> Operation:
    op = _OPERATIONS.get((epilogue, has_bias))
    if op is None:
        raise GemmArgumentError("epilogue", repr(epilogue), " or ".join(map(repr, EPILOGUES)))
    return op


def _out_features(n: int, epilogue: str) -> int:
    return n // 2 if epilogue == "gated_silu" else n


def _gated(v: torch.Tensor) -> torch.Tensor:
    return F.silu(v[..., 0::2]) * v[..., 1::2]


def _reference(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, epilogue: str) -> torch.Tensor:
    """The op in fp32 torch, rounded once to x's dtype (what the kernels compute). The
    shapes are checked as the GEMM checks them: torch would broadcast a bias of one value."""
    _operation(epilogue, bias is not None)
    if weight.dim() != 2:
        raise GemmArgumentError("weight.shape", tuple(weight.shape), "a 2-D (N, K) tensor")
    n, k = weight.shape
    if x.dim() < 1 or x.shape[-1] != k:
        raise GemmArgumentError("x.shape", tuple(x.shape), f"(..., {k}): K of the weight")
    if epilogue == "gated_silu" and n % 2:
        raise GemmArgumentError("weight", f"N = {n}", "an even N: the gated epilogue pairs (gate, up) columns")
    if bias is not None and tuple(bias.shape) != (n,):
        raise GemmArgumentError("bias.shape", tuple(bias.shape), f"({n},): one value per column of x @ weight.T")
    v = F.linear(x.float(), weight.float(), None if bias is None else bias.float())
    return (_gated(v) if epilogue == "gated_silu" else v).to(x.dtype)


# NOTE: defined with a plain Library rather than torch.library.custom_op: the layers
# custom_op wraps around each call cost about 5 us of host time per call on the H200's
# host, a third of torch.matmul's whole call (docs/PERFORMANCE.md).
_LIB = torch.library.Library("gemm_runtime", "DEF")
_LIB.define("linear(Tensor x, Tensor weight, Tensor? bias=None, str epilogue=\"none\", int gemm=0) -> Tensor")
_LIB.define(
    "linear_packed(Tensor x, Tensor qweight, Tensor scales_zeros, int bits, int group_size, int n, int k,"
    " bool symmetric, Tensor? bias=None, str epilogue=\"none\", int gemm=0) -> Tensor"
)


def _register(name: str, cpu, cuda, fake, backward, setup) -> None:
    _LIB.impl(name, cpu, "CPU")
    _LIB.impl(name, cuda, "CUDA")
    torch.library.register_fake(f"gemm_runtime::{name}", fake, lib=_LIB)
    torch.library.register_autograd(f"gemm_runtime::{name}", backward, setup_context=setup, lib=_LIB)


# ---- dense ---------------------------------------------------------------------------------
def _linear_cpu(x, weight, bias=None, epilogue="none", gemm=0):
    """x @ weight.T (+ bias) with the epilogue; weight is (N, K)."""
    return _reference(x, weight, bias, epilogue)


def _rows(x: torch.Tensor) -> torch.Tensor:
    """x with contiguous rows: the kernels read A by rows, and autograd hands the ops
    gradients of any strides (an expanded one has stride 0)."""
    if x.stride(-1) == 1 and (x.dim() < 2 or x.stride(-2) >= x.shape[-1]):
        return x
    return x.contiguous()


def _linear_cuda(x, weight, bias=None, epilogue="none", gemm=0):
    return _gemm(gemm, x.get_device()).linear(_rows(x), weight, bias, _operation(epilogue, bias is not None))


def _linear_fake(x, weight, bias=None, epilogue="none", gemm=0):
    _operation(epilogue, bias is not None)
    return x.new_empty((*x.shape[:-1], _out_features(weight.shape[0], epilogue)))


def _setup_linear(ctx, inputs, output):
    x, weight, bias, epilogue, gemm = inputs
    ctx.epilogue, ctx.gemm, ctx.has_bias = epilogue, gemm, bias is not None
    ctx.save_for_backward(x, weight, bias)


def _pre_activation_grad(ctx, grad, x, weight, bias):
    """The gradient with respect to v = x @ W.T + bias (N columns)."""
    if ctx.epilogue != "gated_silu":
        return grad
    v = torch.ops.gemm_runtime.linear(x, weight, bias, "none", ctx.gemm).float()
    gate, up = v[..., 0::2], v[..., 1::2]
    sig = torch.sigmoid(gate)
    g = grad.float()
    d_gate = g * up * sig * (1 + gate * (1 - sig))
    d_up = g * gate * sig
    return torch.stack((d_gate, d_up), dim=-1).flatten(-2).to(grad.dtype)


def _linear_backward(ctx, grad):
    x, weight, bias = ctx.saved_tensors
    dv = _pre_activation_grad(ctx, grad, x, weight, bias)
    grad_x = grad_w = grad_b = None
    if ctx.needs_input_grad[0]:
        # dX = dV @ W: the same weight read as K x N, on this library's kernels.
        grad_x = torch.ops.gemm_runtime.linear(dv, weight.t(), None, "none", ctx.gemm)
    if ctx.needs_input_grad[1]:
        grad_w = (dv.reshape(-1, dv.shape[-1]).t().float() @ x.reshape(-1, x.shape[-1]).float()).to(weight.dtype)
    if ctx.has_bias and ctx.needs_input_grad[2]:
        grad_b = dv.reshape(-1, dv.shape[-1]).float().sum(0).to(bias.dtype)
    return grad_x, grad_w, grad_b, None, None


_register("linear", _linear_cpu, _linear_cuda, _linear_fake, _linear_backward, _setup_linear)


def _direct(x: torch.Tensor, *params: torch.Tensor | None) -> bool:
    """Whether a layer may call an op's CUDA body itself: nothing traces the call
    (torch.compile, export), no gradient is to be recorded, and x is a plain CUDA
    tensor. Then the op would only add the dispatcher's round trip through Python."""
    if torch.compiler.is_compiling() or type(x) is not torch.Tensor or not x.is_cuda:
        return False
    if torch.is_grad_enabled() and (x.requires_grad or any(p is not None and p.requires_grad for p in params)):
        return False
    return True


def call_linear(x, weight, bias, epilogue: str, gemm: int) -> torch.Tensor:
    """``torch.ops.gemm_runtime.linear``, as the layers call it (see _direct)."""
    if _direct(x, weight, bias):
        return _linear_cuda(x, weight, bias, epilogue, gemm)
    return torch.ops.gemm_runtime.linear(x, weight, bias, epilogue, gemm)


# ---- packed weights ------------------------------------------------------------------------
def packed_weight(qweight, scales_zeros, bits: int, group_size: int, n: int, k: int, symmetric: bool):
    """The PackedWeight whose tensors the op was given (validated by the GEMM)."""
    from gemm_runtime.packed_weight import PackedWeight, group_shift

    groups = scales_zeros.shape[0] // 2
    return PackedWeight(qweight, scales_zeros, bits, group_size, k, n, groups, group_shift(group_size, groups), symmetric)


def _check_packed(qweight, scales_zeros, bits: int, group_size: int, n: int, k: int) -> None:
    """The packed tensors hold an N x K weight of ``bits`` in groups of ``group_size``, as
    pack_for_gemm makes it (the GEMM checks the same; the torch reference would otherwise
    compute with the N and K the tensors hold, not the op's)."""
    from gemm_runtime.packed_weight import BLOCK_K, BLOCK_N
    from gemm_runtime.quant import _check_bits, _resolve_group_size

    bits = _check_bits(bits)
    for name, v in (("n", n), ("k", k)):
        if v < 1:
            raise GemmArgumentError(name, v, "an integer >= 1")
    groups = -(-k // _resolve_group_size(group_size, k))
    shape = (-(-n // BLOCK_N), -(-k // BLOCK_K) * BLOCK_K * bits)
    if qweight.dtype != torch.uint8 or tuple(qweight.shape) != shape:
        raise GemmArgumentError("qweight", f"{qweight.dtype} {tuple(qweight.shape)}",
                                f"a uint8 tensor {shape} from pack_for_gemm (N = {n}, K = {k}, {bits} bits)")  # fmt: skip
    if scales_zeros.dim() != 2 or scales_zeros.shape[0] != 2 * groups or scales_zeros.shape[1] < n:
        raise GemmArgumentError("scales_zeros.shape", tuple(scales_zeros.shape),
                                f"({2 * groups}, N = {n} or more): scales, then zeros, of {groups} groups of K = {k}")  # fmt: skip


def _check_packed_experts(qweight, scales_zeros, bits: int, group_size: int, n: int, k: int) -> None:
    """_check_packed for stacks of experts (experts.pack_experts): [E, ...] of each."""
    if qweight.dim() != 3 or scales_zeros.dim() != 3 or qweight.shape[0] != scales_zeros.shape[0]:
        raise GemmArgumentError("qweight, scales_zeros", f"shapes {tuple(qweight.shape)}, {tuple(scales_zeros.shape)}",
                                "[E, ...] stacks of as many experts (experts.pack_experts)")  # fmt: skip
    _check_packed(qweight[0], scales_zeros[0], bits, group_size, n, k)


def _linear_packed_cpu(x, qweight, scales_zeros, bits, group_size, n, k, symmetric, bias=None, epilogue="none",
                       gemm=0):  # fmt: skip
    """x @ dequant(W).T (+ bias) for a weight packed by packed_weight.pack_for_gemm."""
    _check_packed(qweight, scales_zeros, bits, group_size, n, k)
    w = packed_weight(qweight, scales_zeros, bits, group_size, n, k, symmetric).unpack().dequantize(torch.float32)
    return _reference(x, w, bias, epilogue)


def _linear_packed_cuda(x, qweight, scales_zeros, bits, group_size, n, k, symmetric, bias=None, epilogue="none",
                        gemm=0):  # fmt: skip
    return _gemm(gemm, x.get_device()).linear_packed(
        _rows(x), qweight, scales_zeros, (bits, group_size, n, k, symmetric), bias, _operation(epilogue, bias is not None)
    )


def _linear_packed_fake(x, qweight, scales_zeros, bits, group_size, n, k, symmetric, bias=None, epilogue="none",
                        gemm=0):  # fmt: skip
    _operation(epilogue, bias is not None)
    if x.shape[-1] != k:
        raise GemmArgumentError("x.shape", tuple(x.shape), f"(..., {k}): K of the weight")
    return x.new_empty((*x.shape[:-1], _out_features(n, epilogue)))


def _setup_packed(ctx, inputs, output):
    x, qweight, scales_zeros, bits, group_size, n, k, symmetric, bias, epilogue, gemm = inputs
    ctx.meta = (bits, group_size, n, k, symmetric)
    ctx.epilogue, ctx.gemm, ctx.has_bias = epilogue, gemm, bias is not None
    ctx.save_for_backward(x, qweight, scales_zeros, bias)


def _packed_backward(ctx, grad):
    x, qweight, scales_zeros, bias = ctx.saved_tensors
    weight = packed_weight(qweight, scales_zeros, *ctx.meta).unpack().dequantize(x.dtype)
    dv = _pre_activation_grad(ctx, grad, x, weight, bias)
    grad_x = torch.ops.gemm_runtime.linear(dv, weight.t(), None, "none", ctx.gemm) if ctx.needs_input_grad[0] else None
    grad_b = None
    if ctx.has_bias and ctx.needs_input_grad[8]:
        grad_b = dv.reshape(-1, dv.shape[-1]).float().sum(0).to(bias.dtype)
    return grad_x, None, None, None, None, None, None, None, grad_b, None, None


_register("linear_packed", _linear_packed_cpu, _linear_packed_cuda, _linear_packed_fake, _packed_backward,
          _setup_packed)


def call_linear_packed(x, qweight, scales_zeros, bits, group_size, n, k, symmetric, bias, epilogue: str,
                       gemm: int) -> torch.Tensor:  # fmt: skip
    """``torch.ops.gemm_runtime.linear_packed``, as QuantLinear calls it (see _direct)."""
    if _direct(x, bias):
        return _linear_packed_cuda(x, qweight, scales_zeros, bits, group_size, n, k, symmetric, bias, epilogue, gemm)
    return torch.ops.gemm_runtime.linear_packed(x, qweight, scales_zeros, bits, group_size, n, k, symmetric, bias,
                                                epilogue, gemm)  # fmt: skip


# ---- grouped (mixture-of-experts) ----------------------------------------------------------
# NOTE: no backward: the expert layer (nn.GroupedExperts) holds its weights as buffers
# or frozen parameters, and grouped training is not this library's job; an input that
# requires a gradient gets torch's "no autograd kernel" error.
_LIB.define(
    "grouped_matmul(Tensor x, Tensor w, Tensor offsets, Tensor? index=None, Tensor? row_scale=None,"
    " Tensor? bias=None, bool gated=False, int gemm=0) -> Tensor"
)
_LIB.define(
    "grouped_matmul_packed(Tensor x, Tensor qweight, Tensor scales_zeros, Tensor offsets, int bits, int group_size,"
    " int n, int k, bool symmetric, Tensor? index=None, Tensor? row_scale=None, Tensor? bias=None,"
    " bool gated=False, int gemm=0) -> Tensor"
)


def packed_experts(qweight, scales_zeros, bits: int, group_size: int, n: int, k: int, symmetric: bool):
    """The experts.PackedExperts whose stacked tensors the op was given."""
    from gemm_runtime.experts import PackedExperts

    layout = packed_weight(qweight[0], scales_zeros[0], bits, group_size, n, k, symmetric)
    return PackedExperts(qweight, scales_zeros, layout)


def _grouped_shape(x, index, n: int, gated: bool) -> tuple[int, int]:
    rows = index.shape[0] if index is not None else x.shape[0]
    if gated and n % 2:
        raise GemmArgumentError("w", f"N = {n}", "an even N: the gated epilogue pairs (gate, up) columns")
    return rows, n // 2 if gated else n


def _grouped_reference(x, w, offsets, index, row_scale, bias, gated):
    """The grouped product in fp32 torch (experts.grouped_reference), rounded to x's dtype."""
    from gemm_runtime.experts import check_routing, grouped_reference

    rows = index.shape[0] if index is not None else x.shape[0]
    routing = check_routing(offsets, experts=w.shape[0], rows=rows, device=x.device,
                            tokens=x.shape[0] if index is not None else None, index=index, row_scale=row_scale,
                            check_values=True)  # fmt: skip
    return grouped_reference(x, w, routing, bias=bias, gated=gated).to(x.dtype)


def _grouped_cpu(x, w, offsets, index=None, row_scale=None, bias=None, gated=False, gemm=0):
    return _grouped_reference(x, w, offsets, index, row_scale, bias, gated)


def _grouped_cuda(x, w, offsets, index=None, row_scale=None, bias=None, gated=False, gemm=0):
    return _gemm(gemm, x.get_device()).grouped_matmul(x, w, offsets, index=index, row_scale=row_scale, bias=bias,
                                                      gated=gated)  # fmt: skip


def _grouped_fake(x, w, offsets, index=None, row_scale=None, bias=None, gated=False, gemm=0):
    return x.new_empty(_grouped_shape(x, index, w.shape[1], gated))


def _grouped_packed_cpu(x, qweight, scales_zeros, offsets, bits, group_size, n, k, symmetric, index=None,
                        row_scale=None, bias=None, gated=False, gemm=0):  # fmt: skip
    _check_packed_experts(qweight, scales_zeros, bits, group_size, n, k)
    w = packed_experts(qweight, scales_zeros, bits, group_size, n, k, symmetric).dequantize(torch.float32)
    return _grouped_reference(x, w, offsets, index, row_scale, bias, gated)


def _grouped_packed_cuda(x, qweight, scales_zeros, offsets, bits, group_size, n, k, symmetric, index=None,
                         row_scale=None, bias=None, gated=False, gemm=0):  # fmt: skip
    _check_packed_experts(qweight, scales_zeros, bits, group_size, n, k)
    w = packed_experts(qweight, scales_zeros, bits, group_size, n, k, symmetric)
    return _gemm(gemm, x.get_device()).grouped_matmul(x, w, offsets, index=index, row_scale=row_scale, bias=bias,
                                                      gated=gated)  # fmt: skip


def _grouped_packed_fake(x, qweight, scales_zeros, offsets, bits, group_size, n, k, symmetric, index=None,
                         row_scale=None, bias=None, gated=False, gemm=0):  # fmt: skip
    if x.shape[-1] != k:
        raise GemmArgumentError("x.shape", tuple(x.shape), f"(rows, {k}): K of the experts' weights")
    return x.new_empty(_grouped_shape(x, index, n, gated))


for _name, (_cpu, _cuda, _fake) in {
    "grouped_matmul": (_grouped_cpu, _grouped_cuda, _grouped_fake),
    "grouped_matmul_packed": (_grouped_packed_cpu, _grouped_packed_cuda, _grouped_packed_fake),
}.items():
    _LIB.impl(_name, _cpu, "CPU")
    _LIB.impl(_name, _cuda, "CUDA")
    torch.library.register_fake(f"gemm_runtime::{_name}", _fake, lib=_LIB)


def call_grouped(x, w, offsets, index, row_scale, bias, gated: bool, gemm: int) -> torch.Tensor:
    """A grouped GEMM as nn.GroupedExperts calls it: ``w`` stacked [E, N, K] weights or
    experts.PackedExperts; the op's CUDA body directly where nothing traces (see _direct),
    else the op (torch.compile sees one node per grouped GEMM)."""
    from gemm_runtime.experts import PackedExperts

    packed = isinstance(w, PackedExperts)
    if _direct(x, bias, None if packed else w):
        return _gemm(gemm, x.get_device()).grouped_matmul(x, w, offsets, index=index, row_scale=row_scale, bias=bias,
                                                          gated=gated)  # fmt: skip
    if packed:
        meta = (w.layout.bits, w.layout.group_size, w.layout.n, w.layout.k, w.layout.symmetric)
        return torch.ops.gemm_runtime.grouped_matmul_packed(x, w.b, w.v, offsets, *meta, index, row_scale, bias, gated,
                                                            gemm)  # fmt: skip
    return torch.ops.gemm_runtime.grouped_matmul(x, w, offsets, index, row_scale, bias, gated, gemm)
