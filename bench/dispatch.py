"""How well dispatch chooses: on the linear layers of real LLMs, time the launch
chosen by the cost model alone, by the tuner (MEASURE policy), and the best of an
exhaustive search over every feasible (kernel, splits, swizzle).

    python -m bench.dispatch [--models llama3-8b llama3-70b] [--m 1 16 128 1024 4096] [--out docs/perf/dispatch.md]
    python -m bench.dispatch --bits 4 8 --m 1 16 128 --out docs/perf/dispatch_quant.md

With ``--bits``, the weights are quantized (groups of 128) and packed instead: the same
three choices for weight-only quantized problems. ``--dtype bf16``: bf16 activations and
weights (and bf16 scales for the packed ones) instead of fp16.

Beside the table it writes every timed plan of every problem (``--timings``, default
docs/perf/data/<the table's name>.json.gz): the problems' keys, the times, and what the
cost model ranked them with (each kernel's spec, occupancy and spills, the device model,
the workspace), so that ``python -m bench.experiments.dispatch_regret`` can re-rank them
with a changed cost model on a machine without a GPU.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import gzip
import json
import statistics
import time
from pathlib import Path

import torch

from bench.cli import check_distinct, check_models, check_out, positive_int, shape_models
from bench.quant import DTYPES
from gemm_runtime import DispatchPolicy, Gemm, Operation
from gemm_runtime.context import make_problem
from gemm_runtime.packed_weight import pack_for_gemm
from gemm_runtime.quant import BITS, quantize
from gemm_runtime.timing import median_ms
from gemm_runtime.types import MatrixLayout

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["llama3-8b", "llama3-70b"])
    ap.add_argument("--m", nargs="+", type=positive_int, default=[1, 16, 128, 1024, 4096])
    ap.add_argument("--oracle-reps", type=positive_int, default=5)
    ap.add_argument("--budget", type=float, default=420.0, help="stop starting new problems after this many seconds")
    ap.add_argument("--bits", nargs="+", type=int, choices=BITS, default=[],
                    help="quantize the weights to these widths (group 128) instead of fp16")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="fp16", help="activations and weights")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "perf" / "dispatch.md")
    ap.add_argument("--timings", type=Path, default=None,
                    help="every timed plan, gzipped JSON (default: docs/perf/data/<out's stem>.json.gz)")
    args = ap.parse_args(argv)
    if not args.budget > 0:  # NaN too: no problem would start
        ap.error(f"--budget: got {args.budget}; accepted: seconds > 0")
    check_models(ap, "--models", args.models)
    check_out(ap, "--out", args.out)
    timings = args.timings or ROOT / "docs" / "perf" / "data" / f"{args.out.stem}.json.gz"
    check_out(ap, "--timings", timings)
    check_distinct(ap, ("--out", args.out), ("--timings", timings))
    shapes = shape_models()
    gemm = Gemm()
    rows = []
    t_start = time.perf_counter()
    for model in args.models:
        for layer, (n, k) in shapes[model].items():
            w = torch.randn(n, k, device="cuda", dtype=DTYPES[args.dtype]) * 0.02
            # The weight operands to compare on: dense (as nn.Linear's weight.t()) or packed.
            weights = [(args.dtype, w.t())] if not args.bits else [
                (f"w{bits}", pack_for_gemm(quantize(w, bits=bits, group_size=128))) for bits in args.bits
            ]
            for label, b in weights:
                for m in args.m:
                    if time.perf_counter() - t_start > args.budget:
                        break
                    a = torch.randn(m, k, device="cuda", dtype=DTYPES[args.dtype])
                    out = torch.empty(m, n, device="cuda", dtype=DTYPES[args.dtype])
                    rows.append(_measure(gemm, a, b, out, args.oracle_reps) | dict(model=model, layer=layer, weights=label))
                    r = rows[-1]
                    print(f"{model:11s} {layer:8s} {label:4s} M={m:5d}  oracle {r['oracle']*1e3:9.1f} us  "
                          f"tuned {r['tuned']*1e3:9.1f} us ({r['tuned'] / r['oracle']:.2f}x, {r['tune_s']:.2f} s)  "
                          f"model {r['cost_model']*1e3:9.1f} us ({r['cost_model'] / r['oracle']:.2f}x)  "
                          f"[{r['candidates']} candidates]", flush=True)
    write(rows, args.out, args.dtype)
    write_timings(timings_document(gemm, rows, args.dtype, torch.cuda.get_device_name()), timings)


def _measure(gemm: Gemm, a: torch.Tensor, b, out: torch.Tensor, reps: int) -> dict:
    """Oracle, tuned and cost-model times of ``a @ b`` (``b`` a K x N view or a packed weight)."""
    m, n = out.shape
    t0 = time.perf_counter()
    gemm.matmul(a, b, out=out, operation=Operation(dispatch=DispatchPolicy.MEASURE))
    torch.cuda.synchronize()
    tune_s = time.perf_counter() - t0
    if isinstance(b, torch.Tensor):
        key = make_problem(
            Operation(), a, MatrixLayout.of(a), b, MatrixLayout.of(b), 0.0, None, None, out,
            MatrixLayout.of(out), gemm.device, gemm.registry.device.arch,
        ).key
    else:
        # A packed weight's key is built inside matmul: the entry the tuning just made.
        key = next(key for key, _ in gemm.cache.entries()
                   if (key.m, key.n, key.k, key.b_type.bits) == (m, n, a.shape[1], b.bits))
    everything = [plan for _, plan in gemm.ranked(key)]
    t_oracle = {plan: median_ms(lambda p=plan: gemm.matmul(a, b, out=out, kernel=p), reps=reps) for plan in everything}
    best = min(t_oracle, key=t_oracle.get)
    model_plan = gemm.predicted(key)
    tuned = gemm.cache.get(key)
    # Time the two choices afresh, like the oracle's entries, so all three compare.
    t_tuned = median_ms(lambda: gemm.matmul(a, b, out=out, kernel=tuned), reps=reps)
    t_best = median_ms(lambda: gemm.matmul(a, b, out=out, kernel=best), reps=reps)
    return dict(m=m, n=n, k=a.shape[1], oracle=min(t_best, t_oracle[best]), tuned=t_tuned,
                cost_model=t_oracle[model_plan], tune_s=tune_s, candidates=len(everything),
                tuned_plan=tuned, best_plan=best, model_plan=model_plan, key=key, times=t_oracle)


TIMINGS_FORMAT = "gemm-runtime dispatch timings"
TIMINGS_VERSION = 1


def timings_document(gemm: Gemm, rows: list[dict], dtype: str, device: str) -> dict:
    """Every timed plan of ``rows`` (_measure's, with the model, layer and weights) and
    what the cost model ranked them with: the kernels' specs, the occupancy and spills
    the registry had, the device model and the default workspace."""
    names = sorted({plan.kernel for r in rows for plan in r["times"]})
    kernels = {name: gemm.registry.get(name) for name in names}
    return {
        "format": TIMINGS_FORMAT,
        "version": TIMINGS_VERSION,
        "device": device,
        "date": datetime.date.today().isoformat(),
        "dtype": dtype,
        "device_model": dataclasses.asdict(gemm.device_model),
        "workspace": list(gemm.dispatcher.default_workspace),
        "kernels": {name: {"spec": k.spec.to_json(), "ctas_per_sm": k.ctas_per_sm, "spills": k.spills}
                    for name, k in kernels.items()},
        "problems": [
            {"model": r["model"], "layer": r["layer"], "weights": r["weights"], "key": r["key"].to_json(),
             "tuned": r["tuned_plan"].to_json(), "model_pick": r["model_plan"].to_json(),
             "times_ms": [[plan.to_json(), ms] for plan, ms in r["times"].items()]}
            for r in rows
        ],
    }  # fmt: skip


def write_timings(doc: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8") as f:
        json.dump(doc, f, separators=(",", ":"))
    print(f"wrote {path}")


def read_timings(path: Path) -> dict:
    """A document write_timings wrote, checked for its format and version."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        doc = json.load(f)
    if doc.get("format") != TIMINGS_FORMAT or doc.get("version") != TIMINGS_VERSION:
        raise ValueError(f"{path}: not a bench.dispatch timings file (format {doc.get('format')!r}, version "
                         f"{doc.get('version')!r}; expected {TIMINGS_FORMAT!r}, {TIMINGS_VERSION})")  # fmt: skip
    return doc


def write(rows: list[dict], path: Path, dtype: str = "fp16") -> None:
    tuned = [r["tuned"] / r["oracle"] for r in rows]
    model = [r["cost_model"] / r["oracle"] for r in rows]
    lines = [
        "# Dispatch quality",
        "",
        f"Measured {datetime.date.today().isoformat()} on {torch.cuda.get_device_name()} by `python -m bench.dispatch`: "
        f"{dtype} activations; B {dtype} as N x K, or packed 4/8-bit weights (`weights`). `oracle`: the fastest of every feasible (kernel, splits, swizzle), each timed "
        "(CUDA events, L2 flushed, median). `tuned`: the MEASURE policy's choice. `model`: the cost model's "
        "choice alone. Ratios are time / oracle time (1.00 is optimal).",
        "",
    ]
    if rows:
        lines += [
            f"* tuned / oracle: median {statistics.median(tuned):.3f}, worst {max(tuned):.3f}",
            f"* cost model / oracle: median {statistics.median(model):.3f}, worst {max(model):.3f}",
            f"* tuning time per problem: median {statistics.median(r['tune_s'] for r in rows):.2f} s, "
            f"max {max(r['tune_s'] for r in rows):.2f} s",
            "",
        ]
    lines += [
        "| model | layer | weights | M | N | K | candidates | oracle µs | tuned µs | tuned/oracle | model µs | model/oracle | tune s | oracle plan | tuned plan | model plan |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['layer']} | {r['weights']} | {r['m']} | {r['n']} | {r['k']} | {r['candidates']} | "
            f"{r['oracle']*1e3:.1f} | {r['tuned']*1e3:.1f} | {r['tuned']/r['oracle']:.2f} | "
            f"{r['cost_model']*1e3:.1f} | {r['cost_model']/r['oracle']:.2f} | {r['tune_s']:.2f} | "
            f"{_short(r['best_plan'])} | {_short(r['tuned_plan'])} | {_short(r['model_plan'])} |"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    print(f"wrote {path}")


def _short(plan) -> str:
    parts = plan.kernel.split("_")
    tile = "_".join(x for x in parts if "x" in x or (x[:1] in "sc" and x[1:].isdigit()))
    loop = next((x for x in parts[2:] if x in ("sm70", "sm80", "sm90")), "?")  # the mainloop token
    return f"{'unpack + ' if plan.unpack else ''}{loop} {tile} k{plan.splits} z{plan.swizzle}"


if __name__ == "__main__":
    main()
