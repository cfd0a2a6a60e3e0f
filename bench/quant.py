"""W4A16 and W8A16 (group 128, tuned dispatch) against fp16 torch.matmul on the unquantized
weight, on the llama3-8b and llama3-70b linear layers: every problem, the medians over the
layers per M, the effective weight bandwidth against the GPU's measured copy bandwidth,
and the error statistics of the quantized kernels. ``--dtype bf16``: bf16 activations,
weights and peer instead.

    python -m bench.quant [--models llama3-8b llama3-70b] [--m 1 16 32 64 128 256 1024 4096]
                          [--bits 4 8] [--dtype fp16] [--out docs/perf/quant.md] [--plans FILE]

Each problem is tuned in the run (the tuner times its candidates; H100: 0.2 s a problem
in the median, at most 6 s at M = 4096, 44 s for 80 problems; each problem's time is
printed). ``--plans FILE`` keeps the tuned plans in a dispatch-cache file
(Gemm.export_cache): a run imports it first, tunes only the problems it has no plan for,
and exports it again after each one, so later runs (or a run cut short) time the same
plans. Keep one file per GPU model: plans are tuned for the GPU they ran on. ``--retune M
[M ...]`` leaves the file's plans for those token counts out of the import, so they are
tuned again (after kernels for them joined the set) and replaced in the file.
"""

from __future__ import annotations

import argparse
import datetime
import io
import json
import statistics
import time
from collections.abc import Collection, Iterator
from pathlib import Path

import torch

from bench.cli import check_distinct, check_models, check_out, positive_int, shape_models
from codegen.spec import KernelSpec
from gemm_runtime import DispatchPolicy, Gemm, Operation
from gemm_runtime.context import ProblemKey
from gemm_runtime.packed_weight import PackedWeight, pack_for_gemm
from gemm_runtime.plan import LaunchSpec
from gemm_runtime.quant import BITS, quantize
from gemm_runtime.timing import interleaved_medians_ms, median_ms
from gemm_runtime.types import data_type_of

ROOT = Path(__file__).resolve().parent.parent
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def copy_bandwidth() -> float:
    """Bytes read + written per second by a 2 GiB device-to-device copy."""
    src = torch.empty(1 << 30, dtype=torch.float16, device="cuda").normal_()
    dst = torch.empty_like(src)
    t = median_ms(lambda: dst.copy_(src), reps=10, flush=False)
    return 2 * src.numel() * 2 / (t * 1e-3)


def launch_floor_us() -> float:
    """A timed launch of a one-element kernel, timed as every problem here is (L2 flushed,
    events): the least any kernel's time can be under this measure."""
    one = torch.zeros(1, device="cuda")
    return interleaved_medians_ms([lambda: one.add_(1.0)])[0] * 1e3


def ceiling_speedup(peer_us: float, flops: float, rate: float, floor_us: float) -> float:
    """The most a kernel could gain on the peer's ``peer_us`` if it ran the problem's
    ``flops`` at ``rate`` FLOP/s (the best rate the peer reached in the same run) after a
    timed launch's ``floor_us``, with its loads, dequantization, pipeline fill and epilogue
    all free: the bound the tensor cores put on a quantized kernel's speedup once it is
    compute-bound."""
    if peer_us <= 0 or flops <= 0 or rate <= 0 or floor_us < 0:
        raise ValueError(f"peer_us {peer_us}, flops {flops} and rate {rate} must be > 0, floor_us {floor_us} >= 0")
    return peer_us / (floor_us + flops / rate * 1e6)


def w4_layers(models: list[str]) -> Iterator[tuple[str, int, int, torch.Tensor, PackedWeight]]:
    """Per layer of ``models`` (bench/shapes.yaml): its label, N, K, a random fp16 weight
    [N, K] on the GPU and that weight in 4 bits, groups of 128, packed."""
    shapes = shape_models()
    for model in models:
        for layer, (n, k) in shapes[model].items():
            w = torch.randn(n, k, device="cuda", dtype=torch.float16) * 0.02
            yield f"{model} {layer}", n, k, w, pack_for_gemm(quantize(w, bits=4, group_size=128))


def tuned_choice(gemm: Gemm, a: torch.Tensor, b: object, out: torch.Tensor,
                 policy: DispatchPolicy = DispatchPolicy.MEASURE) -> str:  # fmt: skip
    """Tune ``a @ b`` into ``out`` (``b`` a PackedWeight or a K x N tensor; MEASURE: now,
    APPEND: unless the dispatch cache has a plan for exactly this problem; the plan stays
    cached for the calls that follow) and describe the launch planned."""
    gemm.matmul(a, b, out=out, operation=Operation(dispatch=policy))
    n, k, bits = (b.n, b.k, b.bits) if isinstance(b, PackedWeight) else (b.shape[1], b.shape[0], 0)
    plan = plan_for(gemm.cache.entries(), data_type_of(a.dtype, "a").value, bits, a.shape[0], n, k)
    return "-" if plan is None else describe_launch(gemm.registry.get(plan.kernel).spec, plan)


def plan_for(entries: list[tuple[ProblemKey, LaunchSpec]], a_type: str, bits: int, m: int, n: int, k: int
             ) -> LaunchSpec | None:  # fmt: skip
    """The cached plan of the problem M x N x K with ``a_type`` activations and ``bits``-bit
    quantized weights (0: a dense one), or None. One benchmark run has one such problem."""
    for key, plan in entries:
        quantized = key.quant != "none"
        if ((key.m, key.n, key.k) == (m, n, k) and key.a_type.value == a_type and quantized == (bits > 0)
                and (not quantized or key.b_type.bits == bits)):  # fmt: skip
            return plan
    return None


def describe_launch(spec: KernelSpec, plan: LaunchSpec) -> str:
    """The tile, mainloop, split count and swizzle of ``plan`` on kernel ``spec``."""
    cta, warps = "x".join(map(str, spec.cta)), "x".join(map(str, spec.warps))
    unpack = "unpack + " if plan.unpack else ""  # a whole-weight plan (gemm_runtime/whole_weight.py)
    return f"{unpack}{spec.mainloop.value} {cta} w{warps} s{spec.stages} ({plan.splits}, z{plan.swizzle})"


def error_stats(out: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    """(norm-wise relative error, max abs error over max |ref|) of ``out`` against ``ref``."""
    diff = (out.float() - ref).abs()
    return (diff.norm() / ref.norm()).item(), (diff.max() / ref.abs().max()).item()


def plans_to_import(path: Path, retune: Collection[int]) -> Path | io.StringIO:
    """The plans file as Gemm.import_cache takes it, without the records of the token
    counts in ``retune`` (a dispatch-cache export: docs/DISPATCH.md)."""
    if not retune:
        return path
    try:
        doc = json.loads(path.read_text())
    except ValueError:
        return path  # not JSON: the import says why, by name
    if not isinstance(doc, dict) or not isinstance(doc.get("records"), list):
        return path
    skip = set(retune)
    doc["records"] = [r for r in doc["records"] if not (isinstance(r, dict) and isinstance(r.get("key"), dict)
                                                        and r["key"].get("m") in skip)]
    text = io.StringIO(json.dumps(doc))
    text.name = str(path)
    return text


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["llama3-8b", "llama3-70b"])
    ap.add_argument("--m", nargs="+", type=positive_int, default=[1, 16, 32, 64, 128, 256, 1024, 4096])
    ap.add_argument("--bits", nargs="+", type=int, choices=BITS, default=[4, 8])
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="fp16", help="activations, weight and peer")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "perf" / "quant.md")
    ap.add_argument("--plans", type=Path, help="the tuned plans' file: imported first, exported after each problem")
    ap.add_argument("--retune", nargs="+", type=positive_int, default=[], metavar="M",
                    help="token counts whose plans in --plans are tuned again rather than imported")
    args = ap.parse_args(argv)
    if args.retune and args.plans is None:
        ap.error("--retune: names token counts of a --plans file; give --plans too")
    # NOTE: a token count not in --m was dropped from the import and never tuned again, so
    # the first export rewrote --plans without its plans.
    lost = [m for m in dict.fromkeys(args.retune) if m not in args.m]
    if lost:
        ap.error(f"--retune: got {', '.join(map(str, lost))}, not among --m ({' '.join(map(str, args.m))}); "
                 "accepted: token counts of --m (the plans of another would be dropped from --plans, not tuned)")
    check_models(ap, "--models", args.models)
    check_out(ap, "--out", args.out)
    check_out(ap, "--plans", args.plans)  # exported after each problem
    check_distinct(ap, ("--out", args.out), ("--plans", args.plans))
    label, dtype = args.dtype, DTYPES[args.dtype]
    models = shape_models()
    shapes = {f"{model} {layer}": nk for model in args.models for layer, nk in models[model].items()}
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 references
    gemm = Gemm()
    if args.plans is not None and args.plans.exists():
        report = gemm.import_cache(plans_to_import(args.plans, args.retune))
        print(f"plans from {args.plans} (without M = {args.retune}): {report}" if args.retune else
              f"plans from {args.plans}: {report}")
    bw = copy_bandwidth()
    floor_us = launch_floor_us()
    print(f"copy bandwidth: {bw / 1e12:.2f} TB/s; a timed launch's floor: {floor_us:.1f} us")
    lines = [
        f"# Weight-only quantized GEMM against {label}",
        "",
        f"Measured {datetime.date.today().isoformat()} on {torch.cuda.get_device_name()} by `python -m bench.quant`: "
        f"{', '.join(args.models)} layers, weights in groups of 128 (tuned dispatch) against {label} `torch.matmul` "
        f"(cuBLAS) on the unquantized weight. Copy bandwidth (read + write) measured in the same run: "
        f"{bw / 1e12:.2f} TB/s. `weight BW` = packed weight bytes (with scales and zeros) / time; `of copy` = that "
        "over the copy bandwidth. Every time is the median of L2-flushed runs.",
        "",
    ]
    table = [
        f"| bits | layer | M | N | K | kernel (splits) | ours µs | {label} cuBLAS µs | speedup | weight BW TB/s | of copy |",
        "|---:|---|---:|---:|---:|---|---:|---:|---:|---:|---:|",
    ]
    errors = [
        "",
        "## Error statistics",
        "",
        f"{label} activations, M = 16, against two fp32 references: the product with the weight dequantized and",
        f"rounded to {label} (`W16`, `QuantizedWeight.dequantize()`, what {label} cuBLAS multiplies), and with the exact",
        "weight (q - z) * s in fp32 (`exact`, `dequantize(torch.float32)`). Decode kernels with deferred scaling",
        "(dequant.cuh) never round the weight, so they sit closer to `exact` than to `W16`. `quantization`",
        "compares the fp32 products with the exact dequantized and the original weight: what 4 or 8 bits cost the",
        "layer, independent of any kernel. `rel` = ‖out − ref‖ / ‖ref‖, `max` = max |out − ref| / max |ref|.",
        "",
        "| bits | layer | kernel rel vs W16 | kernel rel vs exact | kernel max vs exact | cuBLAS rel vs W16 | cuBLAS rel vs exact | quantization rel |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    runs: dict[tuple[int, int], list[tuple[float, float, float]]] = {}  # (ours µs, peer µs, FLOPs) per problem
    for bits in args.bits:
        for layer, (n, k) in shapes.items():
            w = torch.randn(n, k, device="cuda", dtype=dtype) * 0.02
            qw = quantize(w, bits=bits, group_size=128)
            packed = pack_for_gemm(qw)
            weight_bytes = packed.b.numel() + packed.v.numel() * 2
            for m in args.m:
                a = torch.randn(m, k, device="cuda", dtype=dtype)
                out = torch.empty(m, n, device="cuda", dtype=dtype)
                t0 = time.perf_counter()
                choice = tuned_choice(gemm, a, packed, out, DispatchPolicy.APPEND)
                print(f"W{bits} {layer} M={m}: planned in {time.perf_counter() - t0:.1f} s", flush=True)
                if args.plans is not None:
                    gemm.export_cache(args.plans)
                t_q, t_h = interleaved_medians_ms([lambda: gemm.matmul(a, packed, out=out),
                                                   lambda: torch.matmul(a, w.t(), out=out)])
                wbw = weight_bytes / (t_q * 1e-3)
                runs.setdefault((bits, m), []).append((t_q * 1e3, t_h * 1e3, 2.0 * m * n * k))
                table.append(f"| {bits} | {layer} | {m} | {n} | {k} | {choice} | {t_q*1e3:.1f} | "
                             f"{t_h*1e3:.1f} | {t_h/t_q:.2f} | {wbw/1e12:.2f} | {wbw/bw:.0%} |")
                print(table[-1], flush=True)
            a = torch.randn(16, k, device="cuda", dtype=dtype)
            w16 = qw.dequantize()
            ref16 = a.float() @ w16.float().t()
            ref_exact = a.float() @ qw.dequantize(torch.float32).t()
            out = gemm.matmul(a, packed)
            ours16, ours_exact = error_stats(out, ref16), error_stats(out, ref_exact)
            cublas_out = a @ w16.t()
            cublas16, cublas_exact = error_stats(cublas_out, ref16), error_stats(cublas_out, ref_exact)
            quant = error_stats(ref_exact, a.float() @ w.float().t())
            row = (ours16[0], *ours_exact, cublas16[0], cublas_exact[0], quant[0])
            errors.append(f"| {bits} | {layer} | " + " | ".join(f"{x:.2e}" for x in row) + " |")
            print(errors[-1], flush=True)
    summary = [
        f"Medians over the {len(shapes)} layers of {label} cuBLAS time / ours (min-max):",
        "",
        "| bits | " + " | ".join(f"M = {m}" for m in args.m) + " |",
        "|---:|" + "---:|" * len(args.m),
    ]
    for bits in args.bits:
        cells = [[peer / ours for ours, peer, _ in runs[bits, m]] for m in args.m]
        summary.append(f"| W{bits} | " + " | ".join(
            f"**{statistics.median(c):.2f}** ({min(c):.2f}-{max(c):.2f})" for c in cells) + " |")  # fmt: skip
    rate = max(flops / (peer * 1e-6) for problems in runs.values() for _, peer, flops in problems)
    summary += [
        "",
        f"The tensor cores' ceiling on those medians: {label} cuBLAS time / (a timed launch's floor, "
        f"{floor_us:.1f} µs, + the problem's FLOPs at the best rate {label} cuBLAS reached in this run, "
        f"{rate / 1e12:.0f} TFLOP/s), the median over the layers: what a kernel with free loads, "
        "dequantization, fill and epilogue could reach (bench.quant.ceiling_speedup). It bounds the "
        "compute-bound problems only: where M is small the weight's bytes bind first.",
        "",
        "| bits | " + " | ".join(f"M = {m}" for m in args.m) + " |",
        "|---:|" + "---:|" * len(args.m),
    ]
    for bits in args.bits:
        summary.append(f"| W{bits} ceiling | " + " | ".join(
            f"{statistics.median(ceiling_speedup(peer, flops, rate, floor_us) for _, peer, flops in runs[bits, m]):.2f}"
            for m in args.m) + " |")  # fmt: skip
    print("\n".join(summary), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines + summary + [""] + table + errors) + "\n")


if __name__ == "__main__":
    main()
