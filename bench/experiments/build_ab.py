"""Experiment: the tree's build against another build of the same kernels (e.g. the
previous commit's headers), every problem timed on both in one process, interleaved
(gemm_runtime.timing.interleaved_medians_ms), the plan forced to the one default
dispatch picks in the tree's build, L2 flushed, medians, µs:

    python -m bench.experiments.build_ab --base BUILD_DIR [--rounds 2] [--bits 4]

Problems: bf16 grouped GEMMs of bench.moe's two configurations at 1024 and 8192 tokens,
and dense bf16 problems whose last tile row holds 64 rows or fewer (M % 128 in 1..64),
beside the llama3-8b gate_up shape at M = 4096. With --bits 4 the same grouped problems
with the experts quantized (4 bits, group 128, as bench.moe's W4A16 columns) and dense
W4A16 problems whose last token tile is short against 256 (M % 256 in 1..128), beside
whole ones (or the dense problems given by --dense-w4, e.g. ones that dispatch takes to
stream-K, or by --layers: bench/shapes.yaml's layers of the models at each --m), each at
the plan the tree's default dispatch picks (the dense ones as `Gemm.matmul` picks it in
each build: the same registry and cost model). --bits 8 and --dtype f16 take those dense
quantized problems with 8-bit weights or fp16 activations, --group their group size
(-1: per channel); with them, and with --layers, no grouped rows:

    python -m bench.experiments.build_ab --base BUILD --bits 4 --dtype f16 --layers llama3-8b llama3-70b --m 64 128 256
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
import yaml

from bench.dense import _problem_key
from bench.moe import key_of, sorted_problems
from bench.quant import describe_launch
from codegen.vocabulary import BOrder, DataType
from gemm_runtime.context import make_key, quant_name
from gemm_runtime.types import data_type_of
from gemm_runtime import Gemm
from gemm_runtime.packed_weight import pack_for_gemm
from gemm_runtime.quant import quantize
from gemm_runtime.timing import interleaved_medians_ms

DENSE = [(4096, 28672, 4096), (4160, 28672, 4096), (192, 28672, 4096), (1088, 8192, 8192), (64 + 128 * 7, 14336, 4096)]
DENSE_W4 = [(4096, 28672, 4096), (4096 + 100, 28672, 4096), (1024 + 60, 8192, 8192), (300, 28672, 4096),
            (1024, 57344, 8192), (1024 + 120, 57344, 8192)]
W4_GROUP = 128
ROOT = Path(__file__).resolve().parents[2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", type=Path, required=True, help="the other build directory")
    ap.add_argument("--tokens", nargs="*", type=int, default=[1024, 8192],
                    help="the grouped problems' tokens; none: no grouped rows")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved measurements per problem (each gives a pair)")
    ap.add_argument("--bits", type=int, choices=[16, 4, 8], default=16,
                    help="16: bf16 problems; 4: W4A16 ones; 8: W8A16 dense ones")
    ap.add_argument("--dtype", choices=["bf16", "f16"], default="bf16", help="the quantized dense rows' activations")
    ap.add_argument("--dense-w4", nargs="+", metavar="MxNxK", help="with --bits 4 or 8: these dense problems instead")
    ap.add_argument("--layers", nargs="+", metavar="MODEL", help="with --bits 4 or 8: the models' layers "
                    "(bench/shapes.yaml) at each --m instead")
    ap.add_argument("--m", nargs="+", type=int, default=[64, 128, 256], help="the M of --layers")
    ap.add_argument("--group", type=int, default=W4_GROUP, help="the quantized dense rows' group size (-1: per "
                    "channel)")
    args = ap.parse_args()
    if args.bits == 8 or args.dtype == "f16" or args.layers:
        args.tokens = []
    tree, base = Gemm(), Gemm(build_dir=args.base)
    rows = ["| problem | plan | tree µs | base µs | base / tree |", "|---|---|---:|---:|---:|"]

    def compare(name: str, plan, call_tree, call_base) -> None:
        pairs = [interleaved_medians_ms([call_tree, call_base]) for _ in range(args.rounds)]
        t, b = min(p[0] for p in pairs), min(p[1] for p in pairs)
        spec = tree.registry.get(plan.kernel).spec
        text = f"{spec.mainloop.value} {'x'.join(map(str, spec.cta))} split {plan.splits} s{plan.swizzle}"
        rows.append(f"| {name} | {text} | {t * 1e3:.1f} | {b * 1e3:.1f} | {b / t:.3f} |")
        print(rows[-1], flush=True)

    gen = torch.Generator().manual_seed(0)
    w4_group = W4_GROUP if args.bits == 4 else None
    dtype = torch.float16 if args.dtype == "f16" else torch.bfloat16
    for cfg_name, tokens, proj, routing, a, w, d in sorted_problems(args.tokens, gen, w4_group=w4_group):
        plan = tree.select(key_of(tree, a, w, routing))
        compare(f"{cfg_name} {tokens} {proj}", plan,
                lambda: tree.grouped_matmul(a, w, routing.offsets, out=d, kernel=plan),
                lambda: base.grouped_matmul(a, w, routing.offsets, out=d, kernel=plan))  # fmt: skip
    if args.bits in (4, 8):
        dense = [tuple(int(v) for v in p.split("x")) for p in args.dense_w4] if args.dense_w4 else DENSE_W4
        if args.layers:
            models = yaml.safe_load((ROOT / "bench" / "shapes.yaml").read_text())["models"]
            dense = [(m, n, k) for m in args.m for model in args.layers for n, k in models[model].values()]
        for m, n, k in dense:
            a = torch.randn(m, k, device="cuda", dtype=dtype)
            packed = pack_for_gemm(quantize(torch.randn(n, k, device="cuda", dtype=dtype) * 0.02, bits=args.bits,
                                            group_size=args.group))  # fmt: skip
            d = torch.empty(m, n, device="cuda", dtype=dtype)
            pairs = [interleaved_medians_ms([lambda: tree.matmul(a, packed, out=d), lambda: base.matmul(a, packed, out=d)])
                     for _ in range(args.rounds)]  # fmt: skip
            t, b = min(p[0] for p in pairs), min(p[1] for p in pairs)
            plans = " / ".join(_planned(g, a, m, n, k, args.bits, args.group) for g in (tree, base))
            rows.append(f"| W{args.bits} {args.dtype} g{args.group} {m}x{n}x{k} | {plans} | {t * 1e3:.1f} | {b * 1e3:.1f} | "
                        f"{b / t:.3f} |")  # fmt: skip
            print(rows[-1], flush=True)
        print("\n".join(rows))
        return
    for m, n, k in DENSE:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = (torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02).t()
        d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        plan = tree.select(_problem_key(tree, a, b, d))
        compare(f"dense {m}x{n}x{k}", plan, lambda: tree.matmul(a, b, out=d, kernel=plan),
                lambda: base.matmul(a, b, out=d, kernel=plan))  # fmt: skip
    print("\n".join(rows))


def _planned(gemm: Gemm, a: torch.Tensor, m: int, n: int, k: int, bits: int, group: int) -> str:
    """The launch default dispatch picks for the quantized problem (the cost model's)."""
    dtype = data_type_of(a.dtype, "a")
    key = make_key(dtype, BOrder.NK, dtype, m, n, k, arch=gemm.registry.device.arch)._replace(
        b_type=DataType(f"u{bits}"), quant=quant_name(DataType(f"u{bits}"), group, k))
    plan = gemm.predicted(key)
    return describe_launch(gemm.registry.get(plan.kernel).spec, plan)


if __name__ == "__main__":
    main()
