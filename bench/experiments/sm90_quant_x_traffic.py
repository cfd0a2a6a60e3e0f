"""Experiment: is X's L2 traffic what the sm90_quant tiles taking K tiles in turn lose to
64x128 on large layers? On 64 weight rows in turn a K tile's X tile is fetched once per
64 weight rows instead of 128 (docs/NOTES.md, fifty-second session). Each plan is timed
as it is and with X's copies left out (GEMM_SM90Q_LEAVE_OUT=4: the sums are then wrong),
all interleaved, W4 fp16, groups of 128, L2 flushed, medians, us. If the tiles in turn
catch up with 64x128 once neither copies X, X's traffic is the difference, and a cluster
multicast of X would be the fix; if not, it is something else.

    python -m bench.experiments.sm90_quant_x_traffic [--m 64] [--layers gate_up down qkv]
"""

from __future__ import annotations

import argparse

import torch
import yaml

from bench.dense import ROOT
from gemm_runtime.packed_weight import pack_for_gemm
from gemm_runtime.quant import quantize
from gemm_runtime.timing import interleaved_medians_ms
from tests.sm90_quant_kernel import QuantKernel, launch

# (label, tokens, rows, stages, k_split): 64x128 and the 64-row tile in turn
PLANS = [("64x128", 64, 128, 8, 1), ("64x64 in turn", 64, 64, 8, 2)]
NO_X = "GEMM_SM90Q_LEAVE_OUT=4"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--m", type=int, default=64)
    ap.add_argument("--model", default="llama3-8b")
    ap.add_argument("--layers", nargs="+", default=["gate_up", "down", "qkv"])
    ap.add_argument("--splits", nargs="+", type=int, default=[1, 2, 4], help="stream-K splits tried per plan")
    args = ap.parse_args()
    layers = yaml.safe_load((ROOT / "bench" / "shapes.yaml").read_text())["models"][args.model]
    print("| layer | plan | splits | µs | no X copies µs | with / without |")
    print("|---|---|---:|---:|---:|---:|")
    for name in args.layers:
        n, k = layers[name]
        packed = pack_for_gemm(quantize(torch.randn(n, k, device="cuda", dtype=torch.float16) * 0.02, bits=4,
                                        group_size=128))  # fmt: skip
        x = torch.randn(args.m, k, device="cuda", dtype=torch.float16)
        d = torch.empty(args.m, n, device="cuda", dtype=torch.float16)
        runs = []
        for label, tokens, rows, stages, k_split in PLANS:
            for defines in ((), (NO_X,)):
                kernel = QuantKernel("f16", 4, "f16", tokens, rows, stages, defines=defines, k_split=k_split)
                for splits in args.splits:
                    launch(kernel, x, packed, d, splits=splits)  # compiled, loaded, checked for traps
                    runs.append((label, splits, defines, kernel))
        times = interleaved_medians_ms([lambda kern=kern, s=s: launch(kern, x, packed, d, splits=s, sync=False)
                                        for _, s, _, kern in runs])  # fmt: skip
        by = {(label, s, bool(defines)): t * 1e3 for (label, s, defines, _), t in zip(runs, times)}
        for label, *_ in PLANS:
            for s in args.splits:
                t, t0 = by[label, s, False], by[label, s, True]
                print(f"| {args.model} {name} M={args.m} | {label} | {s} | {t:.1f} | {t0:.1f} | {t / t0:.3f} |",
                      flush=True)


if __name__ == "__main__":
    main()
