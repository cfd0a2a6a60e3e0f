"""Direct launches of grouped sm80 kernels (docs/MOE.md), for the GPU tests before the
runtime serves grouped problems: a kernel is rendered from its spec, compiled with NVRTC
for the device at hand, and launched with a parameter block packed here.

    D[r] = row_scale[r] * act(alpha * A[r] @ W[e(r)]^T + bias[e(r)]) + beta * C[r]

for the rows r of expert e(r) (routing.offsets), A sorted by expert, W stacked [E, N, K]
("nk") or [E, K, N] ("kn")."""

from __future__ import annotations

import ctypes
import functools
import math
from dataclasses import dataclass

import torch

from codegen.params import PARAM_NAMES, PARAM_STRUCT
from codegen.render import render_kernel
from codegen.spec import KernelSpec
from codegen.vocabulary import BOrder, DataType
from gemm_runtime import cuda_driver
from gemm_runtime.experts import Routing
from tests.helpers import spec_for
from tests.sm90_smoke import _aligned_copy, nvrtc_compile, report

EPILOGUE_BIAS, EPILOGUE_GATED = 1, 2  # gemm/epilogue.cuh
_INDEX = {name: i for i, name in enumerate(PARAM_NAMES)}


@dataclass(frozen=True)
class GroupedKernel:
    cta: tuple[int, int, int]
    warps: tuple[int, int, int]
    stages: int
    b_order: BOrder = BOrder.NK
    dtype: str = "f16"  # f16 | bf16

    @property
    def spec(self) -> KernelSpec:
        t = DataType(self.dtype)
        return spec_for(family=f"grouped_{self.dtype}", a_type=t, b_type=t, d_type=t, cta=self.cta, warps=self.warps,
                        stages=self.stages, b_order=self.b_order, grouped=True)  # fmt: skip

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


def tile_rows_bound(rows: int, experts: int, cta_m: int) -> int:
    """The grid's tile rows: every expert adds at most one partial tile row."""
    return math.ceil(rows / cta_m) + experts


def launch(kernel: GroupedKernel, a: torch.Tensor, w: torch.Tensor, routing: Routing, d: torch.Tensor, *,
           alpha: float = 1.0, beta: float = 0.0, c: torch.Tensor | None = None, bias: torch.Tensor | None = None,
           gated: bool = False, sync: bool = True) -> None:  # fmt: skip
    """The grouped product of ``a`` (rows sorted by expert, contiguous rows) and the
    stacked ``w`` into ``d`` (row stride d.stride(0)); ``bias`` [E, N] contiguous,
    ``routing.row_scale`` fp32 or None, ``gated``: D has N / 2 columns."""
    spec = kernel.spec
    major, minor = torch.cuda.get_device_capability()
    fn = _loaded(kernel, f"sm_{10 * major + minor}")
    experts = w.shape[0]
    if spec.b_order is BOrder.NK:
        n, k = w.shape[1], w.shape[2]
        ldb = w.stride(1)
    else:
        k, n = w.shape[1], w.shape[2]
        ldb = w.stride(1)
    rows = a.shape[0]
    cm, cn, ck = spec.cta
    tiles_m, tiles_n = tile_rows_bound(rows, experts, cm), math.ceil(n / cn)
    scale = routing.row_scale
    assert scale is None or scale.dtype == torch.float32, "the kernels read fp32 row scales"
    values = [0] * len(PARAM_NAMES)
    for name, value in (
        ("A", a.data_ptr()), ("B", w.data_ptr()), ("C", c.data_ptr() if c is not None else 0), ("D", d.data_ptr()),
        ("U", scale.data_ptr() if scale is not None else 0), ("bias", bias.data_ptr() if bias is not None else 0),
        ("offsets", routing.offsets.data_ptr()), ("lda", a.stride(0)), ("ldb", ldb),
        ("ldc", c.stride(0) if c is not None else 0), ("ldd", d.stride(0)), ("stride_b", w.stride(0)),
        ("M", rows), ("N", n), ("K", k), ("tiles_m", tiles_m), ("tiles_n", tiles_n), ("splits", 1),
        ("k_tiles_per_split", math.ceil(k / ck)), ("swizzle", 0),
        ("epilogue", (EPILOGUE_BIAS if bias is not None else 0) | (EPILOGUE_GATED if gated else 0)),
        ("experts", experts), ("alpha", float(alpha)), ("beta", float(beta) if c is not None else 0.0),
    ):  # fmt: skip
        values[_INDEX[name]] = value
    buf, addr = _aligned_copy(PARAM_STRUCT.pack(*values))
    pointers = (ctypes.c_void_p * 1)(addr)
    fn.launch((tiles_m, tiles_n, 1), spec.threads, spec.smem_bytes, torch.cuda.current_stream().cuda_stream,
              ctypes.addressof(pointers))  # fmt: skip
    if sync:
        torch.cuda.synchronize()  # surfaces a trap or fault here, with the buffers still alive
    del buf
