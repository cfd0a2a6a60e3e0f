"""gemm_runtime.compiler: NVRTC compile, ptxas report parsing and the disk cache (no GPU needed)."""

from __future__ import annotations

import functools
import json
import pickle
import shutil
from pathlib import Path

import pytest

from codegen.render import render_kernel
from gemm_runtime.compiler import (
    CompileError,
    cache_key,
    compile_cubin,
    nvrtc_version,
    parse_ptxas_report,
    supported_archs,
)
from gemm_runtime.settings import REPO_ROOT
from tests.helpers import spec_for

INCLUDE = REPO_ROOT / "templates" / "include"

# A 64x64x32 sm80-mainloop GEMM, rendered by the generator's own template, so the test
# follows the device headers' interface (GemmConfig's parameters) wherever it goes.
GEMM_SPEC = spec_for(cta=(64, 64, 32), warps=(2, 2, 1), stages=3)
GEMM_NAME = GEMM_SPEC.name


@functools.cache
def _gemm_source() -> str:
    return render_kernel(GEMM_SPEC, "tests/runtime/test_compiler.py")


# Compiles in a few ms: for the cache mechanics, where the GEMM's ~0.5 s per compile adds nothing.
TINY_SOURCE = """#include "gemm/numeric.cuh"
extern "C" __global__ void tiny(float* p) { p[threadIdx.x] = 2.0f * p[threadIdx.x]; }
"""


def _tiny(cache_dir: Path | None, **kw) -> object:
    args = dict(name="tiny", arch=80, include_dirs=[INCLUDE], cache_dir=cache_dir)
    args.update(kw)
    return compile_cubin(TINY_SOURCE, **args)


def test_nvrtc_version_and_archs():
    major, minor = nvrtc_version()
    assert major >= 12 and minor >= 0
    assert 80 in supported_archs() and 90 in supported_archs()


def test_compile_gemm_parses_ptxas_report(tmp_path):
    r = compile_cubin(_gemm_source(), name=GEMM_NAME, arch=80, include_dirs=[INCLUDE], cache_dir=tmp_path)
    assert r.cubin[:4] == b"\x7fELF"
    assert r.registers > 0
    assert (r.stack_frame, r.spill_stores, r.spill_loads, r.smem_static) == (0, 0, 0, 0)
    assert not r.cached
    assert "Used" in r.log and GEMM_NAME in r.log


def test_second_compile_is_a_cache_hit(tmp_path):
    first = compile_cubin(_gemm_source(), name=GEMM_NAME, arch=90, include_dirs=[INCLUDE], cache_dir=tmp_path)
    second = compile_cubin(_gemm_source(), name=GEMM_NAME, arch=90, include_dirs=[INCLUDE], cache_dir=tmp_path)
    assert not first.cached and second.cached
    assert second.cubin == first.cubin and second.report() == first.report() and second.log == first.log
    assert second.seconds < first.seconds / 10
    assert sorted(p.suffix for p in tmp_path.iterdir()) == [".cubin", ".json"]


def test_no_cache_dir_never_caches(tmp_path):
    assert not _tiny(None).cached
    assert not _tiny(None).cached


def test_key_changes_with_headers_options_and_arch(tmp_path):
    include = tmp_path / "include"
    shutil.copytree(INCLUDE, include)

    def key(**kw):
        args = dict(name="tiny", arch=80, include_dirs=[include], options=())
        args.update(kw)
        return cache_key(TINY_SOURCE, **args)

    base = key()
    assert key() == base  # deterministic
    assert key(arch=90) != base
    assert key(options=["-lineinfo"]) != base
    assert key(name="other") != base
    assert cache_key(TINY_SOURCE + "\n", name="tiny", arch=80, include_dirs=[include]) != base

    # A header the source does not even include still changes the key (the whole tree is hashed).
    header = include / "gemm" / "warp_mma.cuh"
    header.write_text(header.read_text() + "\n// edited\n")
    edited = key()
    assert edited != base
    (include / "gemm" / "new.cuh").write_text("#pragma once\n")
    assert key() not in (base, edited)


def test_header_change_recompiles(tmp_path):
    include = tmp_path / "include"
    shutil.copytree(INCLUDE, include)
    cache = tmp_path / "cache"
    assert not _tiny(cache, include_dirs=[include]).cached
    assert _tiny(cache, include_dirs=[include]).cached
    numeric = include / "gemm" / "numeric.cuh"
    numeric.write_text(numeric.read_text() + "\n// edited\n")
    assert not _tiny(cache, include_dirs=[include]).cached


@pytest.mark.parametrize(
    "damage", ["truncated_json", "missing_json", "missing_cubin", "wrong_cubin", "infinite_field", "negative_field",
               "float_field", "log_not_text"],
)  # fmt: skip
def test_corrupt_cache_entry_is_a_miss(tmp_path, damage):
    good = _tiny(tmp_path)
    (json_path,) = tmp_path.glob("*.json")
    cubin_path = json_path.with_suffix(".cubin")
    if damage == "truncated_json":
        json_path.write_text(json_path.read_text()[:20])
    elif damage == "missing_json":
        json_path.unlink()
    elif damage == "missing_cubin":
        cubin_path.unlink()
    elif damage == "wrong_cubin":
        cubin_path.write_bytes(good.cubin[:100])
    else:
        # A well-formed entry with a report no compile gives (int(Infinity) raised
        # OverflowError; -1 registers would publish a manifest every reader refuses).
        meta = json.loads(json_path.read_text())
        field, value = {"infinite_field": ("registers", float("inf")), "negative_field": ("spill_stores", -1),
                        "float_field": ("registers", 40.5), "log_not_text": ("log", ["x"])}[damage]  # fmt: skip
        meta[field] = value
        json_path.write_text(json.dumps(meta))

    again = _tiny(tmp_path)
    assert not again.cached and again.cubin == good.cubin
    # The recompile repaired the entry.
    assert json.loads(json_path.read_text())["registers"] == good.registers
    assert _tiny(tmp_path).cached
    assert not list(tmp_path.glob("*.tmp"))


def test_compile_error_names_kernel_arch_and_log(tmp_path):
    source = TINY_SOURCE + "\nextern \"C\" __global__ void broken() { int x = ; }\n"
    with pytest.raises(CompileError) as info:
        compile_cubin(source, name="broken_kernel", arch=80, include_dirs=[INCLUDE], cache_dir=tmp_path)
    e = info.value
    assert (e.name, e.arch) == ("broken_kernel", 80)
    assert "expected an expression" in e.log
    assert "broken_kernel" in str(e) and "sm_80" in str(e) and e.log.strip() in str(e)
    assert not list(tmp_path.iterdir())  # failures are not cached
    # It crosses process boundaries (the build compiles in a process pool) intact.
    again = pickle.loads(pickle.dumps(e))
    assert (again.name, again.arch, again.log, str(again)) == (e.name, e.arch, e.log, str(e))


def test_parse_ptxas_report_picks_the_entry_section():
    log = """ptxas info    : 0 bytes gmem
ptxas info    : Function properties for helper
    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads
ptxas info    : Compiling entry function 'k' for 'sm_90'
ptxas info    : Function properties for k
    16 bytes stack frame, 12 bytes spill stores, 20 bytes spill loads
ptxas info    : Used 168 registers, used 1 barriers, 2048 bytes smem, 472 bytes cmem[0]
ptxas info    : Compiling entry function 'other' for 'sm_90'
ptxas info    : Used 32 registers
"""
    assert parse_ptxas_report(log, "k") == {
        "registers": 168,
        "stack_frame": 16,
        "spill_stores": 12,
        "spill_loads": 20,
        "smem_static": 2048,
    }
    assert parse_ptxas_report("", "k") == dict.fromkeys(
        ["registers", "stack_frame", "spill_stores", "spill_loads", "smem_static"], 0
    )


def test_cp_async_prefetch_size_reaches_the_copies():
    """GEMM_CP_ASYNC_PREFETCH (ptx.cuh) changes every cp.async's L2 prefetch size: each
    size gives a different cubin, and a size PTX has no form for is refused by name."""
    def cubin(size: int) -> bytes:
        return compile_cubin(_gemm_source(), name=GEMM_NAME, arch=80, include_dirs=[INCLUDE], cache_dir=None,
                             options=[f"-DGEMM_CP_ASYNC_PREFETCH={size}"]).cubin

    sizes = (64, 128, 256)
    assert len({cubin(s) for s in sizes}) == len(sizes)
    with pytest.raises(CompileError) as info:
        cubin(96)
    assert "GEMM_CP_ASYNC_PREFETCH takes 0, 64, 128 or 256" in info.value.log

