"""TFLOP/s of every SM90-family kernel on square problems beside cuBLAS, one run, L2
flushed, medians: the headline number of the family (8192^3 bf16 against cuBLAS's).

    python -m bench.sm90 [--sizes 4096 8192] [--dtypes bfloat16 float16] [--out FILE.md]"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from bench.cli import check_out, positive_int
from bench.timing import median_ms
from gemm_runtime import Gemm
from gemm_runtime.plan import LaunchSpec


def run(sizes: list[int], dtypes: list[torch.dtype], orders: list[str]) -> list[str]:
    gemm = Gemm()
    lines = ["| M=N=K | dtype | B | kernel (tile, stages) | ours TFLOP/s | cuBLAS TFLOP/s | ours / cuBLAS |",
             "|---:|---|---|---|---:|---:|---:|"]  # fmt: skip
    for size in sizes:
        flop = 2.0 * size**3
        for dtype in dtypes:
            a = torch.randn(size, size, device="cuda", dtype=dtype)
            w = torch.randn(size, size, device="cuda", dtype=dtype)
            out = torch.empty(size, size, device="cuda", dtype=dtype)
            for order in orders:
                b = w.t() if order == "nk" else w
                t_cublas = median_ms(lambda: torch.matmul(a, b, out=out))
                kernels = [k for k in gemm.kernels if k.spec.mainloop.value == "sm90" and not k.spec.grouped and k.spec.b_order.value == order
                           and k.spec.a_type.value == {torch.bfloat16: "bf16", torch.float16: "f16"}[dtype]
                           and k.spec.d_type is k.spec.a_type]  # fmt: skip
                for kern in kernels:
                    for swizzle in (0, 3):
                        t = median_ms(lambda: gemm.matmul(a, b, out=out, kernel=LaunchSpec(kern.name, 1, swizzle)))
                        tile = "x".join(map(str, kern.spec.cta)) + f" s{kern.spec.stages} c{kern.spec.cluster} sw{swizzle}"
                        lines.append(f"| {size} | {str(dtype)[6:]} | {order} | {tile} | {flop / t / 1e9:.0f} | "
                                     f"{flop / t_cublas / 1e9:.0f} | {t_cublas / t:.3f} |")  # fmt: skip
                        print(lines[-1], flush=True)
    return lines


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", nargs="+", type=positive_int, default=[4096, 8192])
    ap.add_argument("--dtypes", nargs="+", choices=["bfloat16", "float16"], default=["bfloat16", "float16"])
    ap.add_argument("--orders", nargs="+", choices=["nk", "kn"], default=["nk", "kn"])
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    check_out(ap, "--out", args.out)
    lines = run(args.sizes, [getattr(torch, d) for d in args.dtypes], args.orders)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)  # check_out accepts folders still to be made
        args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
