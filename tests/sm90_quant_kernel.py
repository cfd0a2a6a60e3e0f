"""The SM90 quantized kernels (codegen/families/sm90_quant.py) outside the registry: a
kernel rendered from its spec as `python -m codegen` would, compiled with NVRTC, and
launched on torch's current stream through the runtime's own launch path
(gemm_runtime.launch.prepare: the tensor maps and GemmParams), for the GPU test
(tests/gpu/test_sm90_quant_kernel.py: tiles and knobs beyond the default set's) and the
experiments in bench/experiments/."""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path
from dataclasses import dataclass
from types import SimpleNamespace

import torch

from codegen.families import Mainloop
from codegen.render import render_kernel
from codegen.spec import KernelSpec
from codegen.vocabulary import BOrder, DataType, MmaAtom
from gemm_runtime import cuda_driver, launch as runtime_launch
from gemm_runtime.context import Problem, ProblemKey, quant_name
from gemm_runtime.packed_weight import PackedWeight
from gemm_runtime.plan import LaunchSpec
from gemm_runtime.types import Epilogue
from tests.helpers import spec_for
from tests.sm90_smoke import _aligned_copy, nvrtc_compile, report

# The epilogue bits of kernel.cuh (bias 1, gated SiLU 2) as the runtime's epilogues.
_EPILOGUES = {0: Epilogue.NONE, 1: Epilogue.BIAS, 2: Epilogue.GATED_SILU, 3: Epilogue.BIAS_GATED_SILU}


@dataclass(frozen=True)
class QuantKernel:
    dtype: str  # "f16" | "bf16": X, the scales and zeros
    bits: int  # 4 | 8
    out: str  # "f16" | "bf16" | "f32": D
    tokens: int = 64  # rows of D per CTA (wgmma N): 64 | 128
    rows: int = 128  # weight rows per CTA: 64 | 128
    stages: int = 4
    defines: tuple[str, ...] = ()  # experiment knobs (gemm/sm90/quant_knobs.cuh), e.g. ("GEMM_SM90Q_LEAVE_OUT=1",)
    # Experiments: another kernel_sm90_quant.cuh (a file) in place of the tree's, pasted over
    # its #include; what it includes comes from the tree (quant_*.cuh: a file from before
    # those parts moved out of it replaces them too, a later one the kernel's layer only).
    header: str = ""
    smem: bool = False  # the shared-B form (sm90_quant_smem): D = X . W^T, weights through shared memory
    blocks: int = 1  # register A: m64 blocks of weight rows per consumer warpgroup (Sm90QuantConfig::kBlocks)
    k_split: int = 1  # register A: consumer warpgroups taking the K tiles in turn (Sm90QuantConfig::kKSplit)
    cta_k: int = 64  # 128: a pair of K tiles a ring stage (Sm90QuantConfig::kKPerStage), in turn or both taken

    @property
    def spec(self) -> KernelSpec:
        family = Mainloop.SM90_QUANT_SMEM if self.smem else Mainloop.SM90_QUANT
        return spec_for(family=f"{family.value}_{self.dtype}_w{self.bits}", mainloop=family,
                        mma=MmaAtom.M64NK16, a_type=DataType(self.dtype), b_type=DataType(f"u{self.bits}"),
                        d_type=DataType(self.out), cta=(self.tokens, self.rows, self.cta_k),
                        warps=(1, 8 if self.smem else self.rows // (16 * self.blocks), self.k_split),
                        stages=self.stages, arch_min=90, arch_max=90)  # fmt: skip

    @property
    def name(self) -> str:
        return self.spec.name


@functools.lru_cache(maxsize=None)
def _loaded(kernel: QuantKernel) -> cuda_driver.LoadedFunction:
    spec = kernel.spec
    source = "".join(f"#define {d.replace('=', ' ', 1)}\n" for d in kernel.defines)
    source += render_kernel(spec, "tests/sm90_quant_kernel.py")
    if kernel.header:
        source = source.replace(f'#include "{spec.mainloop.header}"', Path(kernel.header).read_text())
    ok, log, cubin = nvrtc_compile(source, spec.name)
    assert ok, f"NVRTC failed for {spec.name}:\n{log}"
    rep = report(log, spec.name)
    assert rep["spill_stores"] == rep["spill_loads"] == 0, log
    print(f"{spec.name}: {rep}")
    # NOTE: a variant whose wgmma ptxas serialized (C7515 and kin) runs 12-20% slower for
    # that alone (docs/perf/sm90_quant_k_groups.md): say so wherever it is timed.
    for line in log.splitlines():
        if "serialized" in line:
            print(f"WARNING: {spec.name}: {line.strip()}")
    return cuda_driver.LoadedFunction(cubin, spec.name, spec.smem_bytes, spec.threads)


@functools.lru_cache(maxsize=None)
def _workspace_tensors(device: int) -> tuple[torch.Tensor, torch.Tensor]:
    from gemm_runtime import Gemm

    return (torch.zeros(Gemm.kBarriersSize, dtype=torch.uint8, device=f"cuda:{device}"),
            torch.empty(Gemm.kPartialsSize, dtype=torch.uint8, device=f"cuda:{device}"))  # fmt: skip


def _workspace() -> tuple[int, int]:
    """(semaphores, partials) addresses: split-K's semaphores start at zero and the
    kernels leave them so (split_k.cuh)."""
    semaphores, partials = _workspace_tensors(torch.cuda.current_device())
    return semaphores.data_ptr(), partials.data_ptr()


def launch(kernel: QuantKernel, x: torch.Tensor, pw: PackedWeight, d: torch.Tensor, *, alpha: float = 1.0,
           beta: float = 0.0, c: torch.Tensor | None = None, bias: torch.Tensor | None = None,
           epilogue: int = 0, splits: int = 1, resident: int = 132, sync: bool = True) -> None:  # fmt: skip
    """D = epilogue(alpha * X @ dequant(pw)^T + beta * C) for X [M x K] row-major (K a
    multiple of 8) into D (row stride d.stride(0)); ``epilogue``: bit 0 bias, bit 1
    gated SiLU (D then has N / 2 columns); ``splits`` > 1: stream-K over at most
    ``resident`` CTAs, through a workspace of the runtime's default sizes."""
    fn = _loaded(kernel)
    spec = kernel.spec
    (m, k), n = x.shape, pw.n
    key = ProblemKey(90, spec.a_type, spec.b_type, BOrder.NK, spec.d_type, 8, quant_name(spec.b_type, pw.group_size, k),
                     _EPILOGUES[epilogue].value, n, k, m)  # fmt: skip
    # As make_problem builds it: packed B's ldb in 16-bit units, V = scales then zeros.
    problem = Problem(key, x.data_ptr(), pw.b.data_ptr(), c.data_ptr() if c is not None else 0, d.data_ptr(),
                      x.stride(0), pw.b.shape[1] // 2, c.stride(0) if c is not None else 0, d.stride(0), beta != 0.0,
                      bias.data_ptr() if bias is not None else 0, pw.v.data_ptr(), pw.v.shape[1], pw.groups,
                      pw.group_shift)  # fmt: skip
    semaphores, partials = _workspace() if splits > 1 else (0, 0)
    grid, block, _ = runtime_launch.prepare(SimpleNamespace(spec=spec, resident=resident), problem,
                                            LaunchSpec(spec.name, splits), alpha, beta, semaphores, partials)  # fmt: skip
    buf, addr = _aligned_copy(block)
    pointers = (ctypes.c_void_p * 1)(addr)
    fn.launch(grid, spec.threads, spec.smem_bytes, torch.cuda.current_stream().cuda_stream, ctypes.addressof(pointers))
    if sync:
        torch.cuda.synchronize()  # surfaces a trap or fault here, with the buffers still alive
    del buf
