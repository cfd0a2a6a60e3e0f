"""One W4A16 decode launch for a profiler: ``ncu --clock-control none -k regex:w4
python -m bench.profile_quant --kernel NAME --splits S``. Without --kernel, the tuned
choice for the problem is launched (after tuning, which launches many kernels)."""

from __future__ import annotations

import argparse

import torch

from bench.cli import int_from, positive_int
from gemm_runtime import DispatchPolicy, Gemm, Operation
from gemm_runtime.packed_weight import pack_for_gemm
from gemm_runtime.plan import MAX_SPLITS, LaunchSpec
from gemm_runtime.quant import quantize


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--m", type=positive_int, default=1)
    ap.add_argument("--n", type=positive_int, default=57344)
    ap.add_argument("--k", type=positive_int, default=8192)
    ap.add_argument("--kernel", default=None)
    ap.add_argument("--splits", type=int_from(1, MAX_SPLITS), default=1)
    args = ap.parse_args(argv)
    gemm = Gemm()
    w = torch.randn(args.n, args.k, device="cuda", dtype=torch.float16) * 0.02
    packed = pack_for_gemm(quantize(w, bits=4, group_size=128))
    a = torch.randn(args.m, args.k, device="cuda", dtype=torch.float16)
    if args.kernel:
        gemm.matmul(a, packed, kernel=LaunchSpec(args.kernel, args.splits))
    else:
        gemm.matmul(a, packed, operation=Operation(dispatch=DispatchPolicy.MEASURE))
        gemm.matmul(a, packed)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
