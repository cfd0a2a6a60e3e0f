"""Mixture-of-experts operands (issue 18), the host side: the routing a grouped GEMM
reads, checked, the experts' quantized weights stacked in the kernels' layout, and the
grouped GEMM's result computed an expert at a time in fp32 (``grouped_reference``, what
the kernels are tested against).

A grouped GEMM over E experts multiplies, for each expert e, rows ``offsets[e] ..
offsets[e + 1]`` of the grouped problem by expert e's weight. Those rows are A's own
(A sorted by expert) or gathered (row r reads ``A[index[r]]``, A the unsorted token
matrix); ``row_scale[r]`` (a routing weight) may scale row r of the result.

The routing lives on the device, so that routing never synchronizes the host: its types,
shapes and devices are checked on every call, its values only where asked
(``check_values=True``, or ``GEMM_CHECK_ROUTING=1`` for the whole process), which costs
a synchronization. Unchecked, the values are a contract: ``offsets[0] == 0``, the
offsets do not decrease, ``offsets[E] <= rows``, and every index is a row of A.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from gemm_runtime.errors import GemmArgumentError
from gemm_runtime.packed_weight import PackedWeight, pack_for_gemm
from gemm_runtime.quant import QuantizedWeight
from gemm_runtime.settings import settings

INDEX_DTYPES = (torch.int32, torch.int64)
SCALE_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@dataclass(frozen=True)
class Routing:
    """A grouped problem's rows: ``offsets`` [E + 1] (row starts per expert, then the
    end), ``index`` [rows] or None (sorted A), ``row_scale`` [rows] or None."""

    offsets: torch.Tensor
    index: torch.Tensor | None
    row_scale: torch.Tensor | None

    @property
    def experts(self) -> int:
        return self.offsets.shape[0] - 1


def _names(dtypes: Sequence[torch.dtype]) -> str:
    return " or ".join(str(d).removeprefix("torch.") for d in dtypes)


def _vector(name: str, t: object, dtypes: Sequence[torch.dtype], length: int, device: torch.device) -> torch.Tensor:
    """A 1-D contiguous tensor of ``length`` elements of one of ``dtypes`` on ``device``."""
    if not isinstance(t, torch.Tensor):
        raise GemmArgumentError(name, type(t).__name__, f"a torch.Tensor of {_names(dtypes)}")
    if t.dtype not in dtypes:
        raise GemmArgumentError(f"{name}.dtype", t.dtype, _names(dtypes))
    if t.dim() != 1 or t.shape[0] != length:
        raise GemmArgumentError(f"{name}.shape", tuple(t.shape), f"({length},)")
    if t.device != device:
        raise GemmArgumentError(f"{name}.device", t.device, f"{device}, A's device")
    if not t.is_contiguous():
        raise GemmArgumentError(name, "a strided view", "a contiguous tensor (the kernel reads it densely)")
    return t


def _shape_or_type(t: object) -> object:
    return tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__


def _concrete(device: torch.device) -> torch.device:
    """``cuda`` as the ``cuda:N`` that tensors report, so that the two compare equal."""
    if device.type == "cuda" and device.index is None and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return device


def check_routing(
    offsets: object,
    *,
    experts: int,
    rows: int,
    device: torch.device,
    tokens: int | None = None,
    index: object = None,
    row_scale: object = None,
    check_values: bool | None = None,
) -> Routing:
    """The routing of a grouped GEMM over ``experts`` experts with room for ``rows``
    rows: A's rows when sorted, the length of ``index`` when gathered from the
    ``tokens`` rows of A. ``check_values`` (default: GEMM_CHECK_ROUTING) also checks
    the values, synchronizing with the device."""
    if not isinstance(experts, int) or experts < 1:
        raise GemmArgumentError("experts", experts, "an integer >= 1")
    device = _concrete(torch.device(device))
    offsets = _vector("offsets", offsets, INDEX_DTYPES, experts + 1, device)
    if index is not None:
        if tokens is None:
            raise GemmArgumentError("tokens", None, "A's rows, the range of index's values, when index is given")
        index = _vector("index", index, INDEX_DTYPES, rows, device)
    if row_scale is not None:
        row_scale = _vector("row_scale", row_scale, SCALE_DTYPES, rows, device)
    if settings().check_routing if check_values is None else check_values:
        _check_values(offsets, rows, index, tokens)
    return Routing(offsets, index, row_scale)


def _check_values(offsets: torch.Tensor, rows: int, index: torch.Tensor | None, tokens: int | None) -> None:
    """The routing contract, on the host (one copy of the offsets, and of the index's
    extremes)."""
    starts = offsets.tolist()
    if starts[0] != 0:
        raise GemmArgumentError("offsets[0]", starts[0], "0: the first expert's rows start at row 0")
    for e, (lo, hi) in enumerate(zip(starts, starts[1:])):
        if hi < lo:
            raise GemmArgumentError(f"offsets[{e + 1}]", hi, f">= offsets[{e}] = {lo}: the offsets never decrease")
    if starts[-1] > rows:
        raise GemmArgumentError(f"offsets[{len(starts) - 1}]", starts[-1], f"<= {rows}, the rows given")
    if index is not None and starts[-1] > 0:
        used = index[: starts[-1]]
        low, high = int(used.min()), int(used.max())
        if low < 0 or high >= tokens:
            bad = low if low < 0 else high
            raise GemmArgumentError("index", f"a row {bad}", f"rows of A, 0 .. {tokens - 1}")


def grouped_reference(
    a: torch.Tensor,
    weights: torch.Tensor,
    routing: Routing,
    *,
    bias: torch.Tensor | None = None,
    alpha: float = 1.0,
    beta: float = 0.0,
    c: torch.Tensor | None = None,
    gated: bool = False,
) -> torch.Tensor:
    """The grouped GEMM's result in fp32, an expert at a time (docs/MOE.md): for each
    row r of expert e's rows,

        D[r] = row_scale[r] * act(alpha * A[src(r)] @ weights[e]^T + bias[e]) + beta * C[r]

    with src(r) = index[r] (or r), act the gated SiLU over (gate, up) column pairs when
    ``gated`` (D then has N / 2 columns), ``weights`` [E, N, K] (dequantize packed
    experts first) and ``bias`` [E, N]. Rows past offsets[E] are zero. What the grouped
    kernels are tested against; it synchronizes (it reads the offsets)."""
    if not isinstance(weights, torch.Tensor):
        raise GemmArgumentError("weights", type(weights).__name__,
                                "an [E, N, K] tensor (quantized experts: PackedExperts.dequantize())")  # fmt: skip
    if weights.dim() != 3:
        raise GemmArgumentError("weights.shape", tuple(weights.shape), "[E, N, K]: the experts' weights stacked")
    if not isinstance(routing, Routing):
        raise GemmArgumentError("routing", type(routing).__name__, "an experts.Routing (check_routing())")
    experts, n, k = weights.shape
    if routing.experts != experts:
        raise GemmArgumentError("routing.offsets", f"{routing.experts + 1} offsets",
                                f"{experts + 1}: one per expert of weights [E, N, K], then the end")  # fmt: skip
    # Checked as grouped.grouped_operands checks them: torch would broadcast a bias of [N]
    # (each expert's "row" then one value) and fail deep inside on the others.
    if not isinstance(a, torch.Tensor) or a.dim() != 2 or a.shape[1] != k:
        raise GemmArgumentError("x.shape", _shape_or_type(a), f"(rows, {k}): K of the experts' weights")
    if gated and n % 2:
        raise GemmArgumentError("w", f"N = {n}", "an even N: the gated epilogue pairs (gate, up) columns")
    if bias is not None and tuple(bias.shape) != (experts, n):
        raise GemmArgumentError("bias", f"shape {tuple(bias.shape)}", f"({experts}, {n}): one row per expert")
    rows = routing.index.shape[0] if routing.index is not None else a.shape[0]
    cols = n // 2 if gated else n
    if c is not None and (not isinstance(c, torch.Tensor) or tuple(c.shape) != (rows, cols)):
        # NOTE: torch broadcast a C of one row, and failed inside on the others.
        raise GemmArgumentError("c.shape", _shape_or_type(c), f"({rows}, {cols})")
    out = torch.zeros(rows, cols, dtype=torch.float32, device=a.device)
    starts = routing.offsets.tolist()
    for e, (lo, hi) in enumerate(zip(starts, starts[1:])):
        if hi == lo:
            continue
        src = a[routing.index[lo:hi].long()] if routing.index is not None else a[lo:hi]
        v = alpha * (src.float() @ weights[e].float().t())
        if bias is not None:
            v = v + bias[e].float()
        if gated:
            v = torch.nn.functional.silu(v[:, 0::2]) * v[:, 1::2]
        if routing.row_scale is not None:
            v = v * routing.row_scale[lo:hi].float()[:, None]
        if c is not None and beta != 0.0:
            v = v + beta * c[lo:hi].float()
        out[lo:hi] = v
    return out


@dataclass(frozen=True, eq=False)
class PackedExperts:
    """E experts' quantized weights in the kernels' layout, stacked: ``b`` [E, ...] and
    ``v`` [E, ...] are each expert's ``PackedWeight.b`` and ``.v`` (gemm_runtime.
    packed_weight), so that expert e's weight is at a fixed stride from expert 0's.
    All experts share N, K, bits, group size, symmetry and the scales' dtype: ``layout``
    is expert 0's PackedWeight, whose fields say them."""

    b: torch.Tensor
    v: torch.Tensor
    layout: PackedWeight

    @property
    def experts(self) -> int:
        return self.b.shape[0]

    @property
    def dtype(self) -> torch.dtype:
        return self.v.dtype

    @functools.cached_property
    def signature(self) -> tuple:
        """What a grouped call's validation reads of these weights beyond their pointers'
        values (gemm_runtime.grouped_fast_path; computed once: the tensors are fixed)."""
        from gemm_runtime.fast_path import tensor_part

        w = self.layout
        return (tensor_part(self.b), tensor_part(self.v), w.bits, w.group_size, w.n, w.k, w.symmetric, w.groups,
                w.group_shift, tuple(w.b.shape), tuple(w.v.shape))  # fmt: skip

    def expert(self, e: int) -> PackedWeight:
        """Expert e's weight (views of the stacked tensors)."""
        if not isinstance(e, int) or not 0 <= e < self.experts:
            raise GemmArgumentError("e", e, f"an expert, 0 .. {self.experts - 1}")
        return dataclasses.replace(self.layout, b=self.b[e], v=self.v[e])

    def unpack(self) -> list[QuantizedWeight]:
        """The QuantizedWeights these were packed from, bit-exact."""
        return [self.expert(e).unpack() for e in range(self.experts)]

    def dequantize(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        """The experts' weights [E, N, K] as the kernels see them (``grouped_reference``'s
        weights for quantized experts), in ``dtype`` (default: the scales')."""
        return torch.stack([w.dequantize(dtype) for w in self.unpack()])


def pack_experts(weights: Sequence[QuantizedWeight]) -> PackedExperts:
    """The experts' weights, each packed as ``pack_for_gemm`` does, stacked. Act-order
    weights are refused: each expert's own permutation of K would have to be applied to
    the activations per expert, which one grouped launch over shared rows cannot do;
    reorder such a checkpoint's K once, offline, with one permutation for all experts."""
    if isinstance(weights, (str, bytes)) or not isinstance(weights, Sequence) or len(weights) == 0:
        raise GemmArgumentError("weights", type(weights).__name__, "a non-empty sequence of QuantizedWeight")
    first = weights[0]
    for e, w in enumerate(weights):
        if not isinstance(w, QuantizedWeight):
            raise GemmArgumentError(f"weights[{e}]", type(w).__name__, "a gemm_runtime.quant.QuantizedWeight")
        if w.g_idx is not None:
            raise GemmArgumentError(f"weights[{e}].g_idx", "an act-order g_idx",
                                    "None (act-order experts: see pack_experts)")  # fmt: skip
        for field, got, want in (("shape", tuple(w.shape), tuple(first.shape)), ("bits", w.bits, first.bits),
                                 ("group_size", w.group_size, first.group_size),
                                 ("symmetric", w.symmetric, first.symmetric),
                                 ("scales.dtype", w.scales.dtype, first.scales.dtype),
                                 ("q.device", w.q.device, first.q.device)):  # fmt: skip
            if got != want:
                raise GemmArgumentError(f"weights[{e}].{field}", got, f"{want}, as weights[0]: experts are stacked")
    packed = [pack_for_gemm(w) for w in weights]
    return PackedExperts(torch.stack([x.b for x in packed]), torch.stack([x.v for x in packed]), packed[0])
