"""The SM90 smoke kernel's instantiation text and its NVRTC compile, shared by the CPU
test (tests/codegen/test_sm90_headers.py), the GPU test (tests/gpu/test_sm90_smoke.py)
and bench.sm90_smoke, with the launch of a compiled kernel on torch's current stream.

The instantiation only names the types; all logic is in
templates/include/gemm/sm90/smoke_gemm.cuh."""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass

import torch

from codegen.render import INCLUDE_DIR
from codegen.vocabulary import DataType
from gemm_runtime import cuda_driver
from gemm_runtime.compiler import parse_ptxas_report
from gemm_runtime.tensor_map import TensorMap2D, encode, param_bytes

THREADS = 384
BLOCK_M = 128
BLOCK_N = 128
STAGE_BYTES = (128 * 64 + 128 * 64) * 2


def smem_bytes(stages: int) -> int:
    """Dynamic shared memory the kernel needs (sm90_smoke::smem_bytes)."""
    return stages * STAGE_BYTES + 1024


@dataclass(frozen=True)
class SmokeKernel:
    dtype: str  # "f16" | "bf16": A and B
    out: str  # "f16" | "bf16" | "f32": D
    stages: int = 4

    @property
    def name(self) -> str:
        return f"sm90_smoke_{self.dtype}_{self.out}_s{self.stages}"

    def source(self) -> str:
        return (
            '#include "gemm/sm90/smoke_gemm.cuh"\n\n'
            f'extern "C" __global__ void __launch_bounds__({THREADS}, 1)\n'
            f"{self.name}(const __grid_constant__ gemm::CUtensorMap tma_a,\n"
            f"    const __grid_constant__ gemm::CUtensorMap tma_b, void* D, int ldd, int M, int N, int K) {{\n"
            f"  gemm::sm90_smoke::smoke_gemm<{DataType(self.dtype).cpp}, {DataType(self.out).cpp}, {self.stages}>(\n"
            "      tma_a, tma_b, D, ldd, M, N, K);\n"
            "}\n"
        )


def sm90_options(arch: str = "sm_90a") -> list[str]:
    # NOTE: compiler.compile_options takes an integer arch; the "a" suffix (the
    # arch-specific features wgmma and setmaxnreg need) has no integer spelling yet.
    return [f"--gpu-architecture={arch}", "-std=c++17", "-Xptxas=-v", "-default-device", f"-I{INCLUDE_DIR}"]


def nvrtc_compile(source: str, name: str, arch: str = "sm_90a") -> tuple[bool, str, bytes]:
    """(ok, log, cubin) through the CUDA 13 NVRTC of cuda.bindings."""
    from gemm_runtime.compiler import _nvrtc_compile

    return _nvrtc_compile(source, name, sm90_options(arch))


def report(log: str, name: str) -> dict[str, int]:
    return parse_ptxas_report(log, name)


def nvrtc_ptx(source: str, name: str, arch: str = "sm_90a") -> tuple[bool, str, str]:
    """(ok, log, ptx): the PTX shows which instructions and operands the wrappers emit."""
    from cuda.bindings import nvrtc

    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), f"{name}.cu".encode(), 0, [], [])
    assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS
    try:
        opts = [o.encode() for o in sm90_options(arch)]
        (res,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        _, size = nvrtc.nvrtcGetProgramLogSize(prog)
        log = bytearray(max(1, size))
        nvrtc.nvrtcGetProgramLog(prog, log)
        if res != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            return False, log.rstrip(b"\0").decode(errors="replace"), ""
        _, size = nvrtc.nvrtcGetPTXSize(prog)
        ptx = bytearray(size)
        nvrtc.nvrtcGetPTX(prog, ptx)
        return True, log.rstrip(b"\0").decode(errors="replace"), ptx.rstrip(b"\0").decode(errors="replace")
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


# ---- on the GPU (the GPU test and bench.sm90_smoke) ---------------------------------
@functools.lru_cache(maxsize=None)
def _loaded(kernel: SmokeKernel) -> cuda_driver.LoadedFunction:
    ok, log, cubin = nvrtc_compile(kernel.source(), kernel.name)
    assert ok, f"NVRTC failed for {kernel.name}:\n{log}"
    rep = report(log, kernel.name)
    assert rep["spill_stores"] == rep["spill_loads"] == 0, log
    print(f"{kernel.name}: {rep}")
    fn = cuda_driver.LoadedFunction(cubin, kernel.name, smem_bytes(kernel.stages), THREADS)
    assert fn.ctas_per_sm >= 1, f"{kernel.name}: does not fit an SM ({smem_bytes(kernel.stages)} bytes smem)"
    return fn


def _aligned_copy(data: bytes, align: int = 64) -> tuple[ctypes.Array, int]:
    """A ctypes buffer holding ``data`` at an ``align``-byte aligned address (the
    CUtensorMap parameter is 64-byte aligned; the driver copies it from here)."""
    raw = ctypes.create_string_buffer(len(data) + align)
    addr = ctypes.addressof(raw)
    addr += (-addr) % align
    ctypes.memmove(addr, data, len(data))
    return raw, addr


def launch(kernel: SmokeKernel, a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, ldd: int) -> None:
    fn = _loaded(kernel)
    (m, k), n = a.shape, b.shape[0]
    dtype = DataType(kernel.dtype)
    # NOTE: the boxes are the kernel's tiles: 128 rows x 64 K columns (128 bytes, the
    # 128B swizzle span); both operands are K-major (row-major A, "nk" B).
    tma_a = encode(TensorMap2D(a.data_ptr(), m, k, a.stride(0), dtype, BLOCK_M, 64))
    tma_b = encode(TensorMap2D(b.data_ptr(), n, k, b.stride(0), dtype, BLOCK_N, 64))
    keep = []  # the buffers the parameter array points into, alive until the launch returns
    pointers = []
    for data in (param_bytes(tma_a), param_bytes(tma_b)):
        buf, addr = _aligned_copy(data)
        keep.append(buf)
        pointers.append(addr)
    for value in (ctypes.c_void_p(d.data_ptr()), ctypes.c_int(ldd), ctypes.c_int(m), ctypes.c_int(n), ctypes.c_int(k)):
        keep.append(value)
        pointers.append(ctypes.addressof(value))
    params = (ctypes.c_void_p * len(pointers))(*pointers)
    grid = ((m + BLOCK_M - 1) // BLOCK_M, (n + BLOCK_N - 1) // BLOCK_N, 1)
    stream = torch.cuda.current_stream().cuda_stream
    fn.launch(grid, THREADS, smem_bytes(kernel.stages), stream, ctypes.addressof(params))
    torch.cuda.synchronize()  # surfaces a trap or fault here, with the buffers still alive
    del keep
