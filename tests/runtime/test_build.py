"""gemm_runtime.build: generated/ -> build/sm_XX (no GPU needed; NVRTC only)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from codegen.config import LoadedKernel
from codegen.render import write_generated
from codegen.spec import KernelSpec
from codegen.vocabulary import BOrder, DataType, Mainloop, MmaAtom
from gemm_runtime import settings as settings_mod
from gemm_runtime.build import BuildError, build, main
from gemm_runtime.settings import REPO_ROOT

F16, BF16, F32 = DataType.F16, DataType.BF16, DataType.F32

SMALL = KernelSpec("tst", Mainloop.SM80, MmaAtom.M16N8K16, F16, F16, F32, F16, (64, 64, 32), (2, 2, 1), 3, BOrder.NK, 8)
# sm_90 only, so sm_80 records it as skipped.
HOPPER = KernelSpec(
    "tst", Mainloop.SM80, MmaAtom.M16N8K16, BF16, BF16, F32, BF16, (64, 64, 32), (2, 2, 1), 2, BOrder.KN, 8, 90, 90
)
KERNEL_FIELDS = {
    "name", "symbol", "cubin", "source", "spec", "registers", "stack_frame", "spill_stores",
    "spill_loads", "smem_static", "smem_dynamic", "threads",
}  # fmt: skip


def _source(i: int) -> str:
    return f"tst.yaml:families[0] (tst).tiles[{i}]"


@pytest.fixture
def generated(tmp_path) -> Path:
    out = tmp_path / "generated"
    write_generated([LoadedKernel(SMALL, _source(0)), LoadedKernel(HOPPER, _source(1))], out)
    return out


def _manifest(out: Path, arch: int) -> dict:
    return json.loads((out / f"sm_{arch}" / "manifest.json").read_text())


def test_build_writes_cubins_and_manifests(generated, tmp_path):
    out = tmp_path / "build"
    report = build(generated, out, archs=[80, 90], jobs=2, progress=False)
    assert [a.arch for a in report.archs] == [80, 90]
    assert report.compiled == 3 and report.cached == 0

    m80, m90 = _manifest(out, 80), _manifest(out, 90)
    assert (m80["version"], m80["arch"], m90["arch"]) == (1, 80, 90)
    assert m80["nvrtc"].count(".") == 1
    assert [k["name"] for k in m80["kernels"]] == [SMALL.name]
    assert m80["skipped"] == [{"name": HOPPER.name, "reason": "family arch range sm_90..sm_90 excludes sm_80"}]
    assert [k["name"] for k in m90["kernels"]] == sorted([SMALL.name, HOPPER.name])
    assert m90["skipped"] == []
    for m in (m80, m90):
        for rec in m["kernels"]:
            assert set(rec) == KERNEL_FIELDS
            spec = KernelSpec.from_json(rec["spec"])
            assert rec["symbol"] == rec["name"] == spec.name
            assert rec["source"] == _source(0 if spec == SMALL else 1)
            assert rec["registers"] > 0 and rec["spill_stores"] == rec["spill_loads"] == 0
            assert (rec["smem_dynamic"], rec["threads"]) == (spec.smem_bytes, spec.threads)
            assert (out / f"sm_{m['arch']}" / rec["cubin"]).read_bytes()[:4] == b"\x7fELF"
    assert sorted(p.name for p in (out / "sm_80").iterdir()) == sorted(["manifest.json", f"{SMALL.name}.cubin"])
    assert "sm_90: 2 kernels (2 compiled, 0 cached, 0 skipped)" in report.summary_lines()[1]


def test_second_build_compiles_nothing_and_touches_nothing(generated, tmp_path):
    out = tmp_path / "build"
    build(generated, out, archs=[80, 90], jobs=1, progress=False)
    outputs = sorted(p for p in out.glob("sm_*/*") if p.is_file())
    before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in outputs}
    (out / "sm_80" / "gemm_removed_kernel.cubin").write_bytes(b"stale")

    t0 = time.perf_counter()
    report = build(generated, out, archs=[80, 90], jobs=1, progress=False)
    assert report.compiled == 0 and report.cached == 3
    assert time.perf_counter() - t0 < 5
    assert sorted(p for p in out.glob("sm_*/*") if p.is_file()) == outputs  # the stale cubin is gone
    assert {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in outputs} == before


def test_compile_failure_names_kernel_source_and_log(generated, tmp_path):
    # Breaks the kernel on sm_90 only: sm_80 must still be written.
    cu = generated / "tst" / f"{SMALL.name}.cu"
    cu.write_text(cu.read_text() + "\n#if __CUDA_ARCH__ == 900\n#error broken on purpose\n#endif\n")
    out = tmp_path / "build"
    with pytest.raises(BuildError) as info:
        build(generated, out, archs=[80, 90], jobs=2, progress=False)
    e = info.value
    assert [(f.name, f.arch, f.source) for f in e.failures] == [(SMALL.name, 90, _source(0))]
    assert SMALL.name in str(e) and _source(0) in str(e) and "broken on purpose" in str(e) and "sm_90" in str(e)
    assert [k["name"] for k in _manifest(out, 80)["kernels"]] == [SMALL.name]
    assert not (out / "sm_90" / "manifest.json").exists()

    code = main(["--generated", str(generated), "--out", str(out), "--arch", "90", "--no-progress"])
    assert code == 1


def test_cli_failure_goes_to_stderr_without_traceback(generated, tmp_path, capsys):
    cu = generated / "tst" / f"{HOPPER.name}.cu"
    cu.write_text(cu.read_text().replace("extern \"C\"", "this is not C++; extern \"C\""))
    code = main(["--generated", str(generated), "--out", str(tmp_path / "b"), "--arch", "sm_90", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 1
    assert HOPPER.name in err and _source(1) in err and "error" in err and "Traceback" not in err


def test_cli_unknown_arch_lists_accepted(generated, tmp_path, capsys):
    code = main(["--generated", str(generated), "--out", str(tmp_path / "b"), "--arch", "12"])
    err = capsys.readouterr().err
    assert code == 1
    assert "sm_12" in err and "sm_80" in err and "sm_90" in err and "Traceback" not in err
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize("content", [None, "{not json", '{"version": 1, "kernels": [{"name": "x"}]}'])
def test_missing_or_corrupt_generated_manifest(tmp_path, capsys, content):
    gen = tmp_path / "gen"
    gen.mkdir()
    if content is not None:
        (gen / "manifest.json").write_text(content)
    code = main(["--generated", str(gen), "--out", str(tmp_path / "b"), "--arch", "80"])
    err = capsys.readouterr().err
    assert code == 1
    assert str(gen / "manifest.json") in err and "make generate" in err and "Traceback" not in err


def test_default_archs_without_gpu_and_settings_defaults(generated, tmp_path, monkeypatch):
    import gemm_runtime.build as build_mod

    monkeypatch.setattr(build_mod, "detect_archs", lambda: [])
    assert build_mod.resolve_archs(None) == ([80, 90], {})
    monkeypatch.setattr(build_mod, "detect_archs", lambda: [86, 86, 120])
    archs, skipped = build_mod.resolve_archs(None)
    assert archs == [86] and "sm_120" in skipped[120]

    monkeypatch.setenv("GEMM_BUILD_DIR", str(tmp_path / "env_build"))
    monkeypatch.setenv("GEMM_BUILD_JOBS", "3")
    monkeypatch.delenv("GEMM_GENERATED_DIR", raising=False)
    s = settings_mod.from_env()
    assert (s.build_dir, s.generated_dir, s.jobs) == (tmp_path / "env_build", REPO_ROOT / "generated", 3)
    monkeypatch.setenv("GEMM_BUILD_JOBS", "many")
    with pytest.raises(ValueError, match="GEMM_BUILD_JOBS"):
        settings_mod.from_env()

    # The CLI's defaults come from settings().
    with settings_mod.override(generated_dir=generated, build_dir=tmp_path / "via_settings", jobs=1):
        assert main(["--arch", "80", "--no-progress"]) == 0
    assert (tmp_path / "via_settings" / "sm_80" / "manifest.json").exists()


def test_full_default_set_compiles(tmp_path, capsys):
    """The shipped kernel set (codegen/configs/*.yaml) compiles for every arch its families
    name (sm_70 through the [volta] extra, which CI installs), and the kernels that dispatch
    natively on sm_80 / sm_90 do not spill."""
    from codegen.spec import KernelSpec
    from gemm_runtime import nvrtc_legacy

    gen, out = tmp_path / "generated", tmp_path / "build"
    subprocess.run([sys.executable, "-m", "codegen", "--out", str(gen)], cwd=REPO_ROOT, check=True)
    specs = {k["name"]: KernelSpec.from_json(k["spec"]) for k in json.loads((gen / "manifest.json").read_text())["kernels"]}
    assert specs
    archs = [75, 80, 90] + ([70] if nvrtc_legacy.installed() else [])

    t0 = time.perf_counter()
    cold = build(gen, out, archs=archs, jobs=None, progress=False)
    t_cold = time.perf_counter() - t0
    t0 = time.perf_counter()
    warm = build(gen, out, archs=archs, jobs=None, progress=False)
    t_warm = time.perf_counter() - t0
    with capsys.disabled():
        print(f"\nfull default set: {len(specs)} kernels x {archs}: cold {t_cold:.1f} s, warm {t_warm:.2f} s")
        for line in cold.summary_lines() + cold.warning_lines():
            print("  " + line)

    assert warm.compiled == 0
    spills = []
    for arch in archs:
        m = _manifest(out, arch)
        skipped = {s["name"]: s["reason"] for s in m["skipped"]}
        built = {k["name"]: k for k in m["kernels"]}
        expected = sorted(n for n, spec in specs.items() if spec.archs_that_fit([arch]))
        assert expected, f"no default kernel targets sm_{arch}"
        assert sorted(built) == expected, f"sm_{arch} misses kernels: {skipped}"
        for n, k in built.items():
            lo, hi = specs[n].mma.native_archs
            budget = specs[n].spill_budget(arch)
            if arch in (80, 90) and lo <= arch <= hi and max(k["spill_stores"], k["spill_loads"]) > budget:
                spills.append(f"{n} on sm_{arch}: {k['spill_stores']} B stores, {k['spill_loads']} B loads")
    assert not spills, "kernels spill registers:\n" + "\n".join(spills)
