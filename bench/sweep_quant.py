"""Every quantized kernel of the registry at every split count on one W4A16 (or W8A16)
problem: the table behind a tuning decision, for reading alongside Nsight Compute.

    python -m bench.sweep_quant [--m 1] [--n 57344] [--k 8192] [--bits 4] [--group 128] [--max-splits 8] [--only 16x128]

Prints one line per (kernel, splits): median L2-flushed time and the weight bandwidth.
"""

from __future__ import annotations

import argparse

import torch

from bench.cli import int_from, positive_int
from gemm_runtime import Gemm
from gemm_runtime.packed_weight import pack_for_gemm
from gemm_runtime.plan import MAX_SPLITS, LaunchSpec
from gemm_runtime.quant import BITS, GROUP_SIZES, PER_CHANNEL, quantize
from gemm_runtime.timing import median_ms

from bench.quant import copy_bandwidth


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--m", type=positive_int, default=1)
    ap.add_argument("--n", type=positive_int, default=57344)
    ap.add_argument("--k", type=positive_int, default=8192)
    ap.add_argument("--bits", type=int, choices=BITS, default=4)
    ap.add_argument("--group", type=int, default=128, help="group size along K (-1: per channel)")
    ap.add_argument("--max-splits", type=int_from(1, MAX_SPLITS), default=8)
    ap.add_argument("--only", default="", help="only kernels whose name contains this")
    args = ap.parse_args(argv)
    if args.group not in (*GROUP_SIZES, PER_CHANNEL, args.k):
        ap.error(f"--group: got {args.group}; accepted: one of {', '.join(map(str, GROUP_SIZES))}, or {PER_CHANNEL} "
                 f"or K={args.k} for per channel")
    gemm = Gemm()
    w = torch.randn(args.n, args.k, device="cuda", dtype=torch.float16) * 0.02
    packed = pack_for_gemm(quantize(w, bits=args.bits, group_size=args.group))
    weight_bytes = packed.b.numel() + packed.v.numel() * 2
    a = torch.randn(args.m, args.k, device="cuda", dtype=torch.float16)
    out = torch.empty(args.m, args.n, device="cuda", dtype=torch.float16)
    b_type = f"u{args.bits}"
    names = sorted(
        k.name
        for k in gemm.registry.kernels
        if k.spec.b_type.value == b_type and k.spec.a_type.value == "f16" and args.only in k.name
    )
    # The machine's copy bandwidth and fp16 cuBLAS on the same problem: references for
    # comparing sweeps taken on different machines or runs.
    t16 = median_ms(lambda: torch.matmul(a, w.t()))
    print(
        f"M={args.m} N={args.n} K={args.k} W{args.bits} g{args.group}: {weight_bytes / 1e6:.1f} MB of weights; "
        f"copy {copy_bandwidth() / 1e12:.2f} TB/s, fp16 cuBLAS {t16 * 1e3:.1f} us"
    )
    for name in names:
        for splits in range(1, args.max_splits + 1):
            spec = LaunchSpec(name, splits)
            try:
                gemm.matmul(a, packed, out=out, kernel=spec)
            except Exception as e:  # a split count this kernel cannot take: say why, go on
                print(f"{name} splits={splits}: {type(e).__name__}: {str(e)[:80]}")
                continue
            t = median_ms(lambda: gemm.matmul(a, packed, out=out, kernel=spec))
            print(f"{name} splits={splits}: {t * 1e3:7.1f} us  {weight_bytes / (t * 1e-3) / 1e12:5.2f} TB/s", flush=True)


if __name__ == "__main__":
    main()
