"""python -m gemm_runtime tune, without a GPU: arguments, the plan, the errors, and the
tuning loop against a fake Gemm on CPU tensors."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import gemm_runtime.__main__ as cli
from gemm_runtime import settings as settings_module
from gemm_runtime.errors import GemmArgumentError, GemmError
from gemm_runtime.settings import REPO_ROOT
from gemm_runtime.types import DispatchPolicy

SHAPES = {
    "models": {
        "small": {"qkv": [96, 64], "o": [64, 64]},
        "other": {"o": [64, 64], "down": [64, 128]},  # o repeats small's (N, K)
    }
}


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(cli, "visible_gpus", lambda: 0)


def _run(capsys, *argv):
    rc = cli.main(["tune", *argv])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


# ---- the plan -------------------------------------------------------------------------
def test_tuning_plan_orders_models_layers_then_m_and_skips_repeats():
    plan = cli.tuning_plan(SHAPES, ["small", "other", "small"], [4, 1, 4, 2])
    assert plan == [
        ("small", "qkv", 1, 96, 64), ("small", "qkv", 2, 96, 64), ("small", "qkv", 4, 96, 64),
        ("small", "o", 1, 64, 64), ("small", "o", 2, 64, 64), ("small", "o", 4, 64, 64),
        # other.o is small.o again: already planned
        ("other", "down", 1, 64, 128), ("other", "down", 2, 64, 128), ("other", "down", 4, 64, 128),
    ]  # fmt: skip
    assert plan[0].model == "small" and plan[0].layer == "qkv" and (plan[0].m, plan[0].n, plan[0].k) == (1, 96, 64)


def test_tuning_plan_of_the_benchmark_shapes():
    shapes = cli.load_shapes(REPO_ROOT / "bench" / "shapes.yaml")
    plan = cli.tuning_plan(shapes, ["llama3-8b"], [1, 16, 128])
    assert [(p.layer, p.n, p.k) for p in plan[::3]] == [
        ("qkv", 6144, 4096), ("o", 4096, 4096), ("gate_up", 28672, 4096), ("down", 4096, 14336)
    ]  # fmt: skip
    assert [p.m for p in plan] == [1, 16, 128] * 4


def test_tuning_plan_rejects_unknown_models_and_bad_sequences():
    with pytest.raises(cli.TuneError, match=r"unknown model 'nope'; the shapes file lists: small, other"):
        cli.tuning_plan(SHAPES, ["small", "nope"], [1])
    with pytest.raises(cli.TuneError, match="no model given"):
        cli.tuning_plan(SHAPES, [], [1])
    for seq in ([], [0], [-3], [1.5], [True]):
        with pytest.raises(cli.TuneError, match="positive integers"):
            cli.tuning_plan(SHAPES, ["small"], seq)


@pytest.mark.parametrize(
    "text, message",
    [
        (None, "cannot read the shapes file"),
        ("models: [unclosed", "is not valid YAML"),
        ("batch_sizes: {decode: [1]}\n", "has no 'models' mapping"),
        ("models: {m: {qkv: [64]}}\n", "m.qkv: got [64]; accepted: [N, K], two positive integers"),
        ("models: {m: {qkv: [64, 0]}}\n", "m.qkv: got [64, 0]"),
        ("models: {m: [1, 2]}\n", "model 'm': expected a mapping"),
    ],
)
def test_load_shapes_errors(tmp_path, text, message):
    path = tmp_path / "shapes.yaml"
    if text is not None:
        path.write_text(text)
    with pytest.raises(cli.TuneError, match=message.replace("[", r"\[").replace("]", r"\]")):
        cli.load_shapes(path)


def test_load_shapes_names_a_file_that_is_not_utf8(tmp_path):
    path = tmp_path / "shapes.yaml"
    path.write_bytes(b"models:\n  m: {qkv: [64, 64]}  # \xff\xfe\n")
    with pytest.raises(cli.TuneError, match=r"shapes.yaml is not UTF-8 text \(byte 32\)"):
        cli.load_shapes(path)


# ---- the sequence of M ----------------------------------------------------------------
def test_resolve_seq_uses_the_settings():
    assert cli.resolve_seq(None) == settings_module.tuning_seq()
    assert cli.resolve_seq("1-16-1,16-128-16") == list(range(1, 16)) + list(range(16, 128, 16))  # end exclusive
    assert cli.resolve_seq("8, 2-4-1") == [2, 3, 8]
    with pytest.raises(GemmError, match="--seq"):
        cli.resolve_seq("not-a-seq")


def test_default_seq_follows_gemm_tune(monkeypatch):
    with settings_module.override(tune=settings_module.parse_tune("seq=3,5")):
        assert cli.resolve_seq(None) == [3, 5]


# ---- the command line -----------------------------------------------------------------
def test_arguments_are_parsed(monkeypatch):
    seen = []
    monkeypatch.setattr(cli, "tune_command", lambda args: seen.append(args) or 0)
    assert cli.main(["tune", "--model", "llama3-8b", "--model", "qwen2-7b", "--out", "c.json"]) == 0
    args = seen[-1]
    assert args.model == ["llama3-8b", "qwen2-7b"] and args.out == Path("c.json")
    assert args.shapes == REPO_ROOT / "bench" / "shapes.yaml"
    assert (args.dtype, args.seq, args.device, args.import_path) == ("f16", None, 0, None)
    argv = ["tune", "--shapes", "s.yaml", "--model", "m", "--export", "e.json", "--import", "p.json",
            "--dtype", "bf16", "--seq", "1-16-1,16-128-16", "--device", "1"]  # fmt: skip
    assert cli.main(argv) == 0
    args = seen[-1]
    assert args.out == Path("e.json") and args.import_path == Path("p.json") and args.shapes == Path("s.yaml")
    assert (args.dtype, args.seq, args.device) == ("bf16", "1-16-1,16-128-16", 1)


@pytest.mark.parametrize("argv", [["--out", "c.json"], ["--model", "m", "--dtype", "f32", "--out", "c.json"]])
def test_malformed_arguments_exit_2(capsys, argv):
    with pytest.raises(SystemExit) as e:
        cli.main(["tune", *argv])
    assert e.value.code == 2 and "Traceback" not in capsys.readouterr().err


def test_unknown_model_exits_2_with_one_line(capsys, no_gpu, tmp_path):
    rc, out, err = _run(capsys, "--model", "llama3-8b", "--model", "gpt-5", "--out", str(tmp_path / "c.json"))
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("error: unknown model 'gpt-5'; the shapes file lists: llama2-7b,")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--model", "llama3-8b"], "no output file: give --out PATH (or --export PATH)"),
        (["--model", "llama3-8b", "--shapes", "{tmp}/missing.yaml", "--out", "{tmp}/c.json"],
         "cannot read the shapes file"),
        (["--model", "llama3-8b", "--seq", "not-a-seq", "--out", "{tmp}/c.json"], "not-a-seq"),
        (["--model", "llama3-8b", "--out", "{tmp}/no/such/dir/c.json"], "is not a writable folder"),
        # A folder would be found out only when writing the cache, once everything is tuned.
        (["--model", "llama3-8b", "--out", "{tmp}"], "it is a folder; --out names the file to write"),
        (["--model", "llama3-8b", "--out", "{tmp}/c.json", "--import", "{tmp}/prev.json"], "prev.json: no such file"),
        (["--model", "llama3-8b", "--out", "{tmp}/c.json"], "no GPU is visible"),
        (["--model", "llama3-8b", "--seq", "1-16-1", "--export", "{tmp}/c.json"], "no GPU is visible"),
    ],
)  # fmt: skip
def test_errors_exit_2_with_one_clear_line(capsys, no_gpu, tmp_path, argv, message):
    rc, out, err = _run(capsys, *(a.format(tmp=tmp_path) for a in argv))
    assert rc == 2 and out == ""
    assert err.startswith("error: ") and err.count("\n") == 1 and message in err
    assert not (tmp_path / "c.json").exists()


def test_device_out_of_range_exits_2(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(cli, "visible_gpus", lambda: 2)
    rc, _, err = _run(capsys, "--model", "llama3-8b", "--out", str(tmp_path / "c.json"), "--device", "2")
    assert rc == 2 and err == "error: --device 2: 2 GPU(s) are visible (0..1)\n"


def test_a_malformed_gemm_tune_exits_2_without_a_traceback(tmp_path):
    env = {**os.environ, "GEMM_TUNE": "seq=0"}
    argv = ["tune", "--model", "llama3-8b", "--out", str(tmp_path / "c.json")]
    proc = subprocess.run([sys.executable, "-m", "gemm_runtime", *argv], check=False, cwd=REPO_ROOT, capture_output=True, text=True,
                          env=env)  # fmt: skip
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("error: GEMM_TUNE: ") and proc.stderr.count("\n") == 1


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without a GPU")
def test_without_a_gpu_the_module_exits_2_without_a_traceback(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "gemm_runtime", "tune", "--model", "llama3-8b", "--out", str(tmp_path / "c.json"),
         "--seq", "1-2-1"],
        check=False, cwd=REPO_ROOT, capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == "" and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("error: ") and (
        "no GPU is visible" in proc.stderr or "torch sees no CUDA" in proc.stderr
    )


# ---- the tuning loop, with a fake Gemm on CPU -----------------------------------------
class FakeGemm:
    def __init__(self, fail_m: int | None = None):
        self.device = torch.device("cpu")
        self.calls: list[dict] = []
        self.events: list[tuple] = []
        self.fail_m = fail_m

    def matmul(self, a, b, *, out, operation):
        m = a.shape[0]
        self.calls.append(dict(a=a, b=b, out=out, operation=operation))
        self.events.append(("matmul", m))
        if m == self.fail_m:
            from gemm_runtime.errors import UnsupportedProblemError

            raise UnsupportedProblemError(f"M={m}", {"no tile fits": 3})

    def export_cache(self, path):
        self.events.append(("export", path))
        Path(path).write_text("{}")

    def import_cache(self, path):
        from gemm_runtime.dispatch_cache import ImportReport

        self.events.append(("import", path))
        return ImportReport(added=2)


def test_run_tuning_measures_every_problem_with_views_of_one_allocation_per_layer(tmp_path):
    gemm, out = FakeGemm(), io.StringIO()
    plan = cli.tuning_plan(SHAPES, ["small", "other"], [1, 3, 8])
    rc = cli.run_tuning(gemm, plan, dtype="bf16", out_path=tmp_path / "c.json", progress=False, stdout=out)
    assert rc == 0
    assert [e[1] for e in gemm.events if e[0] == "matmul"] == [p.m for p in plan]
    assert gemm.events[-1] == ("export", tmp_path / "c.json")
    for p, call in zip(plan, gemm.calls):
        a, b, d = call["a"], call["b"], call["out"]
        assert call["operation"].dispatch is DispatchPolicy.MEASURE
        assert a.shape == (p.m, p.k) and b.shape == (p.k, p.n) and d.shape == (p.m, p.n)
        assert a.dtype == b.dtype == d.dtype == torch.bfloat16
        assert b.stride() == (1, p.k)  # W (N x K) transposed: the nn.Linear layout
        assert a.is_contiguous() and d.is_contiguous()
    # one allocation per layer, at its largest M: every M of a layer is a view of it
    for layer_calls in (gemm.calls[0:3], gemm.calls[3:6], gemm.calls[6:9]):
        assert layer_calls[-1]["a"].shape[0] == 8
        assert len({c["a"].untyped_storage().data_ptr() for c in layer_calls}) == 1
        assert len({c["out"].untyped_storage().data_ptr() for c in layer_calls}) == 1
        assert len({c["b"].untyped_storage().data_ptr() for c in layer_calls}) == 1
    text = out.getvalue()
    assert "problems tuned: 9 of 9" in text and "total seconds: " in text and "seconds per problem: " in text
    assert f"dispatch cache written to {tmp_path / 'c.json'}" in text


def test_run_tuning_imports_first_and_then_appends(tmp_path):
    gemm, out = FakeGemm(), io.StringIO()
    plan = cli.tuning_plan(SHAPES, ["small"], [2])
    rc = cli.run_tuning(
        gemm, plan, dtype="f16", out_path=tmp_path / "c.json", import_path=tmp_path / "prev.json",
        progress=False, stdout=out,
    )  # fmt: skip
    assert rc == 0
    assert gemm.events[0] == ("import", tmp_path / "prev.json") and gemm.events[-1][0] == "export"
    assert all(c["operation"].dispatch is DispatchPolicy.APPEND for c in gemm.calls)
    assert all(c["a"].dtype == torch.float16 for c in gemm.calls)
    assert f"imported {tmp_path / 'prev.json'}: added 2, replaced 0" in out.getvalue()


def test_run_tuning_reports_failed_problems_and_goes_on(tmp_path):
    gemm, out = FakeGemm(fail_m=3), io.StringIO()
    plan = cli.tuning_plan(SHAPES, ["small"], [1, 3, 8])
    rc = cli.run_tuning(gemm, plan, dtype="f16", out_path=tmp_path / "c.json", progress=False, stdout=out)
    assert rc == 1
    assert len(gemm.calls) == 6 and gemm.events[-1][0] == "export"
    text = out.getvalue()
    assert "problems tuned: 4 of 6" in text and "2 problem(s) failed:" in text
    assert "small.qkv M=3 N=96 K=64: no kernel can serve M=3" in text


@pytest.mark.parametrize("dtype", ["f32", "fp16", torch.float16, None])
def test_run_tuning_refuses_an_unknown_dtype_before_anything_runs(tmp_path, dtype):
    # Was a KeyError from the dtype table (shared_tuning.tune_across_ranks passes it on).
    gemm = FakeGemm()
    plan = cli.tuning_plan(SHAPES, ["small"], [1])
    with pytest.raises(GemmArgumentError, match=r"^dtype: got .*; accepted: 'f16' or 'bf16'$"):
        cli.run_tuning(gemm, plan, dtype=dtype, out_path=tmp_path / "c.json", import_path=tmp_path / "p.json",
                       progress=False, stdout=io.StringIO())  # fmt: skip
    assert gemm.events == [] and not (tmp_path / "c.json").exists()


@pytest.mark.parametrize("option", ["--out", "--shapes", "--import"])
def test_an_empty_path_is_refused_by_name(capsys, option):
    argv = {"--model": "llama3-8b", "--out": "c.json", option: ""}
    with pytest.raises(SystemExit) as e:
        cli.main(["tune", *(x for kv in argv.items() for x in kv)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "got an empty path" in err and option in err


def test_an_out_that_is_the_shapes_file_is_refused_before_tuning(capsys, monkeypatch, tmp_path):
    """--out naming the --shapes file: the dispatch cache was written over the shapes once
    everything was tuned."""
    monkeypatch.setattr(cli, "visible_gpus", lambda: 1)  # the check must come before the GPU's
    shapes = tmp_path / "shapes.yaml"
    text = (REPO_ROOT / "bench" / "shapes.yaml").read_text()
    shapes.write_text(text)
    monkeypatch.chdir(tmp_path)
    rc, out, err = _run(capsys, "--model", "llama3-8b", "--shapes", str(shapes), "--out", "./shapes.yaml")
    assert rc == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("error: --out: got shapes.yaml, the shapes file --shapes reads; accepted: another file")
    assert shapes.read_text() == text
