"""Experiment: the register-A wgmma paths for quantized weights beside fp16 cuBLAS on the
unquantized weight and beside default dispatch of the same packed weight (the sm80
quantized kernels), on llama3 layers, L2 flushed, medians:

* smoke: templates/include/gemm/sm90/smoke_quant.cuh (D^T = W . X^T, weights read straight
  from global memory, no overlap of dequantization with the MMAs, 128 x 64 tiles);
* kernel: kernel_sm90_quant.cuh (W, scales and zeros through the TMA ring, each K tile
  dequantized under the previous one's wgmma; 128 weight rows x 64 or 128 tokens).


    python -m bench.experiments.sm90_quant_smoke [--m 16 64 128 256 1024] [--bits 4]
"""

from __future__ import annotations

import argparse

import torch

from bench.timing import median_ms
from gemm_runtime import Gemm
from gemm_runtime.packed_weight import pack_for_gemm
from gemm_runtime.quant import quantize
from tests import sm90_quant_kernel
from tests.sm90_smoke_quant import QuantSmokeKernel, launch

LAYERS = {"8b gate_up": (28672, 4096), "8b down": (4096, 14336), "70b o": (8192, 8192)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--m", nargs="+", type=int, default=[16, 64, 128, 256, 1024])
    ap.add_argument("--bits", nargs="+", type=int, default=[4, 8])
    args = ap.parse_args()
    gemm = Gemm()
    for bits in args.bits:
        kernel = QuantSmokeKernel("f16", bits, "f16")
        for layer, (n, k) in LAYERS.items():
            w = torch.randn(n, k, device="cuda", dtype=torch.float16) * 0.05
            packed = pack_for_gemm(quantize(w, bits=bits, group_size=128))
            for m in args.m:
                x = torch.randn(m, k, device="cuda", dtype=torch.float16)
                d = torch.empty(m, n, device="cuda", dtype=torch.float16)
                launch(kernel, x, packed, d)  # compiled, loaded, checked for traps
                smoke = median_ms(lambda: launch(kernel, x, packed, d, sync=False)) * 1e3
                product = sm90_quant_kernel.QuantKernel("f16", bits, "f16", 64 if m <= 64 else 128, 128, 4)
                sm90_quant_kernel.launch(product, x, packed, d)
                kern = median_ms(lambda: sm90_quant_kernel.launch(product, x, packed, d, sync=False)) * 1e3
                ours = median_ms(lambda: gemm.matmul(x, packed, out=d)) * 1e3
                cublas = median_ms(lambda: torch.matmul(x, w.t(), out=d)) * 1e3
                print(f"W{bits} {layer:10s} M={m:5d}: smoke {smoke:8.1f} us, kernel {kern:8.1f} us, sm80 default "
                      f"{ours:8.1f} us, fp16 cuBLAS {cublas:8.1f} us | cuBLAS/kernel {cublas / kern:5.2f}  "
                      f"cuBLAS/smoke {cublas / smoke:5.2f}  cuBLAS/sm80 {cublas / ours:5.2f}", flush=True)


if __name__ == "__main__":
    main()
