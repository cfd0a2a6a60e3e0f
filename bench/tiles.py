"""Which tile wins: time every feasible fp16 kernel (no split, swizzle 0 and 2) on a
few problems and print the fastest, to decide which YAML tiles earn a place in the
default set.

    python -m bench.tiles [--shape 4096 28672 4096 ...] [--top 6]
"""

from __future__ import annotations

import argparse

import torch

from bench.cli import positive_int
from gemm_runtime import Gemm
from gemm_runtime.context import make_key
from gemm_runtime.plan import LaunchSpec
from gemm_runtime.timing import median_ms
from gemm_runtime.types import BOrder, DataType


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", nargs=3, type=positive_int, action="append", metavar=("M", "N", "K"))
    ap.add_argument("--top", type=positive_int, default=6)
    args = ap.parse_args(argv)
    shapes = args.shape or [(4096, 28672, 4096), (4096, 8192, 8192), (4096, 8192, 28672), (1024, 6144, 4096)]
    gemm = Gemm()
    for m, n, k in shapes:
        a = torch.randn(m, k, device="cuda", dtype=torch.float16)
        w = torch.randn(n, k, device="cuda", dtype=torch.float16)
        out = torch.empty(m, n, device="cuda", dtype=torch.float16)
        key = make_key(DataType.F16, BOrder.NK, DataType.F16, m, n, k, arch=gemm.registry.device.arch)
        times = []
        for kern in gemm.feasible(key):
            for swizzle in (0, 2):
                plan = LaunchSpec(kern.name, 1, swizzle)
                times.append((median_ms(lambda p=plan: gemm.matmul(a, w.t(), out=out, kernel=p), reps=5), plan))
        times.sort(key=lambda t: t[0])
        print(f"M={m} N={n} K={k}")
        for t, plan in times[: args.top]:
            tile = "_".join(x for x in plan.kernel.split("_") if "x" in x or (x[:1] == "s" and x[1:].isdigit()))
            print(f"  {t*1e3:9.1f} us  {2*m*n*k/t/1e9:5.0f} TFLOP/s  {plan.kernel.split('_')[1]:4s} {tile} z{plan.swizzle}")


if __name__ == "__main__":
    main()
