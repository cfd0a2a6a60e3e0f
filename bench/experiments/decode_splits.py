"""Experiment: the decode candidates the cost model weighs at small M, each timed with
every split count it may use (the sm80 16-row decode tile and the sm90 tiles),
on the llama3 layers (fp16, N x K weights), L2 flushed, medians, beside cuBLAS, the
default dispatch's plan, the plan the model picked before the sm90 family existed (the
ranking without sm90 kernels) and the model's prediction for each plan:

    python -m bench.experiments.decode_splits [--m 1 16] [--splits 1 2 3 4] [--flush write read]

``--flush``: how L2 is emptied before each repetition. ``read`` (the benchmarks' and
the tuner's flush, gemm_runtime.timing, since 2026-12-04) sums a 256 MB buffer: L2
holds clean lines, as it does in a model step after the previous layer's weights
streamed through. ``write`` zeroes the buffer (the flush until then), which leaves L2
full of dirty lines; the timed kernel's reads then evict them, so up to 60 MB of
write-back shares DRAM with a decode layer of 32-50 MB. ``floor`` is a read of the weights alone (torch.sum) under the same
flush: what the memory system gives a plain streaming read.
"""

from __future__ import annotations

import argparse
import functools

import torch

import gemm_runtime.timing as timing
from codegen.vocabulary import BOrder, DataType
from gemm_runtime import Gemm
from gemm_runtime.context import make_key
from gemm_runtime.cost_model import predict
from gemm_runtime.plan import LaunchSpec

LAYERS = {"8b qkv": (6144, 4096), "8b o": (4096, 4096), "8b gate_up": (28672, 4096), "8b down": (4096, 14336),
          "70b qkv": (10240, 8192), "70b o": (8192, 8192), "70b gate_up": (57344, 8192), "70b down": (8192, 28672)}  # fmt: skip
TILES = ("sm80_m16n8k16_af16_bf16_accf32_df16_16x64x128_w1x2x2_s4_nk_align8",
         "sm90_m64nNk16_af16_bf16_accf32_df16_64x64x64_w4x1x1_s8_nk_align8",
         "sm90_m64nNk16_af16_bf16_accf32_df16_64x128x64_w4x1x1_s8_nk_align8",
         "sm90_m64nNk16_af16_bf16_accf32_df16_64x256x64_w4x1x1_s5_nk_align8",
         "sm90_m64nNk16_af16_bf16_accf32_df16_128x128x64_w8x1x1_s6_nk_align8",
         "sm90_m64nNk16_af16_bf16_accf32_df16_128x192x64_w8x1x1_s4_nk_align8",
         "sm90_m64nNk16_af16_bf16_accf32_df16_128x256x64_w8x1x1_s4_nk_align8")  # fmt: skip
_FLUSHES = {"read": True, "write": timing.write_flush_l2}


def _tile(name: str) -> str:
    return next(p for p in name.split("_") if p.count("x") == 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--m", nargs="+", type=int, default=[16])
    ap.add_argument("--splits", nargs="+", type=int, default=[1, 2, 3, 4])
    ap.add_argument("--flush", nargs="+", choices=["write", "read"], default=["read"])
    ap.add_argument("--tiles", nargs="+", help="only these tiles (e.g. 64x128x64 16x64x128; default: all of TILES)")
    args = ap.parse_args()
    gemm = Gemm()
    tiles = [t for t in TILES if not args.tiles or _tile(t) in args.tiles]
    kernels = {t: next((k for k in gemm.kernels if k.name.endswith(t)), None) for t in tiles}
    device = gemm.dispatcher.device_model
    for flush in args.flush:
        median_ms = functools.partial(timing.median_ms, flush=_FLUSHES[flush])
        for m in args.m:
            for layer, (n, k) in LAYERS.items():
                a = torch.randn(m, k, device="cuda", dtype=torch.float16)
                w = torch.randn(n, k, device="cuda", dtype=torch.float16)
                b = w.t()
                out = torch.empty(m, n, device="cuda", dtype=torch.float16)
                cublas = median_ms(lambda: torch.matmul(a, b, out=out)) * 1e3
                floor = median_ms(lambda: w.sum(dtype=torch.float32)) * 1e3
                key = make_key(DataType.F16, BOrder.NK, DataType.F16, m, n, k, arch=90)
                ranked = gemm.dispatcher.ranked(key)
                picks = {"default": ranked[0][1],
                         "pre-sm90": next(p for _, p in ranked if gemm.dispatcher.kernel(p.kernel).spec.mainloop.value != "sm90")}  # fmt: skip
                cells = []
                for label, plan in picks.items():
                    us = median_ms(lambda: gemm.matmul(a, b, out=out, kernel=plan)) * 1e3
                    cells.append(f"{label} {_tile(plan.kernel)} k{plan.splits} {us:6.1f} (cuBLAS/it {cublas / us:4.2f})")
                for tile, kern in kernels.items():
                    if kern is None:
                        continue
                    for splits in args.splits:
                        try:
                            us = median_ms(lambda: gemm.matmul(a, b, out=out, kernel=LaunchSpec(kern.name, splits, 3)))
                            us *= 1e3
                        except Exception as e:  # noqa: BLE001 - an infeasible split is a cell, not the end
                            cells.append(f"{_tile(tile)} k{splits}: {type(e).__name__}")
                            continue
                        model = predict(kern.spec, kern.ctas_per_sm, device, key, splits) * 1e6
                        cells.append(f"{_tile(tile)} k{splits} {us:6.1f} (model {model:5.1f})")
                print(f"[{flush} flush] {layer:11s} M={m} cuBLAS {cublas:6.1f} us floor {floor:6.1f} | "
                      + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
