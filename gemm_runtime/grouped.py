"""Grouped GEMMs for mixture-of-experts (docs/MOE.md): the operands of one grouped
launch checked, a grouped kernel chosen, its parameter block and grid. Gemm.grouped_matmul
is the facade; the kernels are the grouped forms of the sm80 family (templates/include/
gemm/grouped.cuh), of the sm90 family (gemm/sm90/kernel_sm90.cuh) and, for quantized
experts, of the sm90_quant family (gemm/sm90/kernel_sm90_quant.cuh).

    D[r] = row_scale[r] * act(alpha * A[src(r)] @ W[e(r)]^T + bias[e(r)]) + beta * C[r]

With an ``index`` the sm80 kernels read A's rows through it (A is the unsorted token
matrix); the TMA families read A by boxes of consecutive rows, so their launches
gather the rows first (``sorted_rows``). The routing's values are a contract
(experts.check_routing) unless checked on request."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import threading
from collections import OrderedDict
from dataclasses import dataclass

import torch

from codegen.params import PARAM_NAMES, PARAM_STRUCT, block_bytes
from codegen.spec import KernelSpec
from codegen.vocabulary import BOrder, DataType
from gemm_runtime.context import ProblemKey, quant_name
from gemm_runtime.cost_model import tiles_of
from gemm_runtime.errors import GemmArgumentError
from gemm_runtime.experts import PackedExperts, Routing, check_routing
from gemm_runtime.fast_path import current_stream_handle
from gemm_runtime.launch import EPILOGUE_TMA_STORE
from gemm_runtime.tensor_map import TENSOR_MAP_BYTES, Encoder, TensorMap2D
from gemm_runtime.types import Epilogue

_INDEX = {name: i for i, name in enumerate(PARAM_NAMES)}
_EPILOGUE_BIAS, _EPILOGUE_GATED = 1, 2  # gemm/epilogue.cuh
_TYPES = {torch.float16: DataType.F16, torch.bfloat16: DataType.BF16}


@dataclass(frozen=True)
class GroupedOperands:
    """One grouped launch's operands, checked: ``a`` A [tokens, K] (the grouped rows
    themselves, or the tokens ``routing.index`` picks), ``w`` the stacked weights
    [E, N, K] or, for quantized experts, ``packed``'s blocks [E, ceil(N / 8), ...],
    ``out`` [rows, N] (N / 2 when gated)."""

    a: torch.Tensor
    w: torch.Tensor
    packed: PackedExperts | None
    routing: Routing  # offsets int32, index int32 or None, row scales fp32 or None
    out: torch.Tensor
    bias: torch.Tensor | None
    c: torch.Tensor | None
    gated: bool
    alpha: float
    beta: float

    @property
    def experts(self) -> int:
        return self.w.shape[0]

    @property
    def rows(self) -> int:
        return self.out.shape[0]

    @property
    def n(self) -> int:
        return self.packed.layout.n if self.packed is not None else self.w.shape[1]

    @property
    def k(self) -> int:
        return self.packed.layout.k if self.packed is not None else self.w.shape[2]

    @property
    def dtype(self) -> DataType:
        return _TYPES[self.a.dtype]


def _matrix(name: str, t: object, dtype: torch.dtype | None, device: torch.device, dims: int) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise GemmArgumentError(name, type(t).__name__, f"a torch.Tensor with {dims} dimensions")
    if t.dim() != dims:
        raise GemmArgumentError(f"{name}.shape", tuple(t.shape), f"{dims} dimensions")
    if dtype is not None and t.dtype != dtype:
        raise GemmArgumentError(f"{name}.dtype", t.dtype, f"{dtype}, x's dtype")
    if t.device != device:
        raise GemmArgumentError(f"{name}.device", t.device, f"{device}, x's device")
    # Rows of whole 16-byte vectors, elements contiguous: what the kernels' copies read.
    if t.stride(-1) != 1 or any(t.stride(d) % 8 for d in range(dims - 1)) or t.data_ptr() % 16:
        raise GemmArgumentError(name, f"strides {tuple(t.stride())}", "contiguous rows of whole 16-byte vectors "
                                "(last stride 1, the others multiples of 8 elements, a 16-byte aligned base)")  # fmt: skip
    return t


def grouped_operands(
    x: object,
    w: object,
    offsets: object,
    *,
    index: object = None,
    row_scale: object = None,
    bias: object = None,
    c: object = None,
    out: object = None,
    gated: bool = False,
    alpha: float = 1.0,
    beta: float = 0.0,
    check_values: bool | None = None,
    stream: int | None = None,
) -> GroupedOperands:
    """Check a grouped launch's arguments, each error naming its argument; allocate D
    where not given. ``w``: the stacked weights [E, N, K] or PackedExperts; ``stream``:
    the launch's (kernel_routing; None: the current one)."""
    if not isinstance(x, torch.Tensor) or x.dtype not in _TYPES:
        raise GemmArgumentError("x", getattr(x, "dtype", type(x).__name__), "a torch.float16 or torch.bfloat16 tensor")
    if not isinstance(gated, bool):  # a truthy string ("False") would switch the epilogue on
        raise GemmArgumentError("gated", repr(gated), "True or False")
    device = x.device
    x = _matrix("x", x, x.dtype, device, 2)
    packed = None
    if isinstance(w, PackedExperts):
        packed, w = w, _packed_blocks(w, x.dtype, device)
        experts, n, k = packed.experts, packed.layout.n, packed.layout.k
    else:
        w = _matrix("w", w, x.dtype, device, 3)
        experts, n, k = w.shape
        if experts > 1 and w.stride(0) != n * w.stride(1):
            raise GemmArgumentError("w", f"strides {tuple(w.stride())}", f"experts' [N, K] weights one after another "
                                    f"(stride(0) = N * stride(1) = {n * w.stride(1)})")  # fmt: skip
    if x.shape[1] != k:
        raise GemmArgumentError("x.shape", tuple(x.shape), f"(rows, {k}): K of the experts' weights")
    if gated and n % 2:
        raise GemmArgumentError("w", f"N = {n}", "an even N: the gated epilogue pairs (gate, up) columns")
    rows = index.shape[0] if isinstance(index, torch.Tensor) and index.dim() == 1 else x.shape[0]
    routing = check_routing(offsets, experts=experts, rows=rows, device=device, tokens=x.shape[0] if index is not None
                            else None, index=index, row_scale=row_scale, check_values=check_values)  # fmt: skip
    offsets, index, scale = kernel_routing(routing.offsets, routing.index, routing.row_scale, stream)
    cols = n // 2 if gated else n
    if bias is not None:
        bias = _matrix("bias", bias, x.dtype, device, 2)
        if tuple(bias.shape) != (experts, n) or not bias.is_contiguous():
            raise GemmArgumentError("bias", f"shape {tuple(bias.shape)}", f"a contiguous ({experts}, {n}): one row per expert")
    if c is not None:
        c = _matrix("c", c, x.dtype, device, 2)
        if tuple(c.shape) != (rows, cols):
            raise GemmArgumentError("c.shape", tuple(c.shape), f"({rows}, {cols})")
    if out is None:
        out = torch.empty(rows, cols, dtype=x.dtype, device=device)
    else:
        out = _matrix("out", out, x.dtype, device, 2)
        if tuple(out.shape) != (rows, cols):
            raise GemmArgumentError("out.shape", tuple(out.shape), f"({rows}, {cols})")
    return GroupedOperands(x, w, packed, Routing(offsets, index, scale), out, bias, c, gated, float(alpha),
                           float(beta) if c is not None else 0.0)  # fmt: skip


def _packed_blocks(w: PackedExperts, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Quantized experts' packed blocks, checked as the kernels read them: each expert's
    blocks and its scales and zeros at a fixed stride from expert 0's (PackedExperts
    stacks them so), scales of the activations' dtype, on their device."""
    if w.dtype != dtype:
        raise GemmArgumentError("w.dtype", w.dtype, f"{dtype}: the experts' scales must be x's dtype (pack them "
                                "for x's dtype, or cast x)")  # fmt: skip
    for name, t in (("w.b", w.b), ("w.v", w.v)):
        if t.device != device:
            raise GemmArgumentError(f"{name}.device", t.device, f"{device}, x's device")
        if t.dim() != 3 or not t.is_contiguous() or t.data_ptr() % 16:
            raise GemmArgumentError(name, f"strides {tuple(t.stride())}", "a contiguous [E, rows, cols] stack with a "
                                    "16-byte aligned base, as pack_experts makes it")  # fmt: skip
    layout = w.layout
    if tuple(w.b.shape[1:]) != tuple(layout.b.shape) or tuple(w.v.shape[1:]) != tuple(layout.v.shape):
        raise GemmArgumentError("w", f"blocks {tuple(w.b.shape)} and scales {tuple(w.v.shape)}",
                                f"[E, {', '.join(map(str, layout.b.shape))}] and [E, {', '.join(map(str, layout.v.shape))}]"
                                " as its layout says")  # fmt: skip
    return w.b


def grouped_key(ops: GroupedOperands, arch: int) -> ProblemKey:
    """The dispatch key of a grouped launch: one expert's N and K, E, and the grouped
    rows as M (the tuned M values bucket it; with E it gives the mean rows of an expert).
    How the rows split over the experts is on the device and is not read."""
    epilogue = {(False, False): Epilogue.NONE, (True, False): Epilogue.BIAS, (False, True): Epilogue.GATED_SILU,
                (True, True): Epilogue.BIAS_GATED_SILU}[ops.bias is not None, ops.gated]  # fmt: skip
    t = ops.dtype
    b_type, quant = t, "none"
    if ops.packed is not None:
        layout = ops.packed.layout
        b_type = DataType.U4 if layout.bits == 4 else DataType.U8
        quant = quant_name(b_type, layout.group_size, layout.k)
    return ProblemKey(arch, t, b_type, BOrder.NK, t, 8, quant, epilogue.value, ops.n, ops.k, ops.rows, ops.experts)


def _on_stream(device: torch.device, stream: int | None):
    """Where a launch's temporaries are made: on its stream (the caller's inputs are
    ready there by contract, and the caching allocator reuses their memory only after
    the launch has read them); None, or the current stream: as it is."""
    if stream is None or device.type != "cuda" or current_stream_handle(device.index) == stream:
        return contextlib.nullcontext()
    return torch.cuda.stream(torch.cuda.ExternalStream(stream, device=device))


def kernel_routing(offsets: torch.Tensor, index: torch.Tensor | None, row_scale: torch.Tensor | None,
                   stream: int | None) -> tuple:  # fmt: skip
    """The routing as the kernels read it: int32 offsets and row indices, fp32 row scales
    (converted copies where the caller's differ, made on the launch's ``stream``)."""
    if (offsets.dtype == torch.int32 and (index is None or index.dtype == torch.int32)
            and (row_scale is None or row_scale.dtype == torch.float32)):  # fmt: skip
        return offsets, index, row_scale
    with _on_stream(offsets.device, stream):
        return (offsets.int(), None if index is None else index.int(),
                None if row_scale is None else row_scale.float())  # fmt: skip


def sorted_rows(x: torch.Tensor, index: torch.Tensor, stream: int) -> torch.Tensor:
    """A's rows in grouped order (``x[index]``), for kernels that read A by TMA boxes,
    made on the launch's stream (``_on_stream``)."""
    with _on_stream(x.device, stream):
        return x.index_select(0, index)


# Encoders by geometry (a TensorMap2D without its address), shared by every grouped launch
# of the process: an Encoder converts the driver's arguments once and remembers the
# descriptors of the last few addresses, so a layer's launches, whose weights stay put and
# whose activations come back to the same few addresses, mostly skip
# cuTensorMapEncodeTiled. Made afresh for every map of every launch (until the twenty-
# second session), each map cost the conversion of its arguments and a driver call, three
# or four a launch of the sm90 families (not yet timed on a GPU host; docs/NOTES.md).
_ENCODER_GEOMETRIES = 64
_encoders: OrderedDict[tuple, Encoder] = OrderedDict()
_encoders_lock = threading.Lock()  # an Encoder is not thread-safe


def _encoder(tmap: TensorMap2D) -> Encoder:
    """The shared Encoder of ``tmap``'s geometry; call it under ``_encoders_lock``."""
    geometry = tuple(getattr(tmap, f.name) for f in dataclasses.fields(tmap) if f.name != "address")
    with _encoders_lock:
        encoder = _encoders.get(geometry)
        if encoder is None:
            encoder = _encoders[geometry] = Encoder(tmap)
            if len(_encoders) > _ENCODER_GEOMETRIES:
                _encoders.popitem(last=False)
        else:
            _encoders.move_to_end(geometry)
        return encoder


class GroupedMaps:
    """The TMA families' descriptors of one grouped launch geometry, in the order the
    family lists its boxes: ``maps(a, b, v, d)`` encodes them for operands at those
    addresses (a replay of the same geometry calls it again only when one moved). A over
    the grouped rows; B over the stacked weights as one matrix of E times an expert's
    rows (expert e's tiles start at e times them): [E * N, K], or packed (32-bit words:
    TMA moves them as bytes) [E * ceil(N / 8), padded K words]; V (quantized) the same
    over the experts' scales and zeros [E * 2 * groups, N]; D over all rows (the kernel
    stores through it only the boxes whose rows belong to one expert). D has none where
    its rows are not whole 16-byte chunks (gemm_runtime.launch.TensorMaps: a TMA store
    writes a row's last chunk whole): ``stores_d`` says whether it has one."""

    def __init__(self, spec: KernelSpec, ops: GroupedOperands, a: torch.Tensor, key: ProblemKey) -> None:
        dtype, e = ops.dtype, ops.experts
        self.stores_d = False
        self._encoders: list[tuple[str, Encoder | None]] = []
        for box in spec.mainloop.tensor_maps(spec, key):
            if box.operand == "a":
                matrix = (a.data_ptr(), ops.rows, ops.k, a.stride(0), dtype)
            elif box.operand == "b" and ops.packed is not None:
                b = ops.packed.b
                matrix = (b.data_ptr(), e * b.shape[1], b.shape[2] // 4, b.stride(1) // 4, DataType.F32)
            elif box.operand == "b":
                matrix = (ops.w.data_ptr(), e * ops.n, ops.k, ops.w.stride(1), dtype)
            elif box.operand == "v":
                v = ops.packed.v
                matrix = (v.data_ptr(), e * v.shape[1], ops.n, v.stride(1), dtype)
            else:  # "d"
                out = ops.out
                matrix = (out.data_ptr(), ops.rows, out.shape[1], out.stride(0), dtype)
            encoder = None
            if box.operand != "d" or ops.out.shape[1] * ops.out.element_size() % 16 == 0:
                try:
                    encoder = _encoder(TensorMap2D(*matrix, box.box_rows, box.box_cols, box.swizzle))
                except GemmArgumentError:
                    if box.operand != "d":
                        raise
            self.stores_d |= box.operand == "d" and encoder is not None
            self._encoders.append((box.operand, encoder))

    def __call__(self, a: int, b: int, v: int, d: int) -> bytes:
        address = {"a": a, "b": b, "v": v, "d": d}
        with _encoders_lock:  # an Encoder is not thread-safe
            return b"".join(bytes(TENSOR_MAP_BYTES) if enc is None else enc(address[op]) for op, enc in self._encoders)


def launch_block(
    kernel, ops: GroupedOperands, a: torch.Tensor | None = None, swizzle: int | None = None, splits: int = 1,
    semaphores: int = 0, partials: int = 0, key: ProblemKey | None = None,
) -> tuple[tuple[int, int, int], bytes]:  # fmt: skip
    """The grid and the parameter block of one grouped launch of ``kernel`` (``prepare``)."""
    grid, block, _ = prepare(kernel, ops, a, swizzle, splits, semaphores, partials, key)
    return grid, block


def prepare(
    kernel, ops: GroupedOperands, a: torch.Tensor | None = None, swizzle: int | None = None, splits: int = 1,
    semaphores: int = 0, partials: int = 0, key: ProblemKey | None = None,
) -> tuple[tuple[int, int, int], bytes, GroupedMaps | None]:  # fmt: skip
    """The grid, the parameter block and the tensor maps (None for the families without)
    of one grouped launch of ``kernel`` (a registry.Kernel); ``a``: the sorted rows
    (``sorted_rows``) where the kernel reads A by TMA and the launch is gathered; ``swizzle``: the plan's (None: the family's preferred);
    ``splits``: K slices (the families whose max_splits allows), with the workspace's
    ``semaphores`` and ``partials``; ``key``: the launch's grouped_key where the caller
    has it (else made here).

    The tiles cover a bound on the tile rows, floor((rows + min(E, rows) (CTA M - 1)) /
    CTA M) (cost_model.tiles_of); the work past the last one is
    skipped (gemm/grouped.cuh). The family lays the grid out: the sm80 kernels take a
    CTA per tile and split, the sm90 kernels are persistent, as many CTAs as the device
    holds, in groups of 2^swizzle tile rows, the sm90_quant ones a CTA per tile."""
    spec = kernel.spec
    ck = spec.cta[2]
    key = key if key is not None else grouped_key(ops, 0)
    tiles_m, tiles_n = tiles_of(spec, key)
    k_tiles = math.ceil(ops.k / ck)
    tma = spec.mainloop.reads_a_by_tma(spec)  # it cannot follow a row index: gathered rows come sorted
    gather = ops.routing.index
    if tma and gather is not None:
        if a is None:
            raise ValueError("a gathered launch of a TMA kernel needs the sorted rows (sorted_rows)")
        gather = None
    else:
        a = ops.a
    if not spec.mainloop.persistent:
        swizzle = 0
    elif swizzle is None:
        swizzle = spec.mainloop.preferred_swizzle
    values = [0] * len(PARAM_NAMES)
    scale = ops.routing.row_scale
    if ops.packed is not None:
        # Blocks of packed B are counted in 16-bit units (gemm_runtime.launch).
        v = ops.packed.v
        layout = ops.packed.layout
        ldb = ops.w.stride(1) // 2
        for name, value in (("V", v.data_ptr()), ("ldv", v.stride(1)), ("groups", layout.groups),
                            ("group_shift", layout.group_shift)):  # fmt: skip
            values[_INDEX[name]] = value
    else:
        ldb = ops.w.stride(1)
    for name, value in (
        ("A", a.data_ptr()), ("B", ops.w.data_ptr()), ("C", ops.c.data_ptr() if ops.c is not None else 0),
        ("D", ops.out.data_ptr()), ("U", scale.data_ptr() if scale is not None else 0),
        ("bias", ops.bias.data_ptr() if ops.bias is not None else 0), ("offsets", ops.routing.offsets.data_ptr()),
        ("gather", gather.data_ptr() if gather is not None else 0),
        ("lda", a.stride(0)), ("ldb", ldb), ("ldc", ops.c.stride(0) if ops.c is not None else 0),
        ("ldd", ops.out.stride(0)), ("M", ops.rows), ("N", ops.n), ("K", ops.k),
        ("tiles_m", tiles_m), ("tiles_n", tiles_n), ("splits", splits), ("k_tiles_per_split", math.ceil(k_tiles / splits)),
        ("semaphores", semaphores), ("partials", partials),
        ("swizzle", swizzle), ("experts", ops.experts), ("alpha", ops.alpha), ("beta", ops.beta),
        ("epilogue", (_EPILOGUE_BIAS if ops.bias is not None else 0) | (_EPILOGUE_GATED if ops.gated else 0)),
    ):  # fmt: skip
        values[_INDEX[name]] = value
    grid = spec.mainloop.grid(spec, (tiles_m, tiles_n), splits, swizzle, kernel.resident)
    if not tma:
        return grid, PARAM_STRUCT.pack(*values), None
    maps = GroupedMaps(spec, ops, a, key)
    values[_INDEX["epilogue"]] |= EPILOGUE_TMA_STORE if maps.stores_d else 0
    b, v = (ops.w.data_ptr(), ops.packed.v.data_ptr()) if ops.packed is not None else (ops.w.data_ptr(), 0)
    block = maps(a.data_ptr(), b, v, ops.out.data_ptr()) + PARAM_STRUCT.pack(*values)
    block += bytes(block_bytes(spec.mainloop.params_offset(spec)) - len(block))
    return grid, block, maps
