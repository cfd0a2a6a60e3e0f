"""Experiment: where a staged SM80 W4 tile's time goes (issue 17: W4 at most 1.1x the time
of the family's fp16 kernel at M >= 1024). Each variant rebuilds the sm80_staged f16 W4
tiles of bench/experiments/sm80_staged.yaml and the default set's sm80 fp16 prefill
tiles with one knob of templates/include/gemm/mainloop_sm80.cuh set (a part of the
pipeline left out; the sums are then wrong), then times each kernel unsplit on the same
problems, the variants of a kernel back to back, L2 flushed, medians:

    python -m bench.experiments.sm80_staged_variants [--variants base no_dequant ...] [--tiles 128x256x64s4]

split reads a step's packed weights first in the step and converts and stores them after
its MMAs, fused between its copies and MMAs (GEMM_SM80_STAGED_SPLIT; base chooses per tile). no_dequant leaves out the staged tiles' dequantization inside the K loop (the MMAs then
read the buffer the prologue wrote): its time against base is what the dequantization
costs beside the MMAs; base against the fp16 tile is the whole gap.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch

import gemm_runtime.build as build_mod
from bench.experiments.sm90_variants import subset_manifest
from bench.timing import median_ms
from codegen.__main__ import main as codegen_main
from gemm_runtime import Gemm
from gemm_runtime.packed_weight import pack_for_gemm
from gemm_runtime.plan import LaunchSpec
from gemm_runtime.quant import quantize
from tests.sm80_staged_kernels import YAML

VARIANTS = {
    "base": (),
    "split": ("-DGEMM_SM80_STAGED_SPLIT=1",),
    "fused": ("-DGEMM_SM80_STAGED_SPLIT=0",),
    "no_dequant": ("-DGEMM_SM80_LEAVE_OUT=5",),
    "no_mma": ("-DGEMM_SM80_LEAVE_OUT=2",),
    "no_refill": ("-DGEMM_SM80_LEAVE_OUT=3",),
    "no_barrier": ("-DGEMM_SM80_LEAVE_OUT=4",),
    "no_epilogue": ("-DGEMM_SM80_LEAVE_OUT=1",),
}
# (M, N, K): 4096^3, llama3-8b gate_up at M = 4096, llama3-70b o at M = 1024.
PROBLEMS = [(4096, 4096, 4096), (4096, 28672, 4096), (1024, 8192, 8192)]


def keep(name: str, spec: dict) -> bool:
    """The staged f16 W4 tiles and the default set's sm80 fp16 "nk" prefill tiles."""
    staged = "_sm80_staged_" in name and "_af16_bu4_" in name
    dense = "_sm80_m16n8k16_af16_bf16_" in name and "_nk_" in name and spec["d_type"] == "f16" and \
        spec["cta"][0] >= 128 and "grouped" not in name  # fmt: skip
    return staged or dense


def tile_label(spec) -> str:
    return f"{spec.cta[0]}x{spec.cta[1]}x{spec.cta[2]}s{spec.stages}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    ap.add_argument("--tiles", nargs="+", help="only these tiles, e.g. 128x256x64s4 (default: all)")
    ap.add_argument("--rounds", type=int, default=2, help="times each (kernel, problem) is timed per variant")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sm80_staged_variants_"))
    codegen_main(["--with-defaults", "--config", str(YAML), "--out", str(work / "all")])
    subset_manifest(work / "all", work / "gen", keep)
    gemms = {}
    for variant in args.variants:
        build_mod.BUILD_OPTIONS = VARIANTS[variant]
        build_mod.build(work / "gen", work / variant, archs=[90], progress=False)
        gemms[variant] = Gemm(build_dir=work / variant)
    tensors = {}
    for m, n, k in PROBLEMS:
        a = torch.randn(m, k, device="cuda", dtype=torch.float16)
        w = torch.randn(n, k, device="cuda", dtype=torch.float16) * 0.02
        packed = pack_for_gemm(quantize(w, bits=4, group_size=128))
        tensors[m, n, k] = (a, w.t(), packed, torch.empty(m, n, device="cuda", dtype=torch.float16))
    print("problems: " + ", ".join(f"{m}x{n}x{k}" for m, n, k in PROBLEMS) + " (TFLOP/s each)")
    for kern in sorted(gemms[args.variants[0]].kernels, key=lambda x: (not x.spec.quantized, x.name)):
        label = ("W4 staged " if kern.spec.quantized else "fp16      ") + tile_label(kern.spec)
        if args.tiles and tile_label(kern.spec) not in args.tiles:
            continue
        for r in range(args.rounds):
            for variant, gemm in gemms.items():
                row = []
                for (m, n, k), (a, b, packed, out) in tensors.items():
                    weight = packed if kern.spec.quantized else b
                    t = median_ms(lambda: gemm.matmul(a, weight, out=out, kernel=LaunchSpec(kern.name, 1, 3)))
                    row.append(f"{2 * m * n * k / t / 1e9:5.0f}")
                print(f"{label:26s} r{r} {variant:12s}: " + " ".join(row), flush=True)


if __name__ == "__main__":
    main()
