"""Direct launches of grouped sm80 kernels (docs/MOE.md), for the GPU tests before the
runtime serves grouped problems: a kernel is rendered from its spec, compiled with NVRTC
for the device at hand, and launched with a parameter block packed here.

    D[r] = row_scale[r] * act(alpha * A[r] @ W[e(r)]^T + bias[e(r)]) + beta * C[r]

for the rows r of expert e(r) (routing.offsets), A sorted by expert or gathered through
routing.index, W stacked [E, N, K]."""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass

import torch

from codegen.render import render_kernel
from codegen.spec import KernelSpec
from codegen.vocabulary import DataType
from gemm_runtime import cuda_driver
from gemm_runtime.experts import Routing
from gemm_runtime.grouped import grouped_operands, launch_block
from tests.helpers import spec_for
from tests.sm90_smoke import _aligned_copy, nvrtc_compile, report



@dataclass(frozen=True)
class GroupedKernel:
    cta: tuple[int, int, int]
    warps: tuple[int, int, int]
    stages: int
    dtype: str = "f16"  # f16 | bf16

    @property
    def spec(self) -> KernelSpec:
        t = DataType(self.dtype)
        return spec_for(family=f"grouped_{self.dtype}", a_type=t, b_type=t, d_type=t, cta=self.cta, warps=self.warps,
                        stages=self.stages, grouped=True)  # fmt: skip

    @property
    def torch_dtype(self) -> torch.dtype:
        return torch.float16 if self.dtype == "f16" else torch.bfloat16


def compile_report(kernel: GroupedKernel, arch: str) -> dict[str, int]:
    """Registers and spills of the kernel compiled for ``arch`` (AssertionError with the
    NVRTC log if it does not compile)."""
    spec = kernel.spec
    ok, log, _ = nvrtc_compile(render_kernel(spec, "tests/grouped_kernel.py"), spec.name, arch)
    assert ok, f"NVRTC failed for {spec.name} ({arch}):\n{log}"
    return report(log, spec.name)


@functools.lru_cache(maxsize=None)
def _loaded(kernel: GroupedKernel, arch: str) -> cuda_driver.LoadedFunction:
    spec = kernel.spec
    ok, log, cubin = nvrtc_compile(render_kernel(spec, "tests/grouped_kernel.py"), spec.name, arch)
    assert ok, f"NVRTC failed for {spec.name}:\n{log}"
    return cuda_driver.LoadedFunction(cubin, spec.name, spec.smem_bytes, spec.threads)


def launch(kernel: GroupedKernel, a: torch.Tensor, w: torch.Tensor, routing: Routing, d: torch.Tensor, *,
           alpha: float = 1.0, beta: float = 0.0, c: torch.Tensor | None = None, bias: torch.Tensor | None = None,
           gated: bool = False, sync: bool = True) -> None:  # fmt: skip
    """The grouped product of ``a`` (rows sorted by expert, or the tokens ``routing.index``
    picks) and the stacked ``w`` [E, N, K] into ``d``, checked and packed as Gemm.grouped_matmul does
    (gemm_runtime.grouped), the kernel forced."""
    spec = kernel.spec
    major, minor = torch.cuda.get_device_capability()
    fn = _loaded(kernel, f"sm_{10 * major + minor}")
    ops = grouped_operands(a, w, routing.offsets, index=routing.index, row_scale=routing.row_scale, bias=bias, c=c,
                           out=d, gated=gated, alpha=alpha, beta=beta)  # fmt: skip
    grid, block = launch_block(spec, ops)
    buf, addr = _aligned_copy(block)
    pointers = (ctypes.c_void_p * 1)(addr)
    fn.launch(grid, spec.threads, spec.smem_bytes, torch.cuda.current_stream().cuda_stream, ctypes.addressof(pointers))
    if sync:
        torch.cuda.synchronize()  # surfaces a trap or fault here, with the buffers still alive
    del buf
