"""Host side of TMA: a 2-D CUtensorMap for a row-major matrix, for SM90 kernels.

A tensor map describes the matrix (address, sizes, row stride) and the box one
``cp.async.bulk.tensor`` copies into shared memory (its rows x cols, the shared-memory
swizzle, what fills out-of-bounds elements). It is built once on the host with
``cuTensorMapEncodeTiled`` and passed to the kernel by value, as a 128-byte
``__grid_constant__`` parameter (``param_bytes``).

The driver's own checks answer only CUDA_ERROR_INVALID_VALUE, so the arguments are
checked here first and a wrong one is named (GemmArgumentError).
"""

from __future__ import annotations

import ctypes
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable

from codegen.vocabulary import DataType
from gemm_runtime.cuda_driver import check
from gemm_runtime.errors import GemmArgumentError

TENSOR_MAP_BYTES = 128  # sizeof(CUtensorMap); the kernel parameter is 64-byte aligned

_ELEMENT_BYTES = {DataType.F16: 2, DataType.BF16: 2, DataType.F32: 4}
_DRIVER_DTYPE = {
    DataType.F16: "CU_TENSOR_MAP_DATA_TYPE_FLOAT16",
    DataType.BF16: "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16",
    DataType.F32: "CU_TENSOR_MAP_DATA_TYPE_FLOAT32",
}
# Swizzle span in bytes -> CUtensorMapSwizzle member. The span bounds the box's row.
_SWIZZLE = {
    0: "CU_TENSOR_MAP_SWIZZLE_NONE",
    32: "CU_TENSOR_MAP_SWIZZLE_32B",
    64: "CU_TENSOR_MAP_SWIZZLE_64B",
    128: "CU_TENSOR_MAP_SWIZZLE_128B",
}
# L2 promotion in bytes -> CUtensorMapL2promotion member: how much L2 fetches per miss.
_L2_PROMOTION = {
    0: "CU_TENSOR_MAP_L2_PROMOTION_NONE",
    64: "CU_TENSOR_MAP_L2_PROMOTION_L2_64B",
    128: "CU_TENSOR_MAP_L2_PROMOTION_L2_128B",
    256: "CU_TENSOR_MAP_L2_PROMOTION_L2_256B",
}
_MAX_BOX = 256  # elements per box dimension
_MAX_DIM = 1 << 32  # elements per tensor dimension
_MAX_STRIDE = 1 << 40  # bytes
_MAX_ADDRESS = (1 << 64) - 1  # a 64-bit pointer
_RECENT_ADDRESSES = 16  # descriptors an Encoder keeps, per geometry


@dataclass(frozen=True)
class TensorMap2D:
    """A row-major ``rows x cols`` matrix at ``address`` (row stride ``ld`` elements) and
    the ``box_rows x box_cols`` tile one TMA copy moves. Out-of-bounds elements of a box
    are filled with zeros (so M, N and K residues need no masking in the kernel)."""

    address: int
    rows: int
    cols: int
    ld: int
    dtype: DataType
    box_rows: int
    box_cols: int
    swizzle: int = 128  # bytes: 0, 32, 64, 128
    l2_promotion: int = 256  # bytes: 0, 64, 128, 256

    def __post_init__(self) -> None:
        validate(self)

    @property
    def element_bytes(self) -> int:
        return _ELEMENT_BYTES[self.dtype]

    @property
    def box_bytes(self) -> int:
        """Bytes one copy delivers (what the kernel's mbarrier expects), zero fill included."""
        return self.box_rows * self.box_cols * self.element_bytes

    def encode_args(self) -> dict[str, Any]:
        """cuTensorMapEncodeTiled's arguments as plain values (driver enums by member name).
        Dimension 0 is the contiguous one (cols); strides are in bytes, one per dimension
        above the first."""
        return {
            "tensorDataType": _DRIVER_DTYPE[self.dtype],
            "tensorRank": 2,
            "globalAddress": self.address,
            "globalDim": [self.cols, self.rows],
            "globalStrides": [self.ld * self.element_bytes],
            "boxDim": [self.box_cols, self.box_rows],
            "elementStrides": [1, 1],
            "interleave": "CU_TENSOR_MAP_INTERLEAVE_NONE",
            "swizzle": _SWIZZLE[self.swizzle],
            "l2Promotion": _L2_PROMOTION[self.l2_promotion],
            # NOTE: FLOAT_OOB_FILL_NONE fills zeros; the other choice fills NaN.
            "oobFill": "CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE",
        }


def _positive(argument: str, value: object, limit: int) -> None:
    if type(value) is not int or not 0 < value <= limit:
        raise GemmArgumentError(argument, value, f"an int in 1..{limit}")


def _address(address: object) -> None:
    if type(address) is not int or not 0 < address <= _MAX_ADDRESS or address % 16:
        raise GemmArgumentError("address", address, "a non-null device address below 2^64, aligned to 16 bytes")


def validate(spec: TensorMap2D) -> None:
    """The driver's requirements for a tiled 2-D map, each raising GemmArgumentError
    that names the argument."""
    if not isinstance(spec.dtype, DataType) or spec.dtype not in _ELEMENT_BYTES:
        raise GemmArgumentError("dtype", spec.dtype, ", ".join(d.value for d in _ELEMENT_BYTES))
    if type(spec.swizzle) is not int or spec.swizzle not in _SWIZZLE:
        raise GemmArgumentError("swizzle", spec.swizzle, ", ".join(map(str, _SWIZZLE)) + " (bytes)")
    if type(spec.l2_promotion) is not int or spec.l2_promotion not in _L2_PROMOTION:
        raise GemmArgumentError("l2_promotion", spec.l2_promotion, ", ".join(map(str, _L2_PROMOTION)) + " (bytes)")
    _address(spec.address)
    _positive("rows", spec.rows, _MAX_DIM)
    _positive("cols", spec.cols, _MAX_DIM)
    _positive("box_rows", spec.box_rows, _MAX_BOX)
    _positive("box_cols", spec.box_cols, _MAX_BOX)
    elem = spec.element_bytes
    if type(spec.ld) is not int or spec.ld < spec.cols:
        raise GemmArgumentError("ld", spec.ld, f"an int >= cols ({spec.cols})")
    stride = spec.ld * elem
    if stride % 16 or stride >= _MAX_STRIDE:
        raise GemmArgumentError(
            "ld", spec.ld, f"a row stride (ld * {elem} bytes) that is a multiple of 16 bytes and below 2^40"
        )
    row_bytes = spec.box_cols * elem
    if row_bytes % 16:
        raise GemmArgumentError("box_cols", spec.box_cols, f"box_cols * {elem} bytes a multiple of 16")
    if spec.swizzle and row_bytes > spec.swizzle:
        # NOTE: a swizzled box row may not exceed the swizzle span (64 16-bit elements
        # for 128B), which is why a 128B-swizzled K tile is 64 wide.
        raise GemmArgumentError(
            "box_cols", spec.box_cols, f"box_cols * {elem} bytes <= the swizzle span ({spec.swizzle} bytes)"
        )


def _driver() -> Any:
    from cuda.bindings import driver

    return driver


def encode(spec: TensorMap2D, encode_tiled: Callable[..., tuple] | None = None) -> Any:
    """The CUtensorMap for ``spec`` (a cuda.bindings object). ``encode_tiled`` stands in
    for ``cuTensorMapEncodeTiled`` (tests); it gets the driver's enum members."""
    return Encoder(spec, encode_tiled).tensor_map(spec.address)


def tensor_map_2d(
    address: int,
    rows: int,
    cols: int,
    ld: int,
    dtype: DataType | str,
    box_rows: int,
    box_cols: int,
    *,
    swizzle: int = 128,
    l2_promotion: int = 256,
) -> Any:
    """Validate and encode in one call; ``dtype`` may be a DataType or its short name."""
    if isinstance(dtype, str):
        try:
            dtype = DataType(dtype)
        except ValueError:
            raise GemmArgumentError("dtype", dtype, ", ".join(d.value for d in _ELEMENT_BYTES)) from None
    return encode(TensorMap2D(address, rows, cols, ld, dtype, box_rows, box_cols, swizzle, l2_promotion))


def param_bytes(tmap: Any) -> bytes:
    """The 128 bytes of a CUtensorMap, as the kernel parameter takes them by value."""
    return ctypes.string_at(int(tmap.getPtr()), TENSOR_MAP_BYTES)


class Encoder:
    """``cuTensorMapEncodeTiled`` for one matrix geometry at changing addresses: the
    arguments are converted once, so a launch whose operand moved re-encodes its
    descriptor for the cost of the driver call alone. ``encode_tiled`` stands in for
    the driver call (tests); it gets the driver's enum members. Not thread-safe: a
    replay plan calls its encoders under its own lock (fast_path.FastPlan)."""

    def __init__(self, spec: TensorMap2D, encode_tiled: Callable[..., tuple] | None = None) -> None:
        drv = _driver()
        args = spec.encode_args()
        self._call = encode_tiled or drv.cuTensorMapEncodeTiled
        u32, u64 = (int, int) if encode_tiled else (drv.cuuint32_t, drv.cuuint64_t)
        self._head = (getattr(drv.CUtensorMapDataType, args["tensorDataType"]), u32(args["tensorRank"]))
        self._tail = (
            [u64(v) for v in args["globalDim"]],
            [u64(v) for v in args["globalStrides"]],
            [u32(v) for v in args["boxDim"]],
            [u32(v) for v in args["elementStrides"]],
            getattr(drv.CUtensorMapInterleave, args["interleave"]),
            getattr(drv.CUtensorMapSwizzle, args["swizzle"]),
            getattr(drv.CUtensorMapL2promotion, args["l2Promotion"]),
            getattr(drv.CUtensorMapFloatOOBfill, args["oobFill"]),
        )
        self.spec = spec
        self._recent: OrderedDict[int, bytes] = OrderedDict()

    def tensor_map(self, address: int) -> Any:
        """The CUtensorMap (a cuda.bindings object) for the matrix at ``address``."""
        _address(address)
        return check(self._call(*self._head, address, *self._tail), "cuTensorMapEncodeTiled")

    def __call__(self, address: int) -> bytes:
        """The 128 descriptor bytes for the matrix at ``address``.

        NOTE: remembered for the last few addresses (a descriptor depends on nothing
        else here): torch's caching allocator hands a model's activations the same few
        addresses step after step, so a replay rarely pays for the driver call."""
        # NOTE: only an int may hit: 4096.0 == 4096 would get its descriptor unchecked.
        known = self._recent.get(address) if type(address) is int else None
        if known is not None:
            self._recent.move_to_end(address)
            return known
        encoded = param_bytes(self.tensor_map(address))
        self._recent[address] = encoded
        if len(self._recent) > _RECENT_ADDRESSES:
            self._recent.popitem(last=False)
        return encoded
