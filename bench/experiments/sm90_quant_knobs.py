"""Experiment: the SM90 quantized kernel's knobs (gemm/sm90/quant_knobs.cuh) against their
defaults, on the plans the cost model picks among the SM90 quantized kernels of the
default set, timed interleaved (gemm_runtime.timing.interleaved_medians_ms: every
variant once per round, so all see the same clock), L2 flushed, medians, µs. Each
variant is compiled with NVRTC from the tree's header with its defines
(tests/sm90_quant_kernel.py) and launched directly, so no build of the registry is
needed and no variant is the first kernel of the process when timed (every one is
launched and checked against the defaults' output first, but for variants leaving a part
out with GEMM_SM90Q_LEAVE_OUT, whose sums are wrong by design):

    python -m bench.experiments.sm90_quant_knobs GEMM_SM90Q_INTERLEAVE=1 GEMM_SM90Q_INTERLEAVE=2 \\
        [--layers llama3-8b llama3-70b] [--m 64 128 256] [--bits 4] [--dtype f16] [--rounds 2]

A variant is one or more settings joined by commas: a define of the header, or
`stages=N`, `blocks=N`, `k_split=N` or `cta_k=128` (the kernel's tile, tests/sm90_quant_kernel.py's
QuantKernel fields; `cta_k=128` on a plan taking K tiles in turn: a pair of them a stage) or `splits=N` (the launch's) or `header=PATH` (another kernel_sm90_quant.cuh in
place of the tree's, e.g. an earlier commit's: `git show REV:templates/include/gemm/sm90/
kernel_sm90_quant.cuh > old.cuh`; its includes come from the tree, so a file from before
the kernel's parts moved into quant_*.cuh replaces the whole kernel, a later one the
kernel's own layer only), e.g. `blocks=2,splits=2`. Prints a row
per problem (the plan, the defaults' time, each variant's, and defaults / variant: above
1, the variant is faster; "-" where the variant's tile is not a valid one), then the
medians of those ratios per M over the problems each variant ran.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from types import SimpleNamespace

import torch
import yaml

from codegen.config import default_config_paths, load_configs
from codegen.vocabulary import BOrder, DataType
from gemm_runtime.context import infeasible_reason, make_key
from gemm_runtime.cost_model import DeviceModel, rank
from gemm_runtime.packed_weight import pack_for_gemm
from gemm_runtime.quant import quantize
from gemm_runtime.timing import interleaved_medians_ms
from tests.sm90_quant_kernel import QuantKernel, launch

FIELDS = ("stages", "blocks", "k_split", "cta_k")  # QuantKernel fields a variant may set

ROOT = Path(__file__).resolve().parents[2]
# The device model the plans are picked on (an H100 / H200: 132 SMs at 1.98 GHz).
DEVICE = DeviceModel.of(90, 132, 1980000, 2619000, 5120)


def sm90_quant_kernels(bits: int, dtype: str) -> list[SimpleNamespace]:
    """The default set's register-A SM90 quantized kernels of these weights and
    activations with a 16-bit D of the activations' type, as the cost model takes them."""
    out = []
    for config in load_configs(default_config_paths()):
        s = config.spec
        if (s.mainloop.value == "sm90_quant" and not s.grouped and s.b_type.value == f"u{bits}"
                and s.a_type.value == dtype and s.d_type.value == dtype):  # fmt: skip
            out.append(SimpleNamespace(spec=s, name=s.name, ctas_per_sm=s.min_ctas_per_sm))
    return out


def plan_for(kernels: list[SimpleNamespace], m: int, n: int, k: int, bits: int, dtype: str
             ) -> tuple[QuantKernel, int]:
    """The cost model's pick: its kernel, launched directly, and its split count."""
    key = make_key(DataType(dtype), BOrder.NK, DataType(dtype), m, n, k, arch=90)
    key = key._replace(b_type=DataType(f"u{bits}"), quant=f"u{bits}g128")
    feasible = [x for x in kernels if infeasible_reason(x.spec, key) is None]
    plan = rank(feasible, key, DEVICE, max_splits=8, barriers_bytes=1 << 20, partials_bytes=32 << 20)[0][1]
    spec = next(x.spec for x in feasible if x.name == plan.kernel)
    tokens, rows, cta_k = spec.cta
    kernel = QuantKernel(dtype, bits, dtype, tokens, rows, spec.stages, blocks=spec.mainloop.blocks(spec),
                         k_split=spec.mainloop.k_split(spec), cta_k=cta_k)  # fmt: skip
    assert kernel.name == spec.name, (kernel.name, spec.name)
    return kernel, plan.splits


def variant_of(settings: tuple[str, ...], base: QuantKernel, splits: int) -> tuple[QuantKernel | None, int]:
    """A variant's kernel (None where its tile breaks the family's rules) and split count:
    ``base`` and ``splits`` with the variant's settings applied."""
    fields = {k: int(v) for k, v in (s.split("=") for s in settings if "=" in s) if k in FIELDS}
    defines = tuple(s for s in settings if s.split("=")[0] not in (*FIELDS, "splits", "header"))
    splits = next((int(s.split("=")[1]) for s in settings if s.startswith("splits=")), splits)
    header = next((s.split("=", 1)[1] for s in settings if s.startswith("header=")), "")
    kernel = QuantKernel(base.dtype, base.bits, base.out, base.tokens, base.rows, fields.get("stages", base.stages),
                         defines=defines, blocks=fields.get("blocks", base.blocks), header=header,
                         k_split=fields.get("k_split", base.k_split),
                         cta_k=fields.get("cta_k", base.cta_k))  # fmt: skip
    spec = kernel.spec
    return (None if spec.mainloop.tile_error(spec.cta, spec.warps, spec.stages) else kernel), splits


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("variants", nargs="+", help="defines, e.g. GEMM_SM90Q_INTERLEAVE=1 (comma-joined for several)")
    ap.add_argument("--layers", nargs="+", default=["llama3-8b", "llama3-70b"], help="models of bench/shapes.yaml")
    ap.add_argument("--m", nargs="+", type=int, default=[64, 128, 256])
    ap.add_argument("--bits", type=int, choices=[4, 8], default=4)
    ap.add_argument("--dtype", choices=["f16", "bf16"], default="f16")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved measurements per problem (the least is kept)")
    args = ap.parse_args()
    variants = [tuple(v.split(",")) for v in args.variants]
    models = yaml.safe_load((ROOT / "bench" / "shapes.yaml").read_text())["models"]
    kernels = sm90_quant_kernels(args.bits, args.dtype)
    torch_dtype = torch.float16 if args.dtype == "f16" else torch.bfloat16
    names = "".join(f" {','.join(v)} µs |" for v in variants)
    print(f"| problem | plan | defaults µs |{names} defaults / each | max difference |")
    print("|---|---|---:|" + "---:|" * len(variants) + "---|---:|")
    ratios: dict[int, list[list[float | None]]] = {m: [] for m in args.m}
    for m in args.m:
        for model in args.layers:
            for layer, (n, k) in models[model].items():
                base, splits = plan_for(kernels, m, n, k, args.bits, args.dtype)
                runs = [(base, splits)] + [variant_of(v, base, splits) for v in variants]
                valid = [(kern, s) for kern, s in runs if kern is not None]
                x = torch.randn(m, k, device="cuda", dtype=torch_dtype)
                w = torch.randn(n, k, device="cuda", dtype=torch_dtype) * 0.02
                packed = pack_for_gemm(quantize(w, bits=args.bits, group_size=128))
                outs = [torch.full((m, n), float("nan"), device="cuda", dtype=torch_dtype) for _ in valid]
                for (kern, s), out in zip(valid, outs):
                    launch(kern, x, packed, out, splits=s)
                # A variant leaving a part out (GEMM_SM90Q_LEAVE_OUT) computes no product:
                # its output is not compared.
                checked = [not any(s.startswith("GEMM_SM90Q_LEAVE_OUT") for s in v)
                           for v, (kern, _) in zip(variants, runs[1:]) if kern is not None]  # fmt: skip
                diffs = [(o.float() - outs[0].float()).abs().max().item() for o, c in zip(outs[1:], checked) if c]
                if not all(d == d for d in diffs) or outs[0].isnan().any():
                    raise SystemExit(f"NaN in an output of {m}x{n}x{k}: max differences {diffs}")
                fns = [lambda kern=kern, s=s, out=out: launch(kern, x, packed, out, splits=s, sync=False)
                       for (kern, s), out in zip(valid, outs)]  # fmt: skip
                times = iter(min(t) * 1e3 for t in zip(*[interleaved_medians_ms(fns) for _ in range(args.rounds)]))
                us = [next(times) if kern is not None else None for kern, _ in runs]
                ratio = [us[0] / u if u else None for u in us[1:]]
                ratios[m].append(ratio)
                plan = f"{tokens}x{rows}s{stages}" + (f"b{blocks}" if blocks > 1 else "") + f" /{splits}"
                print(f"| {model} {layer} M={m} | {plan} | {us[0]:.1f} | "
                      + " | ".join(f"{u:.1f}" if u else "-" for u in us[1:]) + " | "
                      + " ".join(f"{r:.3f}" if r else "-" for r in ratio)
                      + f" | {max(diffs, default=0.0):.3g} |", flush=True)  # fmt: skip
    for m in args.m:
        if ratios[m]:
            ran = [[r[i] for r in ratios[m] if r[i]] for i in range(len(variants))]
            print(f"M={m}: median defaults / variant " + " ".join(
                f"{statistics.median(v):.3f} ({len(v)})" if v else "-" for v in ran))  # fmt: skip


if __name__ == "__main__":
    main()
