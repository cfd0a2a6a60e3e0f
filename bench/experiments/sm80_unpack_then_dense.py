"""Experiment: the whole-weight path for SM80-family W4A16 prefill (issue 17: W4 at most
1.1x the time of the family's own fp16 kernel at M >= 1024). The packed weight is
dequantized once into a dense workspace (gemm_runtime.unpack) and the sm80 fp16 kernel
runs on it; the quantized kernels instead dequantize every weight once per CTA row of
tiles beside their MMAs. Builds the default set's sm80 fp16 kernels, dense and 4-bit,
as sm80_quant_vs_dense does (no SM90 family, as on an Ampere GPU), then per llama3
layer and M times, interleaved, L2 flushed, medians:

* the tuned W4 plan on the packed weight (groups of 128);
* the tuned fp16 plan on the unquantized weight (the reference time);
* the unpack alone, and its memory traffic (packed bytes read, 16-bit weights written)
  over its time;
* the unpack then the tuned fp16 plan on its output, one after the other.

    python -m bench.experiments.sm80_unpack_then_dense [--m 1024 4096] [--models llama3-8b llama3-70b]

Prints each problem's times and the ratios to fp16 (asked: at most 1.1), the medians
per M, and the largest difference between the whole-weight path's output and the W4
kernel's (the same products, summed in another order).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import torch

from bench.experiments.sm80_quant_vs_dense import sm80_build
from bench.quant import tuned_choice, w4_layers
from gemm_runtime import Gemm
from gemm_runtime.timing import interleaved_medians_ms
from gemm_runtime.unpack import unpack_weight


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["llama3-8b", "llama3-70b"])
    ap.add_argument("--m", nargs="+", type=int, default=[1024, 4096])
    args = ap.parse_args()
    gemm = Gemm(build_dir=sm80_build(Path(tempfile.mkdtemp(prefix="sm80_unpack_then_dense_"))))
    ratios: dict[int, dict[str, list[float]]] = {}
    print("| layer | M | W4 plan | fp16 plan | W4 µs | fp16 µs | unpack µs (TB/s) | unpack + fp16 µs | "
          "W4 / fp16 | unpack + fp16 / fp16 | max diff |")
    print("|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for layer, n, k, w, packed in w4_layers(args.models):
        dense = unpack_weight(packed)
        moved = packed.b.numel() + packed.v.numel() * 2 + n * k * 2
        for m in args.m:
            a = torch.randn(m, k, device="cuda", dtype=torch.float16)
            out_q = torch.empty(m, n, device="cuda", dtype=torch.float16)
            out_w = torch.empty_like(out_q)
            w4_plan = tuned_choice(gemm, a, packed, out_q)
            fp16_plan = tuned_choice(gemm, a, w.t(), out_w)
            tuned_choice(gemm, a, dense.t(), out_w)  # its own signature (B's row stride)

            def whole() -> None:
                gemm.matmul(a, unpack_weight(packed, out=dense).t(), out=out_w)

            whole()
            diff = (out_w.float() - out_q.float()).abs().max().item()
            t_q, t_h, t_u, t_w = interleaved_medians_ms([lambda: gemm.matmul(a, packed, out=out_q),
                                                         lambda: gemm.matmul(a, w.t(), out=out_w),
                                                         lambda: unpack_weight(packed, out=dense), whole])  # fmt: skip
            r = ratios.setdefault(m, {"w4": [], "whole": []})
            r["w4"].append(t_q / t_h)
            r["whole"].append(t_w / t_h)
            print(f"| {layer} | {m} | {w4_plan} | {fp16_plan} | {t_q * 1e3:.1f} | {t_h * 1e3:.1f} | "
                  f"{t_u * 1e3:.1f} ({moved / t_u / 1e9:.2f}) | {t_w * 1e3:.1f} | {t_q / t_h:.2f} | "
                  f"{t_w / t_h:.2f} | {diff:.2e} |", flush=True)  # fmt: skip
    for m, r in ratios.items():
        print(f"- M = {m}: median time / fp16's: W4 kernel {statistics.median(r['w4']):.2f}, unpack + fp16 "
              f"{statistics.median(r['whole']):.2f} (max {max(r['whole']):.2f}) over {len(r['w4'])} layers; "
              "asked: at most 1.1")  # fmt: skip


if __name__ == "__main__":
    main()
