"""Experiment: the sm80_xor family (K tiles of 32 in XOR-swizzled shared rows,
codegen/families/sm80.py) against its padded twins, the sm80 kernels of the same tile,
types and B order (the default set's and bench/experiments/prefill_tiles.yaml's), built
together for this GPU (tests/sm80_xor_kernels.py). Each dense swizzled kernel, its twin
and cuBLAS are timed interleaved on the same problems (llama3-8b and llama3-70b layers
at each M, and 4096^3), unsplit, rasterization group 2^3, L2 flushed, medians; each
grouped one beside its twin on bench.moe's routed problems (sorted rows):

    python -m bench.experiments.sm80_xor [--m 1024 4096] [--models llama3-8b llama3-70b] [--dtypes f16 bf16]
        [--tiles 128x128x32s5 ...] [--tokens 1024 8192]

Prints TFLOP/s per problem and the median swizzled / padded time per tile, and per
problem the best swizzled tile against the best padded one.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import torch
import yaml

from gemm_runtime import Gemm
from gemm_runtime.plan import LaunchSpec
from gemm_runtime.timing import interleaved_medians_ms
from tests.sm80_xor_kernels import build, twin_key

ROOT = Path(__file__).resolve().parents[2]
SWIZZLE = 3


def layer_problems(models: list[str], ms: list[int]) -> list[tuple[str, int, int, int]]:
    shapes = yaml.safe_load((ROOT / "bench" / "shapes.yaml").read_text())["models"]
    problems = [("4096^3", 4096, 4096, 4096)]
    for model in models:
        for layer, (n, k) in shapes[model].items():
            problems += [(f"{model} {layer}", m, n, k) for m in ms]
    return problems


def tile_of(spec) -> str:
    return f"{spec.cta[0]}x{spec.cta[1]}x{spec.cta[2]}s{spec.stages}"


def pairs(gemm: Gemm, grouped: bool) -> list[tuple[str, str, object]]:
    """(swizzled kernel, its padded twin, spec) for every swizzled tile of the build, once
    (the default set's swizzled tiles are built beside the experiment's of the same key)."""
    by_key = {twin_key(k.spec.to_json()): k.name for k in gemm.kernels if k.spec.mainloop.value == "sm80"}
    found: dict[tuple, tuple[str, str, object]] = {}
    for k in sorted(gemm.kernels, key=lambda k: k.name):
        key = twin_key(k.spec.to_json())
        if k.spec.mainloop.value == "sm80_xor" and k.spec.grouped == grouped and key in by_key:
            found.setdefault(key, (k.name, by_key[key], k.spec))
    return sorted(found.values(), key=lambda p: p[0])


def dense(gemm: Gemm, problems, dtypes: list[str], tiles: list[str] | None = None) -> None:
    print("| tile | types | B | problem | M | N | K | padded TFLOP/s | swizzled TFLOP/s | cuBLAS TFLOP/s | "
          "swizzled / padded time |")
    print("|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    best: dict[tuple, list[float]] = {}
    for xor, twin, spec in pairs(gemm, grouped=False):
        dtype = torch.float16 if spec.a_type.value == "f16" else torch.bfloat16
        if spec.a_type.value not in dtypes or (tiles and tile_of(spec) not in tiles):
            continue
        ratios = []
        for label, m, n, k in problems:
            a = torch.randn(m, k, device="cuda", dtype=dtype)
            w = torch.randn(n, k, device="cuda", dtype=dtype)
            b = w.t() if spec.b_order.value == "nk" else w.t().contiguous()
            out = torch.empty(m, n, device="cuda", dtype=dtype)
            t_pad, t_xor, t_cublas = interleaved_medians_ms([
                lambda: gemm.matmul(a, b, out=out, kernel=LaunchSpec(twin, 1, SWIZZLE)),
                lambda: gemm.matmul(a, b, out=out, kernel=LaunchSpec(xor, 1, SWIZZLE)),
                lambda: torch.matmul(a, b, out=out)])  # fmt: skip
            flops = 2 * m * n * k / 1e9
            ratios.append(t_xor / t_pad)
            entry = best.setdefault((spec.a_type.value, spec.b_order.value, label, m), [float("inf")] * 3)
            entry[0], entry[1], entry[2] = min(entry[0], t_pad), min(entry[1], t_xor), t_cublas
            print(f"| {tile_of(spec)} | {spec.a_type.value} | {spec.b_order.value} | {label} | {m} | {n} | {k} | "
                  f"{flops / t_pad:.0f} | {flops / t_xor:.0f} | {flops / t_cublas:.0f} | {t_xor / t_pad:.3f} |",
                  flush=True)  # fmt: skip
        print(f"|  | median over the problems: {statistics.median(ratios):.3f} (min {min(ratios):.3f}, "
              f"max {max(ratios):.3f}) |", flush=True)  # fmt: skip
    print("\nBest tile of each layout per problem (unsplit, swizzle 3):\n")
    print("| types | B | problem | M | best padded / cuBLAS | best swizzled / cuBLAS | "
          "best swizzled / best padded time |")
    print("|---|---|---|---:|---:|---:|---:|")
    for (types, order, label, m), (t_pad, t_xor, t_cublas) in best.items():
        print(f"| {types} | {order} | {label} | {m} | {t_cublas / t_pad:.3f} | {t_cublas / t_xor:.3f} | "
              f"{t_xor / t_pad:.3f} |")  # fmt: skip


def grouped(gemm: Gemm, tokens: list[int]) -> None:
    from bench.moe import sorted_problems

    found = [p for p in pairs(gemm, grouped=True) if p[2].a_type.value == "bf16"]
    if not found:
        return
    print("\n| tile | config | tokens | projection | padded µs | swizzled µs | swizzled / padded |")
    print("|---|---|---:|---|---:|---:|---:|")
    gen = torch.Generator(device="cpu").manual_seed(0)
    for cfg_name, count, proj, routing, a, w, d in sorted_problems(tokens, gen):
        for xor, twin, spec in found:
            times = interleaved_medians_ms([
                lambda name=name: gemm.grouped_matmul(a, w, routing.offsets, out=d, kernel=LaunchSpec(name, 1))
                for name in (twin, xor)])  # fmt: skip
            print(f"| {tile_of(spec)} | {cfg_name} | {count} | {proj} | {times[0] * 1e3:.1f} | {times[1] * 1e3:.1f} | "
                  f"{times[1] / times[0]:.3f} |", flush=True)  # fmt: skip


def launch_once(gemm: Gemm, tile: str, m: int, n: int, k: int, order: str = "nk") -> None:
    """One launch of each of the fp16 pair of ``tile`` with B in ``order``, for a profiler
    to catch."""
    found = [p for p in pairs(gemm, grouped=False)
             if tile_of(p[2]) == tile and p[2].a_type.value == "f16" and p[2].b_order.value == order]  # fmt: skip
    if not found:
        raise SystemExit(f"no fp16 {order!r} swizzled kernel of tile {tile} with a twin in this build")
    xor, twin, _ = found[0]
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    # "nk": nn.Linear's weight, transposed as a view; "kn": a contiguous K x N matrix.
    b = torch.randn(n, k, device="cuda", dtype=torch.float16).t() if order == "nk" else torch.randn(
        k, n, device="cuda", dtype=torch.float16)
    out = torch.empty(m, n, device="cuda", dtype=torch.float16)
    for name in (twin, xor):
        gemm.matmul(a, b, out=out, kernel=LaunchSpec(name, 1, SWIZZLE))
        print(name, flush=True)
    torch.cuda.synchronize()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["llama3-8b", "llama3-70b"])
    ap.add_argument("--m", nargs="+", type=int, default=[1024, 4096])
    ap.add_argument("--dtypes", nargs="+", default=["f16", "bf16"], choices=["f16", "bf16"])
    ap.add_argument("--tokens", nargs="*", type=int, default=[1024, 8192],
                    help="bench.moe token counts (grouped); none: no grouped problems")
    ap.add_argument("--tiles", nargs="+", metavar="TILE", help="only these dense tiles, e.g. 128x128x32s5 (default: all)")
    ap.add_argument("--build", type=Path, help="an existing build of tests/sm80_xor_kernels.build(with_twins=True)")
    ap.add_argument("--build-only", type=Path, metavar="WORK",
                    help="build the swizzled kernels and their twins under WORK (the build: WORK/build) and stop")
    ap.add_argument("--launch-once", nargs=4, metavar=("TILE", "M", "N", "K"),
                    help="launch the fp16 swizzled kernel of TILE (e.g. 128x128x32s5) for --order's B and its "
                         "twin once each, "
                         "unsplit, swizzle 3 (for ncu -k regex:... -c 1 on either)")  # fmt: skip
    ap.add_argument("--order", choices=["nk", "kn"], default="nk", help="B's order for --launch-once")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    major, minor = torch.cuda.get_device_capability()
    if args.build_only:
        print(build(args.build_only, 10 * major + minor, with_twins=True))
        return
    if args.build is None:
        args.build = build(Path(tempfile.mkdtemp(prefix="sm80_xor_")), 10 * major + minor, with_twins=True)
    gemm = Gemm(build_dir=args.build)
    if args.launch_once:
        launch_once(gemm, args.launch_once[0], *(int(x) for x in args.launch_once[1:]), order=args.order)
        return
    dense(gemm, layer_problems(args.models, args.m), args.dtypes, args.tiles)
    if args.tokens:
        grouped(gemm, args.tokens)


if __name__ == "__main__":
    main()
