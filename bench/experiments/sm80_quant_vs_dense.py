"""Experiment: issue 17's second SM80 target, W4A16 on the SM80 family at M >= 1024 in at
most 1.1x the time of the family's own fp16 kernel on the same problem. Builds the
default set's sm80 fp16 kernels, dense and 4-bit (B as N x K), into one build directory
(no SM90 family, as on an Ampere GPU), then times, per llama3 layer and M, tuned dispatch
of the packed weight (groups of 128) against tuned dispatch of the fp16 weight, the two
interleaved, L2 flushed, medians:

    python -m bench.experiments.sm80_quant_vs_dense [--m 1024 4096] [--models llama3-8b llama3-70b] [--staged]

With --staged the build also has the sm80_staged family's tiles (bench/experiments/
sm80_staged.yaml: the weights dequantized once per CTA into shared memory), which the
W4 problems' tuning then weighs beside the default set's W4 kernels.

Prints each problem's two plans, times and the ratio W4 / fp16 (asked: at most 1.1),
and the median ratio per M.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

import gemm_runtime.build as build_mod
from bench.experiments.sm90_variants import subset_manifest
from bench.quant import tuned_choice, w4_layers
from gemm_runtime import Gemm
from gemm_runtime.timing import interleaved_medians_ms
from tests.sm80_staged_kernels import is_sm80_f16_peer

ROOT = Path(__file__).resolve().parents[2]


def sm80_build(work: Path) -> Path:
    """The default set generated under ``work``, its sm80 fp16 dense and W4 kernels built
    for sm_90: the build directory."""
    subprocess.run([sys.executable, "-m", "codegen", "--out", str(work / "all")], check=True, cwd=ROOT)
    subset_manifest(work / "all", work / "gen", is_sm80_f16_peer)
    build_mod.build(work / "gen", work / "build", archs=[90], progress=False)
    return work / "build"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["llama3-8b", "llama3-70b"])
    ap.add_argument("--m", nargs="+", type=int, default=[1024, 4096])
    ap.add_argument("--staged", action="store_true", help="add the sm80_staged tiles to the build")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sm80_quant_vs_dense_"))
    if args.staged:
        from tests.sm80_staged_kernels import build as staged_build

        major, minor = torch.cuda.get_device_capability()
        gemm = Gemm(build_dir=staged_build(work, 10 * major + minor, with_peers=True))
    else:
        gemm = Gemm(build_dir=sm80_build(work))
    ratios: dict[int, list[float]] = {}
    print("| layer | M | N | K | W4 plan | fp16 plan | W4 µs | fp16 µs | W4 / fp16 |")
    print("|---|---:|---:|---:|---|---|---:|---:|---:|")
    for layer, n, k, w, packed in w4_layers(args.models):
        for m in args.m:
            a = torch.randn(m, k, device="cuda", dtype=torch.float16)
            out = torch.empty(m, n, device="cuda", dtype=torch.float16)
            w4_plan = tuned_choice(gemm, a, packed, out)
            fp16_plan = tuned_choice(gemm, a, w.t(), out)
            t_q, t_h = interleaved_medians_ms([lambda: gemm.matmul(a, packed, out=out),
                                               lambda: gemm.matmul(a, w.t(), out=out)])  # fmt: skip
            ratios.setdefault(m, []).append(t_q / t_h)
            print(f"| {layer} | {m} | {n} | {k} | {w4_plan} | {fp16_plan} | {t_q * 1e3:.1f} | "
                  f"{t_h * 1e3:.1f} | {t_q / t_h:.2f} |", flush=True)  # fmt: skip
            if args.staged:
                # Each staged f16 W4 tile unsplit at swizzle 0, whether or not the tuning
                # took it, interleaved with the tuned W4 plan again (so the two compare).
                staged = [x.name for x in gemm.kernels if "_sm80_staged_" in x.name and "_af16_bu4_" in x.name]
                times = interleaved_medians_ms([lambda: gemm.matmul(a, packed, out=out)] +
                                               [lambda x=x: gemm.matmul(a, packed, out=out, kernel=x)
                                                for x in staged])  # fmt: skip
                print(f"|  | tuned W4 plan again {times[0] * 1e3:.1f}; staged, unsplit, z0: " +
                      ", ".join(f"{x.split('_df16_')[1].split('_nk')[0]} {t * 1e3:.1f} ({t / t_h:.2f})"
                                for x, t in zip(staged, times[1:])) + " |")  # fmt: skip
    for m, r in ratios.items():
        print(f"- M = {m}: median W4 / fp16 time {statistics.median(r):.2f} (min {min(r):.2f}, max {max(r):.2f}) "
              f"over {len(r)} layers; asked: at most 1.1")  # fmt: skip


if __name__ == "__main__":
    main()
