"""The SM90 smoke kernel's instantiation text and its NVRTC compile, shared by the CPU
test (tests/codegen/test_sm90_headers.py) and the GPU test (tests/gpu/test_sm90_smoke.py).

The instantiation only names the types; all logic is in
templates/include/gemm/sm90/smoke_gemm.cuh."""

from __future__ import annotations

from dataclasses import dataclass

from codegen.render import INCLUDE_DIR
from codegen.vocabulary import DataType
from gemm_runtime.compiler import parse_ptxas_report

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
