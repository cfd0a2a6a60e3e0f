"""gemm_runtime.build: generated/ -> build/sm_XX (no GPU needed; NVRTC only)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from codegen.config import LoadedKernel
from codegen.render import write_generated
from codegen.spec import KernelSpec
from codegen.families import Mainloop
from codegen.vocabulary import BOrder, DataType, MmaAtom
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
    "spill_loads", "smem_static", "smem_dynamic", "threads", "size", "sha256",
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
    assert (m80["version"], m80["arch"], m90["arch"]) == (2, 80, 90)
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
            cubin = (out / f"sm_{m['arch']}" / rec["cubin"]).read_bytes()
            assert cubin[:4] == b"\x7fELF"
            assert (rec["size"], rec["sha256"]) == (len(cubin), hashlib.sha256(cubin).hexdigest())
    assert sorted(p.name for p in (out / "sm_80").iterdir()) == sorted(
        [".lock", "manifest.json", f"{SMALL.name}.cubin"]
    )
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


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(archs=[80.0]), r"archs: got \[80\.0\]"),  # was built into sm_80.0/
        (dict(archs=["80"]), r"archs: got \['80'\]"),  # was "unknown arch sm_80"
        (dict(archs=80), r"archs: got 80,"),  # was a TypeError
        (dict(archs=[]), r"archs: got \[\]"),  # built nothing, silently
        (dict(archs=[80], jobs=-3), r"jobs: got -3"),  # ran one job, silently
        (dict(archs=[80], jobs="2"), r"jobs: got '2'"),  # was a TypeError
    ],
)
def test_build_refuses_malformed_archs_and_jobs(generated, tmp_path, kwargs, message):
    out = tmp_path / "b"
    with pytest.raises(BuildError, match=message):
        build(generated, out, progress=False, **kwargs)
    assert not out.exists()


@pytest.mark.parametrize("jobs", ["0", "-2"])
def test_cli_refuses_a_jobs_count_below_one(generated, tmp_path, capsys, jobs):
    with pytest.raises(SystemExit) as info:
        main(["--generated", str(generated), "--out", str(tmp_path / "b"), "--arch", "80", "--jobs", jobs])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "--jobs" in err and "integer >= 1" in err
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize("variable", ["GEMM_BUILD_JOBS=many", "GEMM_TUNE=seq=0", "GEMM_UNPACK_MAX_MIB=-1"])
@pytest.mark.parametrize("entry", [["gemm_runtime.build"], ["gemm_runtime", "build"]])
def test_cli_malformed_environment_exits_2_without_a_traceback(generated, tmp_path, variable, entry):
    name, _, value = variable.partition("=")
    cmd = [sys.executable, "-m", *entry, "--generated", str(generated), "--out", str(tmp_path / "b"), "--arch", "80"]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, env={**os.environ, name: value})
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith(f"error: {name}") and proc.stderr.count("\n") == 1


@pytest.mark.parametrize("blocker", ["out", "arch_dir"])
def test_cli_unwritable_output_names_it_without_a_traceback(generated, tmp_path, capsys, blocker):
    # A file where the build directory (or its sm_80/) should be: one clear line, not a
    # "compile failure" per kernel nor a FileExistsError from the publication.
    out = tmp_path / "b"
    if blocker == "out":
        out.write_text("")
        where = out
    else:
        out.mkdir()
        (out / "sm_80").write_text("")
        where = out / "sm_80"
    code = main(["--generated", str(generated), "--out", str(out), "--arch", "80", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 1 and "cannot write" in err and str(where) in err and "Traceback" not in err
    assert "compile(s) failed" not in err


@pytest.mark.parametrize("where", ["../outside.cu", "/abs/outside.cu"])
def test_a_generated_source_outside_its_folder_is_refused(generated, tmp_path, capsys, where):
    # A hand-edited generated/manifest.json: the build compiled whatever file it named.
    manifest = generated / "manifest.json"
    data = json.loads(manifest.read_text())
    entry = next(e for e in data["kernels"] if e["name"] == SMALL.name)
    target = (generated / where) if not where.startswith("/") else tmp_path / "abs" / "outside.cu"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text((generated / entry["file"]).read_text())
    entry["file"] = where if not where.startswith("/") else str(target)
    manifest.write_text(json.dumps(data))
    code = main(["--generated", str(generated), "--out", str(tmp_path / "b"), "--arch", "80", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 1 and "outside" in err and str(manifest) in err and "Traceback" not in err
    assert not (tmp_path / "b" / "sm_80").exists()


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


def test_each_kernel_is_compiled_for_its_familys_target(tmp_path, monkeypatch):
    """The build asks NVRTC for the family's target: sm_90a for SM90 kernels (wgmma and
    setmaxnreg exist only there), the plain arch for the others. The compile cache is
    the seam: every compile is looked up there first with the same arguments."""
    from gemm_runtime import build as build_mod
    from gemm_runtime.compiler import CompileResult
    from tests.helpers import spec_for

    wgmma = spec_for(family="tst", mainloop=Mainloop.SM90, mma=MmaAtom.M64NK16, cta=(128, 128, 64), warps=(8, 1, 1),
                     stages=6, b_order=BOrder.KN, arch_min=90, arch_max=90)  # fmt: skip
    gen = tmp_path / "generated"
    write_generated([LoadedKernel(SMALL, _source(0)), LoadedKernel(wgmma, _source(1))], gen)
    asked = {}

    def lookup(source, *, name, arch, target=None, **_):
        asked[name, arch] = target
        return CompileResult(b"\x7fELF" + name.encode(), "", 64, 0, 0, 0, 0, True, 0.0)

    monkeypatch.setattr(build_mod.compiler, "lookup", lookup)
    report = build(gen, tmp_path / "build", archs=[80, 90], jobs=1, progress=False)
    assert asked == {(SMALL.name, 80): None, (SMALL.name, 90): None, (wgmma.name, 90): "sm_90a"}
    assert report.cached == 3 and report.compiled == 0
    assert _manifest(tmp_path / "build", 80)["skipped"] == [
        {"name": wgmma.name, "reason": "family arch range sm_90..sm_90 excludes sm_80"}]


def test_full_default_set_compiles(tmp_path):
    """The shipped kernel set (codegen/configs/*.yaml) compiles for every arch its families
    name (sm_70 through the [volta] extra, which CI installs; sm_86 for the GPUs of 100 KB
    of shared memory an SM, whose own tiles are built for sm_86 / sm_89 only), emulated
    pairs included, and the kernels that dispatch natively on sm_80 / sm_86 / sm_90 do not
    spill beyond budget.

    The compiles go through the repository's compile cache (GEMM_BUILD_DIR's .cache), so
    in a clean clone (CI) this compiles every kernel cold and fills the cache, and after
    `make build` it is served from it in seconds. A hit is no weaker than a compile: the
    key is the exact source, options, include tree, NVRTC library and arch
    (compiler.cache_key), the entry's cubin must match its sha256, and one kernel of an
    arch served from the cache is recompiled without it below and must give the same
    cubin (one, to keep a warm run in seconds)."""
    from codegen.spec import KernelSpec
    from gemm_runtime import compiler, nvrtc_legacy
    from gemm_runtime.build import BUILD_OPTIONS, INCLUDE_DIR
    from gemm_runtime.settings import settings

    gen, out = tmp_path / "generated", tmp_path / "build"
    cache = settings().build_dir / ".cache"
    subprocess.run([sys.executable, "-m", "codegen", "--out", str(gen)], cwd=REPO_ROOT, check=True)
    specs = {k["name"]: KernelSpec.from_json(k["spec"]) for k in json.loads((gen / "manifest.json").read_text())["kernels"]}
    assert specs
    archs = [75, 80, 86, 90] + ([70] if nvrtc_legacy.installed() else [])

    first = build(gen, out, archs=archs, jobs=None, progress=False, with_emulated=True, cache_dir=cache)
    again = build(gen, out, archs=archs, jobs=None, progress=False, with_emulated=True, cache_dir=cache)
    assert again.compiled == 0 and again.cached == first.compiled + first.cached

    spills = []
    for arch in archs:
        m = _manifest(out, arch)
        skipped = {s["name"]: s["reason"] for s in m["skipped"]}
        built = {k["name"]: k for k in m["kernels"]}
        expected = sorted(n for n, spec in specs.items() if spec.archs_that_fit([arch]))
        assert expected, f"no default kernel targets sm_{arch}"
        assert sorted(built) == expected, f"sm_{arch} misses kernels: {skipped}"
        for n, k in built.items():
            budget = specs[n].spill_budget(arch)
            native = arch in (80, 86, 90) and specs[n].mma.native_on(arch)
            if native and max(k["spill_stores"], k["spill_loads"]) > budget:
                spills.append(f"{n} on sm_{arch}: {k['spill_stores']} B stores, {k['spill_loads']} B loads")
    assert not spills, "kernels spill registers:\n" + "\n".join(spills)

    # The SM90 kernels, dense and quantized: on sm_90 only, built for sm_90a (the compile cache's entry for
    # that target holds the manifest's cubin), without spills or a stack, and with the
    # wgmma pipelining kept (ptxas says when it serializes wgmma; test_sm90_headers.py).
    hopper = sorted(n for n, spec in specs.items() if spec.mainloop in (Mainloop.SM90, Mainloop.SM90_QUANT))
    assert hopper
    m90 = {k["name"]: k for k in _manifest(out, 90)["kernels"]}
    for arch in archs:
        if arch != 90:
            skipped = {s["name"]: s["reason"] for s in _manifest(out, arch)["skipped"]}
            assert all(skipped[n] == f"family arch range sm_90..sm_90 excludes sm_{arch}" for n in hopper), arch
    for n in hopper:
        rec, spec = m90[n], specs[n]
        source = (gen / spec.family / f"{n}.cu").read_text()
        hit = compiler.lookup(source, name=n, arch=90, include_dirs=[INCLUDE_DIR], options=BUILD_OPTIONS,
                              cache_dir=cache, target="sm_90a")  # fmt: skip
        assert hit is not None and hashlib.sha256(hit.cubin).hexdigest() == rec["sha256"], n
        assert rec["spill_stores"] == rec["spill_loads"] == rec["stack_frame"] == 0, n
        assert (rec["threads"], rec["smem_dynamic"]) == (spec.threads, spec.smem_bytes), n
        assert 0 < rec["registers"] <= min(255, 65536 // spec.threads), n  # __launch_bounds__(threads, 1)
        assert f"Compiling entry function '{n}' for 'sm_90a'" in hit.log, hit.log
        assert "serialized" not in hit.log and "C7508" not in hit.log and "setmaxnreg ignored" not in hit.log, hit.log

    served = [r.arch for r in first.archs if r.cached]
    if served:
        arch = served[0]
        name = min(n for n in specs if specs[n].archs_that_fit([arch]))
        source = (gen / specs[name].family / f"{name}.cu").read_text()
        fresh = compiler.compile_cubin(
            source, name=name, arch=arch, include_dirs=[INCLUDE_DIR], options=BUILD_OPTIONS, cache_dir=None
        )
        assert fresh.cubin == (out / f"sm_{arch}" / f"{name}.cubin").read_bytes(), f"{name} on sm_{arch}"


# ---- interruption ----------------------------------------------------------------------
# Four real GEMM kernels: each takes NVRTC seconds, so a signal lands mid-compile.
SMALL_FAMILY = dict(
    name="intr", arch=[80, 90], mainloop="sm80", mma="m16n8k16", a_type="f16", b_type="f16", acc_type="f32",
    d_types=["f16", "f32"], b_orders=["nk", "kn"], align=[8],
    tiles=[{"cta": [128, 128, 32], "warps": [2, 2, 1], "stages": 3}],
)  # fmt: skip


def _children(pid: int) -> set[int]:
    """Child pids of ``pid``, from /proc (no psutil)."""
    out = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out |= {int(c) for c in (task / "children").read_text().split()}
        except OSError:
            pass
    return out


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has ended


def _is_worker(pid: int) -> bool:
    try:
        return b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_stops_a_cold_build_at_once(tmp_path, signum, code):
    from tests.helpers import build_dir_problems

    import yaml

    (tmp_path / "small.yaml").write_text(yaml.safe_dump({"families": [SMALL_FAMILY]}))
    gen, out = tmp_path / "gen", tmp_path / "out"
    cmd = [sys.executable, "-m", "codegen", "--config", str(tmp_path / "small.yaml"), "--out", str(gen)]
    subprocess.run(cmd, cwd=REPO_ROOT, check=True, capture_output=True)
    cmd = [sys.executable, "-m", "gemm_runtime.build", "--generated", str(gen), "--out", str(out), "--jobs", "2",
           "--arch", "80", "--arch", "90"]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        workers: set[int] = set()
        deadline = time.monotonic() + 60
        while len(workers) < 2 and time.monotonic() < deadline and proc.poll() is None:
            workers = {p for p in _children(proc.pid) if _is_worker(p)}
            time.sleep(0.05)
        assert len(workers) == 2, "the build's workers never started"
        time.sleep(0.5)  # into NVRTC
        proc.send_signal(signum)
        stdout, stderr = proc.communicate(timeout=3)
    finally:
        proc.kill()
    assert proc.returncode == code, stderr
    assert "Traceback" not in stderr + stdout
    assert len(stderr.strip().splitlines()) == 1 and signal.Signals(signum).name in stderr, stderr
    assert not [p for p in workers if _alive(p)]
    assert build_dir_problems(out) == []


# ---- concurrency ---------------------------------------------------------------------
def test_concurrent_builds_of_different_sets_stay_consistent(tmp_path):
    """What races is publication, so the cache is warm: each round two builds of
    different sets publish into one directory at the same time."""
    from codegen.vocabulary import MmaAtom
    from tests.helpers import build_dir_problems, spec_for, write_tiny_generated

    set_a = [spec_for(family=f"a{i}", cta=(64, 64, 32), stages=3) for i in range(4)]
    set_b = [spec_for(family=f"b{i}", mma=MmaAtom.M16N8K8, cta=(64, 64, 32), stages=3) for i in range(4)]
    gens = [write_tiny_generated(tmp_path / name, specs) for name, specs in (("ga", set_a), ("gb", set_b))]
    out = tmp_path / "out"
    for gen in gens:
        build(gen, out, archs=[80, 90], jobs=2, progress=False)

    def cmd(gen: Path) -> list[str]:
        return [sys.executable, "-m", "gemm_runtime.build", "--generated", str(gen), "--out", str(out),
                "--arch", "80", "--arch", "90", "--no-progress"]  # fmt: skip

    sets = [{s.name for s in set_a}, {s.name for s in set_b}]
    for _ in range(4):
        procs = [subprocess.Popen(cmd(g), cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for g in gens]
        for p in procs:
            _, err = p.communicate(timeout=120)
            assert p.returncode == 0, err
        assert build_dir_problems(out) == []
        for arch in (80, 90):
            assert {k["name"] for k in _manifest(out, arch)["kernels"]} in sets


# ---- what is built -------------------------------------------------------------------
def test_emulated_pairs_are_skipped_unless_asked(tmp_path):
    from codegen.vocabulary import MmaAtom
    from tests.helpers import spec_for, write_tiny_generated

    emu = spec_for(family="emu", mainloop=Mainloop.SM70, mma=MmaAtom.M8N8K4, cta=(64, 64, 32), stages=2, arch_min=75)
    gen = write_tiny_generated(tmp_path / "gen", [emu])
    out = tmp_path / "build"
    report = build(gen, out, archs=[75, 80], jobs=1, progress=False)
    assert [k["name"] for k in _manifest(out, 75)["kernels"]] == [emu.name]  # native on sm_75
    assert _manifest(out, 80)["kernels"] == []
    (reason,) = [s["reason"] for s in _manifest(out, 80)["skipped"] if s["name"] == emu.name]
    assert "m8n8k4 MMA is emulated on sm_80" in reason and "--with-emulated" in reason
    assert not any(emu.name in line for line in report.warning_lines())

    again = build(gen, out, archs=[75, 80], jobs=1, progress=False, with_emulated=True)
    assert [k["name"] for k in _manifest(out, 80)["kernels"]] == [emu.name]
    assert again.compiled == 1 and again.cached == 1


def test_next_build_restores_missing_and_damaged_cubins(generated, tmp_path, capsys):
    out = tmp_path / "build"
    build(generated, out, archs=[90], jobs=2, progress=False)
    names = sorted([SMALL.name, HOPPER.name])
    (out / "sm_90" / f"{names[0]}.cubin").unlink()
    (out / "sm_90" / f"{names[1]}.cubin").write_bytes(b"\x7fELF")
    assert main(["--generated", str(generated), "--out", str(out), "--arch", "90", "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert "sm_90: 2 kernels (0 compiled, 2 cached, 0 skipped)" in captured.out
    assert "2 damaged or missing cubins restored" in captured.out
    assert all(f"restored {n}.cubin" in captured.err for n in names)
    from tests.helpers import build_dir_problems

    assert build_dir_problems(out) == []


def test_progress_lines_without_a_terminal(generated, tmp_path, capsys, monkeypatch):
    import gemm_runtime.build as build_mod

    real = build_mod._Progress
    monkeypatch.setattr(build_mod, "_Progress", lambda total, enabled: real(total, enabled, every=0.0))
    build(generated, tmp_path / "build", archs=[80, 90], jobs=2, progress=True)
    err = capsys.readouterr().err  # pytest's capture is not a terminal
    assert "nvrtc: 1/3 kernels" in err or "nvrtc: 2/3 kernels" in err
    assert "sm_80: 1 kernels done (" in err and "sm_90: 2 kernels done (" in err and "s of NVRTC time" in err


@pytest.mark.parametrize("option", ["--out", "--generated"])
@pytest.mark.parametrize("entry", [[], ["build"]])
def test_cli_refuses_an_empty_path_rather_than_the_current_folder(generated, tmp_path, monkeypatch, capsys, option,
                                                                  entry):  # fmt: skip
    """``--out "$BUILD"`` with BUILD unset built into the current folder."""
    import gemm_runtime.__main__ as cli

    monkeypatch.chdir(tmp_path)
    paths = {"--generated": str(generated), "--out": str(tmp_path / "b"), option: ""}
    argv = [*entry, *(x for kv in paths.items() for x in kv), "--arch", "80", "--no-progress"]
    with pytest.raises(SystemExit) as info:
        (cli.main if entry else main)(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2 and f"argument {option}: got an empty path" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["generated"]
