"""Turn one call into a Problem (validated geometry, pointers, alignment) and decide
which kernels can serve it. Every check here runs before anything is launched."""

from __future__ import annotations

import math
import re
from typing import NamedTuple

import torch

from codegen.spec import KernelSpec
from codegen.vocabulary import QUANT_TYPES, BOrder, DataType, Order
from gemm_runtime.errors import GemmArgumentError
from gemm_runtime.packed_weight import GROUP_SHIFT_ALL_K
from gemm_runtime.types import DispatchPolicy, Epilogue, MatrixLayout, Operation, QuantDesc, torch_dtype

_INPUT_TYPES = (DataType.F16, DataType.BF16)
MAX_GRID_Y = 65535  # CUDA's limit on gridDim.y (and z)
_INT32_MAX = 2**31 - 1
_POINTER_MAX = 2**64 - 1  # a raw device pointer is a CUdeviceptr (64 bits)
MAX_EXPERTS = 1 << 16  # a grouped key's experts (the kernels scan the offsets 32 at a time)
# The type of each ProblemKey field that is not an integer (the others are).
KEY_FIELD_TYPES = {"a_type": DataType, "b_type": DataType, "d_type": DataType, "b_order": BOrder, "quant": str,
                   "epilogue": str}  # fmt: skip


class ProblemKey(NamedTuple):
    """Everything that decides which kernels are feasible and which is fastest.
    All fields but ``m`` form the shape key of the dispatch cache (see ``shape``)."""

    arch: int  # 10 * major + minor of the device (0 where none is involved)
    a_type: DataType
    b_type: DataType
    b_order: BOrder
    d_type: DataType
    align: int  # elements every row of A and B (and their bases) are aligned to
    quant: str  # "none" for dense problems
    epilogue: str  # Epilogue value
    n: int
    k: int
    m: int
    # A grouped problem's experts (docs/MOE.md; 0 for the others). Its m is the grouped
    # rows (all experts'), its n and k one expert's weight: how the rows split over the
    # experts lives on the device, so the key keeps their mean (m / experts touched), as
    # the M bucket of a tuned shape does.
    experts: int = 0

    @property
    def group_size(self) -> int:
        """Quantized B's group size as ``quant`` spells it (K for one group); 0 when dense."""
        parsed = _QUANT_NAME.fullmatch(self.quant)
        return int(parsed[2]) if parsed else 0

    @property
    def shape(self) -> "ProblemKey":
        """The key with M erased: what the dispatch cache indexes tuned M values by."""
        return self._replace(m=0)

    def to_json(self) -> dict:
        return {
            f: (v.value if hasattr(v, "value") else v) for f, v in zip(self._fields, self)
        }

    def validate(self) -> None:
        """ValueError naming the first field whose value no kernel of any build serves.
        The one place that knows the valid values of a key: the dispatch cache checks
        every key it stores or imports here, and make_problem only builds valid ones."""
        if self.arch < 0:
            raise ValueError(f"arch {self.arch} is negative")
        if not 0 <= self.experts <= MAX_EXPERTS:
            raise ValueError(f"experts {self.experts} is not in 0..{MAX_EXPERTS}")
        if self.experts and (self.b_order is not BOrder.NK or self.d_type is not self.a_type or self.align != 8):
            raise ValueError(f"a grouped key (experts {self.experts}) is 'nk', align 8, with D of A's type; "
                             f"got b_order {self.b_order.value}, d_type {self.d_type.value}, align {self.align}")  # fmt: skip
        if self.a_type not in _INPUT_TYPES:
            raise ValueError(f"a_type {self.a_type.value} is not one of {_names(_INPUT_TYPES)}")
        if self.d_type not in (self.a_type, DataType.F32):
            raise ValueError(f"d_type {self.d_type.value} is not {self.a_type.value} (a_type) or f32")
        if self.align not in ALIGNMENTS:
            raise ValueError(f"align {self.align} is not one of {', '.join(map(str, ALIGNMENTS))}")
        for f in ("m", "n", "k"):
            v = getattr(self, f)
            # NOTE: empty problems (M, N or K = 0) launch no kernel choice worth keeping.
            if not 1 <= v <= _INT32_MAX:
                raise ValueError(f"{f} {v} is not in 1..{_INT32_MAX}")
        epilogues = {e.value: e for e in Epilogue}
        if self.epilogue not in epilogues:
            raise ValueError(f"epilogue {self.epilogue!r} is not one of {', '.join(map(repr, epilogues))}")
        if epilogues[self.epilogue].gated and self.n % 2:
            raise ValueError(f"epilogue {self.epilogue} needs an even N, got n {self.n}")
        if self.quant == "none":
            if self.b_type is not self.a_type:
                raise ValueError(f"b_type {self.b_type.value} is not {self.a_type.value} (a_type) for quant 'none'")
            return
        parsed = _QUANT_NAME.fullmatch(self.quant)
        if parsed is None:
            raise ValueError(f"quant {self.quant!r} is not 'none' or <u4|u8>g<group size>, e.g. 'u4g128'")
        q_type, group = DataType(parsed[1]), int(parsed[2])
        if quant_groups(group, self.k) is None or quant_name(q_type, group, self.k) != self.quant:
            raise ValueError(
                f"quant {self.quant!r}: group {group} is not a power of two >= 32 below K = {self.k},"
                f" nor K itself (one group)"
            )
        if self.b_type is not q_type:
            raise ValueError(f"b_type {self.b_type.value} is not {q_type.value} as quant {self.quant!r} says")
        if self.b_order is not BOrder.NK:
            raise ValueError(f"b_order {self.b_order.value} is not nk (quantized weights are N x K)")

    @classmethod
    def from_json(cls, data: dict) -> "ProblemKey":
        """Inverse of to_json: KeyError for a missing field, TypeError for a value of the
        wrong JSON type, ValueError for a value no kernel serves (see validate)."""
        kinds = {f: t for f, t in KEY_FIELD_TYPES.items() if t is not str}  # spelled as strings in JSON
        raw = []
        for f in cls._fields:
            # NOTE: exports from before grouped keys have no "experts": dense keys.
            v = data.get(f, 0) if f == "experts" else data[f]
            if f in KEY_FIELD_TYPES:
                if not isinstance(v, str):
                    raise TypeError(f"{f} must be a string, got {v!r}")
            elif not isinstance(v, int) or isinstance(v, bool):
                raise TypeError(f"{f} must be an integer, got {v!r}")
            raw.append(v)
        values = []
        for f, v in zip(cls._fields, raw):
            if f in kinds:
                try:
                    v = kinds[f](v)
                except ValueError:
                    raise ValueError(f"{f} {v!r} is not one of {_names(kinds[f])}") from None
            values.append(v)
        key = cls(*values)
        key.validate()
        return key


def _names(values) -> str:
    return ", ".join(v.value for v in values)


# Elements of A and B every row starts on: the vector widths vector_align finds.
ALIGNMENTS = (1, 2, 4, 8)
_QUANT_NAME = re.compile(r"(u4|u8)g([0-9]{1,10})")


def quant_groups(group_size: int, k: int) -> int | None:
    """Groups along K of a weight quantized with ``group_size``; None when the kernels
    cannot use it. A size of K or more (or <= 0, per-channel) is one group; several
    groups need a power of two >= 32 (the kernels find a row's group by a shift)."""
    if group_size <= 0 or group_size >= k:
        return 1
    if group_size < 32 or group_size & (group_size - 1):
        return None
    return -(-k // group_size)


def quant_name(q_type: DataType, group_size: int, k: int) -> str:
    """The key's ``quant``: one group is spelled with K as its size, however the caller
    gave it (-1, K or more), so equal problems share one key."""
    return f"{q_type.value}g{k if quant_groups(group_size, k) == 1 else group_size}"


def describe(key: ProblemKey) -> str:
    """A key for messages."""
    text = (
        f"M={key.m} N={key.n} K={key.k} A={key.a_type.value} B={key.b_order.value} "
        f"D={key.d_type.value} align={key.align}"
    )
    extra = [f"{f}={getattr(key, f)}" for f in ("quant", "epilogue") if getattr(key, f) != "none"]
    if key.experts:
        extra.append(f"experts={key.experts} (grouped)")
    return " ".join([text, *extra])


def make_key(
    a_type: DataType, b_order: BOrder, d_type: DataType, m: int, n: int, k: int, *, align: int = 8, arch: int = 0
) -> ProblemKey:
    """A dense problem's key (tests, benchmarks, the tuning CLI)."""
    return ProblemKey(arch, a_type, a_type, b_order, d_type, align, "none", "none", n, k, m)


class Problem(NamedTuple):
    key: ProblemKey
    a: int
    b: int
    c: int
    d: int
    lda: int
    ldb: int
    ldc: int
    ldd: int
    read_c: bool
    bias: int = 0  # device pointer of the bias vector (epilogues with bias)
    v: int = 0  # quantized B: scales then zeros, [2 * groups, N]
    ldv: int = 0
    groups: int = 0
    group_shift: int = 0


def vector_align(ptr: int, ld: int, elem_bytes: int, lines: int) -> int:
    """The widest vector (8, 4, 2 or 1 elements) every line of a matrix starts on."""
    for v in (8, 4, 2):
        if ptr % (v * elem_bytes) == 0 and (lines <= 1 or ld % v == 0):
            return v
    return 1


def _layout(name: str, desc: object) -> MatrixLayout:
    if not isinstance(desc, MatrixLayout):
        raise GemmArgumentError(name, type(desc).__name__, "a gemm_runtime.MatrixLayout")
    # NOTE: not only for the message: an order "row" (a str) is not Order.ROW_MAJOR, so
    # every check below would read the matrix as column-major.
    if not isinstance(desc.type, DataType):
        raise GemmArgumentError(f"{name}.type", repr(desc.type), "a gemm_runtime.DataType (e.g. DataType.F16)")
    if not isinstance(desc.order, Order):
        raise GemmArgumentError(f"{name}.order", repr(desc.order), "Order.ROW_MAJOR or Order.COL_MAJOR")
    for field in ("rows", "cols", "ld"):
        v = getattr(desc, field)
        if not isinstance(v, int) or isinstance(v, bool) or v < 0 or v > _INT32_MAX:
            raise GemmArgumentError(f"{name}.{field}", v, f"an integer in [0, {_INT32_MAX}]")
    if desc.ld < max(desc.inner, 1):
        line = "row" if desc.order is Order.ROW_MAJOR else "column"
        raise GemmArgumentError(f"{name}.ld", desc.ld, f">= {max(desc.inner, 1)} (the {line} length) for {desc.order.value}-major")
    return desc


def _pointer(name: str, operand: object, desc: MatrixLayout, device: torch.device) -> int:
    """Check a tensor (or raw device pointer) against its layout; return the address."""
    elem = desc.type.bits // 8
    if isinstance(operand, int) and not isinstance(operand, bool):
        ptr = _raw_pointer(name, operand, desc.span > 0)
    elif isinstance(operand, torch.Tensor):
        if operand.device != device:
            raise GemmArgumentError(f"{name}.device", operand.device, f"{device} (the Gemm's device)")
        expected = torch_dtype(desc.type)
        if operand.dtype != expected:
            raise GemmArgumentError(f"{name}.dtype", operand.dtype, f"{expected} (as its layout says: {desc.type.value})")
        available = operand.untyped_storage().nbytes() - operand.storage_offset() * operand.element_size()
        if desc.span * elem > available:
            raise GemmArgumentError(
                f"{name}", f"{available} bytes of storage", f">= {desc.span * elem} bytes for its layout {desc}"
            )
        ptr = operand.data_ptr()
    else:
        raise GemmArgumentError(name, type(operand).__name__, "a CUDA torch.Tensor or a device pointer (int)")
    if ptr % elem:
        raise GemmArgumentError(f"{name} address", hex(ptr), f"a multiple of the element size, {elem} bytes")
    return ptr


def _raw_pointer(name: str, ptr: int, addressed: bool = True) -> int:
    """A raw device pointer: 1 .. 2**64 - 1 (0 only where nothing is addressed), not a
    null pointer the kernel would fault on nor one the launch cannot pack."""
    if not (1 if addressed else 0) <= ptr <= _POINTER_MAX:
        raise GemmArgumentError(name, hex(ptr), f"a device address in 0x1..{_POINTER_MAX:#x}")
    return ptr


def _overlaps(p0: int, n0: int, p1: int, n1: int) -> bool:
    return n0 > 0 and n1 > 0 and p0 < p1 + n1 and p1 < p0 + n0


def make_problem(
    operation: Operation,
    A: object,
    Adesc: object,
    B: object,
    Bdesc: object,
    beta: float,
    C: object,
    Cdesc: object,
    D: object,
    Ddesc: object,
    device: torch.device,
    arch: int = 0,
    bias: object = None,
    V: object = None,
    Vdesc: object = None,
) -> Problem:
    if not isinstance(operation, Operation):
        raise GemmArgumentError("operation", type(operation).__name__, "a gemm_runtime.Operation")
    if not isinstance(operation.dispatch, DispatchPolicy):
        # NOTE: "measure" (a str) is not DispatchPolicy.MEASURE: it ran DEFAULT, silently.
        raise GemmArgumentError("operation.dispatch", repr(operation.dispatch),
                                ", ".join(f"DispatchPolicy.{p.name}" for p in DispatchPolicy))  # fmt: skip
    if operation.quant_a is not None:
        raise GemmArgumentError("operation.quant_a", operation.quant_a, "None (A is fp16 / bf16)")
    epilogue = operation.epilogue
    if not isinstance(epilogue, Epilogue):
        raise GemmArgumentError("operation.epilogue", epilogue, ", ".join(f"Epilogue.{e.name}" for e in Epilogue))

    a, b, d = _layout("Adesc", Adesc), _layout("Bdesc", Bdesc), _layout("Ddesc", Ddesc)
    if a.type not in _INPUT_TYPES:
        raise GemmArgumentError("Adesc.type", a.type.value, "f16, bf16")
    if a.order is not Order.ROW_MAJOR:
        raise GemmArgumentError("Adesc.order", a.order.value, "row (A is M x K with K contiguous)")
    quant = operation.quant_b
    if quant is not None and (
        not isinstance(quant, QuantDesc)
        or not isinstance(quant.group_size, int)
        or isinstance(quant.group_size, bool)
    ):
        raise GemmArgumentError("operation.quant_b", repr(quant),
                                "None or a QuantDesc(DataType.U4 or DataType.U8, integer group_size)")  # fmt: skip
    if quant is not None:
        if b.type is not quant.type or b.type not in QUANT_TYPES:
            raise GemmArgumentError("Bdesc.type", b.type.value, "u4 or u8, as operation.quant_b says")
        if b.order is not Order.COL_MAJOR or b.ld % 32:
            raise GemmArgumentError("Bdesc", b, "column-major K x N (an N x K weight) with ld a multiple of 32")
    elif b.type is not a.type:
        raise GemmArgumentError("Bdesc.type", b.type.value, f"{a.type.value} (the type of A)")
    if b.rows != a.cols:
        raise GemmArgumentError("Bdesc.rows", b.rows, f"{a.cols} (= K, the columns of A)")
    m, k, n = a.rows, a.cols, b.cols
    if epilogue.gated and n % 2:
        raise GemmArgumentError("Bdesc.cols", n, f"an even N for {epilogue}: (gate, up) column pairs")
    d_cols = n // 2 if epilogue.gated else n
    if d.order is not Order.ROW_MAJOR:
        raise GemmArgumentError("Ddesc.order", d.order.value, "row")
    if (d.rows, d.cols) != (m, d_cols):
        what = "(M, N / 2): the gated epilogue halves the columns" if epilogue.gated else "(M, N)"
        raise GemmArgumentError("Ddesc shape", (d.rows, d.cols), f"({m}, {d_cols}) = {what}")
    if d.type not in (a.type, DataType.F32):
        raise GemmArgumentError("Ddesc.type", d.type.value, f"{a.type.value} or f32")

    read_c = float(beta) != 0.0
    c_ptr, ldc = 0, 0
    if read_c:
        if C is None or Cdesc is None:
            raise GemmArgumentError("C", None, "a matrix (and Cdesc) when beta != 0")
        c = _layout("Cdesc", Cdesc)
        if c.order is not Order.ROW_MAJOR or (c.rows, c.cols) != (m, d_cols) or c.type is not d.type:
            raise GemmArgumentError(
                "Cdesc", c, f"row-major {m} x {d_cols} of type {d.type.value} (C matches D in shape and type)"
            )
        c_ptr, ldc = _pointer("C", C, c, device), c.ld

    a_ptr = _pointer("A", A, a, device)
    v_ptr = ldv = groups = shift = 0
    if quant is not None:
        b_ptr = _packed_pointer(B, b, device)
        v_ptr, ldv, groups, shift = _scales_pointer(V, Vdesc, a.type, n, k, quant, device)
    else:
        b_ptr = _pointer("B", B, b, device)
    d_ptr = _pointer("D", D, d, device)
    d_bytes = d.span * d.type.bits // 8
    for name, ptr, desc in (("A", a_ptr, a), ("B", b_ptr, b)):
        if _overlaps(d_ptr, d_bytes, ptr, desc.span * desc.type.bits // 8 or (1 if desc.span else 0)):
            raise GemmArgumentError("D", f"memory overlapping {name}", f"an output that does not alias {name}")

    bias_ptr = 0
    if epilogue.has_bias:
        bias_ptr = _bias_pointer(bias, n, d.type, device, epilogue)
    elif bias is not None:
        raise GemmArgumentError("bias", "a tensor", f"None for {epilogue} (use an epilogue with bias)")

    elem = a.type.bits // 8
    align = min(vector_align(a_ptr, a.ld, elem, a.outer), vector_align(b_ptr, b.ld, elem, b.outer))
    b_order = BOrder.KN if b.order is Order.ROW_MAJOR else BOrder.NK
    q_name = "none" if quant is None else quant_name(quant.type, quant.group_size, k)
    key = ProblemKey(arch, a.type, b.type, b_order, d.type, align, q_name, epilogue.value, n, k, m)
    # The kernels address packed B in 16-bit units, a row per 8 columns of N.
    ldb = b.ld * b.type.bits // 2 if quant is not None else b.ld
    return Problem(key, a_ptr, b_ptr, c_ptr, d_ptr, a.ld, ldb, ldc, d.ld, read_c, bias_ptr, v_ptr, ldv, groups, shift)


def _packed_pointer(B: object, b: MatrixLayout, device: torch.device) -> int:
    """Packed quantized B: uint8 [ceil(N / 8), ld * bits], the fragment-ordered tiles of
    gemm_runtime.packed_weight.pack_for_gemm (ld: K padded to a multiple of 32)."""
    tiles, row_bytes = -(-b.cols // 8), b.ld * b.type.bits
    if isinstance(B, int) and not isinstance(B, bool):
        ptr = _raw_pointer("B", B, b.span > 0)
    elif isinstance(B, torch.Tensor):
        if B.device != device:
            raise GemmArgumentError("B.device", B.device, f"{device} (the Gemm's device)")
        if B.dtype != torch.uint8 or B.dim() != 2 or B.shape[0] != tiles or B.stride() != (row_bytes, 1):
            raise GemmArgumentError("B", f"{B.dtype} {tuple(B.shape)} strides {B.stride()}",
                                    f"a contiguous uint8 tensor ({tiles}, {row_bytes}) from pack_for_gemm")
        ptr = B.data_ptr()
    else:
        raise GemmArgumentError("B", type(B).__name__, "a CUDA uint8 tensor of packed weights")
    if ptr % 16:
        raise GemmArgumentError("B address", hex(ptr), "a multiple of 16 bytes")
    return ptr


def _scales_pointer(V: object, Vdesc: object, a_type: DataType, n: int, k: int, quant, device) -> tuple[int, int, int, int]:
    """V = scales then zeros, [2 * groups, N] in A's type; returns (ptr, ld, groups, shift)."""
    v = _layout("Vdesc", Vdesc)
    groups = quant_groups(quant.group_size, k)
    if groups is None:
        raise GemmArgumentError("operation.quant_b.group_size", quant.group_size, "32, 64, 128 (powers of two >= 32) or K")
    if v.type is not a_type and v.type in _INPUT_TYPES:
        raise GemmArgumentError(
            "Vdesc.type", v.type.value, f"scales of {a_type.value}, the type of A (quantize and pack the weight"
            f" for {a_type.value} activations, or cast A to {v.type.value})",
        )
    if v.type is not a_type or v.order is not Order.ROW_MAJOR or (v.rows, v.cols) != (2 * groups, n):
        raise GemmArgumentError("Vdesc", v, f"row-major {2 * groups} x {n} of {a_type.value}: scales, then zeros")
    if v.ld % 8:
        raise GemmArgumentError("Vdesc.ld", v.ld, "a multiple of 8 (16-byte rows; quant.pack_for_gemm pads N)")
    shift = quant.group_size.bit_length() - 1 if groups > 1 else GROUP_SHIFT_ALL_K
    ptr = _pointer("V", V, v, device)
    if ptr % 16:
        raise GemmArgumentError("V address", hex(ptr), "a multiple of 16 bytes")
    return ptr, v.ld, groups, shift


def _bias_pointer(bias: object, n: int, dtype: DataType, device: torch.device, epilogue: Epilogue) -> int:
    """A bias vector of the accumulator's N columns, in D's type."""
    if isinstance(bias, int) and not isinstance(bias, bool) and bias:
        return _raw_pointer("bias", bias)
    if not isinstance(bias, torch.Tensor):
        raise GemmArgumentError("bias", type(bias).__name__, f"a CUDA tensor of {n} values for {epilogue}")
    expected = torch_dtype(dtype)
    if bias.dim() != 1 or bias.shape[0] != n:
        raise GemmArgumentError("bias.shape", tuple(bias.shape), f"({n},): one value per column of A @ B")
    if bias.dtype != expected:
        raise GemmArgumentError("bias.dtype", bias.dtype, f"{expected} (the output's type)")
    if bias.device != device:
        raise GemmArgumentError("bias.device", bias.device, f"{device} (the Gemm's device)")
    if bias.stride(0) != 1 and n > 1:
        raise GemmArgumentError("bias.stride()", bias.stride(), "(1,): contiguous")
    return bias.data_ptr()


def arch_limit(key: ProblemKey) -> str | None:
    """Why no kernel of any build serves ``key`` on its GPU's arch, or None. These are
    the GPU's limits and the families' arch ranges, not a build's choice of tiles, so an
    UnsupportedProblemError leads with them: a bf16 call on a T4 should read as the T4's
    limit, not as a build that lacks kernels. tests/codegen/test_default_configs.py checks
    that the default set serves every problem this does not refuse, on every arch."""
    if not key.arch:
        return None
    gpu = f"this GPU is sm_{key.arch}"
    if key.a_type is DataType.BF16 and key.arch < 80:
        return f"bf16 needs compute capability 8.0 or later (its tensor-core MMA), and {gpu}; fp16 runs here"
    if key.quant != "none" and key.arch < 75:
        return (f"quantized weights need compute capability 7.5 or later (their packed layout is the m16n8 MMA "
                f"fragment's, which Volta's m8n8k4 MMA does not have), and {gpu}")  # fmt: skip
    if key.experts and key.arch < 80:
        return f"grouped GEMMs need compute capability 8.0 or later (no sm70-family grouped kernels), and {gpu}"
    return None


def infeasible_reason(spec: KernelSpec, key: ProblemKey) -> str | None:
    """Why ``spec`` cannot compute ``key``, or None if it can."""
    if spec.grouped and not key.experts:
        return "a grouped kernel: it serves grouped problems only (docs/MOE.md)"
    if key.experts and not spec.grouped:
        return "not a grouped kernel (a grouped problem needs one: docs/MOE.md)"
    if spec.a_type is not key.a_type or spec.b_type is not key.b_type:
        return f"operand type is not {key.a_type.value}"
    if spec.b_order is not key.b_order:
        return f"B order is not {key.b_order.value}"
    if spec.d_type is not key.d_type:
        return f"output type is not {key.d_type.value}"
    if spec.align > key.align:
        return f"needs rows aligned to {spec.align} elements, problem has {key.align}"
    if math.ceil(key.n / spec.cta[1]) > MAX_GRID_Y:
        return f"N = {key.n} needs more than {MAX_GRID_Y} CTA columns"
    return spec.mainloop.problem_error(spec, key.k) or spec.mainloop.rows_error(spec, key.m)
