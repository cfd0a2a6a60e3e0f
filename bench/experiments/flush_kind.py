"""Experiment: does the way L2 is emptied before a timed call change what small decode
GEMMs measure? Zeroing a buffer larger than L2 (the benchmarks' flush until 2026-12-04,
gemm_runtime.timing.write_flush_l2) leaves L2 full of dirty lines; a GEMM timed right after may pay for writing them
back to memory while it streams its weights. A flush that reads a large buffer instead
(gemm_runtime.timing.flush_l2 since) leaves clean lines (what a real decode step leaves: the previous layer's weights).

Times, at M = 1 on llama3-8b and 70b layers, ours (W4 tuned, fp16 default), fp16
cuBLAS and torch's int4 kernel under four flushes (none, write, read, write then read)
and a one-element kernel for the floor, each flush's calls interleaved, medians:

    python -m bench.experiments.flush_kind [--m 1 16]
"""

from __future__ import annotations

import argparse

import torch

import gemm_runtime.timing as timing
from bench.decode_chain import GROUP, INT4_INNER_K_TILES
from bench.quant import tuned_choice, w4_layers
from gemm_runtime import Gemm

# How L2 is emptied before each timed call (gemm_runtime.timing's Flush).
FLUSHES = {"none": False, "write": timing.write_flush_l2, "read": timing.flush_l2,
           "write+read": lambda: (timing.write_flush_l2(), timing.flush_l2())}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--m", nargs="+", type=int, default=[1])
    ap.add_argument("--models", nargs="+", default=["llama3-8b", "llama3-70b"])
    args = ap.parse_args()
    gemm = Gemm()
    tiny = torch.zeros(1, device="cuda")
    print("| layer | M | flush | floor µs | ours W4 µs | ours fp16 µs | cuBLAS fp16 µs | torch int4 µs | "
          "cuBLAS / W4 | int4 / W4 |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for layer, n, k, w, packed in w4_layers(args.models):
        q = torch.randint(0, 16, (n, k), dtype=torch.int32, device="cuda")
        int4 = torch._convert_weight_to_int4pack((q[:, ::2] << 4 | q[:, 1::2]).to(torch.uint8), INT4_INNER_K_TILES)
        sz = torch.randn(k // GROUP, n, 2, device="cuda", dtype=torch.bfloat16) * 0.01
        for m in args.m:
            a = torch.randn(m, k, device="cuda", dtype=torch.float16)
            a_bf = a.to(torch.bfloat16)
            out = torch.empty(m, n, device="cuda", dtype=torch.float16)
            tuned_choice(gemm, a, packed, out)
            fns = [lambda: tiny.add_(1), lambda: gemm.matmul(a, packed, out=out),
                   lambda: gemm.matmul(a, w.t(), out=out), lambda: torch.matmul(a, w.t(), out=out),
                   lambda: torch._weight_int4pack_mm(a_bf, int4, GROUP, sz)]  # fmt: skip
            for name, flush in FLUSHES.items():
                t = [x * 1e3 for x in timing.interleaved_medians_ms(fns, reps=40, flush=flush)]
                print(f"| {layer} | {m} | {name} | {t[0]:.1f} | {t[1]:.1f} | {t[2]:.1f} | {t[3]:.1f} | "
                      f"{t[4]:.1f} | {t[3] / t[1]:.2f} | {t[4] / t[1]:.2f} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
