"""Experiment: where one SM90 tile's time goes, from SM clock stamps. Builds one sm90
bf16 "nk" tile with GEMM_SM90_TRACE=1 (and, for comparison, with its epilogue left out),
launches it once on a warm GPU, and reads back per CTA and work unit when the unit
started, when its first stage landed, when its last wgmma completed and when its
epilogue had issued its stores, and when the producer issued the unit's first and last
stage (layout: kernel_sm90.cuh, trace_stamp):

    python -m bench.experiments.sm90_trace [--tile 128x256] [--problem 4096 28672 4096]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import torch

import gemm_runtime.build as build_mod
import gemm_runtime.gemm as gemm_mod
from bench.experiments.sm90_variants import subset_manifest
from gemm_runtime import Gemm, fast_path
from gemm_runtime.plan import LaunchSpec

TRACE_UNITS, TRACE_POINTS = 64, 12  # kernel_sm90.cuh: kTraceUnits, kTracePoints
VARIANTS = {
    "traced": ("-DGEMM_SM90_TRACE=1",),
    "traced_no_epilogue": ("-DGEMM_SM90_TRACE=1", "-DGEMM_SM90_LEAVE_OUT=1"),
    # the staging without the TMA stores' issue (no waits on their reads)
    "traced_no_store_issue": ("-DGEMM_SM90_TRACE=1", "-DGEMM_SM90_LEAVE_OUT=3"),
    "traced_no_store_fence": ("-DGEMM_SM90_TRACE=1", "-DGEMM_SM90_STORE_FENCE=0"),
    # the store as it was before rounds of boxes (store_sm90.cuh)
    "traced_single_boxes": ("-DGEMM_SM90_TRACE=1", "-DGEMM_SM90_STORE_ROUNDS=0"),
}


def traced_launch(trace: torch.Tensor):
    """gemm_runtime.gemm.launch, handing unsplit launches the trace as their partials."""
    plain = gemm_mod.launch

    def launch(kern, problem, plan, alpha, beta, stream, semaphores=0, partials=0):
        if plan.splits == 1:
            partials = trace.data_ptr()
        return plain(kern, problem, plan, alpha, beta, stream, semaphores, partials)

    return launch


def summarize(name: str, stamps: torch.Tensor, elapsed_ms: float) -> None:
    """Medians over CTAs and units (first and last unit of each CTA left out) in SM clocks."""
    s = stamps.cpu().to(torch.float64)
    rows = {"first stage wait": [], "mainloop": [], "epilogue": [], "next unit after epilogue": [],
            "producer lead (unit's first issue before consumers start)": [], "wg1 - wg0 mainloop end": []}  # fmt: skip
    spans = []
    for cta in range(s.shape[0]):
        units = [u for u in range(TRACE_UNITS) if s[cta, u, 0] > 0]
        if len(units) < 3:
            continue
        spans.append(s[cta, units[-1], 3] - s[cta, units[0], 0])
        for u in units[1:-1]:
            t = s[cta, u]
            rows["first stage wait"].append(t[1] - t[0])
            rows["mainloop"].append(t[2] - t[0])
            rows["epilogue"].append(t[3] - t[2])
            rows["next unit after epilogue"].append(s[cta, u + 1, 0] - t[3])
            rows["producer lead (unit's first issue before consumers start)"].append(t[0] - t[8])
            rows["wg1 - wg0 mainloop end"].append(t[6] - t[2])
    clock = statistics.median(spans) / (elapsed_ms * 1e-3) if spans else float("nan")
    print(f"{name}: {len(spans)} CTAs traced, ~{clock / 1e9:.2f} GHz (median CTA span / launch time)")
    for label, values in rows.items():
        if values:
            med = statistics.median(values)
            print(f"  {label:58s} median {med:9.0f} clk = {med / clock * 1e6:7.2f} us   "
                  f"p10 {sorted(values)[len(values) // 10]:9.0f}  p90 {sorted(values)[len(values) * 9 // 10]:9.0f}")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tile", default="128x256", help="an sm90 tile, e.g. 128x256 or 128x256c2")
    ap.add_argument("--problem", nargs=3, type=int, default=[4096, 28672, 4096], metavar=("M", "N", "K"))
    ap.add_argument("--generated", type=Path, default=Path("generated"))
    ap.add_argument("--variants", nargs="+", default=["traced", "traced_no_epilogue"], choices=list(VARIANTS))
    args = ap.parse_args()
    m, n, k = args.problem
    work = Path(tempfile.mkdtemp(prefix="sm90_trace_"))
    subset_manifest(args.generated, work / "gen", lambda name, spec: "sm90_bf16_sm90" in name and "_nk_" in name)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t()
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    trace = torch.zeros(1024, TRACE_UNITS, TRACE_POINTS, dtype=torch.int64, device="cuda")
    gemm_mod.launch = traced_launch(trace)
    for variant in args.variants:
        build_mod.BUILD_OPTIONS = VARIANTS[variant]
        build_mod.build(work / "gen", work / variant, archs=[90], progress=False)
        gemm = Gemm(build_dir=work / variant)
        kern = next(
            kr for kr in gemm.kernels
            if f"{kr.spec.cta[0]}x{kr.spec.cta[1]}" + (f"c{kr.spec.cluster}" if kr.spec.cluster > 1 else "") == args.tile
        )  # fmt: skip
        plan = LaunchSpec(kern.name, 1, 3)
        for _ in range(30):  # warm the clocks; replays pass no trace
            gemm.matmul(a, b, out=out, kernel=plan)
        trace.zero_()
        gemm._fast = fast_path.FastPlans()  # the next call takes the launching path, which passes the trace
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        gemm.matmul(a, b, out=out, kernel=plan)
        end.record()
        torch.cuda.synchronize()
        ms = start.elapsed_time(end)
        print(f"{variant} {args.tile} {m}x{n}x{k}: {ms * 1e3:.1f} us, {2 * m * n * k / ms / 1e9:.0f} TFLOP/s")
        summarize(variant, trace, ms)


if __name__ == "__main__":
    main()
