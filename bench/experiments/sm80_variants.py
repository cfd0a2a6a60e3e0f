"""Experiment: where an SM80-family prefill tile's time goes. Each variant rebuilds the
sm80 fp16 "nk" prefill kernels (the default set's and bench/experiments/prefill_tiles.yaml's,
CTA M of 128 or more) with one knob of templates/include/gemm/mainloop_sm80.cuh set (a
part of the pipeline left out) into its own build directory, then times every kernel on
the same problems beside cuBLAS, L2 flushed, medians:

    python -m bench.experiments.sm80_variants [--variants base no_epilogue ...] [--swizzles 1 2 3]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

import gemm_runtime.build as build_mod
from bench.experiments.sm90_variants import problem_tensors, subset_manifest
from bench.timing import median_ms
from gemm_runtime import Gemm
from gemm_runtime.plan import LaunchSpec

ROOT = Path(__file__).resolve().parents[2]
VARIANTS = {
    "base": (),
    "no_epilogue": ("-DGEMM_SM80_LEAVE_OUT=1",),
    "no_mma": ("-DGEMM_SM80_LEAVE_OUT=2",),
    "no_refill": ("-DGEMM_SM80_LEAVE_OUT=3",),
    "no_barrier": ("-DGEMM_SM80_LEAVE_OUT=4",),
}
# (M, N, K): 4096^3 (where CUTLASS 2.x reached 486 TFLOP/s), llama3-8b gate_up at M = 4096,
# llama3-70b o at M = 1024.
PROBLEMS = [(4096, 4096, 4096), (4096, 28672, 4096), (1024, 8192, 8192)]


def is_prefill_sm80(name: str, spec: dict) -> bool:
    return "_sm80_m16n8k16_af16_bf16_" in name and "_nk_" in name and spec["cta"][0] >= 128 and "f32" not in spec["d_type"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    ap.add_argument("--swizzles", nargs="+", type=int, default=[3], help="rasterization groups (log2) to time")
    ap.add_argument("--tiles", nargs="+", help="only these tiles, e.g. 128x256x32s3 (default: every prefill tile)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sm80_variants_"))
    subprocess.run(
        [sys.executable, "-m", "codegen", "--with-defaults", "--config", str(ROOT / "bench/experiments/prefill_tiles.yaml"),
         "--out", str(work / "all")], check=True, cwd=ROOT,
    )  # fmt: skip
    subset_manifest(work / "all", work / "gen", is_prefill_sm80)
    tensors = problem_tensors(PROBLEMS, torch.float16)
    for variant in args.variants:
        build_mod.BUILD_OPTIONS = VARIANTS[variant]
        build_mod.build(work / "gen", work / variant, archs=[90], progress=False)
        gemm = Gemm(build_dir=work / variant)
        for kern in sorted(gemm.kernels, key=lambda k: k.name):
            s = kern.spec
            tile = f"{s.cta[0]}x{s.cta[1]}x{s.cta[2]}s{s.stages}"
            if args.tiles and tile not in args.tiles:
                continue
            for swizzle in args.swizzles:
                row = []
                for (m, n, k), (a, b, out) in tensors.items():
                    t = median_ms(lambda: gemm.matmul(a, b, out=out, kernel=LaunchSpec(kern.name, 1, swizzle)))
                    row.append(f"{2 * m * n * k / t / 1e9:5.0f}")
                print(f"{variant:12s} {tile:14s} w{s.warps[0]}x{s.warps[1]} sw{swizzle}: " + " ".join(row) + " TFLOP/s",
                      flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
