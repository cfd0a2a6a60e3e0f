"""Descriptors of a GEMM call, mirroring the reference interface:
``D = alpha * (A @ B) + beta * C`` with A (M x K), B (K x N), C and D (M x N)."""

from __future__ import annotations

import enum
from dataclasses import dataclass

import torch

from codegen.vocabulary import BOrder, DataType, Order
from gemm_runtime.errors import GemmArgumentError

__all__ = [
    "DataType",
    "Order",
    "BOrder",
    "MatrixLayout",
    "QuantDesc",
    "Epilogue",
    "DispatchPolicy",
    "Operation",
    "Workspace",
    "torch_dtype",
    "data_type_of",
]

_TORCH_DTYPES = {DataType.F16: torch.float16, DataType.BF16: torch.bfloat16, DataType.F32: torch.float32}
_FROM_TORCH = {v: k for k, v in _TORCH_DTYPES.items()}


def torch_dtype(t: DataType) -> torch.dtype:
    try:
        return _TORCH_DTYPES[t]
    except (KeyError, TypeError):  # TypeError: unhashable
        if not isinstance(t, DataType):
            raise GemmArgumentError("dtype", repr(t), "a DataType: F16, BF16 or F32") from None
        raise GemmArgumentError("dtype", t.value, "f16, bf16, f32 (as torch tensors)") from None


def data_type_of(dtype: torch.dtype, argument: str = "dtype") -> DataType:
    try:
        return _FROM_TORCH[dtype]
    except (KeyError, TypeError):  # TypeError: unhashable (a list)
        raise GemmArgumentError(argument, dtype, "torch.float16, torch.bfloat16, torch.float32") from None


@dataclass(frozen=True)
class MatrixLayout:
    """A (rows x cols) matrix in memory. ``ld`` is the distance in elements between
    consecutive rows (ROW_MAJOR) or columns (COL_MAJOR)."""

    type: DataType
    order: Order
    rows: int
    cols: int
    ld: int

    @classmethod
    def of(cls, t: torch.Tensor, argument: str = "tensor") -> "MatrixLayout":
        """The layout of a 2-D tensor that is row-major or column-major with unit inner stride."""
        if not isinstance(t, torch.Tensor):
            raise GemmArgumentError(argument, type(t).__name__, "a 2-D torch.Tensor")
        if t.dim() != 2:
            raise GemmArgumentError(f"{argument}.shape", tuple(t.shape), "a 2-D tensor")
        rows, cols = t.shape
        s0, s1 = t.stride()
        dtype = data_type_of(t.dtype, f"{argument}.dtype")
        if s1 == 1 and (s0 >= cols or rows <= 1):
            return cls(dtype, Order.ROW_MAJOR, rows, cols, max(s0, cols, 1))
        if s0 == 1 and (s1 >= rows or cols <= 1):
            return cls(dtype, Order.COL_MAJOR, rows, cols, max(s1, rows, 1))
        raise GemmArgumentError(
            f"{argument}.stride()", (s0, s1), "row-major (stride (ld, 1), ld >= cols) or column-major (stride (1, ld))"
        )

    @property
    def inner(self) -> int:
        """Elements in one contiguous line (a row if ROW_MAJOR, a column if COL_MAJOR)."""
        return self.cols if self.order is Order.ROW_MAJOR else self.rows

    @property
    def outer(self) -> int:
        return self.rows if self.order is Order.ROW_MAJOR else self.cols

    @property
    def span(self) -> int:
        """Elements from the first to one past the last element addressed."""
        if self.rows == 0 or self.cols == 0:
            return 0
        return (self.outer - 1) * self.ld + self.inner


@dataclass(frozen=True)
class QuantDesc:
    """Weight-only quantization of an operand (reserved until the quantized kernels land)."""

    type: DataType
    group_size: int
    symmetric: bool = False


class Epilogue(enum.Enum):
    """What happens between the accumulator and D (acc = A @ B, N columns):

    NONE            : D = alpha * acc + beta * C
    BIAS            : D = alpha * acc + bias + beta * C           (bias: N values)
    GATED_SILU      : v = alpha * acc; D[:, j] = silu(v[:, 2j]) * v[:, 2j+1] + beta * C[:, j]
    BIAS_GATED_SILU : the same with v = alpha * acc + bias
    The gated forms take (gate, up) weights interleaved by output column, so D and C
    have N / 2 columns (see gemm_runtime.nn.interleave_gate_up)."""

    NONE = "none"
    BIAS = "bias"
    GATED_SILU = "gated_silu"
    BIAS_GATED_SILU = "bias_gated_silu"

    @property
    def has_bias(self) -> bool:
        return self in (Epilogue.BIAS, Epilogue.BIAS_GATED_SILU)

    @property
    def gated(self) -> bool:
        return self in (Epilogue.GATED_SILU, Epilogue.BIAS_GATED_SILU)

    @property
    def code(self) -> int:
        """The kernel's epilogue flags (templates/include/gemm/epilogue.cuh)."""
        return (1 if self.has_bias else 0) | (2 if self.gated else 0)

    def with_bias(self) -> "Epilogue":
        return Epilogue.BIAS_GATED_SILU if self.gated else Epilogue.BIAS


class DispatchPolicy(enum.Enum):
    DEFAULT = "default"  # exact dispatch-cache hit, else the cost model's choice
    MEASURE = "measure"  # tune now on the caller's data and store the winner
    REUSE = "reuse"  # the entry tuned for the nearest M at or above this M, else the cost model
    APPEND = "append"  # an exact entry if there is one, else measure and store


@dataclass(frozen=True)
class Operation:
    dispatch: DispatchPolicy = DispatchPolicy.DEFAULT
    epilogue: Epilogue = Epilogue.NONE
    quant_a: QuantDesc | None = None
    quant_b: QuantDesc | None = None


@dataclass
class Workspace:
    """Scratch memory for split-K: per-tile semaphores (int32, zero between calls) and
    fp32 partial sums. One workspace serves one stream at a time."""

    barriers: torch.Tensor | None = None
    partials: torch.Tensor | None = None

    @classmethod
    def allocate(cls, device: torch.device, barriers_bytes: int = 1 << 20, partials_bytes: int = 32 << 20) -> "Workspace":
        return cls(
            torch.zeros(barriers_bytes // 4, dtype=torch.int32, device=device),
            torch.empty(partials_bytes // 4, dtype=torch.float32, device=device),
        )

    def sizes(self) -> tuple[int, int]:
        """(barrier bytes, partial bytes) usable for split-K; (0, 0) without a workspace."""
        if self.barriers is None or self.partials is None:
            return 0, 0
        return self.barriers.numel() * self.barriers.element_size(), self.partials.numel() * self.partials.element_size()
