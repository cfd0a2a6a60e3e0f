"""A packed quantized weight back to a dense [N, K] matrix of its activations' type, on
its GPU, by one kernel (templates/include/gemm/unpack.cuh): every weight dequantized
once, with the quantized kernels' own arithmetic, so the values are bit for bit
``packed.unpack().dequantize(packed.dtype)``.

What it is for: the whole-weight path of prefill (issue 17), a dense kernel run on
the unpacked weight where M is large enough that ~2.5 bytes of memory traffic per
weight cost less than dequantizing it once per CTA row of tiles; and reading a packed
checkpoint's weights back on the GPU (LoRA merges, checks) without the torch path's
many passes.

NOTE: experimental (eighteenth session): written and compiled on the CPU, its GPU test
(tests/gpu/test_unpack.py) and timing (bench/experiments/sm80_unpack_then_dense.py) not
yet run. The kernel is compiled on first use with NVRTC for the weight's device and kept
in the build directory's compile cache.
"""

from __future__ import annotations

import ctypes
import struct
import threading
from pathlib import Path

import torch

from gemm_runtime.errors import GemmArgumentError
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
SOURCE = '#include "gemm/unpack.cuh"\n' + "".join(
    f"extern \"C\" __global__ void __launch_bounds__({THREADS}) {name}(const gemm::UnpackParams p) "
    f"{{ gemm::unpack_weight<{_TYPES[dtype]}, {bits}>(p); }}\n"
    for (dtype, bits), name in ENTRIES.items()
)
# UnpackParams: B, V, D; ldb, ldv, ldd; N, K, groups, group_shift.
_PARAMS = struct.Struct("<QQQqqqiiii")
_CHUNK = 4  # kUnpackChunk: k32 blocks a warp converts per trip
_CTAS_PER_SM = 8  # a grid-stride loop: enough warps in flight to cover DRAM's latency

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
            major, minor = torch.cuda.get_device_capability(device)
            cache = cache_dir if cache_dir is not None else settings().build_dir / ".cache"
            result = compile_cubin(SOURCE, name="gemm_unpack", arch=10 * major + minor, include_dirs=[INCLUDE_DIR],
                                   cache_dir=cache)  # fmt: skip
            with torch.cuda.device(device):
                _loaded[key] = LoadedFunction(result.cubin, entry, 0, THREADS)
        return _loaded[key]


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
    n, k = packed.n, packed.k
    if out is None:
        # Rows padded to 8 elements: 16-byte aligned, as the dense kernels' B wants.
        out = torch.empty(n, -(-k // 8) * 8, dtype=packed.dtype, device=packed.b.device)[:, :k]
    elif (out.shape != (n, k) or out.dtype != packed.dtype or out.device != packed.b.device or out.stride(1) != 1
          or out.stride(0) % 2 or out.data_ptr() % 4):  # fmt: skip
        raise GemmArgumentError("out", f"{tuple(out.shape)} {out.dtype} on {out.device}, strides {out.stride()}",
                                f"({n}, {k}) {packed.dtype} on {packed.b.device}, rows contiguous, "
                                "an even row stride and a 4-byte aligned start")  # fmt: skip
    if n == 0 or k == 0:
        return out
    device = packed.b.device
    fn = _function(device, entry, cache_dir)
    params = _PARAMS.pack(packed.b.data_ptr(), packed.v.data_ptr(), out.data_ptr(), packed.b.stride(0),
                          packed.v.stride(0), out.stride(0), n, k, packed.groups, packed.group_shift)  # fmt: skip
    blocks_k = -(-k // 32)
    chunks = -(-n // 8) * -(-blocks_k // _CHUNK)  # a warp's share per trip (unpack.cuh)
    warps_per_cta = THREADS // 32
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    grid = max(1, min(-(-chunks // warps_per_cta), sms * _CTAS_PER_SM))
    buf = ctypes.create_string_buffer(params, len(params))
    args = (ctypes.c_void_p * 1)(ctypes.addressof(buf))
    with torch.cuda.device(device):
        fn.launch((grid, 1, 1), THREADS, 0, torch.cuda.current_stream(device).cuda_stream, ctypes.addressof(args))
    return out
