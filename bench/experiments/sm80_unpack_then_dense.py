"""Experiment: whole-weight plans for SM80-family W4A16 prefill (issue 17: W4 at most 1.1x
the time of the family's own fp16 kernel at M >= 1024; gemm_runtime/whole_weight.py).
The packed weight is unpacked once into a dense buffer (gemm_runtime.unpack) and a dense
kernel runs on it; the quantized kernels instead dequantize every weight once per CTA row
of tiles beside their MMAs. Builds the default set's sm80-class kernels (no SM90 family,
as on an Ampere GPU), then per llama3 layer and M tunes (MEASURE) and times, interleaved,
L2 flushed, medians:

* the quantized kernels alone (whole-weight plans off: GEMM_UNPACK_MAX_MIB=0 while tuning);
* dispatch as shipped: the tuner's choice among both (whole-weight plans on);
* the fp16 plan on the unquantized weight (the reference time);
* the unpack alone, and its memory traffic (packed bytes read, 16-bit weights written)
  over its time.

    python -m bench.experiments.sm80_unpack_then_dense [--m 512 1024 2048 4096] [--models llama3-8b llama3-70b]

Prints each problem's plans, times and ratios to fp16 (asked: at most 1.1), the medians
per M, and the largest difference between the tuned plan's output and the quantized
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
from gemm_runtime.settings import override
from gemm_runtime.timing import interleaved_medians_ms
from gemm_runtime.unpack import unpack_weight


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["llama3-8b", "llama3-70b"])
    ap.add_argument("--m", nargs="+", type=int, default=[512, 1024, 2048, 4096])
    args = ap.parse_args()
    build = sm80_build(Path(tempfile.mkdtemp(prefix="sm80_unpack_then_dense_")))
    gemm, gemm_q = Gemm(build_dir=build), Gemm(build_dir=build)  # whole-weight plans on / off
    ratios: dict[int, dict[str, list[float]]] = {}
    print("| layer | M | W4 kernels' plan | tuned plan | fp16 plan | W4 µs | tuned µs | fp16 µs | unpack µs (TB/s) | "
          "W4 / fp16 | tuned / fp16 | max diff |")
    print("|---|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for layer, n, k, w, packed in w4_layers(args.models):
        dense = unpack_weight(packed)
        moved = packed.b.numel() + packed.v.numel() * 2 + n * k * 2
        for m in args.m:
            a = torch.randn(m, k, device="cuda", dtype=torch.float16)
            out_q = torch.empty(m, n, device="cuda", dtype=torch.float16)
            out_t, out_h = torch.empty_like(out_q), torch.empty_like(out_q)
            with override(unpack_max_mib=0):
                w4_plan = tuned_choice(gemm_q, a, packed, out_q)
            tuned_plan = tuned_choice(gemm, a, packed, out_t)
            fp16_plan = tuned_choice(gemm, a, w.t(), out_h)
            diff = (out_t.float() - out_q.float()).abs().max().item()
            t_q, t_t, t_h, t_u = interleaved_medians_ms([lambda: gemm_q.matmul(a, packed, out=out_q),
                                                         lambda: gemm.matmul(a, packed, out=out_t),
                                                         lambda: gemm.matmul(a, w.t(), out=out_h),
                                                         lambda: unpack_weight(packed, out=dense)])  # fmt: skip
            r = ratios.setdefault(m, {"w4": [], "tuned": []})
            r["w4"].append(t_q / t_h)
            r["tuned"].append(t_t / t_h)
            print(f"| {layer} | {m} | {w4_plan} | {tuned_plan} | {fp16_plan} | {t_q * 1e3:.1f} | {t_t * 1e3:.1f} | "
                  f"{t_h * 1e3:.1f} | {t_u * 1e3:.1f} ({moved / t_u / 1e9:.2f}) | {t_q / t_h:.2f} | {t_t / t_h:.2f} | "
                  f"{diff:.2e} |", flush=True)  # fmt: skip
    for m, r in ratios.items():
        print(f"- M = {m}: median time / fp16's: W4 kernels {statistics.median(r['w4']):.2f}, tuned "
              f"{statistics.median(r['tuned']):.2f} (max {max(r['tuned']):.2f}) over {len(r['w4'])} layers; "
              "asked: at most 1.1")  # fmt: skip


if __name__ == "__main__":
    main()
