"""Dense fp16/bf16 GEMM: this project's kernels against cuBLAS (torch.matmul) on the
linear layers of real LLMs, on one GPU in one run.

    python -m bench.dense [--models llama3-8b llama3-70b] [--m 1 16 128 1024 4096] [--tuned] [--out docs/perf/dense.md]

Columns: time of the launch default dispatch picks (the cost model), time of the best kernel in the
registry for that problem (exhaustive), cuBLAS time, and the ratios (cuBLAS / ours:
above 1 means we are faster). With ``--tuned``, also the launch measured dispatch picks
(DispatchPolicy.MEASURE: the tuner times the model's best candidates once per problem)."""

from __future__ import annotations

import argparse
import datetime
import statistics
from pathlib import Path

import torch

from bench.cli import check_models, check_out, positive_int, shape_models
from bench.timing import host_us_per_call, interleaved_medians_ms, median_ms
from gemm_runtime import DispatchPolicy, Gemm
from gemm_runtime.context import make_problem
from gemm_runtime.types import MatrixLayout, Operation

ROOT = Path(__file__).resolve().parent.parent


def _short(name: str) -> str:
    """The tile, warps and stages part of a kernel name."""
    parts = name.split("_")
    return "_".join(p for p in parts if "x" in p or (p[:1] in "sc" and p[1:].isdigit()))


def _problem_key(gemm: Gemm, a, b, out):
    return make_problem(
        Operation(), a, MatrixLayout.of(a), b, MatrixLayout.of(b), 0.0, None, None, out, MatrixLayout.of(out),
        gemm.device, gemm.registry.device.arch,
    ).key


def run(models: list[str], ms: list[int], dtypes: list[torch.dtype], oracle: bool, tuned: bool = False) -> list[dict]:
    shapes = shape_models()
    gemm = Gemm()
    rows = []
    for dtype in dtypes:
        for model in models:
            for layer, (n, k) in shapes[model].items():
                w = torch.randn(n, k, device="cuda", dtype=dtype) * 0.02
                for m in ms:
                    a = torch.randn(m, k, device="cuda", dtype=dtype)
                    out = torch.empty(m, n, device="cuda", dtype=dtype)
                    b = w.t()
                    key = _problem_key(gemm, a, b, out)
                    chosen = gemm.select(key)
                    # Interleaved: the clock drifts under the power cap (timing.interleaved_medians_ms).
                    t_ours, t_cublas = interleaved_medians_ms([lambda: gemm.matmul(a, b, out=out),
                                                               lambda: torch.matmul(a, b, out=out)])
                    t_tuned = t_cublas_tuned = tuned_pick = None
                    if tuned:
                        # MEASURE tunes on every call: tune once, then default dispatch finds the entry.
                        gemm.matmul(a, b, out=out, operation=Operation(dispatch=DispatchPolicy.MEASURE))
                        tuned_pick = gemm.select(key)
                        # NOTE: cuBLAS again beside it: tuning runs the GPU hot, and the H200's
                        # clock under its power cap moves by several percent after such a burst.
                        t_tuned, t_cublas_tuned = interleaved_medians_ms([lambda: gemm.matmul(a, b, out=out),
                                                                          lambda: torch.matmul(a, b, out=out)])
                    best_name, t_best = chosen.kernel, t_ours
                    if oracle:
                        for kern in gemm.feasible(key):
                            t = median_ms(lambda: gemm.matmul(a, b, out=out, kernel=kern.name), reps=10)
                            if t < t_best:
                                best_name, t_best = kern.name, t
                    flop = 2.0 * m * n * k
                    rows.append(
                        dict(
                            dtype=str(dtype).replace("torch.", ""),
                            model=model,
                            layer=layer,
                            m=m,
                            n=n,
                            k=k,
                            ours_ms=t_ours,
                            best_ms=t_best,
                            cublas_ms=t_cublas,
                            tuned_ms=t_tuned,
                            cublas_tuned_ms=t_cublas_tuned,
                            tuned=f"{_short(tuned_pick.kernel)} k{tuned_pick.splits}" if tuned_pick else None,
                            ours_tflops=flop / t_ours / 1e9,
                            cublas_tflops=flop / t_cublas / 1e9,
                            chosen=chosen.kernel,
                            best=best_name,
                        )
                    )
                    print(
                        f"{rows[-1]['dtype']:8s} {model:11s} {layer:8s} M={m:5d} N={n:6d} K={k:6d}  "
                        f"ours {t_ours*1e3:9.1f} us  best {t_best*1e3:9.1f} us  cuBLAS {t_cublas*1e3:9.1f} us  "
                        f"cuBLAS/ours {t_cublas/t_ours:5.2f}"
                        + (f"  cuBLAS/tuned {t_cublas_tuned/t_tuned:5.2f}" if t_tuned else "")
                        + f"  [{_short(chosen.kernel)} k{chosen.splits} | best {_short(best_name)}]",
                        flush=True,
                    )
    return rows


def host_overhead() -> dict:
    """Host time per call on a tiny problem (the GPU work is negligible)."""
    gemm = Gemm()
    a = torch.randn(1, 64, device="cuda", dtype=torch.float16)
    w = torch.randn(64, 64, device="cuda", dtype=torch.float16)
    out = torch.empty(1, 64, device="cuda", dtype=torch.float16)
    return {
        "ours_us": host_us_per_call(lambda: gemm.matmul(a, w.t(), out=out)),
        "torch_us": host_us_per_call(lambda: torch.matmul(a, w.t(), out=out)),
    }


def markdown(rows: list[dict], device: str, host: dict | None = None, oracle: bool = True) -> str:
    best = ("`best` is the fastest registry kernel for the problem (exhaustive)" if oracle
            else "`best` is `ours` (no exhaustive search in this run)")
    lines = [
        "# Performance",
        "",
        f"Measured {datetime.date.today().isoformat()} on {device} by `python -m bench.dense` "
        "(CUDA events, L2 flushed before each repetition, ours and cuBLAS timed in alternating order, median). "
        "Times in microseconds; "
        f"`cuBLAS/ours` above 1 means this project is faster. {best}, "
        "`ours` the launch default dispatch picks (cost model, no tuning).",
        "",
        "| dtype | model | layer | M | N | K | ours µs | best µs | cuBLAS µs | ours TFLOP/s | cuBLAS TFLOP/s "
        "| cuBLAS/ours | cuBLAS/best | chosen | best |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['dtype']} | {r['model']} | {r['layer']} | {r['m']} | {r['n']} | {r['k']} | "
            f"{r['ours_ms']*1e3:.1f} | {r['best_ms']*1e3:.1f} | {r['cublas_ms']*1e3:.1f} | "
            f"{r['ours_tflops']:.0f} | {r['cublas_tflops']:.0f} | {r['cublas_ms']/r['ours_ms']:.2f} | "
            f"{r['cublas_ms']/r['best_ms']:.2f} | {_short(r['chosen'])} | {_short(r['best'])} |"
        )
    lines += [""] + summary(rows)
    tuned = [r for r in rows if r.get("tuned_ms")]
    if tuned:
        lines += ["", "Tuned dispatch (DispatchPolicy.MEASURE), the same problems:", "",
                  "| dtype | model | layer | M | tuned µs | cuBLAS µs (timed beside it) | cuBLAS/tuned | tuned pick (splits) |",
                  "|---|---|---|---:|---:|---:|---:|---|"]
        lines += [f"| {r['dtype']} | {r['model']} | {r['layer']} | {r['m']} | {r['tuned_ms']*1e3:.1f} | "
                  f"{r['cublas_tuned_ms']*1e3:.1f} | {r['cublas_tuned_ms']/r['tuned_ms']:.2f} | {r.get('tuned') or ''} |"
                  for r in tuned]
        lines += [""] + summary(tuned, "tuned_ms", "tuned", "cublas_tuned_ms")
    if host:
        lines += ["", f"Host time per call (validation, cached dispatch, launch; tiny problem): "
                  f"Gemm.matmul {host['ours_us']:.1f} µs, torch.matmul {host['torch_us']:.1f} µs."]
    return "\n".join(lines) + "\n"


def summary(rows: list[dict], time_key: str = "ours_ms", label: str = "ours", peer_key: str = "cublas_ms") -> list[str]:
    """Median, min and max of cuBLAS / ``label`` per M band (M <= 64, 128-512, >= 1024)."""
    lines = []
    bands = (("M <= 64", lambda m: m <= 64), ("M 128-512", lambda m: 128 <= m <= 512), ("M >= 1024", lambda m: m >= 1024))
    for name, inside in bands:
        ratios = [r[peer_key] / r[time_key] for r in rows if inside(r["m"])]
        if ratios:
            lines.append(f"- {name}: median cuBLAS/{label} {statistics.median(ratios):.3f} over {len(ratios)} problems "
                         f"(min {min(ratios):.2f}, max {max(ratios):.2f})")
    return lines


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["llama3-8b", "llama3-70b"])
    ap.add_argument("--m", nargs="+", type=positive_int, default=[1, 16, 128, 1024, 4096])
    ap.add_argument("--dtypes", nargs="+", choices=["float16", "bfloat16"], default=["float16", "bfloat16"])
    ap.add_argument("--no-oracle", action="store_true", help="skip timing every feasible kernel")
    ap.add_argument("--tuned", action="store_true", help="also time the launch measured dispatch picks")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "perf" / "dense.md")
    args = ap.parse_args(argv)
    check_models(ap, "--models", args.models)
    check_out(ap, "--out", args.out)
    torch.backends.cuda.matmul.allow_tf32 = False
    rows = run(args.models, args.m, [getattr(torch, d) for d in args.dtypes], not args.no_oracle, args.tuned)
    print("\n".join(summary(rows) + summary([r for r in rows if r["tuned_ms"]], "tuned_ms", "tuned", "cublas_tuned_ms")))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    host = host_overhead()
    print(f"host per call: Gemm.matmul {host['ours_us']:.1f} us, torch.matmul {host['torch_us']:.1f} us")
    args.out.write_text(markdown(rows, torch.cuda.get_device_name(), host, oracle=not args.no_oracle))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
