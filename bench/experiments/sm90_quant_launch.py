"""Experiment: one launch of an SM90 quantized kernel (tests/sm90_quant_kernel.py, compiled
from the tree's header with the given defines), for a profiler to catch, e.g. the
thirty-fifth session's stall profile (docs/perf/sm90_quant_k_groups.md):

    ncu --clock-control none --section SourceCounters --section WarpStateStats \\
        -k regex:gemm_sm90_quant -c 1 -o REPORT \\
        python3 -m bench.experiments.sm90_quant_launch 64x128s8 64 4096 4096 --splits 3
    python -m bench.experiments.ncu_sass_table REPORT.ncu-rep --stalls 40

TILE is TOKENSxROWSsSTAGES with an optional bBLOCKS (two m64 blocks a consumer
warpgroup), as bench/experiments/sm90_quant_tiles.py takes them; the problem is M x N x K
with random activations and a random weight quantized in groups of --group. The kernel
runs once (--launches for more), then the output is checked against the dequantized
weight's product so that a profile is never of a broken variant.
"""

from __future__ import annotations

import argparse
import re


def parse_tile(text: str) -> tuple[int, int, int, int, int]:
    """'64x128s8' -> (64, 128, 8, 1, 1); '64x256s8b2' -> (64, 256, 8, 2, 1): two m64 blocks
    per consumer warpgroup; '64x64s8k2' -> (64, 64, 8, 1, 2): two consumer warpgroups
    taking the K tiles in turn."""
    m = re.fullmatch(r"(\d+)x(\d+)s(\d+)(?:b(\d+))?(?:k(\d+))?", text)
    if m is None:
        raise argparse.ArgumentTypeError(f"tile {text!r}: expected TOKENSxROWSsSTAGES[bBLOCKS][kTURNS], e.g. 64x128s8")
    tokens, rows, stages, blocks, k_split = m.groups()
    return int(tokens), int(rows), int(stages), int(blocks or 1), int(k_split or 1)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tile", type=parse_tile)
    ap.add_argument("m", type=int)
    ap.add_argument("n", type=int)
    ap.add_argument("k", type=int)
    ap.add_argument("--splits", type=int, default=1, help="stream-K splits (1: the persistent walk)")
    ap.add_argument("--bits", type=int, choices=[4, 8], default=4)
    ap.add_argument("--dtype", choices=["f16", "bf16"], default="f16")
    ap.add_argument("--group", type=int, default=128, help="the weight's group size (-1: per channel)")
    ap.add_argument("-D", dest="defines", action="append", default=[], help="a knob of the header, e.g. "
                    "GEMM_SM90Q_LEAVE_OUT=3 (repeatable)")
    ap.add_argument("--launches", type=int, default=1)
    args = ap.parse_args(argv)

    import torch

    from gemm_runtime.packed_weight import pack_for_gemm
    from gemm_runtime.quant import quantize
    from tests.sm90_quant_kernel import QuantKernel, launch

    tokens, rows, stages, blocks, k_split = args.tile
    kernel = QuantKernel(args.dtype, args.bits, args.dtype, tokens, rows, stages, defines=tuple(args.defines),
                         blocks=blocks, k_split=k_split)  # fmt: skip
    spec = kernel.spec
    error = spec.mainloop.tile_error(spec.cta, spec.warps, spec.stages)
    if error:
        ap.error(f"tile {kernel.name}: {error[0]} must be {error[1]}")
    dtype = torch.float16 if args.dtype == "f16" else torch.bfloat16
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(args.m, args.k, device="cuda", dtype=dtype, generator=gen)
    qw = quantize(torch.randn(args.n, args.k, device="cuda", dtype=dtype, generator=gen) * 0.02, bits=args.bits,
                  group_size=args.group)  # fmt: skip
    packed = pack_for_gemm(qw)
    d = torch.full((args.m, args.n), float("nan"), device="cuda", dtype=dtype)
    for _ in range(args.launches):
        launch(kernel, x, packed, d, splits=args.splits)
    ref = x.float() @ qw.dequantize().float().t()
    err = ((d.float() - ref).abs().max() / ref.abs().max()).item()
    print(f"{kernel.name} {args.m}x{args.n}x{args.k} splits {args.splits}: max error / max |ref| {err:.2e}")
    if not err < 2e-2:  # NaN fails too
        raise SystemExit(f"{kernel.name}: wrong result (max error / max |ref| {err})")


if __name__ == "__main__":
    main()
