"""The benchmark CLIs' argument checks (bench/cli.py), on the CPU: a bad argument or an
output path that cannot be written ends the run with an argparse error naming the option
before anything touches the GPU (on this machine, Gemm() would raise instead)."""

from __future__ import annotations

import argparse
import importlib

import pytest

from bench.cli import check_models, check_out, positive_int


@pytest.mark.parametrize("text", ["0", "-5", "x", "1.5", ""])
def test_positive_int_refuses_what_is_not_an_integer_of_one_or_more(text):
    with pytest.raises(argparse.ArgumentTypeError, match="accepted: an integer >= 1"):
        positive_int(text)
    assert positive_int("16") == 16


def _parser() -> argparse.ArgumentParser:
    return argparse.ArgumentParser(prog="bench")


def test_check_out_refuses_a_folder_a_file_as_parent_and_accepts_a_missing_parent(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    for path, said in ((tmp_path, "a folder"), (blocker / "x.md", f"{blocker} is not a folder")):
        with pytest.raises(SystemExit) as info:
            check_out(_parser(), "--out", path)
        assert info.value.code == 2 and said in capsys.readouterr().err
    check_out(_parser(), "--out", tmp_path / "new" / "deeper" / "x.md")  # created at the end
    check_out(_parser(), "--out", None)


def test_check_models_names_the_unknown_and_lists_the_known(capsys):
    check_models(_parser(), "--models", ["llama3-8b"])
    with pytest.raises(SystemExit):
        check_models(_parser(), "--models", ["llama3-8b", "gpt-5"])
    err = capsys.readouterr().err
    assert "--models: got 'gpt-5'; accepted: models of shapes.yaml: llama2-7b, llama3-8b" in err


@pytest.mark.parametrize(
    "module, argv, said",
    [
        ("dense", ["--m", "0"], "argument --m: got '0'"),
        ("dense", ["--m", "-5"], "argument --m: got '-5'"),
        ("dense", ["--models", "nope"], "--models: got 'nope'"),
        ("dense", ["--dtypes", "float32"], "argument --dtypes: invalid choice"),
        ("dense", ["--out", "{tmp}"], "a folder"),
        ("dense", ["--out", "{blocker}/dense.md"], "is not a folder"),
        ("quant", ["--bits", "3"], "argument --bits: invalid choice: 3"),
        ("quant", ["--m", "0"], "argument --m: got '0'"),
        ("quant", ["--plans", "{tmp}"], "--plans: got"),
        ("quant", ["--plans", "{blocker}/plans.json"], "is not a folder"),
        ("quant", ["--out", "{blocker}/quant.md"], "--out: got"),
        ("quant", ["--models", "nope"], "--models: got 'nope'"),
        ("dispatch", ["--bits", "3"], "argument --bits: invalid choice: 3"),
        ("dispatch", ["--m", "-1"], "argument --m: got '-1'"),
        ("dispatch", ["--oracle-reps", "0"], "argument --oracle-reps: got '0'"),
        ("dispatch", ["--budget", "0"], "--budget: got 0.0"),
        ("dispatch", ["--out", "{blocker}/d.md"], "--out: got"),
        ("dispatch", ["--timings", "{tmp}"], "--timings: got"),
        ("moe", ["--tokens", "0"], "argument --tokens: got '0'"),
        ("moe", ["--out", "{tmp}"], "a folder"),
        ("decode_chain", ["--m", "0"], "argument --m: got '0'"),
        ("decode_chain", ["--models", "qwen1.5-moe-expert"], "lacks a decoder layer's qkv, o, gate_up, down"),
        ("decode_chain", ["--out", "{blocker}/c.md"], "--out: got"),
        ("tp_mlp", ["--cpu", "--reps", "0"], "argument --reps: got '0'"),
        ("tp_mlp", ["--cpu", "--tokens", "-1"], "argument --tokens: got '-1'"),
        ("tp_mlp", ["--cpu", "--out", "{tmp}"], "a folder"),
        ("host_time", ["--shape", "0", "1024", "1024"], "argument --shape: got '0'"),
        ("host_time", ["--out", "{blocker}/h.md"], "--out: got"),
        ("tiles", ["--top", "0"], "argument --top: got '0'"),
        ("tiles", ["--shape", "16", "-1", "64"], "argument --shape: got '-1'"),
        ("sm90", ["--orders", "nn"], "argument --orders: invalid choice"),
        ("sm90", ["--sizes", "0"], "argument --sizes: got '0'"),
        ("sm90", ["--out", "{tmp}"], "a folder"),
        ("cutlass_peer", ["--jobs", "0"], "argument --jobs: got '0'"),
        ("cutlass_peer", ["--out", "{blocker}/peer.json"], "--out: got"),
        # The seventh audit's second pass.
        ("quant", ["--m", "1", "16", "--plans", "{tmp}/p.json", "--retune", "16", "128"],
         "--retune: got 128, not among --m (1 16)"),
        ("quant", ["--out", "{tmp}/q.md", "--plans", "{tmp}/./q.md"], "--plans: got"),
        ("dispatch", ["--out", "{tmp}/d.json.gz", "--timings", "{tmp}/d.json.gz"], "--timings: got"),
        ("cutlass_peer", ["--ours-build", "{tmp}/nowhere"], "--ours-build: got"),
        ("cutlass_peer", ["--ours-build", "{tmp}"], "holds no sm_XX/manifest.json"),
        ("cutlass_peer", ["--cache-dir", "{blocker}"], "--cache-dir: got"),
        ("cutlass_peer", ["--cache-dir", "{blocker}/sub"], "is a file"),
        ("sweep_quant", ["--bits", "3"], "argument --bits: invalid choice: 3"),
        ("sweep_quant", ["--max-splits", "0"], "argument --max-splits: got '0'"),
        ("sweep_quant", ["--m", "0"], "argument --m: got '0'"),
        ("sweep_quant", ["--group", "100"], "--group: got 100; accepted: one of 32, 64, 128"),
        ("mainloops", ["--k", "-1"], "argument --k: got '-1'"),
        ("profile_dense", ["--swizzle", "9"], "argument --swizzle: got '9'; accepted: an integer from 0 to 5"),
        ("profile_dense", ["--tile", "128"], "argument --tile: got '128'; accepted: MxN"),
        ("profile_dense", ["--cta-k", "0"], "argument --cta-k: got '0'"),
        ("profile_grouped", ["--tokens", "-1"], "argument --tokens: got '-1'"),
        ("profile_grouped", ["--swizzle", "-1"], "argument --swizzle: got '-1'"),
        ("profile_quant", ["--splits", "0"], "argument --splits: got '0'; accepted: an integer from 1 to 64"),
        ("profile_quant", ["--n", "0"], "argument --n: got '0'"),
    ],
)
def test_a_bad_argument_ends_the_run_before_the_gpu_is_touched(module, argv, said, tmp_path, capsys):
    """Before: --m 0 or --bits 3 failed from inside the run (or, on the GPU, ran into an
    odd table), --dtypes float32 raised AttributeError or UnsupportedProblemError, --out
    in a folder that is a file failed after minutes of timing."""
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    argv = [a.format(tmp=tmp_path, blocker=blocker) for a in argv]
    main = importlib.import_module(f"bench.{module}").main
    with pytest.raises(SystemExit) as info:
        main(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2 and said in err and "Traceback" not in err


def test_a_run_without_torchrun_is_an_argparse_error(monkeypatch, capsys):
    """bench.tp_mlp run as python -m: the rendezvous raised ValueError from inside torch."""
    from bench.tp_mlp import main

    for var in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(SystemExit) as info:
        main(["--cpu", "--hidden", "64", "--intermediate", "128", "--tokens", "1"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "no torchrun rendezvous (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT not set)" in err


@pytest.mark.parametrize("module, fake", [("host_time", "measure"), ("sm90", "run")])
def test_an_out_in_a_folder_still_to_be_made_is_written(module, fake, tmp_path, monkeypatch):
    """check_out accepts a missing folder (made at the end); these wrote into it without
    making it: FileNotFoundError once the timing was done."""
    bench = importlib.import_module(f"bench.{module}")
    if module == "host_time":
        monkeypatch.setattr(bench, "measure", lambda *a: None)
        monkeypatch.setattr(bench, "report", lambda *a: ["| table |"])
    else:
        monkeypatch.setattr(bench, "run", lambda *a: ["| table |"])
    out = tmp_path / "new" / "deeper" / "t.md"
    bench.main(["--out", str(out)])
    assert out.read_text() == "| table |\n"


def test_tp_mlp_writes_its_out_in_a_folder_still_to_be_made(tmp_path):
    import torch.distributed as dist

    from bench.tp_mlp import main

    out = tmp_path / "new" / "tp.md"
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        main(["--cpu", "--hidden", "64", "--intermediate", "128", "--tokens", "1", "--reps", "1", "--out", str(out)])
    finally:
        dist.destroy_process_group()
    assert out.read_text().startswith("| weights | tokens | TP 1 step (ms)")
