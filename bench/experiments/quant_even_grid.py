"""Experiment: the sm90_quant walk on the dense family's even grid (Sm90Family.balanced_units)
against its stream-K-sized grid (resident CTAs), tuned plans, llama3 layers, W4/W8 g128.

Both grids launch the same kernel and plan; only the CTA count differs, so they run from two
Gemm instances whose ready launches were built with and without the patched grid rule, and are
timed interleaved with fp16 cuBLAS in one process (one clock).

    python -m bench.experiments.quant_even_grid [--m 128 256 1024 4096] [--bits 4]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import torch
import yaml

from codegen.families.sm90 import Sm90Family
from codegen.families.sm90_quant import Sm90QuantFamily
from gemm_runtime import DispatchPolicy, Gemm, Operation
from gemm_runtime.packed_weight import pack_for_gemm
from gemm_runtime.quant import quantize
from gemm_runtime.timing import interleaved_medians_ms

ROOT = Path(__file__).resolve().parents[2]
STREAM_K_GRID = Sm90QuantFamily.grid


def even_grid(self, spec, tiles, splits, swizzle, resident):
    if splits == 1 and not spec.grouped:
        return Sm90Family.balanced_units(tiles[0] * tiles[1], max(1, resident)), 1, 1
    return STREAM_K_GRID(self, spec, tiles, splits, swizzle, resident)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs="+", default=["llama3-8b", "llama3-70b"])
    ap.add_argument("--m", nargs="+", type=int, default=[128, 256, 1024, 4096])
    ap.add_argument("--bits", nargs="+", type=int, default=[4])
    args = ap.parse_args()
    models = yaml.safe_load((ROOT / "bench" / "shapes.yaml").read_text())["models"]
    base, even = Gemm(), Gemm()
    ratios: dict[int, list[float]] = {}
    for bits in args.bits:
        for model in args.models:
            for layer, (n, k) in models[model].items():
                w = torch.randn(n, k, device="cuda", dtype=torch.float16) * 0.02
                packed = pack_for_gemm(quantize(w, bits=bits, group_size=128))
                for m in args.m:
                    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
                    out_b, out_e, out_h = (torch.empty(m, n, device="cuda", dtype=torch.float16) for _ in range(3))
                    before = {key for key, _ in base.cache.entries()}
                    base.matmul(a, packed, out=out_b, operation=Operation(dispatch=DispatchPolicy.MEASURE))
                    plan = next(spec for key, spec in base.cache.entries() if key not in before)
                    kern = base.registry.get(plan.kernel)
                    grids = []
                    for g, out, rule in ((base, out_b, STREAM_K_GRID), (even, out_e, even_grid)):
                        g._fast._plans.clear()  # one ready launch per instance: the one timed below
                        Sm90QuantFamily.grid = rule
                        try:
                            g.matmul(a, packed, out=out, kernel=plan)
                        finally:
                            Sm90QuantFamily.grid = STREAM_K_GRID
                        (ready,) = g._fast._plans.values()
                        grids.append(ready.kernel.grid[0])
                    label = f"W{bits} {model} {layer} M={m} {kern.spec.name} ({plan.splits})"
                    if grids[0] == grids[1]:
                        print(f"{label}: grid {grids[0]} either way", flush=True)
                        continue
                    same = torch.equal(out_b, out_e)
                    t_b, t_e, t_h = interleaved_medians_ms([
                        lambda: base.matmul(a, packed, out=out_b, kernel=plan),
                        lambda: even.matmul(a, packed, out=out_e, kernel=plan),
                        lambda: torch.matmul(a, w.t(), out=out_h),
                    ])  # fmt: skip
                    ratios.setdefault(m, []).append(t_b / t_e)
                    print(f"{label}: grid {grids[0]} -> {grids[1]}: {t_b*1e3:.1f} -> {t_e*1e3:.1f} us "
                          f"(x{t_b/t_e:.3f}); cuBLAS {t_h*1e3:.1f} us; vs cuBLAS {t_h/t_b:.2f} -> {t_h/t_e:.2f}; "
                          f"bit-equal {same}", flush=True)
    for m, r in sorted(ratios.items()):
        print(f"M={m}: even/stream-K speedup median {statistics.median(r):.3f} (min {min(r):.3f}, max {max(r):.3f}, "
              f"{len(r)} problems)")


if __name__ == "__main__":
    main()
