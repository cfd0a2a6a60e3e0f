"""The two mainloops on the same CTA tile: SM80 (cp.async, multi-stage) against SM70
(register-staged double buffer), same MMA atom, on one large problem.

    python -m bench.mainloops [--m 4096 --n 8192 --k 8192]
"""

from __future__ import annotations

import argparse

import torch

from bench.cli import positive_int
from bench.timing import median_ms
from gemm_runtime import Gemm


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--m", type=positive_int, default=4096)
    ap.add_argument("--n", type=positive_int, default=8192)
    ap.add_argument("--k", type=positive_int, default=8192)
    args = ap.parse_args(argv)
    gemm = Gemm()
    m, n, k = args.m, args.n, args.k
    print(f"M={m} N={n} K={k}, fp16, B as N x K")
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    w = torch.randn(n, k, device="cuda", dtype=torch.float16)
    out = torch.empty(m, n, device="cuda", dtype=torch.float16)
    by_tile: dict[tuple, list] = {}
    for kern in gemm.kernels:
        s = kern.spec
        if s.a_type.value == "f16" and s.d_type.value == "f16" and s.b_order.value == "nk" and s.align == 8 and not s.grouped:
            by_tile.setdefault((s.cta, s.warps, s.mma.value), []).append(kern)
    rows = []
    for (cta, warps, mma), kernels in sorted(by_tile.items()):
        loops = {kk.spec.mainloop.value: kk for kk in kernels}
        if "sm70" not in loops or "sm80" not in loops:
            continue
        t = {ml: median_ms(lambda kk=kk: gemm.matmul(a, w.t(), out=out, kernel=kk.name)) for ml, kk in loops.items()}
        tflops = {ml: 2.0 * m * n * k / v / 1e9 for ml, v in t.items()}
        rows.append((cta, warps, mma, loops["sm80"].spec.stages, t["sm80"], t["sm70"], tflops["sm80"], tflops["sm70"]))
        print(
            f"cta {cta} warps {warps} {mma}: SM80 ({loops['sm80'].spec.stages} stages) {t['sm80']*1e3:.0f} us "
            f"{tflops['sm80']:.0f} TFLOP/s | SM70 (2 buffers) {t['sm70']*1e3:.0f} us {tflops['sm70']:.0f} TFLOP/s | "
            f"SM80 faster by {t['sm70']/t['sm80']:.2f}x"
        )
    if not rows:
        print("no tile exists for both mainloops")


if __name__ == "__main__":
    main()
