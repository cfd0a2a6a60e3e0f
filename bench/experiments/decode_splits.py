"""Experiment: the decode candidates the cost model weighs at small M, each timed with
every split count it may use: the sm80 16-row decode tile and the sm90 64-row tiles on
the llama3 layers (fp16, N x K weights), L2 flushed, medians, beside cuBLAS and beside
the model's prediction for the same plan:

    python -m bench.experiments.decode_splits [--m 16] [--splits 1 2 3 4]
"""

from __future__ import annotations

import argparse

import torch

from bench.timing import median_ms
from codegen.vocabulary import BOrder, DataType
from gemm_runtime import Gemm
from gemm_runtime.context import make_key
from gemm_runtime.cost_model import predict
from gemm_runtime.plan import LaunchSpec

LAYERS = {"8b qkv": (6144, 4096), "8b o": (4096, 4096), "8b gate_up": (28672, 4096), "8b down": (4096, 14336),
          "70b qkv": (10240, 8192), "70b o": (8192, 8192), "70b gate_up": (57344, 8192), "70b down": (8192, 28672)}  # fmt: skip
TILES = ("sm80_m16n8k16_af16_bf16_accf32_df16_16x64x128_w1x2x2_s4_nk_align8",
         "sm90_m64nNk16_af16_bf16_accf32_df16_64x128x64_w4x1x1_s8_nk_align8",
         "sm90_m64nNk16_af16_bf16_accf32_df16_64x256x64_w4x1x1_s5_nk_align8")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--m", type=int, default=16)
    ap.add_argument("--splits", nargs="+", type=int, default=[1, 2, 3, 4])
    args = ap.parse_args()
    gemm = Gemm()
    kernels = {t: next((k for k in gemm.kernels if k.name.endswith(t)), None) for t in TILES}
    device = gemm.dispatcher.device_model
    for layer, (n, k) in LAYERS.items():
        a = torch.randn(args.m, k, device="cuda", dtype=torch.float16)
        b = torch.randn(n, k, device="cuda", dtype=torch.float16).t()
        out = torch.empty(args.m, n, device="cuda", dtype=torch.float16)
        cublas = median_ms(lambda: torch.matmul(a, b, out=out)) * 1e3
        key = make_key(DataType.F16, BOrder.NK, DataType.F16, args.m, n, k, arch=90)
        cells = []
        for tile, kern in kernels.items():
            if kern is None:
                continue
            for splits in args.splits:
                try:
                    us = median_ms(lambda: gemm.matmul(a, b, out=out, kernel=LaunchSpec(kern.name, splits, 3))) * 1e3
                except Exception as e:  # noqa: BLE001 - an infeasible split is a cell, not the end
                    cells.append(f"{tile.split('_')[-5]} k{splits}: {type(e).__name__}")
                    continue
                model = predict(kern.spec, kern.ctas_per_sm, device, key, splits) * 1e6
                cells.append(f"{tile.split('_')[-5]} k{splits} {us:6.1f} (model {model:5.1f})")
        print(f"{layer:11s} M={args.m} cuBLAS {cublas:6.1f} us | " + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
