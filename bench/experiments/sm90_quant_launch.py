"""Experiment: one launch of an SM90 quantized kernel (tests/sm90_quant_kernel.py, compiled
from the tree's header with the given defines), for a profiler to catch, e.g. the
thirty-fifth session's stall profile (docs/perf/sm90_quant_k_groups.md):

    ncu --clock-control none --section SourceCounters --section WarpStateStats \\
        -k regex:gemm_sm90_quant -c 1 -o REPORT \\
        python3 -m bench.experiments.sm90_quant_launch 64x128s8 64 4096 4096 --splits 3
    python -m bench.experiments.ncu_sass_table REPORT.ncu-rep --stalls 40

TILE is TOKENSxROWS[xK]sSTAGES with an optional bBLOCKS (two m64 blocks a consumer
warpgroup) or kTURNS, as bench/experiments/sm90_quant_tiles.py takes them (parse_tile);
the problem is M x N x K with random activations and a random weight quantized in groups of --group. The kernel
runs once (--launches for more), then the output is checked against the dequantized
weight's product so that a profile is never of a broken variant.
"""

from __future__ import annotations

import argparse
import re
from typing import NamedTuple


class TileForm(NamedTuple):
    """A tile of the SM90 quantized kernel as the experiments name it (parse_tile)."""

    tokens: int
    rows: int
    stages: int
    blocks: int = 1  # m64 blocks of weight rows per consumer warpgroup
    k_split: int = 1  # consumer warpgroups per weight row, taking the K tiles in turn
    cta_k: int = 64  # 128: a pair of K tiles a ring stage (one for each of two warpgroups, or both for one)
    defines: tuple[str, ...] = ()  # experiment knobs of the header (gemm/sm90/quant_knobs.cuh)

    @property
    def label(self) -> str:
        """64x128s8, 64x256s8b2, 64x64s8k2, 64x64x128s8k2, 64x256x128s4@KNOB=1 (parse_tile's
        form)."""
        k = f"x{self.cta_k}" if self.cta_k != 64 else ""
        return (f"{self.tokens}x{self.rows}{k}s{self.stages}" + (f"b{self.blocks}" if self.blocks > 1 else "")
                + (f"k{self.k_split}" if self.k_split > 1 else "")
                + ("@" + ",".join(self.defines) if self.defines else ""))  # fmt: skip

    def kernel(self, dtype: str = "f16", bits: int = 4, out: str | None = None, **fields):
        """The QuantKernel of this tile (tests/sm90_quant_kernel.py); ``fields``: its
        others (defines, header; defines given here come after the tile's own)."""
        from tests.sm90_quant_kernel import QuantKernel

        fields["defines"] = self.defines + tuple(fields.get("defines", ()))
        return QuantKernel(dtype, bits, out or dtype, self.tokens, self.rows, self.stages, blocks=self.blocks,
                           k_split=self.k_split, cta_k=self.cta_k, **fields)  # fmt: skip


def parse_tile(text: str) -> TileForm:
    """'64x128s8' -> (64, 128, 8, 1, 1, 64, ()); '64x256s8b2': two m64 blocks per consumer
    warpgroup; '64x64s8k2': two consumer warpgroups taking the K tiles in turn;
    '64x64x128s8k2': the same with a pair of K tiles a stage (cta K 128);
    '64x256x128s4@GEMM_SM90Q_SK_SKEW=0': a tile with knobs set (comma-separated)."""
    m = re.fullmatch(r"(\d+)x(\d+)(?:x(\d+))?s(\d+)(?:b(\d+))?(?:k(\d+))?(?:@((?:GEMM_\w+=\w+,?)+))?", text)
    if m is None or (m.group(7) or "").endswith(","):
        raise argparse.ArgumentTypeError(f"tile {text!r}: expected TOKENSxROWS[xK]sSTAGES[bBLOCKS][kTURNS][@KNOB=V,...], "
                                         "e.g. 64x128s8, 64x64x128s8k2 or 64x256x128s4@GEMM_SM90Q_SK_SKEW=0")  # fmt: skip
    tokens, rows, cta_k, stages, blocks, k_split, knobs = m.groups()
    return TileForm(int(tokens), int(rows), int(stages), int(blocks or 1), int(k_split or 1), int(cta_k or 64),
                    tuple(knobs.split(",")) if knobs else ())


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
    from tests.sm90_quant_kernel import launch

    kernel = args.tile.kernel(args.dtype, args.bits, defines=tuple(args.defines))
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
