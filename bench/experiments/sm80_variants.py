"""Experiment: where an SM80-family prefill tile's time goes. Each variant rebuilds the
sm80 fp16 "nk" prefill kernels (the default set's and bench/experiments/prefill_tiles.yaml's,
CTA M of 128 or more) with one knob of templates/include/gemm/mainloop_sm80.cuh set (a
part of the pipeline left out) into its own build directory, then times every kernel on
the same problems beside cuBLAS, L2 flushed, medians:

    python -m bench.experiments.sm80_variants [--variants base no_epilogue ...] [--swizzles 1 2 3]

With --order kn, the "kn" kernels (B stored K x N) instead, e.g. `--order kn --variants base
kn_general kn_lean_all`: the lean copies for "kn" B against the general ones. With
--grouped TOKENS, the default set's grouped dense sm80-family bf16 kernels on bench.moe's
routed problems (rows sorted by expert) at those token counts, in microseconds, e.g.
`--grouped 1024 8192 --variants base grouped_late`; with --grouped-bits 4, the grouped W4 tiles of
more than 32 rows on the experts packed at 4 bits (`--variants base quant_lean_grouped`).

With --decode, the dense decode tiles (CTA M of 32 or less) instead, unsplit, on llama3-8b
layers at M = 1 and 16, in microseconds.
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
    "l2_64": ("-DGEMM_CP_ASYNC_PREFETCH=64",),  # cp.async's L2 prefetch size (ptx.cuh)
    "l2_128": ("-DGEMM_CP_ASYNC_PREFETCH=128",),
    "l2_256": ("-DGEMM_CP_ASYNC_PREFETCH=256",),
    "direct_epilogue": ("-DGEMM_STAGED_EPILOGUE=0",),
    "general_copies": ("-DGEMM_SM80_LEAN_COPIES=0",),
    "kn_general": ("-DGEMM_SM80_LEAN_KN=0",),  # "kn" B on the general copies
    "kn_lean_all": ("-DGEMM_SM80_LEAN_KN=2",),  # and on the lean ones where they spill too
    "grouped_late": ("-DGEMM_SM80_GROUPED_EARLY=0",),  # grouped tiles: late barrier, one body
    "kn_decode_general": ("-DGEMM_SM80_KN_DECODE_LEAN=0",),  # "kn" decode tiles on the general copies
    "quant_lean_grouped": ("-DGEMM_SM80_QUANT_LEAN=2",),  # grouped quantized tiles on the lean copies
    "late_barrier": ("-DGEMM_SM80_EARLY_BARRIER=0",),
    "stage_index": ("-DGEMM_SM80_STAGE_BASES=0",),
    "one_body": ("-DGEMM_SM80_LEAN_LOOP=0", "-DGEMM_SM80_INSIDE_LOOP=0"),
}
# (M, N, K): 4096^3 (where CUTLASS 2.x reached 486 TFLOP/s), llama3-8b gate_up at M = 4096,
# llama3-70b o at M = 1024.
PROBLEMS = [(4096, 4096, 4096), (4096, 28672, 4096), (1024, 8192, 8192)]
# llama3-8b qkv and down at M = 1, qkv and o at M = 16.
DECODE_PROBLEMS = [(1, 6144, 4096), (1, 4096, 14336), (16, 6144, 4096), (16, 4096, 4096)]


def is_dense_sm80(name: str, spec: dict, order: str = "nk") -> bool:
    """An sm80-family fp16 or bf16 kernel with 16-bit output and B in ``order`` (the
    sm80_xor family's included, where the build generated them)."""
    dense_16bit = any(f"_{family}_m16n8k16_{types}_" in name for family in ("sm80", "sm80_xor")
                      for types in ("af16_bf16", "abf16_bbf16"))  # fmt: skip
    return dense_16bit and f"_{order}_" in name and "f32" not in spec["d_type"] and not spec.get("grouped")


def is_prefill_sm80(name: str, spec: dict, order: str = "nk") -> bool:
    return is_dense_sm80(name, spec, order) and spec["cta"][0] >= 128


def is_decode_sm80(name: str, spec: dict, order: str = "nk") -> bool:
    return is_dense_sm80(name, spec, order) and spec["cta"][0] <= 32


def is_grouped_sm80(name: str, spec: dict, order: str = "nk") -> bool:
    """A grouped dense sm80-family bf16 kernel (bench.moe's experts are bf16)."""
    return (spec.get("grouped", False) and "_abf16_bbf16_" in name and "f32" not in spec["d_type"]
            and any(f"_{family}_m16n8k16_" in name for family in ("sm80", "sm80_xor")))  # fmt: skip


def is_grouped_w4_sm80(name: str, spec: dict, order: str = "nk") -> bool:
    """A grouped sm80 W4 bf16 kernel of more than 32 rows (the register path's prefill tiles)."""
    return spec.get("grouped", False) and "_sm80_m16n8k16_abf16_bu4_" in name and spec["cta"][0] > 32


def sm80_manifest(work: Path, candidates: bool = True, decode: bool = False, xor: bool = False,
                  order: str = "nk", grouped: bool = False, grouped_bits: int = 16) -> Path:
    """The default set (and with ``candidates`` prefill_tiles.yaml, with ``xor`` the
    sm80_xor family's sm80_xor.yaml) generated under ``work``, then the manifest of its
    sm80 fp16 and bf16 kernels with B in ``order``, the prefill tiles only with
    ``candidates``, the decode tiles only with ``decode``, the grouped bf16 ones only with
    ``grouped``: the folder a build reads."""
    configs = [ROOT / "bench/experiments" / name
               for name, wanted in (("prefill_tiles.yaml", candidates), ("sm80_xor.yaml", xor)) if wanted]
    extra = ["--with-defaults", "--config", *map(str, configs)] if configs else []
    subprocess.run([sys.executable, "-m", "codegen", *extra, "--out", str(work / "all")], check=True, cwd=ROOT)
    keep = (is_grouped_w4_sm80 if grouped_bits == 4 else is_grouped_sm80) if grouped else \
        is_decode_sm80 if decode else is_prefill_sm80 if candidates else is_dense_sm80
    subset_manifest(work / "all", work / "gen", lambda name, spec: keep(name, spec, order))
    return work / "gen"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    ap.add_argument("--swizzles", nargs="+", type=int, default=[3], help="rasterization groups (log2) to time")
    ap.add_argument("--tiles", nargs="+", help="only these tiles, e.g. 128x256x32s3 (default: every prefill tile)")
    ap.add_argument("--rounds", type=int, default=2, help="times each (kernel, problem) is timed per variant")
    ap.add_argument("--build-only", type=Path, help="build the default set's sm80 fp16/bf16 'nk' kernels there "
                    "(e.g. for bench.cutlass_peer --ours-build) and stop")  # fmt: skip
    ap.add_argument("--with-candidates", action="store_true",
                    help="with --build-only: the default set's prefill tiles and prefill_tiles.yaml's candidates")
    ap.add_argument("--with-xor", action="store_true",
                    help="the sm80_xor family's tiles too (bench/experiments/sm80_xor.yaml), built or timed")
    ap.add_argument("--decode", action="store_true", help="the decode tiles on decode problems (us), not prefill")
    ap.add_argument("--problems", nargs="+", help="MxNxK problems to time (default: PROBLEMS, or DECODE_PROBLEMS)")
    ap.add_argument("--order", choices=["nk", "kn"], default="nk", help="B's order: the kernels and tensors timed")
    ap.add_argument("--grouped", nargs="+", type=int, metavar="TOKENS",
                    help="the grouped dense kernels on bench.moe's problems at these token counts (us)")
    ap.add_argument("--grouped-bits", type=int, choices=[4, 16], default=16,
                    help="with --grouped: 4 times the grouped W4 prefill tiles on the experts packed at 4 bits")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sm80_variants_"))
    if args.build_only:
        gen = sm80_manifest(work, candidates=args.with_candidates, xor=args.with_xor)
        build_mod.build(gen, args.build_only, archs=[90], progress=False)
        return
    if args.grouped:
        grouped_variants(sm80_manifest(work, candidates=False, grouped=True, grouped_bits=args.grouped_bits), work, args)
        return
    gen = sm80_manifest(work, candidates=not args.decode, decode=args.decode, order=args.order, xor=args.with_xor)
    problems = [tuple(int(x) for x in p.split("x")) for p in args.problems] if args.problems else \
        DECODE_PROBLEMS if args.decode else PROBLEMS
    tensors = problem_tensors(problems, torch.float16, b_order=args.order)
    gemms = {}
    for variant in args.variants:
        build_mod.BUILD_OPTIONS = VARIANTS[variant]
        build_mod.build(gen, work / variant, archs=[90], progress=False)
        gemms[variant] = Gemm(build_dir=work / variant)
    # NOTE: the variants of one kernel are timed back to back, round after round: the SM
    # clock drifts over a run by more than some of the differences looked for.
    for kern in sorted(gemms[args.variants[0]].kernels, key=lambda k: k.name):
        s = kern.spec
        tile = f"{s.cta[0]}x{s.cta[1]}x{s.cta[2]}s{s.stages}"
        if s.a_type.value != "f16" or s.grouped or (args.tiles and tile not in args.tiles):
            continue
        tile += "xor" if s.mainloop.value == "sm80_xor" else ""
        for swizzle in args.swizzles:
            for r in range(args.rounds):
                for variant, gemm in gemms.items():
                    row = []
                    for (m, n, k), (a, b, out) in tensors.items():
                        t = median_ms(lambda: gemm.matmul(a, b, out=out, kernel=LaunchSpec(kern.name, 1, swizzle)))
                        row.append(f"{t * 1e3:6.1f}" if args.decode else f"{2 * m * n * k / t / 1e9:5.0f}")
                    print(f"{tile:17s} w{s.warps[0]}x{s.warps[1]} sw{swizzle} r{r} {variant:16s}: " + " ".join(row)
                          + (" us" if args.decode else " TFLOP/s"), flush=True)  # fmt: skip


def grouped_variants(gen: Path, work: Path, args) -> None:
    """Each grouped kernel's variants on bench.moe's sorted problems, interleaved, unsplit."""
    from bench.moe import sorted_problems
    from gemm_runtime.timing import interleaved_medians_ms

    gemms = {}
    for variant in args.variants:
        build_mod.BUILD_OPTIONS = VARIANTS[variant]
        build_mod.build(gen, work / variant, archs=[90], progress=False)
        gemms[variant] = Gemm(build_dir=work / variant)
    names = sorted(k.name for k in gemms[args.variants[0]].kernels)
    print("| kernel | config | tokens | projection | " + " | ".join(f"{v} us" for v in args.variants) + " |")
    print("|---|---|---:|---|" + "---:|" * len(args.variants))
    gen_cpu = torch.Generator(device="cpu").manual_seed(0)
    w4_group = 128 if args.grouped_bits == 4 else None
    for cfg_name, tokens, proj, routing, a, w, d in sorted_problems(args.grouped, gen_cpu, w4_group=w4_group):
        for name in names:
            tile = name.split("_m16n8k16_")[1].split("_nk_")[0].split("_", 4)[-1]
            times = interleaved_medians_ms([
                lambda g=g: g.grouped_matmul(a, w, routing.offsets, out=d, kernel=LaunchSpec(name, 1))
                for g in gemms.values()])  # fmt: skip
            print(f"| {tile} | {cfg_name} | {tokens} | {proj} | " + " | ".join(f"{t * 1e3:.1f}" for t in times) + " |",
                  flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
