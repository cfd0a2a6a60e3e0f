"""Two NVRTCs side by side: CUDA 13's (cuda.bindings) and CUDA 12's (the [volta] extra,
gemm_runtime.nvrtc_legacy) for sm_70. No GPU needed.

Tests that need the CUDA 12 NVRTC skip only when its wheel is not installed (the
Makefile installs it, so they run on CI); one that is installed but fails to load fails.
"""

from __future__ import annotations

import dataclasses

import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from codegen.families import Mainloop
from codegen.vocabulary import MmaAtom
from gemm_runtime import compiler, nvrtc_legacy
from gemm_runtime.build import build, main
from gemm_runtime.compiler import ArchUnsupportedError, NvrtcBackend, cache_key, compile_cubin
from gemm_runtime.settings import REPO_ROOT
from tests.helpers import TINY_KERNEL, spec_for, write_tiny_generated

INCLUDE = REPO_ROOT / "templates" / "include"

needs_volta = pytest.mark.skipif(
    not nvrtc_legacy.installed(), reason=f"{nvrtc_legacy.DISTRIBUTION} (the [volta] extra) is not installed"
)

# Volta's MMA: in PTX since sm_70, and the one instruction the SM70 kernels are built on.
MMA_SM70_SOURCE = """extern "C" __global__ void mma884(float* d, const unsigned* a, const unsigned* b) {
  float c[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  const unsigned a0 = a[2 * threadIdx.x], a1 = a[2 * threadIdx.x + 1];
  const unsigned b0 = b[2 * threadIdx.x], b1 = b[2 * threadIdx.x + 1];
  asm volatile(
      "mma.sync.aligned.m8n8k4.row.col.f32.f16.f16.f32 "
      "{%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9}, {%10,%11}, {%0,%1,%2,%3,%4,%5,%6,%7};\\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]), "+f"(c[4]), "+f"(c[5]), "+f"(c[6]), "+f"(c[7])
      : "r"(a0), "r"(a1), "r"(b0), "r"(b1));
  for (int i = 0; i < 8; ++i) d[8 * threadIdx.x + i] = c[i];
}
"""

# Kernel specs for the tiny generated dirs: one for Volta only, one for sm_80..sm_90.
VOLTA = spec_for(family="volta", mainloop=Mainloop.SM70, mma=MmaAtom.M8N8K4, cta=(64, 64, 32), stages=2,
                 arch_min=70, arch_max=75)  # fmt: skip
AMPERE = spec_for(family="ampere", cta=(64, 64, 32), stages=3)


def _without_legacy(monkeypatch) -> None:
    """As on an install without the [volta] extra."""

    def unavailable():
        raise nvrtc_legacy.LegacyNvrtcUnavailable(f"the {nvrtc_legacy.DISTRIBUTION} wheel is not installed")

    monkeypatch.setattr(nvrtc_legacy, "load", unavailable)


def _manifest(out: Path, arch: int) -> dict:
    return json.loads((out / f"sm_{arch}" / "manifest.json").read_text())


# ---- the CUDA 12 library -------------------------------------------------------------
@needs_volta
def test_legacy_library_comes_from_the_wheel():
    from importlib.metadata import distribution

    path = nvrtc_legacy.library_path()
    assert path is not None and path.name == "libnvrtc.so.12" and path.is_file()
    dist = distribution(nvrtc_legacy.DISTRIBUTION)
    assert path in {Path(str(dist.locate_file(f))).resolve() for f in dist.files}
    lib = nvrtc_legacy.load()
    assert lib.path == path and lib.version[0] == 12 and 70 in lib.archs
    assert nvrtc_legacy.load() is lib  # loaded once per process


@needs_volta
def test_legacy_compiles_volta_mma_for_sm70(tmp_path):
    options = ["--gpu-architecture=sm_70", "-Xptxas=-v"]
    ok, log, cubin = nvrtc_legacy.load().compile(MMA_SM70_SOURCE, "mma884.cu", options)
    assert ok, log
    assert cubin[:4] == b"\x7fELF" and "sm_70" in log

    r = compile_cubin(MMA_SM70_SOURCE, name="mma884", arch=70, include_dirs=[INCLUDE], cache_dir=tmp_path)
    assert r.cubin[:4] == b"\x7fELF" and len(r.cubin) > 100
    assert r.registers > 0 and r.spills == 0 and not r.cached
    assert "Compiling entry function 'mma884' for 'sm_70'" in r.log
    again = compile_cubin(MMA_SM70_SOURCE, name="mma884", arch=70, include_dirs=[INCLUDE], cache_dir=tmp_path)
    assert again.cached and again.cubin == r.cubin


@needs_volta
def test_legacy_compile_error_carries_the_log():
    with pytest.raises(compiler.CompileError) as info:
        compile_cubin("extern \"C\" __global__ void k() { int x = ; }", name="k", arch=70, include_dirs=[],
                      cache_dir=None)  # fmt: skip
    assert info.value.arch == 70 and "expected an expression" in info.value.log


@needs_volta
def test_cuda13_nvrtc_stays_cuda13_when_the_legacy_one_loads_first():
    # cuda-pathfinder adopts an already loaded libnvrtc.so.12 for cuda.bindings unless
    # cuda.bindings has loaded its own first; load() sees to that.
    code = (
        "from gemm_runtime import nvrtc_legacy, compiler\n"
        "nvrtc_legacy.load()\n"
        "print(compiler.nvrtc_version()[0], compiler.nvrtc_version(70)[0])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, check=True, capture_output=True, text=True)
    assert out.stdout.split() == ["13", "12"]


# ---- backend selection ---------------------------------------------------------------
def test_cuda13_serves_every_arch_it_supports():
    primary = compiler.primary_backend()
    assert primary.version[0] == 13 and compiler.nvrtc_version() == primary.version
    for arch in (75, 80, 86, 89, 90):
        assert compiler.backend_for(arch) == primary and compiler.nvrtc_version(arch) == primary.version
    assert set(primary.archs) <= set(compiler.supported_archs())


@needs_volta
def test_cuda12_serves_sm70():
    backend = compiler.backend_for(70)
    assert backend.version[0] == 12 and backend.label == "CUDA 12"
    assert compiler.nvrtc_version(70) == nvrtc_legacy.load().version
    assert 70 in compiler.supported_archs() and 90 in compiler.supported_archs()
    assert [b.version[0] for b in compiler.backends()] == [13, 12]


def test_without_the_extra_sm70_is_unsupported(monkeypatch):
    _without_legacy(monkeypatch)
    assert 70 not in compiler.supported_archs() and 80 in compiler.supported_archs()
    assert [b.version[0] for b in compiler.backends()] == [13]
    with pytest.raises(ArchUnsupportedError) as info:
        compile_cubin(MMA_SM70_SOURCE, name="mma884", arch=70, include_dirs=[], cache_dir=None)
    e = info.value
    primary = compiler.nvrtc_version()
    assert e.arch == 70 and e.tried == (f"{primary[0]}.{primary[1]}",)
    text = str(e)
    assert "sm_70" in text and f"NVRTC {primary[0]}.{primary[1]}" in text and "CUDA 12" in text
    assert "[volta]" in text and "pip install -e '.[volta]'" in text and "not installed" in text
    again = pickle.loads(pickle.dumps(e))  # crosses the build's process pool intact
    assert (again.arch, again.reason, again.tried, str(again)) == (e.arch, e.reason, e.tried, text)


@needs_volta
def test_an_arch_neither_nvrtc_targets_names_both():
    with pytest.raises(ArchUnsupportedError) as info:
        compiler.backend_for(10)
    assert len(info.value.tried) == 2 and "CUDA 13" in str(info.value) and "CUDA 12" in str(info.value)
    assert "[volta]" not in str(info.value)  # installed already: nothing to install


# ---- the cache key -------------------------------------------------------------------
def test_cache_key_holds_the_version_of_the_nvrtc_that_compiles(monkeypatch):
    src = TINY_KERNEL.format(name="tiny")
    on13 = cache_key(src, name="tiny", arch=80, include_dirs=[INCLUDE])
    monkeypatch.setattr(compiler, "backend_for", lambda arch: NvrtcBackend("CUDA 12", (12, 9), (80,), None))
    on12 = cache_key(src, name="tiny", arch=80, include_dirs=[INCLUDE])
    assert on12 != on13
    monkeypatch.setattr(compiler, "backend_for", lambda arch: NvrtcBackend("CUDA 12", (12, 8), (80,), None))
    assert cache_key(src, name="tiny", arch=80, include_dirs=[INCLUDE]) not in (on12, on13)


def test_cache_key_holds_the_exact_nvrtc_library(monkeypatch, tmp_path):
    """nvrtcVersion says only major.minor: a patch release of the library (another file)
    must not be served the cubins of the previous one."""
    src = TINY_KERNEL.format(name="tiny")
    primary = compiler.primary_backend()
    assert primary.library.split()[0].endswith(f"libnvrtc.so.{primary.version[0]}")
    lib = tmp_path / "libnvrtc.so.13"
    lib.write_bytes(b"a")
    keys = []
    for content in (b"a", b"patched"):
        lib.write_bytes(content)
        patched = dataclasses.replace(primary, library=compiler.library_identity(lib))
        monkeypatch.setattr(compiler, "backend_for", lambda arch, b=patched: b)
        keys.append(cache_key(src, name="tiny", arch=80, include_dirs=[INCLUDE]))
    assert keys[0] != keys[1]


@needs_volta
def test_a_cubin_cached_by_one_nvrtc_is_a_miss_for_the_other(tmp_path, monkeypatch):
    src = TINY_KERNEL.format(name="tiny")
    args = dict(name="tiny", arch=80, include_dirs=[INCLUDE], cache_dir=tmp_path)
    by13 = compile_cubin(src, **args)
    assert compile_cubin(src, **args).cached
    monkeypatch.setattr(compiler, "backend_for", lambda arch: compiler.legacy_backend())
    by12 = compile_cubin(src, **args)
    assert not by12.cached and by12.cubin[:4] == b"\x7fELF"
    assert compile_cubin(src, **args).cached
    assert len(list(tmp_path.glob("*.cubin"))) == 2 and by13.cubin != by12.cubin


# ---- the build -----------------------------------------------------------------------
def test_build_skips_sm70_with_one_line_without_the_extra(tmp_path, capsys, monkeypatch):
    _without_legacy(monkeypatch)
    gen, out = write_tiny_generated(tmp_path / "gen", [VOLTA, AMPERE]), tmp_path / "build"
    code = main(["--generated", str(gen), "--out", str(out), "--arch", "70", "--arch", "80", "--no-progress"])
    captured = capsys.readouterr()
    assert code == 0
    assert "Traceback" not in captured.err + captured.out
    sm70 = [line for line in (captured.err + captured.out).splitlines() if "sm_70" in line]
    assert len(sm70) == 1, sm70
    line = sm70[0]
    assert line.startswith("sm_70: skipped: CUDA 13's NVRTC") and "cannot target sm_70" in line
    assert line.endswith("install the [volta] extra (pip install -e '.[volta]') for the CUDA 12 NVRTC")
    assert "sm_80: 1 kernels (1 compiled, 0 cached, 1 skipped)" in captured.out
    assert not (out / "sm_70").exists()
    assert [k["name"] for k in _manifest(out, 80)["kernels"]] == [AMPERE.name]


@needs_volta
def test_build_compiles_sm70_with_the_cuda12_nvrtc(tmp_path):
    gen, out = write_tiny_generated(tmp_path / "gen", [VOLTA, AMPERE]), tmp_path / "build"
    report = build(gen, out, archs=[70, 80], jobs=2, progress=False)  # two misses: the process pool
    assert not report.skipped_archs and report.compiled == 2
    m70, m80 = _manifest(out, 70), _manifest(out, 80)
    assert m70["nvrtc"] == compiler.legacy_backend().version_text and m70["nvrtc"].startswith("12.")
    assert m80["nvrtc"] == compiler.primary_backend().version_text and m80["nvrtc"].startswith("13.")
    assert [k["name"] for k in m70["kernels"]] == [VOLTA.name]
    assert [s["name"] for s in m70["skipped"]] == [AMPERE.name]
    assert (out / "sm_70" / f"{VOLTA.name}.cubin").read_bytes()[:4] == b"\x7fELF"
    assert m70["kernels"][0]["registers"] > 0
    line = report.summary_lines()[0]
    assert line.startswith("sm_70: 1 kernels (1 compiled") and ", NVRTC 12." in line

    again = build(gen, out, archs=[70, 80], jobs=2, progress=False)
    assert again.compiled == 0 and again.cached == 2
