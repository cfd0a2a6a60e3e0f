"""Experiment: where a small layer's W4A16 decode time goes (issue 17: llama3-8b o at M = 1
took 12.3 us where torch's int4 kernel took 9.0). Builds the default set's 16-row W4 fp16
sm80 tiles and the narrow candidates of bench/experiments/decode_narrow_tiles.yaml, each
with one part of the kernel left out (templates/include/gemm/mainloop_sm80.cuh's
GEMM_SM80_LEAVE_OUT: the MMAs, the epilogue, split-K's hand-over, the tile-end barrier,
the K loop's refilling copies, the quantized warps' tensor MMAs alone; the sums are then
wrong) or one setting changed (handover_fence: split_k.cuh's GEMM_SPLIT_K_FENCE=1, the old
fence, sums right), then per layer at M = 1 (or each of --m):

* every base kernel at every split count (short medians), the fastest first;
* the two fastest plans under every variant, interleaved, beside fp16 cuBLAS, torch's
  int4 kernel and a one-element kernel (the timing's floor).

L2 emptied by a read before every call, medians, microseconds.

    python -m bench.experiments.decode_variants [--layers 4096x4096 6144x4096 4096x14336] [--m 1 16]
        [--variants base no_mma]
    python -m bench.experiments.decode_variants --prefill --m 64 256 1024 --variants base quant_whole_vector

With --prefill, the default set's W4 fp16 sm80 tiles of 32 rows or more instead (the A100
class's quantized prefill path); --bits 8 for the W8 ones, --dtype bf16 for bf16 activations
(and bf16 cuBLAS), --match to keep the kernels whose name holds a substring. torch's int4 kernel is timed on a 4-bit weight of its own either way.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

import gemm_runtime.build as build_mod
from bench.decode_chain import GROUP, INT4_INNER_K_TILES
from bench.experiments.decode_ring import short
from bench.experiments.sm90_variants import subset_manifest
from gemm_runtime import Gemm
from gemm_runtime.packed_weight import pack_for_gemm
from gemm_runtime.plan import LaunchSpec
from gemm_runtime.quant import quantize
from gemm_runtime.timing import interleaved_medians_ms, median_ms

ROOT = Path(__file__).resolve().parents[2]
VARIANTS = {
    "base": (),
    "no_mma": ("-DGEMM_SM80_LEAVE_OUT=2",),
    "no_epilogue": ("-DGEMM_SM80_LEAVE_OUT=1",),
    "no_handover": ("-DGEMM_SM80_LEAVE_OUT=6",),
    "handover_fence": ("-DGEMM_SPLIT_K_FENCE=1",),  # split_k.cuh: every thread fences its partials (before 2026-12-06)
    "no_barrier": ("-DGEMM_SM80_LEAVE_OUT=4",),
    "no_refill": ("-DGEMM_SM80_LEAVE_OUT=3",),  # the K loop's refilling copies (A and the scale rows; prologue kept)
    "no_tensor_ops": ("-DGEMM_SM80_LEAVE_OUT=7",),  # the MMAs only: loads and dequantization kept (a sink)
    "all_a_rows": ("-DGEMM_SM80_LOWER_A_COPIES=0",),  # A's copies of rows 8-15 at M <= 8 too (before 2026-12-06)
    "l2_64": ("-DGEMM_CP_ASYNC_PREFETCH=64",),  # cp.async's L2 prefetch size (ptx.cuh)
    "l2_128": ("-DGEMM_CP_ASYNC_PREFETCH=128",),
    "l2_256": ("-DGEMM_CP_ASYNC_PREFETCH=256",),
    "lean_tail": ("-DGEMM_LEAN_TAIL=1",),  # config.cuh: the work after the K loop for the rows that exist only
    "old_tail": ("-DGEMM_LEAN_TAIL=0",),  # the same knob off: every row's sums moved, one epilogue path
    "quant_whole_vector": ("-DGEMM_SM80_QUANT_LEAN=0",),  # --prefill: packed B on the whole-vector copies
    "quant_lean_all": ("-DGEMM_SM80_QUANT_LEAN=2",),  # --prefill: on the lean copies, 128x128x64 too
}


def is_decode(name: str, spec: dict, bits: int = 4, dtype: str = "f16") -> bool:
    """A 16-row sm80 kernel of ``dtype`` activations and ``bits``-bit weights, not grouped."""
    return f"_sm80_m16n8k16_a{dtype}_bu{bits}_" in name and spec["cta"][0] == 16 and not spec.get("grouped")


def is_prefill(name: str, spec: dict, bits: int = 4, dtype: str = "f16") -> bool:
    """The same of 32 rows or more (--prefill)."""
    return f"_sm80_m16n8k16_a{dtype}_bu{bits}_" in name and spec["cta"][0] >= 32 and not spec.get("grouped")


def timed_plans(gemm: Gemm, a: torch.Tensor, packed, out: torch.Tensor) -> list[tuple[float, LaunchSpec]]:
    """(short median in ms, plan) of every kernel of `gemm` at every split count K takes,
    fastest first."""
    plans = []
    for kern in gemm.kernels:
        for splits in (1, 2, 3, 4, 6, 8):
            spec = LaunchSpec(kern.name, splits)
            try:
                gemm.matmul(a, packed, out=out, kernel=spec)
            except Exception:  # a split count K cannot take
                continue
            plans.append((median_ms(lambda: gemm.matmul(a, packed, out=out, kernel=spec), reps=15, max_ms=50), spec))
    return sorted(plans, key=lambda p: p[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", nargs="+", default=["4096x4096", "6144x4096", "4096x14336"], help="N x K")
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    ap.add_argument("--m", nargs="+", type=int, default=[1], help="rows of A (tokens)")
    ap.add_argument("--prefill", action="store_true", help="the W4 tiles of 32 rows or more instead")
    ap.add_argument("--bits", type=int, choices=[4, 8], default=4, help="the packed weights' bits (and kernels')")
    ap.add_argument("--match", default="", help="only the kernels whose name holds this, e.g. 128x128x64")
    ap.add_argument("--dtype", choices=["f16", "bf16"], default="f16",
                    help="the activations' type (and the peer's: cuBLAS in that type)")
    args = ap.parse_args()
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    work = Path(tempfile.mkdtemp(prefix="decode_variants_"))
    subprocess.run([sys.executable, "-m", "codegen", "--with-defaults", "--config",
                    str(ROOT / "bench/experiments/decode_narrow_tiles.yaml"), "--out", str(work / "all")],
                   check=True, cwd=ROOT, stdout=subprocess.DEVNULL)  # fmt: skip
    tiles = is_prefill if args.prefill else is_decode
    subset_manifest(work / "all", work / "gen",
                    lambda name, spec: tiles(name, spec, args.bits, args.dtype) and args.match in name)
    gemms = {}
    for variant in args.variants:
        build_mod.BUILD_OPTIONS = VARIANTS[variant]
        build_mod.build(work / "gen", work / variant, archs=[90], progress=False)
        gemms[variant] = Gemm(build_dir=work / variant)
    base = gemms[args.variants[0]]
    tiny = torch.zeros(1, device="cuda")
    for layer, m in ((layer, m) for layer in args.layers for m in args.m):
        n, k = (int(x) for x in layer.split("x"))
        w = torch.randn(n, k, device="cuda", dtype=dtype) * 0.02
        packed = pack_for_gemm(quantize(w, bits=args.bits, group_size=GROUP))
        q = torch.randint(0, 16, (n, k), dtype=torch.int32, device="cuda")
        int4 = torch._convert_weight_to_int4pack((q[:, ::2] << 4 | q[:, 1::2]).to(torch.uint8), INT4_INNER_K_TILES)
        sz = torch.randn(k // GROUP, n, 2, device="cuda", dtype=torch.bfloat16) * 0.01
        a = torch.randn(m, k, device="cuda", dtype=dtype)
        a_bf = a.to(torch.bfloat16)
        out = torch.empty(m, n, device="cuda", dtype=dtype)
        plans = timed_plans(base, a, packed, out)
        print(f"\n### {layer} (N x K), M = {m}: every base plan, fastest first (us)\n")
        print(" | ".join(f"{short(s.kernel)} ({s.splits}) {t * 1e3:.1f}" for t, s in plans[:12]))
        refs = [lambda: tiny.add_(1), lambda: torch.matmul(a, w.t(), out=out),
                lambda: torch._weight_int4pack_mm(a_bf, int4, GROUP, sz)]  # fmt: skip
        top = [s for _, s in plans[:2]]
        fns = list(refs)
        for spec in top:
            for gemm in gemms.values():
                fns.append(lambda gemm=gemm, spec=spec: gemm.matmul(a, packed, out=out, kernel=spec))
        t = [x * 1e3 for x in interleaved_medians_ms(fns, reps=30)]
        print(f"\nfloor {t[0]:.1f}, {args.dtype} cuBLAS {t[1]:.1f}, torch int4 {t[2]:.1f}\n")
        print("| plan | " + " | ".join(gemms) + " |")
        print("|---|" + "---:|" * len(gemms))
        for i, spec in enumerate(top):
            row = t[3 + i * len(gemms): 3 + (i + 1) * len(gemms)]
            print(f"| {short(spec.kernel)} ({spec.splits}) | " + " | ".join(f"{x:.1f}" for x in row) + " |", flush=True)


if __name__ == "__main__":
    main()
