"""python -m gemm_runtime list / build, without a GPU (the GPU path is Registry.load's)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import gemm_runtime.__main__ as cli
from codegen.vocabulary import ARCH_SMEM_LIMIT, MmaAtom
from gemm_runtime.build import build
from gemm_runtime.settings import REPO_ROOT
from tests.helpers import spec_for, write_tiny_generated

PLAIN = spec_for(family="plain", cta=(64, 64, 32), stages=3)
# Builds for sm_80..sm_90, but its MMA is emulated there: filtered on a GPU unless allowed.
EMULATED = spec_for(family="emu", mma=MmaAtom.M8N8K4, cta=(64, 64, 32), stages=2)
# sm_90 only: built for sm_90, listed as not built for sm_80.
HOPPER = spec_for(family="hopper", cta=(64, 64, 32), stages=4, arch_min=90, arch_max=90)


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(cli, "visible_gpus", lambda: 0)


@pytest.fixture
def built(tmp_path):
    gen = write_tiny_generated(tmp_path / "gen", [PLAIN, EMULATED, HOPPER])
    out = tmp_path / "build"
    build(gen, out, archs=[80, 90], jobs=1, progress=False, with_emulated=True)
    return out


def _section(text: str, arch: int) -> str:
    start = text.index(f"\nsm_{arch}: ")
    end = text.find("\nsm_", start + 1)
    return text[start : end if end >= 0 else len(text)]


def test_list_without_gpu_shows_kernels_and_would_be_filters(built, no_gpu, capsys):
    assert cli.main(["list", "--build-dir", str(built)]) == 0
    captured = capsys.readouterr()
    out = captured.out
    assert captured.err == "" and "Traceback" not in out
    assert "no GPU is visible, so nothing is filtered per device" in out.splitlines()[0]

    sm80, sm90 = _section(out, 80), _section(out, 90)
    assert "sm_80: 2 kernels (NVRTC 13." in sm80 and "sm_90: 3 kernels (NVRTC 13." in sm90
    header = next(line for line in sm80.splitlines() if line.strip().startswith("name"))
    assert header.split() == ["name", "registers", "smem", "spills"]
    rows = {line.split()[0]: line.split()[1:] for line in sm80.splitlines() if line.strip().startswith("gemm_")}
    assert set(rows) >= {PLAIN.name, EMULATED.name}
    registers, smem, spills = (int(x) for x in rows[PLAIN.name])
    (rec,) = [r for r in cli.read_manifests(built)[0][0].records if r.name == PLAIN.name]
    assert registers == rec.registers and smem == PLAIN.smem_bytes and spills == 0
    # What was not built, and what a GPU of the arch would filter, with the registry's reasons.
    assert f"not built for sm_80:\n    {HOPPER.name}: family arch range sm_90..sm_90 excludes sm_80" in sm80
    assert f"on an sm_80 GPU ({ARCH_SMEM_LIMIT[80]} B shared memory), filtered out:" in sm80
    assert f"{EMULATED.name}: m8n8k4 MMA is emulated on sm_80" in sm80
    assert f"{EMULATED.name}: m8n8k4 MMA is emulated on sm_90" in sm90
    assert PLAIN.name + ":" not in out  # never filtered


def test_list_allow_emulated_filters_nothing(built, no_gpu, capsys):
    assert cli.main(["list", "--build-dir", str(built), "--allow-emulated"]) == 0
    out = capsys.readouterr().out
    assert "emulated on" not in out
    assert f"on an sm_80 GPU ({ARCH_SMEM_LIMIT[80]} B shared memory), nothing is filtered out" in out


@pytest.mark.parametrize("state", ["missing", "empty", "no_manifest", "corrupt"])
def test_list_without_builds_says_to_run_make_build(tmp_path, no_gpu, capsys, state):
    d = tmp_path / "build"
    if state != "missing":
        d.mkdir()
    if state == "no_manifest":
        (d / "sm_80").mkdir()
    if state == "corrupt":
        (d / "sm_80").mkdir()
        (d / "sm_80" / "manifest.json").write_text("{not json")
    assert cli.main(["list", "--build-dir", str(d)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("error: ") and str(d) in captured.err and "make build" in captured.err
    assert "Traceback" not in captured.err


def test_module_entry_point_and_build_forwarding(tmp_path):
    gen = write_tiny_generated(tmp_path / "gen", [PLAIN])
    out = tmp_path / "build"

    def run(*args):
        cmd = [sys.executable, "-m", "gemm_runtime", *args]
        return subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True)

    empty = run("list", "--build-dir", str(out))
    assert empty.returncode == 1 and "make build" in empty.stderr and "Traceback" not in empty.stderr

    made = run("build", "--generated", str(gen), "--out", str(out), "--arch", "80", "--no-progress")
    assert made.returncode == 0, made.stderr
    assert made.stdout.startswith("sm_80: 1 kernels (1 compiled")
    assert (out / "sm_80" / f"{PLAIN.name}.cubin").is_file()

    helped = run("--help")
    assert helped.returncode == 0 and "list" in helped.stdout and "build" in helped.stdout


def test_table_aligns_columns():
    lines = cli.table(("name", "n"), [("a", 1), ("bbb", 100)], indent="  ")
    assert lines == ["  name    n", "  a       1", "  bbb   100"]


@pytest.mark.gpu
def test_list_with_gpu_prints_the_registry(tmp_path, capsys):
    from gemm_runtime.build import detect_archs

    (arch,) = detect_archs()[:1]
    gen = write_tiny_generated(tmp_path / "gen", [PLAIN, EMULATED])
    out = tmp_path / "build"
    build(gen, out, archs=[arch], jobs=1, progress=False, with_emulated=True)
    assert cli.main(["list", "--build-dir", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"GPU 0: sm_{arch}, ") and "2 kernels" not in lines[0]
    assert lines[1].split() == [
        "name", "family", "mainloop", "mma", "cta", "warps", "stages", "b_order", "align", "d_type",
        "registers", "smem", "CTAs/SM",
    ]  # fmt: skip
    row = next(line.split() for line in lines if line.startswith(PLAIN.name))
    assert row[1:10] == ["plain", "sm80", "m16n8k16", "64x64x32", "2x2x1", "3", "nk", "8", "f16"]
    # registers: from the driver, so right even where NVRTC left ptxas's report out of the log
    assert int(row[10]) > 0 and int(row[11]) == PLAIN.smem_bytes and int(row[12]) >= 1
    assert lines[lines.index("filtered out:") + 1].startswith(f"  {EMULATED.name}: m8n8k4 MMA is emulated")

    assert cli.main(["list", "--build-dir", str(out), "--allow-emulated"]) == 0
    out_text = capsys.readouterr().out
    assert "filtered out: none" in out_text and "(emulated MMAs allowed)" in out_text


def test_list_names_missing_and_damaged_entries(built, no_gpu, capsys):
    (built / "sm_80" / f"{PLAIN.name}.cubin").unlink()
    cubin = built / "sm_90" / f"{HOPPER.name}.cubin"
    cubin.write_bytes(cubin.read_bytes()[:100])
    assert cli.main(["list", "--build-dir", str(built)]) == 1
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    assert "sm_80: 2 kernels" in captured.out  # the listing still prints
    err = captured.err
    assert err.startswith("error: 2 manifest entries are missing or damaged")
    assert f"{built / 'sm_80' / 'manifest.json'}: kernel {PLAIN.name!r}: cubin missing" in err
    assert f"{built / 'sm_90' / 'manifest.json'}: kernel {HOPPER.name!r}: cubin damaged" in err
    assert "truncated" in err and "make build" in err


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (lambda recs: recs[0].update(registers="lots"), "field 'registers': got 'lots', accepted: an integer >= 0"),
        (lambda recs: recs[0].update(registers=None), "field 'registers': got None, accepted: an integer >= 0"),
        (lambda recs: recs.__setitem__(0, "gemm_x"), "kernels[0]: got 'gemm_x', accepted: a mapping"),
    ],
)
def test_list_malformed_manifest_names_manifest_and_entry(built, no_gpu, capsys, change, needle):
    import json

    path = built / "sm_80" / "manifest.json"
    data = json.loads(path.read_text())
    change(data["kernels"])
    path.write_text(json.dumps(data))
    assert cli.main(["list", "--build-dir", str(built)]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and "Traceback" not in captured.err
    assert captured.err.startswith(f"error: {path}: kernels[0]") and needle in captured.err
    assert "make build" in captured.err


@pytest.mark.parametrize("device", ["2", "-1"])
def test_list_device_out_of_range_names_it(tmp_path, capsys, monkeypatch, device):
    # Like tune's --device: named, not a CUDA error from cuDeviceGet (or a negative index
    # passed to the driver).
    monkeypatch.setattr(cli, "visible_gpus", lambda: 2)
    assert cli.main(["list", "--build-dir", str(tmp_path), "--device", device]) == 1
    captured = capsys.readouterr()
    assert captured.err == f"error: --device {device}: 2 GPU(s) are visible (0..1)\n" and captured.out == ""


def test_an_empty_build_dir_is_refused_by_name(capsys):
    """``--build-dir "$BUILD"`` with BUILD unset listed the current folder as a build."""
    with pytest.raises(SystemExit) as e:
        cli.main(["list", "--build-dir", ""])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "argument --build-dir: got an empty path" in err
