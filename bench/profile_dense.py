"""One dense launch for a profiler, e.g. the SM90 family's 128x256 tile at 8192^3 bf16
beside cuBLAS's kernel (docs/NOTES.md, "The SM90 family": where the 0.86x goes):

    ncu --clock-control none --set full -k regex:"gemm_sm90|sm90_xmma|nvjet" -c 2 \\
        python -m bench.profile_dense --tile 128x256 --cublas

Without --tile, default dispatch picks the kernel."""

from __future__ import annotations

import argparse

import torch

from bench.cli import int_from, positive_int, tile_mn
from gemm_runtime import Gemm
from gemm_runtime.plan import SWIZZLES, LaunchSpec


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--m", type=positive_int, default=8192)
    ap.add_argument("--n", type=positive_int, default=8192)
    ap.add_argument("--k", type=positive_int, default=8192)
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    ap.add_argument("--tile", type=tile_mn, help="MxN of a kernel to force (cluster 1, N x K weights), e.g. 128x256")
    ap.add_argument("--mainloop", default="sm90", choices=["sm90", "sm80"], help="the forced kernel's family")
    ap.add_argument("--cta-k", type=positive_int, default=None, help="the forced kernel's CTA K (sm80 tiles differ in it)")
    ap.add_argument("--swizzle", type=int_from(SWIZZLES[0], SWIZZLES[-1]), default=3)
    ap.add_argument("--cublas", action="store_true", help="also launch torch.matmul once")
    args = ap.parse_args(argv)
    dtype = getattr(torch, args.dtype)
    gemm = Gemm()
    a = torch.randn(args.m, args.k, device="cuda", dtype=dtype)
    b = torch.randn(args.n, args.k, device="cuda", dtype=dtype).t()
    out = torch.empty(args.m, args.n, device="cuda", dtype=dtype)
    kernel = None
    if args.tile:
        short = {"bfloat16": "bf16", "float16": "f16"}[args.dtype]
        kernel = next(
            (k.name for k in gemm.kernels if k.spec.mainloop.value == args.mainloop and k.spec.cluster == 1 and not k.spec.grouped
             and (args.cta_k is None or k.spec.cta[2] == args.cta_k)
             and "x".join(map(str, k.spec.cta[:2])) == args.tile and k.spec.b_order.value == "nk"
             and k.spec.a_type.value == short and k.spec.d_type is k.spec.a_type),
            None,
        )  # fmt: skip
        if kernel is None:
            raise SystemExit(f"no {args.mainloop} {args.tile} kernel for {args.dtype} in this build")
    for _ in range(2):  # the first call is the validating one; the second the replay
        gemm.matmul(a, b, out=out, kernel=LaunchSpec(kernel, 1, args.swizzle) if kernel else None)
    if args.cublas:
        torch.matmul(a, b, out=out)
    torch.cuda.synchronize()
    print("launched", kernel or "the default choice")


if __name__ == "__main__":
    main()
