"""The SM90 quantized kernel (templates/include/gemm/sm90/kernel_sm90_quant.cuh) outside
the registry: its instantiation text and a direct launch on torch's current stream, for
the CPU compile test (tests/codegen/test_sm90_headers.py) and the GPU test
(tests/gpu/test_sm90_quant_kernel.py) while the family that will generate it from YAML
is being built (issue 16). The NVRTC compile is tests/sm90_smoke.py's."""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass

import torch

from codegen.families.sm90 import a_box_rows
from codegen.params import PARAM_STRUCT, cpp_struct
from codegen.vocabulary import DataType
from gemm_runtime import cuda_driver
from gemm_runtime.packed_weight import PackedWeight
from gemm_runtime.tensor_map import TensorMap2D, encode, param_bytes
from tests.sm90_smoke import _aligned_copy, nvrtc_compile, report

_MAPS = 3 * 128  # three CUtensorMaps ahead of GemmParams


@dataclass(frozen=True)
class QuantKernel:
    dtype: str  # "f16" | "bf16": X, the scales and zeros
    bits: int  # 4 | 8
    out: str  # "f16" | "bf16" | "f32": D
    tokens: int = 64  # rows of D per CTA (wgmma N): 64 | 128
    rows: int = 128  # weight rows per CTA: 64 | 128
    stages: int = 4

    @property
    def name(self) -> str:
        return f"sm90_quant_{self.dtype}_u{self.bits}_{self.out}_{self.tokens}x{self.rows}_s{self.stages}"

    @property
    def threads(self) -> int:
        return 128 * (self.rows // 64 + 1)

    @property
    def smem_bytes(self) -> int:
        """Sm90QuantConfig::kSmemBytes."""
        words = self.bits // 4
        stage = self.tokens * 64 * 2 + self.rows // 8 * 64 * words * 4 + 2 * 2 * self.rows * 2
        return self.stages * -(-stage // 1024) * 1024 + 1024

    def source(self) -> str:
        cfg = (f"gemm::Sm90QuantConfig<{DataType(self.dtype).cpp}, {DataType(self.out).cpp}, {self.bits}, "
               f"{self.tokens}, {self.rows}, {self.stages}>")  # fmt: skip
        return (
            '#include "gemm/sm90/kernel_sm90_quant.cuh"\n\n'
            f"{cpp_struct()}\n\n"
            "struct QuantParams {\n  gemm::CUtensorMap tma_x, tma_w, tma_v;\n  GemmParams p;\n};\n"
            f"using Config = {cfg};\n"
            f'static_assert(Config::kSmemBytes == {self.smem_bytes}, "tests/sm90_quant_kernel.py");\n'
            f'extern "C" __global__ void __launch_bounds__({self.threads}, 1)\n'
            f"{self.name}(const __grid_constant__ QuantParams params) {{\n"
            "  gemm::gemm_sm90_quant<Config>(params.p, &params.tma_x, &params.tma_w, &params.tma_v);\n"
            "}\n"
        )


@functools.lru_cache(maxsize=None)
def _loaded(kernel: QuantKernel) -> cuda_driver.LoadedFunction:
    ok, log, cubin = nvrtc_compile(kernel.source(), kernel.name)
    assert ok, f"NVRTC failed for {kernel.name}:\n{log}"
    rep = report(log, kernel.name)
    assert rep["spill_stores"] == rep["spill_loads"] == 0, log
    print(f"{kernel.name}: {rep}")
    return cuda_driver.LoadedFunction(cubin, kernel.name, kernel.smem_bytes, kernel.threads)


def v_box_rows(group_shift: int) -> int:
    """Group rows of V a stage holds (quant_v_rows in the kernel): two for groups of 32."""
    return 2 if group_shift < 6 else 1


def launch(kernel: QuantKernel, x: torch.Tensor, pw: PackedWeight, d: torch.Tensor, *, alpha: float = 1.0,
           beta: float = 0.0, c: torch.Tensor | None = None, bias: torch.Tensor | None = None,
           epilogue: int = 0, sync: bool = True) -> None:  # fmt: skip
    """D = epilogue(alpha * X @ dequant(pw)^T + beta * C) for X [M x K] row-major (K a
    multiple of 8) into D (row stride d.stride(0)); ``epilogue``: bit 0 bias, bit 1
    gated SiLU (D then has N / 2 columns)."""
    fn = _loaded(kernel)
    m, k = x.shape
    dtype = DataType(kernel.dtype)
    words = pw.b.shape[1] // 4
    maps = [
        TensorMap2D(x.data_ptr(), m, k, x.stride(0), dtype, a_box_rows(kernel.tokens, m), 64),
        # The packed rows as 32-bit elements (TMA copies bytes; the type only sizes them).
        TensorMap2D(pw.b.data_ptr(), pw.b.shape[0], words, words, DataType.F32, kernel.rows // 8,
                    64 * kernel.bits // 4, swizzle=0),
        TensorMap2D(pw.v.data_ptr(), pw.v.shape[0], pw.v.shape[1], pw.v.shape[1], dtype,
                    v_box_rows(pw.group_shift), kernel.rows, swizzle=0),
    ]  # fmt: skip
    fields = dict.fromkeys(("A", "B", "C", "D", "U", "V", "semaphores", "partials", "bias"), 0)
    fields.update(A=x.data_ptr(), B=pw.b.data_ptr(), V=pw.v.data_ptr(), D=d.data_ptr())
    fields.update(C=c.data_ptr() if c is not None else 0, bias=bias.data_ptr() if bias is not None else 0)
    ints = dict(lda=x.stride(0), ldb=words, ldc=c.stride(0) if c is not None else 0, ldd=d.stride(0), ldu=0,
                ldv=pw.v.shape[1], M=m, N=pw.n, K=k, tiles_m=-(-m // kernel.tokens), tiles_n=-(-pw.n // kernel.rows),
                splits=1, k_tiles_per_split=-(-k // 64), swizzle=0, epilogue=epilogue, groups=pw.groups,
                group_shift=pw.group_shift, pad0=0)  # fmt: skip
    fields.update(ints)
    from codegen.params import PARAM_NAMES

    values = [float(alpha) if n == "alpha" else float(beta) if n == "beta" else fields[n] for n in PARAM_NAMES]
    block = b"".join(param_bytes(encode(t)) for t in maps) + PARAM_STRUCT.pack(*values)
    block += bytes(-len(block) % 64)
    buf, addr = _aligned_copy(block)
    pointers = (ctypes.c_void_p * 1)(addr)
    grid = (-(-pw.n // kernel.rows), -(-m // kernel.tokens), 1)
    fn.launch(grid, kernel.threads, kernel.smem_bytes, torch.cuda.current_stream().cuda_stream, ctypes.addressof(pointers))
    if sync:
        torch.cuda.synchronize()  # surfaces a trap or fault here, with the buffers still alive
    del buf
