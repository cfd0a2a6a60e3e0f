"""Experiment: the sm_90 register cap's two forms of a decode tile, timed side by side.

The bf16 4-bit 16-row tiles that spill under sm_90's 128-register cap have an uncapped
twin in the default set (a tile's ``ctas_per_sm: 1``; codegen/configs/sm80_quant.yaml and
sm80_grouped.yaml). For each problem this times every such pair at the same splits,
interleaved (gemm_runtime.timing.interleaved_medians_ms), L2 flushed, and says which of
the two the default dispatch (the cost model, which prices the spills where a wave holds
the grid) chose, if either. A second table times the default plan beside the one the
model of the twenty-third session would have taken (no twins, no spill or narrow-CTA
price: cost_model._SPILLED_RATE and _NARROW_CTA_RATE at 1) wherever the two differ:

    python -m bench.experiments.register_cap [--tokens 1 16] [--m 1 16] [--splits 1 2 4]
                                             [--models llama3-8b llama3-70b]

Problems: bench.moe's two configurations' grouped W4A16 projections (bf16, group 128) at
``--tokens``, and the layers of ``--models`` as dense W4A16 at ``--m``.
"""

from __future__ import annotations

import argparse
import torch
import yaml

from bench.moe import key_of, sorted_problems
from bench.quant import ROOT
from gemm_runtime import Gemm, GemmArgumentError, cost_model
from gemm_runtime.cost_model import tiles_of
from gemm_runtime.packed_weight import pack_for_gemm
from gemm_runtime.plan import LaunchSpec
from gemm_runtime.quant import quantize
from gemm_runtime.timing import interleaved_medians_ms

GROUP = 128


def twins(gemm: Gemm) -> list[tuple[str, str]]:
    """(capped kernel, its uncapped twin) for every twin in the registry."""
    names = {k.name for k in gemm.kernels}
    out = []
    for k in gemm.kernels:
        if k.spec.ctas_per_sm:
            capped = k.name.removesuffix(f"_ctas{k.spec.ctas_per_sm}").replace("_uncapped_", "_", 1)
            if capped in names:
                out.append((capped, k.name))
    return out


def previous_plan(gemm: Gemm, key) -> LaunchSpec:
    """The cost model's first plan for ``key`` without this session's terms: no uncapped
    twins, no price for spills or for a narrow CTA's copies of A."""
    saved = cost_model._SPILLED_RATE, cost_model._NARROW_CTA_RATE
    cost_model._SPILLED_RATE = cost_model._NARROW_CTA_RATE = 1.0
    try:
        kernels = [k for k in gemm.feasible(key) if not k.spec.ctas_per_sm]
        return gemm.dispatcher._rank(kernels, key, None)[0][1]
    finally:
        cost_model._SPILLED_RATE, cost_model._NARROW_CTA_RATE = saved


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", nargs="*", type=int, default=[1, 16])
    ap.add_argument("--m", nargs="*", type=int, default=[1, 16])
    ap.add_argument("--splits", nargs="+", type=int, default=[1, 2, 4])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--models", nargs="+", default=["llama3-8b", "llama3-70b"])
    args = ap.parse_args()
    gemm = Gemm()
    pairs = twins(gemm)
    print(f"{len(pairs)} twins: " + ", ".join(t for _, t in pairs), flush=True)
    rows = ["| problem | tile | splits | CTAs | capped µs | uncapped µs | capped / uncapped | default |",
            "|---|---|---:|---:|---:|---:|---:|---|"]  # fmt: skip

    moved = ["| problem | before: plan | µs | now: plan | µs | before / now |", "|---|---|---:|---|---:|---:|"]

    def text(plan: LaunchSpec) -> str:
        spec = gemm.registry.get(plan.kernel).spec
        cap = " uncapped" if spec.ctas_per_sm else ""
        return f"{'x'.join(map(str, spec.cta))}{cap} split {plan.splits} s{plan.swizzle}"

    def before_after(name: str, key, call, default: LaunchSpec) -> None:
        before = previous_plan(gemm, key)
        if before == default:
            return
        times = [interleaved_medians_ms([lambda: call(before), lambda: call(default)]) for _ in range(args.rounds)]
        b, n = (min(t[i] for t in times) for i in range(2))
        moved.append(f"| {name} | {text(before)} | {b * 1e3:.1f} | {text(default)} | {n * 1e3:.1f} | {b / n:.3f} |")
        print(moved[-1], flush=True)

    def measure(name: str, key, call, default: LaunchSpec) -> None:
        before_after(name, key, call, default)
        for capped, twin in pairs:
            spec = gemm.registry.get(capped).spec
            if not any(k.name == capped for k in gemm.feasible(key)):
                continue
            tm, tn = tiles_of(spec, key)
            for splits in args.splits:
                plans = [LaunchSpec(capped, splits, 0), LaunchSpec(twin, splits, 0)]
                try:
                    for plan in plans:
                        call(plan)
                except GemmArgumentError:
                    continue  # a split the kernel or the problem refuses
                times = [interleaved_medians_ms([lambda p=p: call(p) for p in plans]) for _ in range(args.rounds)]
                c, u = (min(t[i] for t in times) for i in range(2))
                picked = {capped: "capped", twin: "uncapped"}.get(default.kernel, "other")
                if default.splits != splits and picked != "other":
                    picked += f" (split {default.splits})"
                tile = "x".join(map(str, spec.cta))
                rows.append(f"| {name} | {tile} | {splits} | {tm * tn * splits} | {c * 1e3:.1f} | {u * 1e3:.1f} | "
                            f"{c / u:.3f} | {picked} |")  # fmt: skip
                print(rows[-1], flush=True)

    gen = torch.Generator().manual_seed(0)
    for cfg_name, tokens, proj, routing, a, w, d in sorted_problems(args.tokens, gen, w4_group=GROUP):
        key = key_of(gemm, a, w, routing)
        measure(f"{cfg_name} {tokens} tok {proj}", key,
                lambda plan, a=a, w=w, o=routing.offsets, d=d: gemm.grouped_matmul(a, w, o, out=d, kernel=plan),
                gemm.select(key))  # fmt: skip
    # The dense calls' default plans, as the dispatcher makes them (the fast path keeps
    # no cache entry for a default choice).
    chosen: list = []
    plan_of = gemm.dispatcher.plan

    def spy(policy, key, sizes, measure_call):
        plan = plan_of(policy, key, sizes, measure_call)
        chosen.append((key, plan))
        return plan

    gemm.dispatcher.plan = spy
    models = yaml.safe_load((ROOT / "bench" / "shapes.yaml").read_text())["models"]
    layers = {f"{model.removeprefix('llama3-')} {layer}": nk for model in args.models for layer, nk in models[model].items()}
    for layer, (n, k) in layers.items():
        packed = pack_for_gemm(quantize(torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02, bits=4,
                                        group_size=GROUP))  # fmt: skip
        for m in args.m:
            a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            gemm.matmul(a, packed, out=d)
            key, default = chosen[-1]
            measure(f"{layer} M = {m}", key, lambda plan, a=a, p=packed, d=d: gemm.matmul(a, p, out=d, kernel=plan),
                    default)  # fmt: skip
    print("\n".join(rows))
    print()
    print("\n".join(moved))


if __name__ == "__main__":
    main()
