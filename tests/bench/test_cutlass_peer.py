"""bench.cutlass_peer without a GPU: the variant catalogues (sm90 and sm80), cache keys,
argument parsing, launch configurations, failure records and the CLI's failure path; with
nvidia-cutlass importable, also the CUTLASS source each variant emits (no nvcc, no GPU)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bench import cutlass_peer as cp

ROOT = Path(__file__).resolve().parents[2]
HAS_CUTLASS = importlib.util.find_spec("cutlass_cppgen") is not None


def test_variant_names_are_unique_and_describe_the_variant():
    names = [v.name for v in cp.VARIANTS]
    assert len(set(names)) == len(names)
    assert 1 <= len(names) <= 8  # each costs about a minute of nvcc
    assert cp.Variant("cooperative", (128, 256, 64), (2, 1)).name == "coop_128x256x64_c2x1"
    assert cp.Variant("pingpong", (128, 128, 64), (1, 1)).name == "ping_128x128x64_c1x1"


def test_each_schedule_pairs_with_its_tma_epilogue():
    pairs = {v.schedule: v.schedule_names() for v in cp.VARIANTS}
    assert pairs == {
        "cooperative": ("TmaWarpSpecializedCooperative", "TmaWarpSpecializedCooperative"),
        "pingpong": ("TmaWarpSpecializedPingpong", "TmaWarpSpecialized"),
    }
    assert {v.cluster for v in cp.VARIANTS} <= {(1, 1), (2, 1), (1, 2)}


def test_variants_named():
    assert cp.variants_named(None) == list(cp.VARIANTS)
    subset = [cp.VARIANTS[2].name, cp.VARIANTS[0].name]
    assert cp.variants_named(subset) == [cp.VARIANTS[0], cp.VARIANTS[2]]  # catalogue order
    with pytest.raises(ValueError, match="unknown variant"):
        cp.variants_named(["coop_1x1x1_c1x1"])


def test_sm80_catalogue_names_are_unique_beside_sm90():
    names = [v.name for v in cp.ALL_VARIANTS]
    assert len(set(names)) == len(names)
    assert all(v.name.startswith("sm80_") for v in cp.SM80_VARIANTS)
    assert not any(v.name.startswith("sm80_") for v in cp.VARIANTS)
    assert 1 <= len(cp.SM80_VARIANTS) <= 6  # each costs about a minute of nvcc, per dtype
    v = cp.Sm80Variant((128, 256, 64), (2, 4), 3)
    assert v.name == "sm80_128x256x64_w2x4_s3_sw8"
    assert (v.warp_tile, v.threads, v.family, v.kernel_cc, v.launch_cluster) == ((64, 64, 64), 256, "sm80", 80, None)
    assert cp.Sm80Variant((128, 128, 32), (2, 2), 5, swizzle=1).name == "sm80_128x128x32_w2x2_s5_sw1"
    assert {(x.family, x.kernel_cc) for x in cp.VARIANTS} == {("sm90", 90)}
    assert cp.VARIANTS[1].launch_cluster == (2, 1)


@pytest.mark.parametrize("variant", cp.SM80_VARIANTS, ids=lambda v: v.name)
def test_sm80_variants_are_whole_mma_tiles_within_cc80_shared_memory(variant):
    (m, n, k), (wm, wn) = variant.tile, variant.warps
    assert m % wm == 0 and n % wn == 0
    warp_m, warp_n, warp_k = variant.warp_tile
    assert warp_m % 16 == 0 and warp_n % 8 == 0 and warp_k % 16 == 0  # mma.sync m16n8k16
    assert variant.threads <= 256 and variant.stages >= 3
    assert variant.stages * (m + n) * k * 2 <= 163 * 1024  # the mainloop, 16-bit, on an A100's budget


def test_variants_named_by_family():
    assert cp.variants_named(None) == list(cp.VARIANTS)  # today's default: sm90 only
    assert cp.variants_named(None, "sm90") == list(cp.VARIANTS)
    assert cp.variants_named(None, "sm80") == list(cp.SM80_VARIANTS)
    assert cp.variants_named(None, "both") == list(cp.VARIANTS) + list(cp.SM80_VARIANTS)
    sm80, sm90 = cp.SM80_VARIANTS[1], cp.VARIANTS[0]
    assert cp.variants_named([sm80.name, sm90.name]) == [sm90, sm80]  # names alone: any family
    assert cp.variants_named([sm80.name], "sm80") == [sm80]
    with pytest.raises(ValueError, match="unknown variant.*in family sm80"):
        cp.variants_named([sm90.name], "sm80")
    with pytest.raises(ValueError, match="unknown family"):
        cp.variants_named(None, "sm75")


def test_cli_selects_variants_by_family():
    with pytest.raises(SystemExit) as exc:
        cp.main(["--family", "sm80", "--variants", cp.VARIANTS[0].name])
    assert exc.value.code == 2
    with pytest.raises(SystemExit):
        cp.main(["--family", "sm70"])


def test_compile_jobs(monkeypatch):
    monkeypatch.setattr(cp.os, "cpu_count", lambda: 16)
    assert cp.compile_jobs(None, 10) == cp.DEFAULT_MAX_JOBS == 8
    assert cp.compile_jobs(16, 10) == 10  # an explicit --jobs may pass the default cap
    assert cp.compile_jobs(None, 3) == 3
    assert cp.compile_jobs(4, 0) == 1
    monkeypatch.setattr(cp.os, "cpu_count", lambda: None)
    assert cp.compile_jobs(None, 5) == 1


@pytest.mark.skipif(importlib.util.find_spec("cuda.bindings") is None, reason="needs cuda-bindings")
def test_launch_config_has_a_cluster_for_sm90_only():
    from cuda.bindings import driver

    plain = cp._launch_config(driver, [8, 16, 1], [256, 1, 1], 147456, cp.SM80_VARIANTS[0].launch_cluster)
    assert plain.numAttrs == 0 and len(plain.attrs) == 0
    assert (plain.gridDimX, plain.gridDimY, plain.blockDimX, plain.sharedMemBytes) == (8, 16, 256, 147456)
    cluster = cp._launch_config(driver, [132, 1, 1], [384, 1, 1], 200000, cp.VARIANTS[1].launch_cluster)
    assert cluster.numAttrs == 1
    attr = cluster.attrs[0]
    assert attr.id == driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    assert (attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z) == (2, 1, 1)


def test_dynamic_shared_memory_is_allowed_above_48_kib():
    calls = []

    class Driver:
        class CUfunction_attribute:
            CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = "max_dynamic_smem"

        @staticmethod
        def cuFuncSetAttribute(kernel, attr, value):
            calls.append((kernel, attr, value))
            return (1 if value > 227 * 1024 else 0,)

    cp.allow_dynamic_smem(Driver, "k", 48 * 1024)
    assert calls == []
    cp.allow_dynamic_smem(Driver, "k", 147456)
    assert calls == [("k", "max_dynamic_smem", 147456)]
    with pytest.raises(RuntimeError, match="MAX_DYNAMIC_SHARED_SIZE_BYTES"):
        cp.allow_dynamic_smem(Driver, "k", 300 * 1024)


def test_plan_key_separates_dtype_order_and_variant():
    v0, v1 = cp.VARIANTS[0], cp.VARIANTS[1]
    keys = {cp.plan_key(dt, order, v) for dt in (torch.float16, torch.bfloat16) for order in cp.ORDERS for v in (v0, v1)}
    assert len(keys) == 8
    assert cp.plan_key(torch.bfloat16, "nk", v0) == ("bf16", "nk", v0.name)
    with pytest.raises(ValueError):
        cp.plan_key(torch.float32, "nk", v0)
    with pytest.raises(ValueError):
        cp.plan_key(torch.float16, "nt", v0)


def test_cache_subdir_names_both_versions(tmp_path):
    assert cp.cache_subdir(tmp_path, "4.2.0.0", "13.0") == tmp_path / "nvidia-cutlass-4.2.0.0_nvcc-13.0"


def test_problem_dims():
    assert cp.problem_dims((64, 256), (512, 256), (64, 512), "nk") == (64, 512, 256)
    assert cp.problem_dims((64, 256), (256, 512), (64, 512), "kn") == (64, 512, 256)
    with pytest.raises(ValueError, match="do not match"):
        cp.problem_dims((64, 256), (256, 512), (64, 512), "nk")
    with pytest.raises(ValueError, match="multiples of 8"):
        cp.problem_dims((64, 252), (512, 252), (64, 512), "nk")


def test_parse_shapes_and_dtypes():
    assert cp.parse_shapes("8192x8192x8192, 1X4096x128") == [(8192, 8192, 8192), (1, 4096, 128)]
    for bad in ("8192x8192", "0x8x8", "axbxc"):
        with pytest.raises(Exception, match="MxNxK"):
            cp.parse_shapes(bad)
    assert cp.parse_shapes("8x16x32,8x16x32") == [(8, 16, 32)]
    llama = cp.parse_shapes("llama3")
    assert len(llama) == 16 and len(set(llama)) == 16
    assert {(1024, 6144, 4096), (4096, 4096, 4096), (1024, 57344, 8192), (4096, 8192, 28672)} <= set(llama)
    assert {m for m, _, _ in llama} == {1024, 4096}
    assert cp.parse_shapes("LLAMA3, 4096x4096x4096,1x8x8") == llama + [(1, 8, 8)]
    assert cp.parse_dtypes("bf16,float16,half") == [torch.bfloat16, torch.float16, torch.float16]
    with pytest.raises(Exception, match="use bf16, fp16"):
        cp.parse_dtypes("fp32")


def test_likely_cause():
    assert "cutlass_env.sh" in cp.likely_cause("import", "ModuleNotFoundError: No module named 'cutlass_cppgen'")
    assert "nvcc rejected" in cp.likely_cause("compile", "Exception: Invalid Kernel. See './e.txt' for details.")
    assert "H100/H200" in cp.likely_cause("device", "compute capability 8.0 (A100), need 9.0")
    assert "not recognised" in cp.likely_cause("run", "something new")


def test_failure_record_is_json_and_says_why():
    err = cp.PeerError("compile", "Exception: Invalid Kernel. See './e.txt' for details.", detail="x" * 5000)
    record = json.loads(json.dumps(cp.failure_record(err)))
    assert record["status"] == "unavailable" and record["step"] == "compile"
    assert record["message"].startswith("CUTLASS peer could not be built because compile failed: Exception: Invalid")
    assert record["cause"] == err.cause and "nvcc" in record["cause"]
    assert len(record["detail"]) == 4000


def test_peer_error_wrap_keeps_the_inner_step():
    inner = cp.PeerError("headers", "missing")
    assert cp.PeerError.wrap("import", inner) is inner
    wrapped = cp.PeerError.wrap("run", ValueError("bad"))
    assert (wrapped.step, wrapped.error) == ("run", "ValueError: bad")


def test_nvcc_error_tail(tmp_path):
    log = tmp_path / "err.txt"
    log.write_text("Compilation error for the following kernel: \nint main;\nError Message:\n" +
                   "\n".join(f"line {i}" for i in range(100)))
    exc = Exception(f"Invalid Kernel. See '{log}' for details.")
    assert cp._nvcc_error_tail(exc, lines=3) == "line 97\nline 98\nline 99"
    assert cp._nvcc_error_tail(exc, "main", lines=1) == "line 99"
    assert cp._nvcc_error_tail(exc, "other_kernel", lines=1).startswith("(nvcc's log below is another kernel's")
    assert cp._nvcc_error_tail(Exception("no file named")) == ""


@pytest.mark.skipif(importlib.util.find_spec("cuda.bindings") is None, reason="needs cuda-bindings")
def test_legacy_cuda_names_alias_cuda_bindings():
    code = (
        "from bench import cutlass_peer as cp; print(cp.alias_legacy_cuda_modules());"
        "import cuda, cuda.cuda, cuda.cudart, cuda.nvrtc, cuda.bindings.driver as d;"
        "assert cuda.cuda is d and cuda.__version__ == __import__('cuda.bindings').bindings.__version__"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "cuda.bindings" in out.stdout or "cuda-python 12" in out.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the failure path of a machine without a GPU")
def test_cli_fails_clearly_without_a_gpu(tmp_path):
    out_json = tmp_path / "peer.json"
    base = [sys.executable, "-m", "bench.cutlass_peer", "--probe", "--cache-dir", str(tmp_path / "cache")]
    failed = subprocess.run(base, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert failed.returncode == 2
    assert "CUTLASS peer FAILED at step" in failed.stderr and "likely cause:" in failed.stderr
    allowed = subprocess.run([*base, "--allow-fail", "--out", str(out_json)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert allowed.returncode == 0, allowed.stderr
    record = json.loads(out_json.read_text())
    assert record["status"] == "unavailable"
    assert record["step"] in ("toolchain", "import", "headers", "device")
    assert record["message"].startswith("CUTLASS peer could not be built because")


def test_cli_rejects_unknown_variant():
    out = subprocess.run([sys.executable, "-m", "bench.cutlass_peer", "--variants", "nope"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "unknown variant" in out.stderr


@pytest.fixture(scope="module")
def cutlass(tmp_path_factory):
    if not HAS_CUTLASS:
        pytest.skip("nvidia-cutlass is not importable (source bench/cutlass_env.sh)")
    cp.alias_legacy_cuda_modules()
    with cp.inside(tmp_path_factory.mktemp("cutlass_cache")):  # its sqlite cache opens in the cwd
        module = importlib.import_module("cutlass_cppgen")
    cp.install_options(module, "13.0")
    return module


@pytest.mark.parametrize("variant", cp.VARIANTS, ids=lambda v: v.name)
def test_emitted_source_is_the_sm90_kernel_asked_for(cutlass, variant):
    op = cp.make_operation(cutlass, torch.bfloat16, "nk", variant)
    src = op.rt_module.emit()
    m, n, k = variant.tile
    kernel_schedule, epilogue_schedule = variant.schedule_names()
    assert "cutlass::arch::Sm90" in src
    assert f"cute::Shape<cute::_{m}, cute::_{n}, cute::_{k}>" in src
    assert f"cute::Shape<cute::_{variant.cluster[0]},cute::_{variant.cluster[1]},cute::_1>" in src
    assert f"cutlass::gemm::Kernel{kernel_schedule}\n" in src
    assert f"cutlass::epilogue::{epilogue_schedule}\n" in src
    assert "StageCountAutoCarveout" in src
    # A row-major, B the nn.Linear weight (K x N column-major), bf16 in and out, fp32 accumulation.
    assert "cutlass::bfloat16_t, cutlass::layout::RowMajor, 8,\n    cutlass::bfloat16_t, cutlass::layout::ColumnMajor, 8,\n    float," in src
    assert variant.schedule in op.procedural_name()


def test_kn_order_and_fp16(cutlass):
    src = cp.make_operation(cutlass, torch.float16, "kn", cp.VARIANTS[0]).rt_module.emit()
    assert "cutlass::half_t, cutlass::layout::RowMajor, 8,\n    cutlass::half_t, cutlass::layout::RowMajor, 8," in src


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("variant", cp.SM80_VARIANTS, ids=lambda v: v.name)
def test_emitted_source_is_the_sm80_kernel_asked_for(cutlass, variant, dtype):
    from cutlass_cppgen.backend.library import ApiVersion

    op = cp.make_operation(cutlass, dtype, "nk", variant)
    src = op.rt_module.emit()
    (m, n, k), (wm, wn, wk) = variant.tile, variant.warp_tile
    element = {torch.bfloat16: "cutlass::bfloat16_t", torch.float16: "cutlass::half_t"}[dtype]
    assert (op.api, op.arch, op.switched) == (ApiVersion.v2x, 80, False)
    assert "cutlass::gemm::kernel::DefaultGemmUniversal<" in src and "cutlass::arch::Sm80," in src
    assert f"cutlass::gemm::GemmShape<{m}, {n}, {k}>,\n    cutlass::gemm::GemmShape<{wm}, {wn}, {wk}>,\n" \
           "    cutlass::gemm::GemmShape<16, 8, 16>," in src
    assert f"GemmIdentityThreadblockSwizzle<{variant.swizzle}>,\n    {variant.stages},\n    cutlass::arch::OpMultiplyAdd" in src
    # A row-major, B the nn.Linear weight (K x N column-major), fp32 accumulation, D in the input type.
    assert f"{element}, cutlass::layout::RowMajor, cutlass::ComplexTransform::kNone, 8,\n" \
           f"    {element}, cutlass::layout::ColumnMajor, cutlass::ComplexTransform::kNone, 8,\n" \
           f"    {element}, cutlass::layout::RowMajor,\n    float,\n    cutlass::arch::OpClassTensorOp," in src
    assert f"LinearCombination<{element}, 8, float, float>" in src
    name = op.procedural_name()
    assert f"_{m}x{n}_{k}x{variant.stages}_tn_align8" in name and "s16816gemm" in name
    assert op.rt_module.threads == variant.threads


def test_sm80_and_sm90_plans_in_one_process(cutlass):
    """The option stand-in serves both kernel ccs; an SM90 plan after an SM80 one is still SM90."""
    sm80 = cp.make_operation(cutlass, torch.bfloat16, "kn", cp.SM80_VARIANTS[0]).rt_module.emit()
    sm90 = cp.make_operation(cutlass, torch.bfloat16, "nk", cp.VARIANTS[0]).rt_module.emit()
    assert "cutlass::arch::Sm80" in sm80 and "Sm90" not in sm80
    assert "cutlass::arch::Sm90" in sm90 and "Sm80," not in sm90
    assert "cutlass::bfloat16_t, cutlass::layout::RowMajor, cutlass::ComplexTransform::kNone, 8,\n" \
           "    cutlass::bfloat16_t, cutlass::layout::RowMajor, cutlass::ComplexTransform::kNone, 8," in sm80


def test_the_table_puts_this_projects_kernel_beside_cutlass_and_cublas(capsys):
    from bench.cutlass_peer import print_table

    row = {"dtype": "bf16", "order": "nk", "m": 8192, "n": 8192, "k": 8192, "ratio": 0.9,
           "cutlass_best": {"tflops": 700.0, "variant": "coop_128x256x64_c1x1", "ms": 1.1},
           "cublas": {"tflops": 800.0, "ms": 1.0}}  # fmt: skip
    print_table([dict(row, ours={"status": "ok", "tflops": 780.0, "ms": 1.25}), dict(row, ours={"status": "no build"})])
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("| bf16")]
    assert lines[0].endswith("| 700 | coop_128x256x64_c1x1 | 800 | 0.90 | 780 | 0.80 | 0.88 |")
    assert lines[1].endswith("| 800 | 0.90 | - | - | - |")
    assert "ours / CUTLASS's best: median 0.880 (min 0.88, max 0.88, 1 problems)" in out
    assert "tuned" not in out


def test_the_tuned_column_names_its_plan_and_its_own_median(capsys):
    from bench.cutlass_peer import ours_over_cutlass, print_table

    def row(cutlass_ms: float, ours_ms: float, tuned_ms: float | None) -> dict:
        tuned = {"status": "no build"} if tuned_ms is None else {
            "status": "ok", "tflops": 1.0 / tuned_ms, "ms": tuned_ms, "plan": {"kernel": "k1", "splits": 2, "swizzle": 3}}
        return {"dtype": "fp16", "order": "nk", "m": 1024, "n": 4096, "k": 4096, "ratio": 1.0,
                "cutlass_best": {"tflops": 1.0 / cutlass_ms, "variant": "sm80_v", "ms": cutlass_ms},
                "cublas": {"tflops": 1.0, "ms": 1.0}, "ours": {"status": "ok", "tflops": 1.0 / ours_ms, "ms": ours_ms},
                "ours_tuned": tuned}  # fmt: skip

    results = [row(1.0, 1.25, 1.0), row(1.0, 1.0, 0.8), row(1.0, 2.0, None)]
    assert ours_over_cutlass(results) == [0.8, 1.0, 0.5]
    assert ours_over_cutlass(results, "ours_tuned") == [1.0, 1.25]  # the problem whose tuning failed is left out
    print_table(results)
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("| fp16")]
    assert lines[0].endswith("| 0.80 | 1 | 1.00 | 1.00 | k1 split 2 swizzle 3 |")
    assert lines[2].endswith("| - | - | - | - |")
    assert "ours / CUTLASS's best: median 0.800 (min 0.50, max 1.00, 3 problems)" in out
    assert "ours_tuned / CUTLASS's best: median 1.125 (min 1.00, max 1.25, 2 problems)" in out


def test_the_interleaved_times_have_their_own_medians(capsys):
    from bench.cutlass_peer import interleaved_over_cutlass, print_table

    def row(cutlass_ms: float, ours_ms: float, tuned_ms: float | None) -> dict:
        timed = {"cutlass_best": {"ms": cutlass_ms}, "ours": {"ms": ours_ms}}
        if tuned_ms is not None:
            timed["ours_tuned"] = {"ms": tuned_ms}
        return {"dtype": "fp16", "order": "nk", "m": 1024, "n": 4096, "k": 4096, "ratio": 1.0,
                "cutlass_best": {"tflops": 1.0, "variant": "sm80_v", "ms": 1.0}, "cublas": {"tflops": 1.0, "ms": 1.0},
                "ours": {"status": "ok", "tflops": 1.0, "ms": 2.0}, "interleaved": timed}  # fmt: skip

    results = [row(1.0, 1.25, 1.0), row(0.9, 1.0, None), {**row(1.0, 1.0, 1.0), "interleaved": {}}]
    assert interleaved_over_cutlass(results) == [0.8, 0.9]
    assert interleaved_over_cutlass(results, "ours_tuned") == [1.0]
    print_table(results)
    out = capsys.readouterr().out
    assert "ours / CUTLASS's best: median 0.500" in out  # the separate timings' median is unchanged
    assert "ours / CUTLASS's best, timed interleaved: median 0.850 (min 0.80, max 0.90, 2 problems)" in out
