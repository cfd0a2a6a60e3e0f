"""The hot path of ``Gemm.matmul``: once a call of a given signature (shapes, strides,
dtypes, devices, pointer alignment, beta's zero-ness, policy, stream) has been validated
and dispatched, the next call with the same signature reuses the packed parameter
struct and only writes the new pointers and scalars into it.

A signature holds everything the validation and the dispatch decision depend on, so
a reused plan is exactly what the slow path would compute; plans are dropped when
the dispatch cache changes (its version).

NOTE: the signature is taken from the arguments as the caller gave them, before any
of matmul's own processing (reshapes, the output's allocation, layouts), so a replay
costs about what torch.matmul's own host path does (docs/PERFORMANCE.md)."""

from __future__ import annotations

import ctypes
import struct
import threading
from typing import NamedTuple

import torch

from codegen.params import PARAM_NAMES, PARAM_OFFSETS
from gemm_runtime.errors import CudaError, GemmArgumentError

# NOTE: A, B, C, D, U, V are the first six fields (U is always null: the runtime takes
# no scales of A) and alpha, beta two adjacent ones, so a call rewrites what changes
# with three pack_into calls.
_OPERANDS = struct.Struct("=QQQQQQ")
_SCALARS = struct.Struct("=ff")
assert PARAM_NAMES[:6] == ("A", "B", "C", "D", "U", "V")
assert PARAM_OFFSETS["beta"] == PARAM_OFFSETS["alpha"] + 4
_ALPHA = PARAM_OFFSETS["alpha"]
_POINTER = struct.Struct("=Q")
_BIAS = PARAM_OFFSETS["bias"]
_MAX_PLANS = 4096
# NOTE: the raw handle of torch's current stream without building a torch.cuda.Stream
# (a third of a replay's host time otherwise); what torch.cuda.current_stream wraps.
# CPU builds of torch lack it (and run no GEMM).
current_stream_handle = getattr(torch._C, "_cuda_getCurrentRawStream", None) or (
    lambda index: torch.cuda.current_stream(index).cuda_stream
)


def tensor_part(t: torch.Tensor) -> tuple:
    """What validation reads of one tensor: geometry, type, device, alignment."""
    return (t.shape, t.stride(), t.dtype, t.get_device(), t.data_ptr() & 15)


def packed_signature(b: torch.Tensor, v: torch.Tensor, meta: tuple) -> tuple:
    """The ``b`` part of a signature for a packed weight's tensors and its (bits,
    group_size, n, k, symmetric)."""
    return (tensor_part(b), tensor_part(v), meta)


def signature(a, b_part: tuple, out, c, bias, read_c: bool, extra: tuple) -> tuple:
    """Everything about a matmul call that validation and dispatch look at, except the
    pointer values themselves (only their alignment), from the arguments as given:
    it is computed before any of them is checked, so it must be cheap. AttributeError
    where an argument is not a tensor (the validating path then says what it is).
    ``b_part``: tensor_part of a dense B, or packed_signature."""
    c_part = None
    if read_c and c is not None:
        c_part = (*tensor_part(c), out is not None and c.data_ptr() == out.data_ptr())
    return (
        tensor_part(a), b_part, None if out is None else tensor_part(out),
        None if bias is None else (bias.shape, bias.stride(), bias.dtype, bias.get_device()),
        read_c, c_part, extra,
    )  # fmt: skip


class KeptLaunch(NamedTuple):
    """One kernel's launch whose parameter block is kept between calls and rewritten in
    place: what a matmul and a grouped replay share."""

    launch: object  # cuda.bindings' cuLaunchKernel
    function: object  # the CUfunction
    grid: tuple[int, int, int]
    threads: int
    smem: int
    stream: object  # the CUstream of the launch
    params: object  # ctypes buffer holding the parameter block
    args: int  # address of the one-entry void* array pointing at ``params``
    lock: object  # guards ``params`` and ``last`` from the write to the launch (which copies them)
    last: list  # [the values ``params`` holds now]: a call with the same ones rewrites nothing
    keep: object  # the args array, alive as long as ``args`` is used

    @classmethod
    def build(cls, function, grid, threads: int, smem: int, stream: int, block: bytes) -> "KeptLaunch":
        """``function``: the kernel's LoadedFunction; ``stream``: a raw handle; ``block``:
        the validated launch's parameter block."""
        params = ctypes.create_string_buffer(block, len(block))
        args = (ctypes.c_void_p * 1)(ctypes.addressof(params))
        launch, handle, stream_obj = function.launcher(stream)
        return cls(launch, handle, grid, threads, smem, stream_obj, params, ctypes.addressof(args), threading.Lock(),
                   [None], args)  # fmt: skip

    def __call__(self, values: tuple, write, plan) -> None:
        """Launch with the block holding ``values``; where they differ from the last
        call's, ``write(plan, params, last values or None, values)`` rewrites it first.
        NOTE: the plan's unbound writer and the plan, not a bound method, which every
        replay would make anew (this is a replay's hot path)."""
        gx, gy, gz = self.grid
        with self.lock:
            last = self.last[0]
            if last != values:
                write(plan, self.params, last, values)
                self.last[0] = values
            (err,) = self.launch(self.function, gx, gy, gz, self.threads, 1, 1, self.smem, self.stream, self.args, 0)
        if err:
            raise CudaError("cuLaunchKernel", err)


class FastPlan(NamedTuple):
    kernel: KeptLaunch  # the parameter block holds (a, b, c, d, v, bias, alpha, beta)
    a_bytes: int  # spans of A, B and D, for the aliasing check
    b_bytes: int
    d_bytes: int
    version: int
    keep: tuple  # what the parameters point at that must stay alive (workspace)
    rows: int  # A as (rows, K): a's leading dimensions flattened
    k: int
    out_shape: tuple[int, ...]  # of an output matmul allocates
    out_dtype: torch.dtype
    read_c: bool
    offset: int = 0  # where GemmParams starts in the parameter block (after any tensor maps)
    maps: object = None  # launch.TensorMaps: the block's descriptors for (A, B, D, V) addresses, or None
    # A whole-weight plan's unpack.UnpackStep: B and V go through it into a dense buffer
    # first, and the kernel reads the buffer (gemm_runtime/whole_weight.py); else None.
    unpack: object = None

    @classmethod
    def build(cls, function, grid, threads: int, smem: int, stream: int, template: bytes, spans, version: int,
              keep: tuple, shape: tuple, offset: int = 0, maps=None, unpack=None) -> "FastPlan":  # fmt: skip
        """``function``: the kernel's LoadedFunction; ``stream``: a raw handle;
        ``template``: the parameter block, GemmParams at ``offset``."""
        kernel = KeptLaunch.build(function, grid, threads, smem, stream, template)
        return cls(kernel, *spans, version, keep, *shape, offset, maps or None, unpack)

    def replay(self, a, b_ptr: int, v_ptr: int, out, c, bias, alpha: float, beta: float) -> torch.Tensor:
        """``Gemm.matmul`` for arguments of this plan's signature (B and V by pointer)."""
        if a.dim() != 2:
            a = a.reshape(self.rows, self.k)  # a copy where a's strides allow no view, as the first call made
        if out is None:
            out = a.new_empty(self.out_shape, dtype=self.out_dtype)  # on a's device, as the signature says
        c_ptr = c.data_ptr() if self.read_c else 0
        buffer = None
        if self.unpack is not None:
            d = out.data_ptr()
            if d < b_ptr + self.b_bytes and b_ptr < d + self.d_bytes:  # run() sees only the buffer
                raise GemmArgumentError("D", "memory overlapping A or B", "an output that does not alias its inputs")
            buffer = self.unpack(b_ptr, v_ptr)  # queued on the plan's stream, before the kernel
            b_ptr, v_ptr = buffer.data_ptr(), 0
        self.run(a.data_ptr(), b_ptr, c_ptr, out.data_ptr(), alpha, beta if self.read_c else 0.0,
                 0 if bias is None else bias.data_ptr(), v_ptr)  # fmt: skip
        del buffer  # the caching allocator's again, for the stream's later work
        return out

    def run(self, a: int, b: int, c: int, d: int, alpha: float, beta: float, bias: int, v: int = 0) -> None:
        if (d < a + self.a_bytes and a < d + self.d_bytes) or (d < b + self.b_bytes and b < d + self.d_bytes):
            raise GemmArgumentError("D", "memory overlapping A or B", "an output that does not alias its inputs")
        self.kernel((a, b, c, d, v, bias, alpha, beta), FastPlan._write, self)

    def _write(self, buf, last: tuple | None, values: tuple) -> None:
        a, b, c, d, v, bias, alpha, beta = values
        at = self.offset
        if self.maps is not None and (last is None or last[0] != a or last[1] != b or last[3] != d or last[4] != v):
            # NOTE: a descriptor holds its operand's address: one for the last call's A,
            # B, D or V would read or write the old tensor.
            ctypes.memmove(buf, self.maps(a, b, d, v), at)
        _OPERANDS.pack_into(buf, at, a, b, c, d, 0, v)
        _SCALARS.pack_into(buf, at + _ALPHA, alpha, beta)
        _POINTER.pack_into(buf, at + _BIAS, bias)


class FastPlans:
    """Signature -> FastPlan, bounded, thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._plans: dict[tuple, FastPlan] = {}

    def get(self, sig: tuple, version: int) -> FastPlan | None:
        try:
            plan = self._plans.get(sig)
        except TypeError:  # an unhashable argument (a list as kernel=...): the slow path says what is wrong
            return None
        return plan if plan is not None and plan.version == version else None

    def put(self, sig: tuple, plan: FastPlan) -> None:
        try:
            hash(sig)
        except TypeError:
            return
        with self._lock:
            if len(self._plans) >= _MAX_PLANS:
                self._plans.clear()
            self._plans[sig] = plan
