"""codegen.render and the CLI: deterministic output, minimal rewrites, stale cleanup, NVRTC compile."""

from __future__ import annotations

import re

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from codegen import params
from codegen.config import REPO_ROOT, LoadedKernel, default_config_paths, load_configs
from codegen.render import INCLUDE_DIR, kernel_file, render_kernel, write_generated


@pytest.fixture(scope="module")
def default_set() -> list[LoadedKernel]:
    return load_configs(default_config_paths())


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _mtimes(root: Path) -> dict[str, int]:
    return {p.relative_to(root).as_posix(): p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}


def test_render_is_deterministic(default_set: list[LoadedKernel]) -> None:
    first = [render_kernel(k.spec, k.source) for k in default_set]
    second = [render_kernel(k.spec, k.source) for k in load_configs(default_config_paths())]
    assert first == second


def test_rendered_content(default_set: list[LoadedKernel]) -> None:
    k = default_set[0]
    text = render_kernel(k.spec, k.source)
    assert f"from {k.source}." in text
    assert f"extern \"C\" __global__ void __launch_bounds__({k.spec.threads}) {k.spec.name}(" in text
    assert params.cpp_struct() in text
    assert f"static_assert(Config::kSmemBytes == {k.spec.smem_bytes}," in text
    assert f"static_assert(Config::kThreads == {k.spec.threads}," in text
    assert f'#include "{k.spec.mainloop.header}"' in text
    assert text.endswith("}\n")


def test_rendered_direct_b_kernel(default_set: list[LoadedKernel]) -> None:
    # The direct-B flag and the register cap reach the compiled code.
    direct = [k for k in default_set if k.spec.direct_b]
    assert direct, "the default set ships direct-B decode kernels"
    for k in direct:
        text = render_kernel(k.spec, k.source)
        grouped = "true" if k.spec.grouped else "false"
        # Direct B, the grouped flag, B not staged in shared memory, no decode ring, padded rows.
        assert re.search(rf", {k.spec.align}, true, {grouped},\s+false, false, false,\s+false>;", text), text
        low, hopper = k.spec.min_ctas_per_sm, k.spec.min_ctas_per_sm_hopper
        if low == hopper:
            bounds = f"{k.spec.threads}, {low}" if low > 1 else f"{k.spec.threads}"
            assert f"__launch_bounds__({bounds}) {k.spec.name}(" in text
        else:
            # The cap by architecture: sm_90 and later take min_ctas_per_sm_hopper.
            assert re.search(rf"#if __CUDA_ARCH__ >= 900\n#define GEMM_MIN_CTAS_PER_SM {hopper}\n#else\n"
                             rf"#define GEMM_MIN_CTAS_PER_SM {low}\n#endif\n", text), text
            assert f"__launch_bounds__({k.spec.threads}, GEMM_MIN_CTAS_PER_SM) {k.spec.name}(" in text
    assert any(k.spec.min_ctas_per_sm_hopper != k.spec.min_ctas_per_sm for k in direct)
    dense = render_kernel(default_set[0].spec, default_set[0].source)
    assert re.search(rf", {default_set[0].spec.align}, false, false,\s+false, false, false,\s+false>;", dense)
    grouped = dataclasses.replace(default_set[0].spec, grouped=True)
    assert re.search(rf", {grouped.align}, false, true,\s+false, false, false,\s+false>;",
                     render_kernel(grouped, default_set[0].source))


def test_rendered_staged_b_kernel() -> None:
    # The sm80_staged family's flag reaches GemmConfig (the parameter two before the last).
    from tests.sm80_staged_kernels import YAML

    k = load_configs([YAML])[0]
    assert k.spec.staged_b
    assert re.search(rf", {k.spec.align}, false, false,\s+true, false, false,\s+false>;", render_kernel(k.spec, k.source))


def test_rendered_decode_ring_kernel() -> None:
    # The sm80_ring family's kernels: B through the ring (not direct), the ring flag before the rows'.
    kernels = load_configs([REPO_ROOT / "bench/experiments/decode_ring_tiles.yaml"])
    assert kernels
    for k in kernels:
        assert k.spec.decode_ring and not k.spec.direct_b and not k.spec.staged_b
        assert re.search(rf", {k.spec.align}, false, false,\s+false, true, false,\s+false>;", render_kernel(k.spec, k.source))


def test_rendered_xor_rows_kernel() -> None:
    # The sm80_xor family's kernels: the swizzled rows' flag (before the "kn" lean flag), grouped or not.
    from tests.sm80_xor_kernels import YAML

    kernels = load_configs([YAML])
    assert any(k.spec.grouped for k in kernels)
    for k in kernels:
        grouped = "true" if k.spec.grouped else "false"
        text = render_kernel(k.spec, k.source)
        lean_kn = "true" if k.spec.lean_kn else "false"  # the experiment's "kn" tiles
        assert re.search(rf", {k.spec.align}, false, {grouped},\s+false, false, true,\s+{lean_kn}>;", text), text


def test_rendered_lean_kn_kernel(default_set: list[LoadedKernel]) -> None:
    # The "kn" lean-copies flag last: on the dense "kn" sm80 tiles but 128x128x64 w2x2,
    # never on "nk" B (whose copies are lean without it).
    kn = [k for k in default_set if k.spec.b_order.value == "kn" and k.spec.mainloop.value == "sm80"]
    lean = {k.spec.name for k in kn if k.spec.lean_kn}
    assert lean and not any(k.spec.lean_kn for k in default_set if k.spec.b_order.value == "nk")
    assert {(k.spec.cta, k.spec.warps) for k in kn if not k.spec.lean_kn} == {((128, 128, 64), (2, 2, 1))}
    # The 8-warp 64x64 tiles of K 64 spill with them on sm_90 (a budget there); no other does.
    budget = {k.spec.name for k in kn if k.spec.spill_budget(90) > 0 and not k.spec.quantized}
    assert {(k.spec.cta, k.spec.warps) for k in kn if k.spec.name in budget} == {
        ((128, 256, 64), (2, 4, 1)), ((256, 128, 64), (4, 2, 1))}
    for k in kn:
        flag = "true" if k.spec.name in lean else "false"
        assert re.search(rf", false,\s+{flag}>;", render_kernel(k.spec, k.source)), k.spec.name


def test_write_generated(tmp_path: Path, default_set: list[LoadedKernel]) -> None:
    out = tmp_path / "generated"
    result = write_generated(default_set, out)
    assert len(result.written) == len(default_set) + 1 and not result.removed  # + manifest
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["version"] == 1
    assert [e["name"] for e in manifest["kernels"]] == [k.spec.name for k in default_set]
    for entry, k in zip(manifest["kernels"], default_set, strict=True):
        spec = k.spec.to_json()
        assert entry == {"name": k.spec.name, "file": kernel_file(k.spec), "source": k.source, "spec": spec}
        assert (out / entry["file"]).read_text() == render_kernel(k.spec, k.source)
    text = (out / "manifest.json").read_text()
    assert text.endswith("}\n") and text == json.dumps(manifest, sort_keys=True, indent=2) + "\n"
    # No temp files left behind.
    assert not [p for p in out.rglob("*") if p.name.startswith(".")]

    # Same input, second output folder: byte-identical.
    other = tmp_path / "again"
    write_generated(load_configs(default_config_paths()), other)
    assert _tree(other) == _tree(out)


def test_second_write_touches_nothing(tmp_path: Path, default_set: list[LoadedKernel]) -> None:
    out = tmp_path / "generated"
    write_generated(default_set, out)
    for p in out.rglob("*"):  # push mtimes into the past so a rewrite would show
        if p.is_file():
            os.utime(p, ns=(1_000_000_000, 1_000_000_000))
    before = _mtimes(out)
    result = write_generated(default_set, out)
    assert not result.written and not result.removed
    assert _mtimes(out) == before


def test_changed_kernel_rewrites_only_its_file(tmp_path: Path, default_set: list[LoadedKernel]) -> None:
    out = tmp_path / "generated"
    write_generated(default_set, out)
    victim = out / kernel_file(default_set[3].spec)
    victim.write_text("// edited by hand\n")
    result = write_generated(default_set, out)
    assert result.written == [victim]
    assert victim.read_text() == render_kernel(default_set[3].spec, default_set[3].source)


def test_stale_files_removed_others_kept(tmp_path: Path, default_set: list[LoadedKernel]) -> None:
    out = tmp_path / "generated"
    out.mkdir()
    (out / "README.md").write_text("hands off\n")
    write_generated(default_set, out)
    lowalign_f16 = out / "sm80_f16_lowalign"
    (lowalign_f16 / "notes.txt").write_text("not ours\n")  # keeps its folder alive
    keep = [k for k in default_set if k.spec.family not in ("sm80_f16_lowalign", "sm80_bf16_lowalign")]
    dropped_one = default_set[0]
    keep.remove(dropped_one)

    result = write_generated(keep, out)
    assert not (out / kernel_file(dropped_one.spec)).exists()
    assert (out / dropped_one.spec.family).is_dir()  # still has other kernels
    assert not (out / "sm80_bf16_lowalign").exists()  # emptied family folder removed
    assert sorted(p.name for p in lowalign_f16.iterdir()) == ["notes.txt"]
    assert (out / "README.md").read_text() == "hands off\n"
    assert len(result.removed) == 1 + 8 + 8 + 1  # files, files, files, one folder
    manifest = json.loads((out / "manifest.json").read_text())
    assert len(manifest["kernels"]) == len(keep)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "codegen", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )


def test_cli_bad_config_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    text = (REPO_ROOT / "codegen/configs/sm80_f16.yaml").read_text().replace("stages: 6", "stages: 1")
    bad.write_text(text)
    proc = _cli("--config", str(bad), "--out", str(tmp_path / "out"))
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    expected = f"{bad.as_posix()}: families[0] (sm80_f16).tiles[5]: field 'stages': got 1, accepted: an integer >= 2"
    assert expected in proc.stderr
    assert not (tmp_path / "out").exists()


def test_cli_writes(tmp_path: Path) -> None:
    config = REPO_ROOT / "codegen/configs/sm80_lowalign.yaml"
    proc = _cli("--config", str(config), "--out", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("24 kernels from 1 files -> ")
    assert len(json.loads((tmp_path / "out/manifest.json").read_text())["kernels"]) == 24


# One kernel per code path the templates select: plain, kn + split-K, fp32 output, register
# copy, quantized B with A copied through registers and an fp32 output.
NVRTC_KERNELS = [
    "gemm_sm80_f16_sm80_m16n8k16_af16_bf16_accf32_df16_128x128x32_w2x2x1_s4_nk_align8",
    "gemm_sm80_bf16_sm80_m16n8k16_abf16_bbf16_accf32_dbf16_16x64x128_w1x2x2_s4_kn_align8",
    "gemm_sm80_bf16_f32out_sm80_m16n8k16_abf16_bbf16_accf32_df32_128x128x32_w2x2x1_s4_nk_align8",
    "gemm_sm80_f16_lowalign_sm80_m16n8k16_af16_bf16_accf32_df16_64x64x32_w2x2x1_s3_kn_align1",
    "gemm_sm80_f16_w4_lowalign_sm80_m16n8k16_af16_bu4_accf32_df32_64x128x64_w1x4x1_s4_nk_align1",
]


@pytest.mark.parametrize("name", NVRTC_KERNELS)
def test_nvrtc_compiles(name: str, default_set: list[LoadedKernel]) -> None:
    """Catches drift between the template, the headers and codegen (static_asserts included)."""
    nvrtc = pytest.importorskip("cuda.bindings.nvrtc")
    (k,) = [k for k in default_set if k.spec.name == name]
    src = render_kernel(k.spec, k.source).encode()
    err, prog = nvrtc.nvrtcCreateProgram(src, f"{name}.cu".encode(), 0, [], [])
    assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS
    try:
        opts = [b"--gpu-architecture=sm_80", b"-std=c++17", f"--include-path={INCLUDE_DIR}".encode()]
        (res,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        # NOTE: writable buffers: NVRTC writes through the pointer, and b" " * 1 (an
        # empty log is just its NUL) is CPython's shared b" " singleton, which it would
        # turn into b"\x00" for the rest of the process (unpickling the int 32 then
        # gave 0 in a later test).
        _, size = nvrtc.nvrtcGetProgramLogSize(prog)
        log = bytearray(max(1, size))
        nvrtc.nvrtcGetProgramLog(prog, log)
        assert res == nvrtc.nvrtcResult.NVRTC_SUCCESS, log.decode(errors="replace")
        _, ptx_size = nvrtc.nvrtcGetPTXSize(prog)
        ptx = bytearray(ptx_size)
        nvrtc.nvrtcGetPTX(prog, ptx)
        assert f".entry {name}(".encode() in ptx
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def test_cli_extends_the_default_set(tmp_path: Path) -> None:
    extra = tmp_path / "extra.yaml"
    text = (REPO_ROOT / "codegen/configs/sm80_f16.yaml").read_text().replace("name: sm80_f16", "name: my_f16")
    extra.write_text(text)
    proc = _cli("--with-defaults", "--config", str(extra), "--out", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    families = {k["spec"]["family"] for k in manifest["kernels"]}
    assert "my_f16" in families and "sm80_f16" in families and "sm70_f16_m8n8k4" in families


@pytest.mark.parametrize("option", ["--out", "--config"])
def test_cli_refuses_an_empty_path_and_leaves_the_current_folder_alone(tmp_path, monkeypatch, capsys, option):
    """``--out "$DIR"`` with DIR unset: the empty path was the current folder, where the
    sync wrote the kernel set and deleted every <folder>/*.cu not in it."""
    from codegen.__main__ import main

    monkeypatch.chdir(tmp_path)
    keep = tmp_path / "mine" / "keep.cu"
    keep.parent.mkdir()
    keep.write_text("// not generated\n")
    config = str(REPO_ROOT / "codegen/configs/sm80_lowalign.yaml")
    argv = ["--config", config, "--out", ""] if option == "--out" else ["--config", "", "--out", str(tmp_path / "o")]
    with pytest.raises(SystemExit) as info:
        main(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2 and f"argument {option}: got an empty path" in err
    assert keep.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["mine"]


def test_an_out_folder_of_the_users_keeps_the_kernels_it_did_not_generate(tmp_path: Path) -> None:
    """``--out`` naming a project's folder: the sync deleted every <folder>/*.cu there that
    was not in the kernel set, hand-written kernels included, and the folders it emptied."""
    mine = tmp_path / "kernels" / "fast.cu"
    mine.parent.mkdir()
    mine.write_text("// my hand-written kernel\n")
    config = REPO_ROOT / "codegen/configs/sm80_lowalign.yaml"
    proc = _cli("--config", str(config), "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert mine.read_text() == "// my hand-written kernel\n"
    assert "0 removed" in proc.stdout
    # A stale kernel the generator wrote is still removed.
    loaded = load_configs([config])
    stale = tmp_path / kernel_file(loaded[0].spec)
    assert stale.exists()
    assert write_generated(loaded[1:], tmp_path).removed == [stale] and not stale.exists()
    assert mine.exists()
