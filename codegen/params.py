"""The kernel parameter struct, declared once.

The C++ struct (rendered into every generated kernel) and the Python packing
(``gemm_runtime.launch``) both come from ``PARAM_FIELDS``; a generated
``static_assert`` on ``sizeof`` catches any disagreement at compile time.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass


@dataclass(frozen=True)
class ParamField:
    name: str
    cpp: str  # C++ type
    fmt: str  # struct module format character

    @property
    def size(self) -> int:
        return struct.calcsize(self.fmt)


_PTR_IN = ("const void*", "Q")
_PTR_OUT = ("void*", "Q")
_I64 = ("long long", "q")
_I32 = ("int", "i")
_F32 = ("float", "f")

# NOTE: ordered by size, largest first, so natural C++ alignment adds no padding
# and the struct module's "=" layout (no padding) matches byte for byte.
PARAM_FIELDS: tuple[ParamField, ...] = tuple(
    ParamField(name, cpp, fmt)
    for name, (cpp, fmt) in [
        ("A", _PTR_IN),
        ("B", _PTR_IN),
        ("C", _PTR_IN),
        ("D", _PTR_OUT),
        ("U", _PTR_IN),  # grouped kernels: fp32 scales of D's rows (routing weights), or null
        ("V", _PTR_IN),  # reserved: group-wise scales / zeros of B
        ("semaphores", ("int*", "Q")),  # split-K: one per output tile, zero between calls
        ("partials", ("float*", "Q")),  # split-K: fp32 tile accumulators
        ("bias", _PTR_IN),  # per-column bias of the accumulator (N values, D's type; grouped: [E, N])
        ("offsets", ("const int*", "Q")),  # grouped: E + 1 row starts of the experts' row groups
        ("gather", ("const int*", "Q")),  # grouped: A's row of each grouped row (A unsorted), or null
        ("lda", _I64),
        ("ldb", _I64),
        ("ldc", _I64),
        ("ldd", _I64),
        ("ldu", _I64),
        ("ldv", _I64),
        ("M", _I32),
        ("N", _I32),
        ("K", _I32),
        ("tiles_m", _I32),  # output tiles along M and N
        ("tiles_n", _I32),
        ("splits", _I32),  # serial split-K slices (gridDim.z)
        ("k_tiles_per_split", _I32),
        ("swizzle", _I32),  # log2 of the CTA rasterization group along N
        ("epilogue", _I32),  # bit 0: add bias; bit 1: gated SiLU over (gate, up) column pairs; bit 2: TMA store
        ("groups", _I32),  # quantized B: rows of scales (and of zeros) in V
        ("group_shift", _I32),  # quantized B: the group of K index k is k >> group_shift
        ("alpha", _F32),
        ("beta", _F32),
        ("experts", _I32),  # grouped: E (0 for the other kernels)
    ]
)

PARAM_STRUCT = struct.Struct("=" + "".join(f.fmt for f in PARAM_FIELDS))
PARAM_NAMES = tuple(f.name for f in PARAM_FIELDS)
# Byte offset of each field in the packed struct ("=" layout: no padding anywhere).
PARAM_OFFSETS = {f.name: sum(g.size for g in PARAM_FIELDS[:i]) for i, f in enumerate(PARAM_FIELDS)}


def cpp_struct(name: str = "GemmParams") -> str:
    """The C++ declaration of the parameter struct, with a size check."""
    lines = [f"struct {name} {{"]
    lines += [f"  {f.cpp} {f.name};" for f in PARAM_FIELDS]
    lines.append("};")
    lines.append(
        f'static_assert(sizeof({name}) == {PARAM_STRUCT.size}, "parameter struct differs from codegen/params.py");'
    )
    return "\n".join(lines)


def block_bytes(offset: int) -> int:
    """Size of a kernel parameter block holding ``offset`` bytes of TMA descriptors and
    then the struct: C++ pads it to the descriptors' 64-byte alignment."""
    size = offset + PARAM_STRUCT.size
    return size if offset == 0 else -(-size // 64) * 64
