"""A packed quantized weight back to a dense [N, K] matrix of its activations' type, on
its GPU, by one kernel (templates/include/gemm/unpack.cuh): every weight dequantized
once, with the quantized kernels' own arithmetic, so the values are bit for bit
``packed.unpack().dequantize(packed.dtype)``.

What it is for: the whole-weight plans of prefill (gemm_runtime/whole_weight.py), a
dense kernel run on the unpacked weight where M is large enough that ~2.5 bytes of
memory traffic per weight cost less than dequantizing it once per CTA row of tiles; and
reading a packed checkpoint's weights back on the GPU (LoRA merges, checks) without
the torch path's many passes.

The kernel is compiled on first use with NVRTC for the weight's device and kept in the
build directory's compile cache.
"""

from __future__ import annotations

import ctypes
import functools
import struct
import threading
from pathlib import Path

import torch

from gemm_runtime.errors import CudaError, GemmArgumentError
from gemm_runtime.packed_weight import PackedWeight

THREADS = 256
# (activation dtype, bits) -> the kernel's entry point in SOURCE.
ENTRIES = {
    (torch.float16, 4): "gemm_unpack_f16_u4",
    (torch.float16, 8): "gemm_unpack_f16_u8",
    (torch.bfloat16, 4): "gemm_unpack_bf16_u4",
    (torch.bfloat16, 8): "gemm_unpack_bf16_u8",
}
_TYPES = {torch.float16: "gemm::Half", torch.bfloat16: "gemm::BFloat16"}
BF16_MIN_ARCH = 80  # bf16x2 arithmetic (and the bf16 MMA its kernels feed) needs sm_80
PACKED_MIN_ARCH = 75  # no quantized kernels before Turing (context.arch_limit), so no unpack


def entries(arch: int) -> dict[tuple[torch.dtype, int], str]:
    """The entry points ``sm_{arch}`` has: no bf16 ones before sm_80 (they do not compile
    there), none before sm_75 (nothing there takes packed weights), so that a Gemm on a
    Turing or Volta GPU, which loads these when it is made, can be made."""
    if arch < PACKED_MIN_ARCH:
        return {}
    return {key: name for key, name in ENTRIES.items() if key[0] is torch.float16 or arch >= BF16_MIN_ARCH}


def source(arch: int) -> str:
    """The kernels' source for ``sm_{arch}``: one entry point per entries(arch)."""
    return '#include "gemm/unpack.cuh"\n' + "".join(
        f"extern \"C\" __global__ void __launch_bounds__({THREADS}) {name}(const gemm::UnpackParams p) "
        f"{{ gemm::unpack_weight<{_TYPES[dtype]}, {bits}>(p); }}\n"
        for (dtype, bits), name in entries(arch).items()
    )


SOURCE = source(BF16_MIN_ARCH)  # every entry point
# UnpackParams: B, V, D; ldb, ldv, ldd; N, K, groups, group_shift.
_PARAMS = struct.Struct("<QQQqqqiiii")
_CHUNK = 8  # kUnpackChunk: k32 blocks a warp converts per trip



def row_pitch(k: int) -> int:
    """Elements between the rows of a buffer the unpack makes: K rounded up to 8, so that
    rows are 16-byte multiples (its whole-row stores, the dense kernels' widest copies)."""
    return -(-k // 8) * 8


_loaded: dict[tuple[int, str], object] = {}  # (device index, entry) -> LoadedFunction
_lock = threading.Lock()


def _function(device: torch.device, entry: str, cache_dir: Path | None):
    from gemm_runtime.build import INCLUDE_DIR
    from gemm_runtime.compiler import compile_cubin
    from gemm_runtime.cuda_driver import LoadedFunction
    from gemm_runtime.settings import settings

    key = (device.index, entry)
    with _lock:
        if key not in _loaded:
            arch = _arch(device)
            cache = cache_dir if cache_dir is not None else settings().build_dir / ".cache"
            compile_one = functools.partial(compile_cubin, source(arch), name="gemm_unpack", arch=arch,
                                            include_dirs=[INCLUDE_DIR])  # fmt: skip
            try:
                result = compile_one(cache_dir=cache)
            except OSError:  # a build directory this process may not write: compile, keep nothing
                result = compile_one(cache_dir=None)
            with torch.cuda.device(device):
                _loaded[key] = LoadedFunction(result.cubin, entry, 0, THREADS)
        return _loaded[key]


def _arch(device: torch.device) -> int:
    major, minor = torch.cuda.get_device_capability(device)
    return 10 * major + minor


def preload(device: torch.device, cache_dir: Path | None = None) -> None:
    """Load the unpack kernels on ``device`` now (Gemm does when it is made), so that a
    first whole-weight plan inside a CUDA-graph capture compiles and loads no module."""
    for entry in entries(_arch(device)).values():
        _function(device, entry, cache_dir)


def unpack_weight(packed: PackedWeight, *, out: torch.Tensor | None = None,
                  cache_dir: Path | None = None) -> torch.Tensor:  # fmt: skip
    """``packed`` dequantized into a dense [N, K] tensor of ``packed.dtype`` on its
    device (``out``: such a tensor to write, its rows 4-byte aligned), queued on the
    current stream."""
    if not isinstance(packed, PackedWeight):
        raise GemmArgumentError("packed", type(packed).__name__, "a gemm_runtime.packed_weight.PackedWeight")
    if not packed.b.is_cuda:
        raise GemmArgumentError("packed", f"on {packed.b.device}", "a weight on a CUDA device")
    entry = ENTRIES.get((packed.dtype, packed.bits))
    if entry is None:
        raise GemmArgumentError("packed", f"{packed.dtype}, {packed.bits}-bit", "fp16 or bf16 scales, 4 or 8 bits")
    arch = _arch(packed.b.device)
    if (packed.dtype, packed.bits) not in entries(arch):
        raise GemmArgumentError("packed", f"{packed.dtype} scales on sm_{arch}",
                                f"a weight on sm_{PACKED_MIN_ARCH} or later, with bf16 scales on sm_{BF16_MIN_ARCH} "
                                "or later")  # fmt: skip
    n, k = packed.n, packed.k
    if out is None:
        out = torch.empty(n, row_pitch(k), dtype=packed.dtype, device=packed.b.device)[:, :k]
    elif (out.shape != (n, k) or out.dtype != packed.dtype or out.device != packed.b.device or out.stride(1) != 1
          or out.stride(0) % 2 or out.data_ptr() % 4):  # fmt: skip
        raise GemmArgumentError("out", f"{tuple(out.shape)} {out.dtype} on {out.device}, strides {out.stride()}",
                                f"({n}, {k}) {packed.dtype} on {packed.b.device}, rows contiguous, "
                                "an even row stride and a 4-byte aligned start")  # fmt: skip
    if n == 0 or k == 0:
        return out
    device = packed.b.device
    with torch.cuda.device(device):
        step = UnpackStep(device, packed.dtype, packed.bits, packed.b.stride(0), packed.v.stride(0), n, k,
                          packed.groups, packed.group_shift, torch.cuda.current_stream(device).cuda_stream,
                          ldd=out.stride(0), cache_dir=cache_dir)  # fmt: skip
        step.launch(packed.b.data_ptr(), packed.v.data_ptr(), out.data_ptr())
    return out


def _grid(fn, device: torch.device, n: int, k: int) -> int:
    blocks_k = -(-k // 32)
    chunks = -(-n // 8) * -(-blocks_k // _CHUNK)  # a warp's share per trip (unpack.cuh)
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    # NOTE: a grid-stride loop over exactly the CTAs the device holds at once: a second,
    # partial wave would leave most SMs idle at the end.
    return max(1, min(-(-chunks // (THREADS // 32)), sms * fn.ctas_per_sm))


_POINTERS = struct.Struct("<QQQ")  # UnpackParams' B, V, D


class UnpackStep:
    """The unpack kernel prepared once for a weight's geometry, an output row pitch and a
    stream. ``launch(b, v, d)`` queues the unpack of the weight at ``b`` (packed) and ``v``
    (scales, zeros) into ``d`` (unpack_weight's output); a call allocates the dense buffer
    of a whole-weight plan (gemm_runtime/whole_weight.py) first, a temporary of the stream
    (torch's caching allocator gives the same block back to the next call, and inside a
    CUDA-graph capture takes it from the graph's pool), and unpacks into it: replays of
    Gemm.matmul's fast path call it before the dense kernel's launch. ``ldb``: bytes
    between the packed rows of 8 columns; ``ldv``, ``ldd``: elements between rows of the
    scales and of D (even; a multiple of 8 with a 16-byte aligned D takes whole-row
    stores; default: row_pitch(k), the buffer's)."""

    def __init__(self, device: torch.device, dtype: torch.dtype, bits: int, ldb: int, ldv: int, n: int, k: int,
                 groups: int, group_shift: int, stream: int, *, ldd: int | None = None,
                 cache_dir: Path | None = None) -> None:  # fmt: skip
        fn = _function(device, ENTRIES[(dtype, bits)], cache_dir)
        self.device, self.dtype, self.stream = device, dtype, stream
        self.shape = (n, row_pitch(k))
        self.grid = _grid(fn, device, n, k)
        ldd = self.shape[1] if ldd is None else ldd
        self.params = ctypes.create_string_buffer(_PARAMS.pack(0, 0, 0, ldb, ldv, ldd, n, k, groups, group_shift),
                                                  _PARAMS.size)  # fmt: skip
        self.args = (ctypes.c_void_p * 1)(ctypes.addressof(self.params))
        self.function_launch, self.function, self.cu_stream = fn.launcher(stream)
        self.external = torch.cuda.ExternalStream(stream, device=device)
        self.lock = threading.Lock()

    def launch(self, b: int, v: int, d: int) -> None:
        with self.lock:  # the launch copies the parameters
            _POINTERS.pack_into(self.params, 0, b, v, d)
            (err,) = self.function_launch(self.function, self.grid, 1, 1, THREADS, 1, 1, 0, self.cu_stream,
                                          ctypes.addressof(self.args), 0)  # fmt: skip
        if int(err) != 0:
            raise CudaError("cuLaunchKernel", err)

    def __call__(self, b: int, v: int) -> torch.Tensor:
        if torch.cuda.current_stream(self.device).cuda_stream == self.stream:
            buffer = torch.empty(self.shape, dtype=self.dtype, device=self.device)
        else:
            with torch.cuda.stream(self.external):
                buffer = torch.empty(self.shape, dtype=self.dtype, device=self.device)
        self.launch(b, v, buffer.data_ptr())
        return buffer
