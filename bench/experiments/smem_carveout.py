"""Experiment: does the driver's choice of shared-memory carveout hold a kernel to fewer
CTAs per SM than its registers and shared memory allow? The sm80 prefill tiles built by
``sm80_variants --build-only DIR --with-candidates`` are loaded twice; in the first load
every kernel leaves the carveout to the driver (CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT
= -1), in the second it asks for the whole carveout as shared memory (100). Each kernel is then timed in
both loads on the same problems, interleaved, unsplit, L2 flushed, medians, TFLOP/s:

    python -m bench.experiments.smem_carveout --build DIR [--match 128x128x32] [--problems 1024x10240x8192 ...]

(ncu's launch__shared_mem_config_size says which carveout a launch got.)
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from cuda.bindings import driver

from bench.experiments.sm90_variants import problem_tensors
from gemm_runtime import Gemm
from gemm_runtime.cuda_driver import check
from gemm_runtime.plan import LaunchSpec
from gemm_runtime.timing import interleaved_medians_ms

PROBLEMS = ["1024x10240x8192", "1024x6144x4096", "4096x4096x4096"]


def set_carveout(gemm: Gemm, percent: int) -> None:
    """Every kernel of ``gemm`` asks for ``percent`` of the carveout as shared memory (-1:
    no preference, the driver's choice)."""
    attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT
    for kern in gemm.kernels:
        check(driver.cuFuncSetAttribute(kern.function.handle, attr, percent), f"carveout of {kern.name}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", type=Path, required=True, help="a build of the sm80 prefill tiles")
    ap.add_argument("--match", nargs="+", default=["128x128x"], help="substrings a kernel's name must hold (any)")
    ap.add_argument("--problems", nargs="+", default=PROBLEMS, help="MxNxK")
    ap.add_argument("--swizzle", type=int, default=3)
    args = ap.parse_args()
    plain, carved = Gemm(build_dir=args.build), Gemm(build_dir=args.build)
    set_carveout(plain, -1)
    set_carveout(carved, 100)
    tensors = problem_tensors([tuple(int(x) for x in p.split("x")) for p in args.problems], torch.float16)
    for kern in sorted(plain.kernels, key=lambda k: k.name):
        s = kern.spec
        if s.a_type.value != "f16" or not any(m in kern.name for m in args.match):
            continue
        tile = f"{s.cta[0]}x{s.cta[1]}x{s.cta[2]} w{s.warps[0]}x{s.warps[1]} s{s.stages}"
        spec = LaunchSpec(kern.name, 1, args.swizzle)
        row = []
        for (m, n, k), (a, b, out) in tensors.items():
            t = interleaved_medians_ms([lambda g=g: g.matmul(a, b, out=out, kernel=spec) for g in (plain, carved)])
            row.append(" / ".join(f"{2 * m * n * k / x / 1e9:.0f}" for x in t))
        print(f"{tile:24s} {s.smem_bytes // 1024:4d} KiB, {kern.registers} regs, {kern.ctas_per_sm} CTA/SM: "
              + " | ".join(row) + " TFLOP/s (default / carveout 100)", flush=True)


if __name__ == "__main__":
    main()
