"""The hot path of ``Gemm.matmul``: once a call of a given signature (shapes, strides,
dtypes, devices, pointer alignment, beta's zero-ness, policy, stream) has been validated
and dispatched, the next call with the same signature reuses the packed parameter
struct and only writes the new pointers and scalars into it.

A signature holds everything the validation and the dispatch decision depend on, so
a reused plan is exactly what the slow path would compute; plans are dropped when
the dispatch cache changes (its version)."""

from __future__ import annotations

import ctypes
import struct
import threading
from typing import NamedTuple

import torch

from codegen.params import PARAM_NAMES, PARAM_OFFSETS
from gemm_runtime.errors import GemmArgumentError

# NOTE: A, B, C, D are the first four fields and alpha, beta two adjacent ones, so a
# call rewrites them with two pack_into calls.
_POINTERS = struct.Struct("=QQQQ")
_SCALARS = struct.Struct("=ff")
assert PARAM_NAMES[:4] == ("A", "B", "C", "D")
assert PARAM_OFFSETS["beta"] == PARAM_OFFSETS["alpha"] + 4
_ALPHA = PARAM_OFFSETS["alpha"]
_POINTER = struct.Struct("=Q")
_BIAS = PARAM_OFFSETS["bias"]
_V = PARAM_OFFSETS["V"]
_MAX_PLANS = 4096


def signature(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, c: torch.Tensor | None, read_c: bool, extra: tuple):
    """Everything about a matmul call that validation and dispatch look at, except the
    pointer values themselves (only their alignment)."""
    sig = (
        a.shape, a.stride(), a.dtype, a.device, a.data_ptr() & 15,
        b.shape, b.stride(), b.dtype, b.device, b.data_ptr() & 15,
        out.shape, out.stride(), out.dtype, out.device, out.data_ptr() & 15,
        read_c, extra,
    )
    if read_c and c is not None:
        sig += (c.shape, c.stride(), c.dtype, c.device, c.data_ptr() & 15, c.data_ptr() == out.data_ptr())
    return sig


class FastPlan(NamedTuple):
    launch: object  # LoadedFunction.launch
    grid: tuple[int, int, int]
    threads: int
    smem: int
    stream: int
    template: bytes
    a_bytes: int  # spans of A, B and D, for the aliasing check
    b_bytes: int
    d_bytes: int
    version: int
    keep: tuple  # the workspace tensors the template points at

    def run(self, a: int, b: int, c: int, d: int, alpha: float, beta: float, bias: int, v: int = 0) -> None:
        if (d < a + self.a_bytes and a < d + self.d_bytes) or (d < b + self.b_bytes and b < d + self.d_bytes):
            raise GemmArgumentError("D", "memory overlapping A or B", "an output that does not alias its inputs")
        buf = bytearray(self.template)
        _POINTERS.pack_into(buf, 0, a, b, c, d)
        _SCALARS.pack_into(buf, _ALPHA, alpha, beta)
        _POINTER.pack_into(buf, _BIAS, bias)
        _POINTER.pack_into(buf, _V, v)
        packed = (ctypes.c_char * len(buf)).from_buffer(buf)
        args = (ctypes.c_void_p * 1)(ctypes.addressof(packed))
        self.launch(self.grid, self.threads, self.smem, self.stream, ctypes.addressof(args))


class FastPlans:
    """Signature -> FastPlan, bounded, thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._plans: dict[tuple, FastPlan] = {}

    def get(self, sig: tuple, version: int) -> FastPlan | None:
        plan = self._plans.get(sig)
        return plan if plan is not None and plan.version == version else None

    def put(self, sig: tuple, plan: FastPlan) -> None:
        with self._lock:
            if len(self._plans) >= _MAX_PLANS:
                self._plans.clear()
            self._plans[sig] = plan
