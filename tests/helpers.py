"""Small factories shared by CPU tests."""

from __future__ import annotations

from codegen.spec import KernelSpec
from codegen.families import Mainloop
from codegen.vocabulary import BOrder, DataType, MmaAtom


def spec_for(**overrides) -> KernelSpec:
    fields = dict(
        family="test",
        mainloop=Mainloop.SM80,
        mma=MmaAtom.M16N8K16,
        a_type=DataType.F16,
        b_type=DataType.F16,
        acc_type=DataType.F32,
        d_type=DataType.F16,
        cta=(128, 128, 32),
        warps=(2, 2, 1),
        stages=4,
        b_order=BOrder.NK,
        align=8,
    )
    fields.update(overrides)
    return KernelSpec(**fields)


# A kernel body that compiles in milliseconds for any arch NVRTC targets (sm_70 included):
# for build/list tests about the machinery rather than the GEMM.
TINY_KERNEL = 'extern "C" __global__ void {name}(float* p) {{ p[threadIdx.x] = 2.0f * p[threadIdx.x]; }}\n'


def write_tiny_generated(out, specs):
    """A generated/ folder (codegen's manifest format) whose kernel for each spec is
    TINY_KERNEL under the spec's name; returns ``out``."""
    from pathlib import Path

    from codegen.config import LoadedKernel
    from codegen.render import MANIFEST, kernel_file, manifest_text

    out = Path(out)
    loaded = [LoadedKernel(s, f"tiny.yaml:tiles[{i}]") for i, s in enumerate(specs)]
    for k in loaded:
        path = out / kernel_file(k.spec)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(TINY_KERNEL.format(name=k.spec.name))
    (out / MANIFEST).write_text(manifest_text(loaded))
    return out


def build_dir_problems(out) -> list[str]:
    """What is inconsistent in a build directory: manifest entries whose cubin is
    missing or damaged, and temp files left behind (anywhere, the cache included)."""
    from pathlib import Path

    from gemm_runtime import build_manifest

    out = Path(out)
    problems = [str(p) for p in out.rglob(".*.tmp")]
    for arch, path in build_manifest.arch_dirs(out):
        problems += [p.describe() for p in build_manifest.verify(build_manifest.read_manifest(path, arch))]
    return problems


def compile_without_spills(spec: KernelSpec, arch: int, origin: str) -> None:
    """Render ``spec`` (its header naming ``origin``) and compile it for ``arch`` with
    NVRTC, failing the test with NVRTC's log on an error or a spill."""
    import pytest

    from codegen.render import INCLUDE_DIR, render_kernel
    from gemm_runtime.compiler import CompileError, compile_cubin

    try:
        result = compile_cubin(render_kernel(spec, origin), name=spec.name, arch=arch, include_dirs=[INCLUDE_DIR],
                               cache_dir=None)  # fmt: skip
    except CompileError as err:
        pytest.fail(str(err))
    assert result.spill_stores == result.spill_loads == 0, (spec.name, arch, result.log)
