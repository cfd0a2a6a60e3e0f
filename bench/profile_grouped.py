"""One grouped launch for a profiler, beside the dense launch of the same kernel tile over
all the grouped rows (one expert's weight) and torch._grouped_mm: where the grouped sm90
kernels lose against the dense ones (docs/NOTES.md, "The grouped form of the SM90 family").

    ncu --clock-control none --set full -k regex:"gemm_sm90|cutlass|nvjet" -c 3 \\
        python -m bench.profile_grouped --config mixtral --tokens 8192 --gemm gate_up --tile 128x256

Without --tile, default dispatch picks the grouped kernel."""

from __future__ import annotations

import argparse

import torch

from bench.cli import int_from, positive_int, tile_mn
from bench.moe import CONFIGS, _projections, route
from gemm_runtime import Gemm
from gemm_runtime.plan import SWIZZLES, LaunchSpec


def _kernel(gemm: Gemm, tile: str, short: str, grouped: bool) -> str:
    """The sm90 kernel of ``tile`` (MxN) for bf16/f16 "nk" weights, grouped or dense."""
    name = next((k.name for k in gemm.kernels if k.spec.mainloop.value == "sm90" and k.spec.cluster == 1
                 and k.spec.grouped == grouped and not k.spec.quantized and k.spec.b_order.value == "nk"
                 and "x".join(map(str, k.spec.cta[:2])) == tile and k.spec.a_type.value == short
                 and k.spec.d_type is k.spec.a_type), None)  # fmt: skip
    if name is None:
        raise SystemExit(f"no {'grouped ' if grouped else ''}sm90 {tile} kernel for {short} in this build")
    return name


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="mixtral", choices=list(CONFIGS))
    ap.add_argument("--tokens", type=positive_int, default=8192)
    ap.add_argument("--gemm", default="gate_up", choices=["gate_up", "down"])
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    ap.add_argument("--tile", type=tile_mn, help="MxN of the sm90 kernels to force, e.g. 128x256")
    ap.add_argument("--swizzle", type=int_from(SWIZZLES[0], SWIZZLES[-1]), default=3)
    args = ap.parse_args(argv)
    dtype = getattr(torch, args.dtype)
    short = {"bfloat16": "bf16", "float16": "f16"}[args.dtype]
    cfg = CONFIGS[args.config]
    n, k = _projections(cfg)[args.gemm]
    routing = route(args.tokens, cfg, torch.Generator().manual_seed(0), "cuda")
    rows = int(routing.offsets[-1])
    gemm = Gemm()
    a = torch.randn(rows, k, device="cuda", dtype=dtype)
    w = torch.randn(cfg.experts, n, k, device="cuda", dtype=dtype) / k**0.5
    out = torch.empty(rows, n, device="cuda", dtype=dtype)
    grouped = LaunchSpec(_kernel(gemm, args.tile, short, True), 1, args.swizzle) if args.tile else None
    dense = LaunchSpec(_kernel(gemm, args.tile, short, False), 1, args.swizzle) if args.tile else None
    for _ in range(2):
        gemm.grouped_matmul(a, w, routing.offsets, out=out, kernel=grouped)
    for _ in range(2):
        gemm.matmul(a, w[0].t(), out=out, kernel=dense)
    torch._grouped_mm(a, w.transpose(1, 2), offs=routing.offsets[1:].contiguous())
    torch.cuda.synchronize()
    print(f"launched grouped {grouped.kernel if grouped else 'default'} and dense {dense.kernel if dense else 'default'}"
          f" at {rows} x {n} x {k}, then torch._grouped_mm")  # fmt: skip


if __name__ == "__main__":
    main()
