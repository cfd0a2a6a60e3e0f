"""Experiment: where the sm90 grouped kernels lose against the dense ones at prefill.

One MoE projection's rows (bench.moe's routing) multiplied four ways by the same tile:
the dense sm90 kernel over all rows with one expert's weight (with and without a 2-CTA
cluster), and the grouped kernel with the rows (1) all on one expert, (2) split evenly
in whole tiles, (3) as routed. Each at the rasterization groups 2^0 .. 2^3, beside
torch._grouped_mm and cuBLAS on the same rows. TFLOP/s, medians, L2 flushed.

    python -m bench.experiments.grouped_overhead --config mixtral --tokens 8192
"""

from __future__ import annotations

import argparse

import torch

from bench.moe import CONFIGS, _projections, route
from bench.timing import median_ms
from gemm_runtime import Gemm
from gemm_runtime.plan import LaunchSpec


def _sm90(gemm: Gemm, tile: str, grouped: bool, cluster: int) -> str | None:
    return next((k.name for k in gemm.kernels if k.spec.mainloop.value == "sm90" and k.spec.cluster == cluster
                 and k.spec.grouped == grouped and not k.spec.quantized and k.spec.b_order.value == "nk"
                 and "x".join(map(str, k.spec.cta[:2])) == tile and k.spec.a_type.value == "bf16"
                 and k.spec.d_type is k.spec.a_type), None)  # fmt: skip


def _offsets(counts: list[int]) -> torch.Tensor:
    out = torch.zeros(len(counts) + 1, dtype=torch.int32)
    out[1:] = torch.cumsum(torch.tensor(counts), 0)
    return out.cuda()


def _uneven(rows: int, experts: int, step: int) -> list[int]:
    """Whole tiles of 128 rows per expert, every other expert ``step`` rows fewer and the
    next as many more: boundaries on multiples of ``step``."""
    per = rows // experts // 128 * 128
    counts = [per + (step if e % 2 else -step) for e in range(experts - 1)]
    return counts + [rows - sum(counts)]


def _layouts(rows: int, experts: int, routed: torch.Tensor) -> dict[str, torch.Tensor]:
    """The row layouts compared: all rows on one expert, whole tiles each, uneven counts
    with boundaries on multiples of 128 / 64 / 8, and bench.moe's routing."""
    per = rows // experts // 128 * 128
    out = {"one expert": _offsets([rows] + [0] * (experts - 1)),
           "even": _offsets([per] * (experts - 1) + [rows - per * (experts - 1)])}  # fmt: skip
    if per >= 256:
        for step in (128, 64, 8):
            out[f"uneven {step}"] = _offsets(_uneven(rows, experts, step))
    out["routed"] = routed
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", nargs="+", default=["mixtral", "qwen"], choices=list(CONFIGS))
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--gemm", nargs="+", default=["gate_up", "down"])
    ap.add_argument("--tiles", nargs="+", default=["128x256", "128x128"])
    ap.add_argument("--swizzles", nargs="+", type=int, default=[1, 3])
    ap.add_argument("--profile", action="store_true",
                    help="launch each layout's grouped kernel and the dense one once (first tile and swizzle), "
                    "for ncu, instead of timing")
    args = ap.parse_args()
    gemm = Gemm()
    for name in args.config:
        cfg = CONFIGS[name]
        routing = route(args.tokens, cfg, torch.Generator().manual_seed(0), "cuda")
        rows = int(routing.offsets[-1])
        layouts = _layouts(rows, cfg.experts, routing.offsets)
        for proj in args.gemm:
            n, k = _projections(cfg)[proj]
            a = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16)
            w = torch.randn(cfg.experts, n, k, device="cuda", dtype=torch.bfloat16) / k**0.5
            out = torch.empty(rows, n, device="cuda", dtype=torch.bfloat16)
            flop = 2 * rows * n * k
            tf = lambda ms: flop / ms / 1e9  # noqa: E731
            head = f"{name} {args.tokens} {proj} ({rows} x {n} x {k})"
            if args.profile:
                plan = LaunchSpec(_sm90(gemm, args.tiles[0], True, 1), 1, args.swizzles[0])
                for label, offs in layouts.items():
                    print(f"{head}: profiling grouped {label}", flush=True)
                    gemm.grouped_matmul(a, w, offs, out=out, kernel=plan)
                    torch.cuda.synchronize()
                gemm.matmul(a, w[0].t(), out=out, kernel=LaunchSpec(_sm90(gemm, args.tiles[0], False, 1), 1,
                                                                     args.swizzles[0]))  # fmt: skip
                torch.cuda.synchronize()
                continue
            print(f"{head}: cuBLAS {tf(median_ms(lambda: torch.matmul(a, w[0].t(), out=out))):.0f}", flush=True)
            for label, offs in layouts.items():
                ends = offs[1:].contiguous()
                t = median_ms(lambda: torch._grouped_mm(a, w.transpose(1, 2), offs=ends))  # noqa: B023
                print(f"{head}: _grouped_mm {label} {tf(t):.0f}", flush=True)
            for tile in args.tiles:
                for swz in args.swizzles:
                    cells = []
                    for cluster in (1, 2):
                        kern = _sm90(gemm, tile, False, cluster)
                        if kern:
                            plan = LaunchSpec(kern, 1, swz)
                            t = median_ms(lambda: gemm.matmul(a, w[0].t(), out=out, kernel=plan))  # noqa: B023
                            cells.append(f"dense c{cluster} {tf(t):.0f}")
                    kern = _sm90(gemm, tile, True, 1)
                    for label, offs in layouts.items():
                        plan = LaunchSpec(kern, 1, swz)
                        t = median_ms(lambda: gemm.grouped_matmul(a, w, offs, out=out, kernel=plan))  # noqa: B023
                        cells.append(f"grouped {label} {tf(t):.0f}")
                    print(f"{head}: {tile} s{swz}: " + ", ".join(cells), flush=True)


if __name__ == "__main__":
    main()
