"""Experiment: where a decode launch's time goes, phase by phase (issue 17: our W4 plans take
1.4-1.7x a bare read of their bytes at M = 1, and no part of the loop left out is worth
more than 4-6%). Builds the default set's 16-row W4 sm80 tiles twice, as they are and with
GEMM_CTA_TRACE=1 (templates/include/gemm/cta_trace.cuh: thread 0 of every CTA stamps its
start and end on the global timer and, in SM clocks, when the prologue's first tile
landed, when it left the K loop, when the warps' K slices were summed, split-K's
hand-over and the epilogue). Per layer and M, the fastest two plans of the untraced build
(short medians over every kernel and split count), then:

* the plan untraced and traced, interleaved (what the stamps cost);
* the traced launch under three states of L2: emptied by a read (the benchmarks' measure),
  emptied and then x read back (a model's decode step, where the previous kernel wrote x),
  and warm (no flush: the weight too, where it fits);
* per state: the launch's span on the global timer, when its CTAs started (waves), and
  each phase's median / p90 / max over the CTAs in microseconds (clocks over each CTA's
  own clock rate), and the same for the CTA that ended last.

    python -m bench.experiments.decode_trace [--layers 4096x4096 6144x4096] [--m 1 16] [--bits 4]
        [--define GEMM_LEAN_TAIL=0]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

import gemm_runtime.build as build_mod
from bench.decode_chain import GROUP
from bench.experiments.decode_ring import short
from bench.experiments.decode_variants import is_decode, timed_plans
from bench.experiments.sm90_variants import subset_manifest
from gemm_runtime import Gemm
from gemm_runtime.cuda_driver import check
from gemm_runtime.packed_weight import pack_for_gemm
from gemm_runtime.quant import quantize
from gemm_runtime.timing import flush_l2, interleaved_medians_ms

ROOT = Path(__file__).resolve().parents[2]
TRACE_CTAS, TRACE_POINTS = 8192, 13  # cta_trace.cuh: kCtaTraceCtas, kCtaTracePoints
(START_NS, SM, START, FIRST_TILE, LOOP_END, REDUCED, HANDED_OVER, END, END_NS, K_TILES, SET_UP,
 ISSUED, ALL_LEFT) = range(TRACE_POINTS)  # fmt: skip
PHASES = {  # label: (from point, to point)
    "first tile (prologue round trip)": (START, FIRST_TILE),
    "  of it: set-up (the mainloop's state)": (START, SET_UP),
    "  of it: the prologue's loads issued": (SET_UP, ISSUED),
    "  of it: the wait for tile 0 and the barrier": (ISSUED, FIRST_TILE),
    "K loop": (FIRST_TILE, LOOP_END),
    "K slices' reduction (waits for the slowest warp)": (LOOP_END, REDUCED),
    "  of it: the wait for the slowest warp": (LOOP_END, ALL_LEFT),
    "  of it: the sum after": (ALL_LEFT, REDUCED),
    "split-K hand-over (CTAs that go on)": (REDUCED, HANDED_OVER),
    "epilogue": (HANDED_OVER, END),
    "whole CTA": (START, END),
}


def trace_buffer(gemm: Gemm, kernel: str) -> tuple[int, int]:
    """(device pointer, bytes) of the module global gemm_cta_trace of `kernel`'s module."""
    from cuda.bindings import driver as drv

    kern = next(k for k in gemm.kernels if k.name == kernel)
    ptr, size = check(drv.cuModuleGetGlobal(kern.function.module, b"gemm_cta_trace"), "cuModuleGetGlobal")
    return int(ptr), int(size)


def read_trace(ptr: int, size: int) -> torch.Tensor:
    """The trace as (CTAs, points) int64 on the host, the CTAs that ran."""
    from cuda.bindings import driver as drv

    torch.cuda.synchronize()
    out = torch.empty(size // 8, dtype=torch.int64, device="cuda")
    check(drv.cuMemcpyDtoD(out.data_ptr(), ptr, size), "cuMemcpyDtoD")
    torch.cuda.synchronize()
    t = out.view(-1, TRACE_POINTS).cpu()
    return t[t[:, START_NS] > 0]


def clear_trace(ptr: int, size: int) -> None:
    from cuda.bindings import driver as drv

    torch.cuda.synchronize()
    check(drv.cuMemsetD8(ptr, 0, size), "cuMemsetD8")
    torch.cuda.synchronize()


def quantiles(values: list[float]) -> str:
    v = sorted(values)
    return f"{statistics.median(v):6.2f} {v[len(v) * 9 // 10]:6.2f} {v[-1]:6.2f}"


def summarize(t: torch.Tensor, event_us: float) -> None:
    """Phases of the CTAs of one traced launch, in us (median / p90 / max)."""
    s = t.to(torch.float64)
    t0 = s[:, START_NS].min()
    span_ns = s[:, END_NS] - s[:, START_NS]
    clocks = s[:, END] - s[:, START]
    ghz = clocks / span_ns.clamp(min=1)  # each CTA's own clock rate
    starts = sorted(((s[:, START_NS] - t0) / 1e3).tolist())
    launch_span = (s[:, END_NS].max() - t0).item() / 1e3
    steps = sorted({int(x) for x in s[:, START_NS].tolist()})
    tick = min((b - a for a, b in zip(steps, steps[1:])), default=0)
    late = sum(1 for x in starts if x > 1.0)
    sms = len({int(x) for x in s[:, SM].tolist()})
    # NOTE: the events bracket the host's launch too (the GPU idles after the flush until
    # the launch arrives): the kernel's own time is the global timer's span.
    print(f"  {len(starts)} CTAs on {sms} SMs; events {event_us:.1f} us (with the host's launch); "
          f"first start to last end {launch_span:.2f} us (global timer tick {tick} ns); clock {statistics.median(ghz.tolist()):.2f} GHz; "
          f"CTAs starting > 1 us after the first: {late}; start offsets p50 / p90 / max "
          f"{statistics.median(starts):.2f} / {starts[len(starts) * 9 // 10]:.2f} / {starts[-1]:.2f} us")  # fmt: skip
    ended = s[:, HANDED_OVER] > 0
    print(f"  {'phase (us)':52s} median    p90    max   | last CTA to end")
    last = int(torch.argmax(s[:, END_NS]))
    for label, (a, b) in PHASES.items():
        rows = ended if HANDED_OVER in (a, b) else torch.ones_like(ended)  # the CTAs that went on
        sel = rows & (s[:, b] > 0) & (s[:, a] > 0)
        if not sel.any():
            continue
        us = ((s[sel, b] - s[sel, a]) / ghz[sel] / 1e3).tolist()
        mine = ""
        if sel[last]:
            mine = f"{(s[last, b] - s[last, a]).item() / ghz[last].item() / 1e3:6.2f}"
        print(f"  {label:52s} {quantiles(us)}   | {mine}")
    tiles = s[:, K_TILES].clamp(min=1)
    per_tile = ((s[:, LOOP_END] - s[:, FIRST_TILE]) / tiles / ghz / 1e3).tolist()
    print(f"  {'K loop per K tile':52s} {quantiles(per_tile)}   | K tiles a CTA: {int(s[last, K_TILES])}; "
          f"last CTA started at +{(s[last, START_NS] - t0).item() / 1e3:.2f} us on SM {int(s[last, SM])}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", nargs="+", default=["4096x4096", "6144x4096", "4096x14336", "28672x4096"],
                    help="N x K")  # fmt: skip
    ap.add_argument("--m", nargs="+", type=int, default=[1, 16])
    ap.add_argument("--bits", type=int, choices=[4, 8], default=4)
    ap.add_argument("--plans", type=int, default=2, help="the fastest plans traced per problem")
    ap.add_argument("--launches", type=int, default=5, help="traced launches per L2 state (medians of phases)")
    ap.add_argument("--define", nargs="*", default=[], metavar="NAME=VALUE",
                    help="knobs for both builds (e.g. GEMM_LEAN_TAIL=0)")  # fmt: skip
    args = ap.parse_args()
    dtype = torch.float16
    work = Path(tempfile.mkdtemp(prefix="decode_trace_"))
    subprocess.run([sys.executable, "-m", "codegen", "--with-defaults", "--out", str(work / "all")],
                   check=True, cwd=ROOT, stdout=subprocess.DEVNULL)  # fmt: skip
    subset_manifest(work / "all", work / "gen", lambda name, spec: is_decode(name, spec, args.bits, "f16"))
    gemms = {}
    defines = tuple(f"-D{d}" for d in args.define)
    for variant, options in (("base", ()), ("traced", ("-DGEMM_CTA_TRACE=1",))):
        build_mod.BUILD_OPTIONS = defines + options
        build_mod.build(work / "gen", work / variant, archs=[90], progress=False)
        gemms[variant] = Gemm(build_dir=work / variant)
    base, traced = gemms["base"], gemms["traced"]
    for layer, m in ((layer, m) for layer in args.layers for m in args.m):
        n, k = (int(x) for x in layer.split("x"))
        w = torch.randn(n, k, device="cuda", dtype=dtype) * 0.02
        packed = pack_for_gemm(quantize(w, bits=args.bits, group_size=GROUP))
        a = torch.randn(m, k, device="cuda", dtype=dtype)
        out = torch.empty(m, n, device="cuda", dtype=dtype)
        plans = timed_plans(base, a, packed, out)
        for _, spec in plans[: args.plans]:
            fns = [lambda g=g: g.matmul(a, packed, out=out, kernel=spec) for g in (base, traced)]
            t_base, t_traced = (x * 1e3 for x in interleaved_medians_ms(fns, reps=30))
            print(f"\n### {layer} (N x K), M = {m}, W{args.bits}: {short(spec.kernel)} split {spec.splits}: "
                  f"untraced {t_base:.1f} us, traced {t_traced:.1f} us (L2 emptied, medians)", flush=True)  # fmt: skip
            ptr, size = trace_buffer(traced, spec.kernel)
            states = {
                "L2 emptied": flush_l2,
                "L2 emptied, x read back": lambda: (flush_l2(), a.sum()),
                "warm (no flush)": lambda: None,
            }
            for label, prepare in states.items():
                runs = []
                for _ in range(args.launches + 2):
                    prepare()
                    clear_trace(ptr, size)
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    traced.matmul(a, packed, out=out, kernel=spec)
                    end.record()
                    torch.cuda.synchronize()
                    runs.append((start.elapsed_time(end) * 1e3, read_trace(ptr, size)))
                runs = sorted(runs[2:], key=lambda r: r[0])  # the first two warm up; the median launch
                event_us, trace = runs[len(runs) // 2]
                print(f"\n{label}:")
                summarize(trace, event_us)


if __name__ == "__main__":
    main()
