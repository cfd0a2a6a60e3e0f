"""bench.dispatch's timings file and bench/experiments/dispatch_regret.py, which re-ranks
it with the tree's cost model (no GPU needed: a fake Gemm with real kernel specs)."""

from __future__ import annotations

import gzip
import json
import statistics
from pathlib import Path
from types import SimpleNamespace

import pytest

from bench.dispatch import read_timings, timings_document, write_timings
from bench.experiments.dispatch_regret import regrets
from codegen.config import default_config_paths, load_configs
from codegen.families import Mainloop
from codegen.vocabulary import BOrder, DataType
from gemm_runtime.context import make_key
from gemm_runtime.cost_model import DeviceModel
from gemm_runtime.plan import LaunchSpec

H200 = DeviceModel.of(90, 132, 1980000, 3201000, 6144)


def _sm90_w4_256x128():
    return next(k.spec for k in load_configs(default_config_paths())
                if k.spec.mainloop is Mainloop.SM90_QUANT and k.spec.cta == (256, 128, 64)
                and k.spec.b_type is DataType.U4 and k.spec.a_type is DataType.F16
                and k.spec.d_type is DataType.F16 and not k.spec.grouped)  # fmt: skip


def _document():
    """The H200's llama3-70b down, W4, M = 1024 on 256x128 (docs/perf/dispatch_quant.md):
    unsplit 608.8 us, two-way stream-K 818.8 (the run's own model picked the latter)."""
    spec = _sm90_w4_256x128()
    kernel = SimpleNamespace(spec=spec, ctas_per_sm=1, spills=0)
    gemm = SimpleNamespace(registry=SimpleNamespace(get={spec.name: kernel}.__getitem__), device_model=H200,
                           dispatcher=SimpleNamespace(default_workspace=(1 << 20, 32 << 20)))  # fmt: skip
    key = make_key(DataType.F16, BOrder.NK, DataType.F16, 1024, 8192, 28672, arch=90)._replace(
        b_type=DataType.U4, quant="u4g128")
    whole, split = LaunchSpec(spec.name, 1, 0), LaunchSpec(spec.name, 2, 0)
    rows = [dict(model="llama3-70b", layer="down", weights="w4", key=key, tuned_plan=whole, model_plan=split,
                 times={whole: 0.6088, split: 0.8188})]  # fmt: skip
    return timings_document(gemm, rows, "fp16", "NVIDIA H200"), whole, split


def test_the_timings_file_round_trips(tmp_path):
    doc, _, _ = _document()
    path = tmp_path / "data" / "dispatch_quant.json.gz"
    write_timings(doc, path)
    assert read_timings(path) == json.loads(json.dumps(doc))
    problem = read_timings(path)["problems"][0]
    assert problem["key"]["n"] == 8192 and problem["model_pick"]["splits"] == 2 and len(problem["times_ms"]) == 2


def test_regret_ranks_the_run_with_the_trees_cost_model(tmp_path):
    doc, whole, split = _document()
    path = tmp_path / "t.json.gz"
    write_timings(doc, path)
    (r,) = regrets(read_timings(path))
    # This tree prices stream-K shares that cross tiles (split_compute_factor): the
    # unsplit launch, the faster one, is its pick; the run's model took the split.
    assert r.pick == whole and r.ratio == pytest.approx(1.0) and r.best == whole
    assert r.run_pick_ms == pytest.approx(0.8188) and r.untimed_ahead == 0
    assert r.label == "llama3-70b down w4 M=1024"


def test_regret_counts_untimed_plans_ranked_above_its_pick(tmp_path):
    doc, whole, _ = _document()
    last_swizzle = LaunchSpec(whole.kernel, 1, 3)  # its last swizzle: ties go to the preferred one, then the smaller
    doc["problems"][0]["times_ms"] = [[last_swizzle.to_json(), 0.61]]
    doc["problems"][0]["model_pick"] = last_swizzle.to_json()
    path = tmp_path / "t.json.gz"
    write_timings(doc, path)
    (r,) = regrets(read_timings(path))
    assert r.pick == last_swizzle and r.untimed_ahead >= 3 and r.ratio == 1.0


def test_read_refuses_another_format(tmp_path):
    path = tmp_path / "x.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump({"format": "dispatch cache", "version": 1}, f)
    with pytest.raises(ValueError, match="not a bench.dispatch timings file"):
        read_timings(path)


def _recorded(name: str) -> list:
    """The regrets of a timings file under docs/perf/data, re-ranked with this tree's model."""
    return regrets(read_timings(Path(__file__).resolve().parents[2] / "docs" / "perf" / "data" / name))


def test_the_trees_model_on_the_recorded_h100_run():
    """docs/perf/data/dispatch_quant_h100.json.gz: every feasible plan of 48 quantized
    problems (llama3-8b / 70b, W4 / W8, M = 16, 128, 1024) timed on an H100, re-ranked with
    this tree's cost model. At M = 128 and 1024 each pick is within 8% of the fastest timed
    plan (the run's own model: 1.059 and 1.072 at worst; without the sm90_quant stream-K
    price, 1.79 at M = 1024, llama3-70b down), and the model is within 1% of the oracle in
    the median over all 48 (1.005; 1.036 without that price). M = 16 is not pinned: its W8
    picks are the model's known weak spot (up to 1.29, docs/NOTES.md)."""
    rows = _recorded("dispatch_quant_h100.json.gz")
    assert len(rows) == 48
    prefill = [r for r in rows if r.key.m >= 128]
    assert len(prefill) == 32
    for r in prefill:
        assert r.ratio <= 1.08, (r.label, r.pick, r.best, r.ratio)
    assert statistics.median(r.ratio for r in rows) <= 1.01


@pytest.mark.parametrize(
    "name, bits, worst, median",
    [("dispatch_quant_k_turns_h100.json.gz", 4, 1.08, 1.01), ("dispatch_quant_w8_k_turns_h100.json.gz", 8, 1.05, 1.02)],
)
def test_the_trees_model_on_the_recorded_h100_k_turns_runs(name, bits, worst, median):
    """docs/perf/data/dispatch_quant_k_turns_h100.json.gz and dispatch_quant_w8_k_turns_
    h100.json.gz: every feasible plan of 16 problems (llama3-8b / 70b, M = 32 and 64) timed
    on an H100 with the sm90_quant tiles taking K tiles in turn, W4 (fifty-second session)
    and W8 (fifty-third, once W8 took them). The oracle takes them on 8b o at both widths
    (and for W4 on five layers at 32 tokens); so does the tree's model, each pick within
    8% (W4: 8b qkv's 64x128 split three ways, 1.07) and 5% (W8: 8b down at 32 tokens,
    1.043) of the fastest timed plan, within 1% and 2% in the median."""
    rows = _recorded(name)
    assert len(rows) == 16
    for r in rows:
        assert r.ratio <= worst, (r.label, r.pick, r.best, r.ratio)
    assert statistics.median(r.ratio for r in rows) <= median
    in_turn = {r.label for r in rows
               if "sm90_quant" in r.pick.kernel and ("_w1x4x2_" in r.pick.kernel or "_w1x8x2_" in r.pick.kernel)}
    assert {f"llama3-8b o w{bits} M=32", f"llama3-8b o w{bits} M=64"} <= in_turn


@pytest.mark.parametrize(
    "name, bits, worst, median",
    [("dispatch_quant_k_pairs_h200.json.gz", 4, 1.11, 1.005), ("dispatch_quant_w8_k_pairs_h200.json.gz", 8, 1.19, 1.015)],
)
def test_the_trees_model_on_the_recorded_h200_k_pairs_runs(name, bits, worst, median):
    """docs/perf/data/dispatch_quant_k_pairs_h200.json.gz and dispatch_quant_w8_k_pairs_
    h200.json.gz: every feasible plan of 24 problems (llama3-8b / 70b, M = 32, 64, 128)
    timed on the H200 once the tiles in turn took a pair of K tiles a stage (fifty-fourth
    session). The model takes them on 8b o and down at 32 and 64 tokens and on 8b o at
    128; its picks are within 1% (W4) and 2% (W8) of the fastest timed plan in the median.
    The worst are split counts, not tiles: 8b qkv split two ways where whole tiles ran
    1.10x (W4) and 1.19x (W8) faster, W8 8b gate_up at 64 tokens the same (1.18x)."""
    rows = _recorded(name)
    assert len(rows) == 24
    for r in rows:
        assert r.ratio <= worst, (r.label, r.pick, r.best, r.ratio)
    assert statistics.median(r.ratio for r in rows) <= median
    pairs = {r.label for r in rows if "sm90_quant" in r.pick.kernel and "x128_w1x4x2_" in r.pick.kernel}
    assert {f"llama3-8b {layer} w{bits} M={m}" for layer in ("o", "down") for m in (32, 64)} <= pairs
    assert f"llama3-8b o w{bits} M=128" in pairs


def test_the_trees_model_on_the_recorded_h100_128x64_pairs_run():
    """docs/perf/data/dispatch_quant_128x64_pairs_h100.json.gz: every feasible plan of 32
    problems (llama3-8b / 70b, W4 / W8, M = 128 and 256) timed on an H100 with 128x64 in
    turn (a pair of K tiles a stage) in the registry (fifty-fourth session). Before X's
    L2 terms and the take by size (fifty-fifth session) the model took that tile split
    where it ran whole (8b qkv at 128 tokens, 1.16 / 1.24 of the fastest) and on large
    layers where X's re-reads slow it (70b gate_up, 1.07): 1.025 in the median. Now each
    pick is within 12% (8b o W8 at 256 tokens, 128x128 split where whole 128x64 tiles
    ran 1.11x faster), within 1% in the median, and whole 128x64 tiles serve 8b qkv at
    128 tokens, as the oracle has it."""
    rows = _recorded("dispatch_quant_128x64_pairs_h100.json.gz")
    assert len(rows) == 32
    for r in rows:
        assert r.ratio <= 1.12, (r.label, r.pick, r.best, r.ratio)
    assert statistics.median(r.ratio for r in rows) <= 1.01
    for bits in (4, 8):
        (qkv,) = [r for r in rows if r.label == f"llama3-8b qkv w{bits} M=128"]
        assert "128x64x128_w1x4x2" in qkv.pick.kernel and qkv.pick.splits == 1, qkv.pick
    big = [r for r in rows if r.label.startswith("llama3-70b gate_up")]
    assert big and all("128x64x128" not in r.pick.kernel for r in big)


def test_the_trees_model_on_the_h100_run_with_128x64_in_the_default_set():
    """docs/perf/data/dispatch_quant_128x64_default_h100.json.gz: the same 32 problems timed
    again on an H100 with 128x64 in turn in the default set and the model that prices X's
    reads from L2 (fifty-fifth session), a run the model was not fitted on. Its picks are
    within 1% of the fastest timed plan in the median and 13% at worst (8b o W8 at 256
    tokens: 128x128 split two ways, 1.12x whole 128x64 tiles); it takes whole 128x64 tiles
    for 8b qkv at 128 tokens (W4 / W8) and 8b o W4 at 256, the fastest plans there."""
    rows = _recorded("dispatch_quant_128x64_default_h100.json.gz")
    assert len(rows) == 32
    assert statistics.median(r.ratio for r in rows) <= 1.01 and max(r.ratio for r in rows) <= 1.13
    for label in ("llama3-8b qkv w4 M=128", "llama3-8b qkv w8 M=128", "llama3-8b o w4 M=256"):
        (row,) = [r for r in rows if r.label == label]
        assert "128x64x128_w1x4x2" in row.pick.kernel and row.pick.splits == 1 and row.ratio <= 1.03, (label, row.pick)


def test_the_trees_model_on_the_h100_run_with_whole_pair_stages_in_the_default_set():
    """docs/perf/data/dispatch_quant_whole_stages_h100.json.gz: every feasible plan of 48
    problems (llama3-8b / 70b, W4 / W8, M = 64, 128 and 256) timed on an H100 with 64x256
    and 128x192 taking both halves of a pair stage (fifty-sixth session). The model's
    picks are within 1% of the fastest timed plan in the median and 14% at worst (the
    misses of the run before, 8b o W8 and 8b down W4 at 256 tokens); the large layers at
    64 and 128 tokens get those tiles, within 1% of the fastest plan on 70b gate_up at 64
    and 70b down at 128."""
    rows = _recorded("dispatch_quant_whole_stages_h100.json.gz")
    assert len(rows) == 48
    assert statistics.median(r.ratio for r in rows) <= 1.01 and max(r.ratio for r in rows) <= 1.14
    for label, tile in (("llama3-70b gate_up w4 M=64", "64x256x128_w1x16x1"),
                        ("llama3-70b gate_up w8 M=64", "64x256x128_w1x16x1"),
                        ("llama3-70b down w4 M=128", "128x192x128_w1x12x1"),
                        ("llama3-70b down w8 M=128", "128x192x128_w1x12x1")):  # fmt: skip
        (row,) = [r for r in rows if r.label == label]
        assert tile in row.pick.kernel and row.ratio <= 1.01, (label, row.pick, row.ratio)


def test_the_trees_model_on_the_recorded_h100_bf16_decode_run():
    """docs/perf/data/dispatch_w4_bf16_decode_h100.json.gz: every feasible plan of 16 bf16
    W4 problems (llama3-8b / 70b, M = 1 and 16) timed on an H100. At M = 1 the model's
    pick is within 1.5% of the fastest timed plan in the median (1.021 before the ring
    fill per round of CTAs, cost_model.ring_fills) and llama3-70b qkv's within 3% (1.11
    before: 16x32x512 split into a second round of CTAs)."""
    rows = _recorded("dispatch_w4_bf16_decode_h100.json.gz")
    assert len(rows) == 16
    decode = [r for r in rows if r.key.m == 1]
    assert len(decode) == 8 and statistics.median(r.ratio for r in decode) <= 1.015
    (qkv,) = [r for r in decode if r.label == "llama3-70b qkv w4 M=1"]
    assert qkv.ratio <= 1.03, (qkv.pick, qkv.best)


def test_the_trees_model_on_the_recorded_h100_bf16_w8_decode_run():
    """docs/perf/data/dispatch_quant_bf16_decode_h100.json.gz: bf16 W4 and W8 at M = 1 and
    16 on an H100 (32 problems, every feasible plan timed). The bf16 8-bit dequantization,
    which goes through fp32, is priced 1.25x the others' a weight (cost_model.
    _DEQUANT_TYPE_COST): the W8 picks at M = 1 are within 5% of the fastest timed plan
    (llama3-70b qkv was 1.32x on the 16x32x512 tile without it) and the file's median
    within 2% (1.034 before)."""
    rows = _recorded("dispatch_quant_bf16_decode_h100.json.gz")
    assert len(rows) == 32
    w8_decode = [r for r in rows if r.key.b_type.bits == 8 and r.key.m == 1]
    assert len(w8_decode) == 8
    for r in w8_decode:
        assert r.ratio <= 1.05, (r.label, r.pick, r.best, r.ratio)
    assert statistics.median(r.ratio for r in rows) <= 1.02


def test_the_trees_model_on_the_recorded_h100_fp16_decode_run():
    """docs/perf/data/dispatch_quant_decode_h100.json.gz: fp16 W4 and W8 at M = 1 and 16 on
    an H100 (32 problems, every feasible plan timed, forty-fourth session, with the ring
    fill per round of CTAs and the bf16 W8 price). The W4 picks are within 10% of the
    fastest timed plan, 1.01 in the median; the W8 ones are the model's known weak spot
    (it takes sm90's 64x128 split where sm80's 16x128x128 split is faster: 1.04 / 1.06 in
    the median at M = 1 / 16, 1.18 at worst) and are held to where they are. The CTAs
    past a whole round priced at their own warps' rate (forty-fifth session) took
    llama3-70b gate_up at M = 16 off its unsplit plan, 1.25x the fastest. sm90's
    stream-K take priced at 2 us a share (forty-sixth session) takes llama3-8b qkv off
    64x128 split three ways (1.18 / 1.13 at M = 1 / 16) and the W8 worst to 1.11; that
    gate_up problem goes from 1.03 to 1.07 (sm80's two splits where four ran faster)."""
    rows = _recorded("dispatch_quant_decode_h100.json.gz")
    assert len(rows) == 32
    w4 = [r for r in rows if r.key.b_type.bits == 4]
    assert all(r.ratio <= 1.10 for r in w4), [(r.label, r.ratio) for r in w4 if r.ratio > 1.10]
    assert statistics.median(r.ratio for r in w4) <= 1.01
    w8 = [r for r in rows if r.key.b_type.bits == 8]
    assert max(r.ratio for r in w8) <= 1.12 and statistics.median(r.ratio for r in w8) <= 1.06
    gate_up = next(r for r in w8 if r.label == "llama3-70b gate_up w8 M=16")
    assert gate_up.ratio <= 1.08, (gate_up.pick, gate_up.best)
    for qkv in (r for r in w8 if r.label.startswith("llama3-8b qkv")):
        assert qkv.ratio <= 1.05, (qkv.label, qkv.pick, qkv.best)


def test_the_trees_model_on_the_h100_run_after_the_round_tail_term():
    """docs/perf/data/dispatch_quant_decode_tail_h100.json.gz: the same 32 problems (fp16 W4
    and W8 at M = 1 and 16) timed again on an H100 with the tail round priced at its own
    warps' rate (forty-fifth session): llama3-70b gate_up W8 at M = 16 stays within 5% of
    the fastest timed plan in a run of its own, not only in the run the term was fitted
    on; the W8 picks at M <= 16 are still the weak spot (1.19 at worst). With sm90's
    stream-K take at 2 us a share (forty-sixth session) llama3-8b qkv W8 leaves 64x128
    split three ways (1.16 / 1.19 at M = 1 / 16: 144 shares for 132 CTAs) and the worst is
    1.11; that gate_up problem goes to 1.08."""
    rows = _recorded("dispatch_quant_decode_tail_h100.json.gz")
    assert len(rows) == 32
    assert statistics.median(r.ratio for r in rows) <= 1.03 and max(r.ratio for r in rows) <= 1.12
    gate_up = next(r for r in rows if r.label == "llama3-70b gate_up w8 M=16")
    assert gate_up.ratio <= 1.08, (gate_up.pick, gate_up.best)
    for qkv in (r for r in rows if r.label.startswith("llama3-8b qkv w8")):
        assert qkv.ratio <= 1.05, (qkv.label, qkv.pick, qkv.best)


def test_the_trees_model_on_the_h100_run_after_the_stream_k_take_price():
    """docs/perf/data/dispatch_quant_decode_split_h100.json.gz: the same 32 problems (fp16 W4
    and W8 at M = 1 and 16) timed on an H100 with sm90's stream-K take priced at 2 us a
    share (forty-sixth session): the model's worst pick is 1.10 of the fastest timed plan
    (1.19 in the run before it), llama3-8b qkv W8 no longer takes 64x128 split three ways
    (144 shares for 132 CTAs), and the median stays within 3%."""
    rows = _recorded("dispatch_quant_decode_split_h100.json.gz")
    assert len(rows) == 32
    assert statistics.median(r.ratio for r in rows) <= 1.03 and max(r.ratio for r in rows) <= 1.11
    for qkv in (r for r in rows if r.label.startswith("llama3-8b qkv w8")):
        assert qkv.ratio <= 1.07 and qkv.pick.splits != 3, (qkv.label, qkv.pick, qkv.best)


def test_the_trees_model_on_the_h100_runs_with_the_4bit_128x128_whole_stage_tile():
    """docs/perf/data/dispatch_quant_128x128_whole_h100.json.gz (W4) and dispatch_quant_w8_
    128x128_whole_h100.json.gz (W8): every feasible plan of 24 problems each (llama3-8b /
    70b, M = 128, 256 and 1024) timed on an H100 with 128x128 taking both halves of a pair
    stage in the 4-bit default set (fifty-eighth session). The oracle takes that tile
    unsplit on 8b qkv at 256 tokens, 8b gate_up at 128 and 70b o at 256 (W4). The run's
    own model took 256x128 split two or four ways where unsplit 128-token tiles ran
    1.05-1.17x faster (W4 worst 1.168, 8b qkv at 1024; W8 1.130); with the 256-token
    tile's shares priced 1.2x (split_compute_factor) the picks are within 0.5% of the
    fastest timed plan in the median, 7% (W4) and 11% (W8: 8b o at 256 tokens, 128x128
    split two ways where whole 128x64 tiles in turn ran 1.11x faster) at worst, and where
    the model still splits 256x128 (70b down at 256 tokens, 70b o W8) that is within 1%
    of the fastest plan; the W4 tile's picks split two ways (70b qkv and o at 128 tokens)
    are within 7% (70b o: 1.064, where 128x64 in turn runs unsplit)."""
    for name, worst in (("dispatch_quant_128x128_whole_h100.json.gz", 1.07),
                        ("dispatch_quant_w8_128x128_whole_h100.json.gz", 1.11)):  # fmt: skip
        rows = _recorded(name)
        assert len(rows) == 24
        assert statistics.median(r.ratio for r in rows) <= 1.005 and max(r.ratio for r in rows) <= worst, name
        assert not [r.label for r in rows if "_256x128x64_" in r.pick.kernel and r.pick.splits > 1 and r.ratio > 1.01]
    rows = _recorded("dispatch_quant_128x128_whole_h100.json.gz")
    best_whole = {r.label for r in rows if "128x128x128_w1x8x1" in r.best.kernel and r.best.splits == 1}
    assert {"llama3-8b qkv w4 M=256", "llama3-8b gate_up w4 M=128", "llama3-70b o w4 M=256"} <= best_whole
    for r in rows:
        if "128x128x128_w1x8x1" in r.pick.kernel and r.pick.splits > 1:
            assert r.ratio <= 1.07, (r.label, r.pick, r.best, r.ratio)


def test_the_trees_model_on_the_h100_run_after_the_wide_shares_price():
    """docs/perf/data/dispatch_quant_wide_shares_h100.json.gz: every feasible plan of 32
    problems (llama3-8b / 70b, W4 and W8, M = 256 and 1024) timed on an H100 once the
    256-token tile's shares were priced 1.2x, a run the factor was not fitted on
    (fifty-eighth session). The model's picks are within 0.5% of the fastest timed plan
    in the median and 12% at worst (8b o W8 at 256 tokens, 128x128 split two ways where
    whole 128x64 tiles in turn ran 1.12x faster); at 1.0 they were 1.033 in the mean and
    1.175 at worst on this run, 1.010 and 1.116 now."""
    rows = _recorded("dispatch_quant_wide_shares_h100.json.gz")
    assert len(rows) == 32
    ratios = [r.ratio for r in rows]
    assert statistics.median(ratios) <= 1.005 and statistics.mean(ratios) <= 1.015 and max(ratios) <= 1.12
