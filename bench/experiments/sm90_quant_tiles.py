"""Experiment: the SM90 quantized kernel (kernel_sm90_quant.cuh, launched directly through
tests/sm90_quant_kernel.py) over tile shapes, stage counts and split counts, beside fp16
cuBLAS on the unquantized weight and the sm80 default of the same packed weight, on
llama3 layers, groups of 128, L2 flushed, medians. Prints, per layer and M, every
candidate's time and the best one's ratio to cuBLAS; the best per M feeds the family's
cost terms and the default tiles (codegen/configs/sm90_quant.yaml).

    python -m bench.experiments.sm90_quant_tiles [--m 1 16 64 128 256 1024 4096] [--bits 4 8]
        [--tiles 128x128s6 128x128x128s4 ...] [--compare 128x128x128s4:128x128s6 ...]

--compare A:B prints, per problem where both ran, tile A's best time (over its split
counts) over tile B's, and their median per M (below 1: A faster).
"""

from __future__ import annotations

import argparse
import statistics

import torch
import yaml

from bench.dense import ROOT
from bench.experiments.sm90_quant_launch import TileForm, parse_tile
from bench.timing import median_ms
from gemm_runtime import Gemm
from gemm_runtime.packed_weight import pack_for_gemm
from gemm_runtime.quant import quantize
from tests.sm90_quant_kernel import launch

# 128x192 and 64x256: three and four consumer warpgroups; b2: two m64 blocks of weight
# rows per consumer warpgroup (half the warps); k2: two consumer warpgroups on 64 rows
# taking the K tiles in turn (x128: a pair of them a stage); --tiles for others
TILES = [parse_tile(t) for t in ("64x128s8", "64x64s8", "128x128s6", "128x64s8", "256x128s4", "128x192s6", "64x256s8",
                                 "64x256s8b2", "64x128s8b2")]  # fmt: skip
SMS = 132


def candidates(m: int, n: int, k: int) -> list[tuple[TileForm, int]]:
    """(tile, splits) pairs worth timing: tiles no wider in tokens than M needs, split
    counts that bring the grid up to at most two CTAs per SM."""
    out = []
    for tile in TILES:
        tokens, rows = tile.tokens, tile.rows
        if tokens > 64 and tokens // 2 >= m:
            continue
        ctas = -(-m // tokens) * -(-n // rows)
        for splits in (1, 2, 3, 4, 6, 8):
            if splits == 1 or (ctas * splits <= 2 * SMS and k // 64 >= 4 * splits):
                out.append((tile, splits))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--m", nargs="+", type=int, default=[1, 16, 64, 128, 256, 1024, 4096])
    ap.add_argument("--bits", nargs="+", type=int, default=[4, 8])
    ap.add_argument("--models", nargs="+", default=["llama3-8b", "llama3-70b"])
    ap.add_argument("--tiles", nargs="+",
                    help="tokens x rows [x K] s stages [b blocks] [k turns], e.g. 128x64s4, 64x256s8b2, 64x64s8k2 "
                    "or 64x64x128s8k2 (default: TILES)")
    ap.add_argument("--compare", nargs="+", default=[], metavar="A:B",
                    help="tile pairs (labels as --tiles gives them) whose best times to set side by side")
    args = ap.parse_args()
    if args.tiles:
        TILES[:] = [parse_tile(t) for t in args.tiles]
    pairs = [tuple(parse_tile(t).label for t in c.split(":")) for c in args.compare]
    if any(len(c) != 2 for c in pairs):
        ap.error(f"--compare takes A:B pairs of tiles, got {args.compare}")
    models = yaml.safe_load((ROOT / "bench" / "shapes.yaml").read_text())["models"]
    gemm = Gemm()
    for bits in args.bits:
        ratios: dict[int, list[float]] = {m: [] for m in args.m}
        sm80: dict[int, list[float]] = {m: [] for m in args.m}
        # The best tile taking K tiles in turn against the best of the others, where both ran.
        turns: dict[int, list[float]] = {m: [] for m in args.m}
        compared: dict[tuple[str, str, int], list[float]] = {(a, b, m): [] for a, b in pairs for m in args.m}
        for model in args.models:
            for layer, (n, k) in models[model].items():
                w = torch.randn(n, k, device="cuda", dtype=torch.float16) * 0.05
                packed = pack_for_gemm(quantize(w, bits=bits, group_size=128))
                for m in args.m:
                    x = torch.randn(m, k, device="cuda", dtype=torch.float16)
                    d = torch.empty(m, n, device="cuda", dtype=torch.float16)
                    cublas = median_ms(lambda: torch.matmul(x, w.t(), out=d)) * 1e3
                    ours = median_ms(lambda: gemm.matmul(x, packed, out=d)) * 1e3
                    times = []
                    for tile, splits in candidates(m, n, k):
                        kernel = tile.kernel("f16", bits)
                        launch(kernel, x, packed, d, splits=splits)  # compiled, loaded, checked for traps
                        t = median_ms(lambda: launch(kernel, x, packed, d, splits=splits, sync=False)) * 1e3
                        times.append((t, tile, splits))
                    times.sort()
                    best, tile, splits = times[0]
                    ratios[m].append(cublas / best)
                    sm80[m].append(cublas / ours)
                    others = " ".join(f"{t.label}/{s}:{u:.1f}" for u, t, s in times[1:6])
                    in_turn = [u for u, t, _ in times if t.k_split > 1]
                    whole = [u for u, t, _ in times if t.k_split == 1]
                    if in_turn and whole:
                        turns[m].append(min(whole) / min(in_turn))
                        others += f" | best without turns / with {min(whole) / min(in_turn):.3f}"
                    for a, b in pairs:
                        ta = [u for u, t, _ in times if t.label == a]
                        tb = [u for u, t, _ in times if t.label == b]
                        if ta and tb:
                            compared[(a, b, m)].append(min(ta) / min(tb))
                            others += f" | {a}/{b} {min(ta) / min(tb):.3f}"
                    print(f"W{bits} {model} {layer:8s} M={m:5d}: cuBLAS {cublas:8.1f} us, sm80 default {ours:8.1f}, "
                          f"best {best:8.1f} ({tile.label} /{splits}) -> {cublas / best:5.2f}x "
                          f"(sm80 {cublas / ours:5.2f}x) | {others}", flush=True)  # fmt: skip
        for m in args.m:
            print(f"W{bits} M={m:5d}: median cuBLAS/best {statistics.median(ratios[m]):5.2f}x "
                  f"(min {min(ratios[m]):.2f}), cuBLAS/sm80 default {statistics.median(sm80[m]):5.2f}x"
                  + (f", best without turns / with {statistics.median(turns[m]):.3f} (min {min(turns[m]):.3f}, "
                     f"max {max(turns[m]):.3f})" if turns[m] else ""), flush=True)  # fmt: skip
            for a, b in pairs:
                r = compared[(a, b, m)]
                if r:
                    print(f"W{bits} M={m:5d}: {a} / {b} median {statistics.median(r):.3f} (min {min(r):.3f}, "
                          f"max {max(r):.3f}, {len(r)} problems)", flush=True)


if __name__ == "__main__":
    main()
