"""Experiment: where the SM90 quantized kernel's time goes. Each variant compiles
kernel_sm90_quant.cuh with one experiment knob set (a stage left out, another wgmma
depth) and times it, launched directly (tests/sm90_quant_kernel.py), on the same
problems beside fp16 cuBLAS on the unquantized weight, W4 groups of 128, L2 flushed,
medians:

    python -m bench.experiments.sm90_quant_variants [--variants base depth0 ...] [--m 64 ...]
        [--tiles 64x128s8 64x256s8m ...] [--splits 1 2 ...] [--per-tile]

Unsplit launches walk the tiles persistently on the resident CTAs; ``--per-tile`` also
times each unsplit variant on a CTA per tile (label ``/tile``), as a grid of the tiles
would run it (no tile's copies overlap another's epilogue in a CTA).

A tile ending in "m" is the shared-B form (codegen/families/sm90_quant.py,
Sm90QuantSmemFamily).
"""

from __future__ import annotations

import argparse

import torch

from bench.timing import median_ms
from gemm_runtime.packed_weight import pack_for_gemm
from gemm_runtime.quant import quantize
from tests.sm90_quant_kernel import QuantKernel, launch

VARIANTS = {
    "base": (),
    "depth0": ("GEMM_SM90Q_WGMMA_DEPTH=0",),
    "no_epilogue": ("GEMM_SM90Q_LEAVE_OUT=1",),
    "no_mma": ("GEMM_SM90Q_LEAVE_OUT=2",),
    "no_dequant": ("GEMM_SM90Q_LEAVE_OUT=3",),
    "no_x_copy": ("GEMM_SM90Q_LEAVE_OUT=4",),
    "no_w_copy": ("GEMM_SM90Q_LEAVE_OUT=5",),
    "no_sync": ("GEMM_SM90Q_LEAVE_OUT=6",),  # shared-B form only: wrong sums
}
# (M, N, K) and the tiles (tokens, rows, stages) timed on it: llama3-8b gate_up at
# M = 4096, 64, 128 and 256, llama3-8b qkv at 256 and 1024, llama3-70b o at 1024 and
# down at 4096; and the Qwen-MoE-like experts' down and gate_up at 8192 tokens as one
# dense problem (49152 routed rows, the tiles' short K loops of 22 and 32 K tiles).
PROBLEMS = {
    (49152, 2048, 1408): [(256, 128, 4), (128, 128, 6)],
    (49152, 2816, 2048): [(256, 128, 4), (128, 128, 6)],
    (4096, 28672, 4096): [(128, 128, 6), (128, 128, 4), (256, 128, 4)],
    (1024, 8192, 8192): [(128, 128, 6), (256, 128, 4)],
    (4096, 8192, 28672): [(128, 128, 6), (256, 128, 4)],
    (64, 28672, 4096): [(64, 128, 8), (64, 128, 4)],
    (128, 28672, 4096): [(128, 128, 6), (64, 128, 8)],
    (256, 28672, 4096): [(256, 128, 4), (128, 128, 6)],
    (256, 6144, 4096): [(256, 128, 4), (128, 128, 6)],
    (1024, 6144, 4096): [(256, 128, 4)],
}


RESIDENT = 132  # the H200's SMs, a CTA of these tiles each


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    ap.add_argument("--bits", type=int, default=4)
    ap.add_argument("--m", type=int, nargs="+", default=None, help="only the problems of these M")
    ap.add_argument("--splits", nargs="+", type=int, default=[1], help="stream-K splits (1: one CTA per tile)")
    ap.add_argument("--baseline", default="", help="another kernel_sm90_quant.cuh (e.g. `git show REV:templates/"
                    "include/gemm/sm90/kernel_sm90_quant.cuh > F`), timed unsplit on a CTA per tile beside each "
                    "tile as 'baseline'")
    ap.add_argument("--baseline-walks", action="store_true", help="the baseline header walks its tiles too "
                    "(from this session's persistent kernel on): launch it on the resident CTAs")
    ap.add_argument("--per-tile", action="store_true", help="also time unsplit launches on a CTA per tile")
    ap.add_argument("--tiles", nargs="+", default=None, help="tiles as TOKENSxROWSsSTAGES (e.g. 64x128s16; "
                    "a trailing m: the shared-B form) instead of each problem's own")
    args = ap.parse_args()
    for (m, n, k), tiles in PROBLEMS.items():
        if args.m and m not in args.m:
            continue
        w = torch.randn(n, k, device="cuda", dtype=torch.float16) * 0.05
        packed = pack_for_gemm(quantize(w, bits=args.bits, group_size=128))
        x = torch.randn(m, k, device="cuda", dtype=torch.float16)
        d = torch.empty(m, n, device="cuda", dtype=torch.float16)
        flop = 2.0 * m * n * k
        cublas = median_ms(lambda: torch.matmul(x, w.t(), out=d)) * 1e3
        print(f"{m}x{n}x{k}: fp16 cuBLAS {cublas:8.1f} us {flop / cublas / 1e6:5.0f} TFLOP/s", flush=True)
        if args.tiles:
            tiles = [(*map(int, t.rstrip("m").replace("s", "x").split("x")), "m" * t.endswith("m")) for t in args.tiles]
        for tile in tiles:
            form = tile[3] if len(tile) > 3 else ""
            tile, smem = tuple(tile[:3]), form == "m"
            row = []
            if args.baseline and not smem:
                kernel = QuantKernel("f16", args.bits, "f16", *tile, header=args.baseline)
                # NOTE: a CTA per tile unless --baseline-walks: a header from before the
                # persistent walk reads its tile from the block index, and needs no more
                # shared memory than this one's.
                resident = RESIDENT if args.baseline_walks else 2**31 - 1
                launch(kernel, x, packed, d, resident=resident)
                t = median_ms(lambda: launch(kernel, x, packed, d, resident=resident, sync=False)) * 1e3
                row.append(f"baseline {t:7.1f} us ({flop / t / 1e6:4.0f})")
            for variant in args.variants:
                kernel = QuantKernel("f16", args.bits, "f16", *tile, defines=VARIANTS[variant], smem=smem)
                runs = [(splits, RESIDENT, variant if splits == 1 else f"{variant}/{splits}") for splits in args.splits]
                if args.per_tile:
                    runs.append((1, 2**31 - 1, f"{variant}/tile"))  # the grid: min(resident, tiles)
                for splits, resident, label in runs:
                    def call(sync: bool = False):
                        launch(kernel, x, packed, d, splits=splits, resident=resident, sync=sync)

                    call(sync=True)
                    t = median_ms(call) * 1e3
                    row.append(f"{label} {t:7.1f} us ({flop / t / 1e6:4.0f})")
            print(f"  {tile[0]}x{tile[1]}s{tile[2]}{form}: " + " | ".join(row), flush=True)


if __name__ == "__main__":
    main()
