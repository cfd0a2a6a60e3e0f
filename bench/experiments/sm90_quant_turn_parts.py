"""Experiment: where the sm90_quant tiles taking K tiles in turn spend their time, beside
the tiles that do not. Each tile is timed as it is and with one part left out
(GEMM_SM90Q_LEAVE_OUT: the epilogue, the wgmma, the dequantization, X's copies, the
weight's copies; the sums are then wrong), and with ``--baseline`` also compiled from
another kernel_sm90_quant.cuh (e.g. the previous commit's), every variant of a problem
interleaved (gemm_runtime.timing.interleaved_medians_ms), W4 fp16 by default, groups of
128, L2 flushed, medians, µs:

    python -m bench.experiments.sm90_quant_turn_parts [--tiles 64x128s8 64x64s8k2 64x64x128s8k2]
        [--problems down:1 gate_up:1 qkv:2] [--m 64] [--bits 4] [--baseline OLD.cuh]

A problem is LAYER:SPLITS of --model (bench/shapes.yaml). Fifty-third session (H100,
docs/NOTES.md): with the wgmma left out, 64x128 and 64x64 in turn both took a stage
every 155 ns on llama3-8b down at 64 tokens, so the tile in turn's two warpgroups, each
taking every other stage, wait for theirs; X's copies cost 2-6% on either.
"""

from __future__ import annotations

import argparse

import torch
import yaml

from bench.dense import ROOT
from bench.experiments.sm90_quant_launch import parse_tile
from bench.experiments.sm90_quant_variants import VARIANTS as ALL_VARIANTS
from gemm_runtime.packed_weight import pack_for_gemm
from gemm_runtime.quant import quantize
from gemm_runtime.timing import interleaved_medians_ms
from tests.sm90_quant_kernel import launch

# The leave-out variants of sm90_quant_variants (the register-A form's), by its names.
VARIANTS = {name: ALL_VARIANTS[name] for name in ("base", "no_epilogue", "no_mma", "no_dequant", "no_x_copy",
                                                  "no_w_copy")}  # fmt: skip


def parse_problem(text: str) -> tuple[str, int]:
    """'down:4' -> ('down', 4): a layer of --model and its stream-K splits (1: the walk)."""
    layer, _, splits = text.partition(":")
    if not layer or not splits.isdigit() or int(splits) < 1:
        raise argparse.ArgumentTypeError(f"problem {text!r}: expected LAYER:SPLITS, e.g. down:1")
    return layer, int(splits)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tiles", nargs="+", type=parse_tile, default=[parse_tile(t) for t in
                    ("64x128s8", "64x64s8k2", "64x64x128s8k2", "64x128s8k2")])  # fmt: skip
    ap.add_argument("--problems", nargs="+", type=parse_problem, default=[("down", 1), ("gate_up", 1), ("qkv", 2)])
    ap.add_argument("--model", default="llama3-8b")
    ap.add_argument("--m", type=int, default=64)
    ap.add_argument("--bits", type=int, choices=[4, 8], default=4)
    ap.add_argument("--baseline", default="", help="another kernel_sm90_quant.cuh, timed as it is beside the tree's")
    args = ap.parse_args()
    layers = yaml.safe_load((ROOT / "bench" / "shapes.yaml").read_text())["models"][args.model]
    columns = list(VARIANTS) + (["baseline"] if args.baseline else [])
    for layer, splits in args.problems:
        n, k = layers[layer]
        w = torch.randn(n, k, device="cuda", dtype=torch.float16) * 0.02
        packed = pack_for_gemm(quantize(w, bits=args.bits, group_size=128))
        x = torch.randn(args.m, k, device="cuda", dtype=torch.float16)
        d = torch.empty(args.m, n, device="cuda", dtype=torch.float16)
        kernels = []
        for tile in args.tiles:
            for column in columns:
                kernel = tile.kernel("f16", args.bits, defines=VARIANTS.get(column, ()),
                                     header=args.baseline if column == "baseline" else "")  # fmt: skip
                launch(kernel, x, packed, d, splits=splits)  # compiled, loaded, checked for traps
                kernels.append(kernel)
        times = interleaved_medians_ms([lambda kern=kern: launch(kern, x, packed, d, splits=splits, sync=False)
                                        for kern in kernels])  # fmt: skip
        print(f"\n{args.model} {layer} M={args.m} W{args.bits}, splits {splits}, µs\n")
        print("| tile | " + " | ".join(columns) + " |")
        print("|---|" + "---:|" * len(columns))
        for i, tile in enumerate(args.tiles):
            row = times[i * len(columns):(i + 1) * len(columns)]
            print(f"| {tile.label} | " + " | ".join(f"{t * 1e3:.1f}" for t in row) + " |", flush=True)


if __name__ == "__main__":
    main()
