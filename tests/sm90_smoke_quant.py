"""The SM90 quantized smoke kernel (templates/include/gemm/sm90/smoke_quant.cuh: D^T =
W . X^T with the dequantized weight as wgmma's register A operand): its instantiation
text, and its launch on torch's current stream, shared by the CPU compile test
(tests/codegen/test_sm90_headers.py) and the GPU test (tests/gpu/test_sm90_smoke_quant.py).
The NVRTC compile is tests/sm90_smoke.py's."""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass

import torch

from codegen.vocabulary import DataType
from gemm_runtime import cuda_driver
from gemm_runtime.packed_weight import PackedWeight
from gemm_runtime.tensor_map import TensorMap2D, encode, param_bytes
from tests.sm90_smoke import _aligned_copy, nvrtc_compile, report

THREADS = 384
ROWS, TOKENS = 128, 64  # weight rows and tokens per CTA (kRows, kTokens)
SMEM_BYTES = 4 * TOKENS * 64 * 2 + 1024  # kSmemBytes


class Params(ctypes.Structure):
    """sm90_smoke_quant::Params, field for field."""

    _fields_ = [("b", ctypes.c_void_p), ("v", ctypes.c_void_p), ("d", ctypes.c_void_p)] + [
        (name, ctypes.c_int) for name in ("ldd", "M", "N", "K", "kp", "np", "groups", "group_shift")
    ]


@dataclass(frozen=True)
class QuantSmokeKernel:
    dtype: str  # "f16" | "bf16": X, the scales and zeros
    bits: int  # 4 | 8
    out: str  # "f16" | "bf16" | "f32": D

    @property
    def name(self) -> str:
        return f"sm90_smoke_quant_{self.dtype}_u{self.bits}_{self.out}"

    def source(self) -> str:
        return (
            '#include "gemm/sm90/smoke_quant.cuh"\n\n'
            f'extern "C" __global__ void __launch_bounds__({THREADS}, 1)\n'
            f"{self.name}(const __grid_constant__ gemm::CUtensorMap tma_x,\n"
            "    const gemm::sm90_smoke_quant::Params p) {\n"
            f"  gemm::sm90_smoke_quant::smoke_quant_gemm<{DataType(self.dtype).cpp}, {DataType(self.out).cpp}, "
            f"{self.bits}>(tma_x, p);\n"
            "}\n"
        )


@functools.lru_cache(maxsize=None)
def _loaded(kernel: QuantSmokeKernel) -> cuda_driver.LoadedFunction:
    ok, log, cubin = nvrtc_compile(kernel.source(), kernel.name)
    assert ok, f"NVRTC failed for {kernel.name}:\n{log}"
    rep = report(log, kernel.name)
    assert rep["spill_stores"] == rep["spill_loads"] == 0, log
    print(f"{kernel.name}: {rep}")
    return cuda_driver.LoadedFunction(cubin, kernel.name, SMEM_BYTES, THREADS)


def launch(kernel: QuantSmokeKernel, x: torch.Tensor, pw: PackedWeight, d: torch.Tensor, sync: bool = True) -> None:
    """D = X @ dequant(pw)^T for X [M x K] row-major (K a multiple of 8, the TMA row
    rule) into D [M x N] (row stride d.stride(0)). ``sync``: wait for the kernel (a
    trap or fault surfaces here); timing loops pass False."""
    fn = _loaded(kernel)
    m, k = x.shape
    tma_x = encode(TensorMap2D(x.data_ptr(), m, k, x.stride(0), DataType(kernel.dtype), TOKENS, 64))
    buf, addr = _aligned_copy(param_bytes(tma_x))
    p = Params(pw.b.data_ptr(), pw.v.data_ptr(), d.data_ptr(), d.stride(0), m, pw.n, k, pw.padded_k,
               pw.v.shape[1], pw.groups, pw.group_shift)  # fmt: skip
    pointers = (ctypes.c_void_p * 2)(addr, ctypes.addressof(p))
    grid = (-(-pw.n // ROWS), -(-m // TOKENS), 1)
    fn.launch(grid, THREADS, SMEM_BYTES, torch.cuda.current_stream().cuda_stream, ctypes.addressof(pointers))
    if sync:
        torch.cuda.synchronize()  # surfaces a trap or fault here, with the buffers still alive
    del buf, p  # NOTE: the driver copied the parameters at the launch
