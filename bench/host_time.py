"""Host time of one cached call, ours beside torch's, in one run.

    python -m bench.host_time [--calls 500] [--rounds 11] [--out docs/perf/host_time.md]

Each variant issues ``calls`` calls while the GPU sleeps (timing.host_us_per_call, so
the loop measures the host alone) and reports the median over ``rounds`` interleaved
rounds: torch
(``torch.matmul`` / ``F.linear`` / ``torch.nn.Linear`` on the dense weight) against
``Gemm.matmul``, the custom ops and the layers, dense and packed; and grouped launches
(8 experts of N x K, 2 M rows sorted by expert) beside ``torch._grouped_mm``: default
dispatch, an sm90 grouped kernel forced (its launches encode tensor maps) and W4A16
experts. Each kind's ratios are to its first row."""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from bench.cli import check_out, positive_int
from bench.timing import host_us_per_call


def variants(m: int, n: int, k: int):
    from gemm_runtime import ops
    from gemm_runtime.nn import Linear, QuantLinear, default_gemm
    from gemm_runtime.packed_weight import pack_for_gemm
    from gemm_runtime.quant import quantize

    gemm = default_gemm(torch.device("cuda"))
    x = torch.randn(m, k, device="cuda", dtype=torch.float16)
    lin = torch.nn.Linear(k, n, device="cuda", dtype=torch.float16)
    w, b = lin.weight.detach(), lin.bias.detach()
    ours = Linear.from_float(lin)
    packed = pack_for_gemm(quantize(w, bits=4, group_size=128))
    qlin = QuantLinear.from_quantized(quantize(w, bits=4, group_size=128), b)
    out = torch.empty(m, n, device="cuda", dtype=torch.float16)
    meta = (packed.b, packed.v, packed.bits, packed.group_size, packed.n, packed.k, packed.symmetric)
    assert ops.EPILOGUES  # the ops are registered by importing gemm_runtime.ops
    # Where a replay's time goes: its parts alone (after one call has planned it).
    wt = w.t()
    gemm.matmul(x, wt)
    sig = gemm._signature(x, wt, None, None, None, 0.0, None, None, None, None, None)
    plan = gemm._fast.get(sig, gemm.cache.version)
    kept = plan.kernel
    d = torch.empty(m, n, device="cuda", dtype=torch.float16)
    plan.run(x.data_ptr(), w.data_ptr(), 0, d.data_ptr(), 1.0, 0.0, 0)  # its parameters now point at d
    parts = [
        ("part: w.t()", lambda: w.t()),
        ("part: the op's body, no dispatcher", lambda: ops._linear_cuda(x, w, b, "none", 0)),
        ("part: x.new_empty(M, N)", lambda: x.new_empty((m, n))),
        ("part: torch.empty(M, N)", lambda: torch.empty((m, n), dtype=torch.float16, device=x.device)),
        ("part: signature + lookup", lambda: gemm._fast.get(
            gemm._signature(x, wt, None, None, None, 0.0, None, None, None, None, None), 0)),
        ("part: parameters + cuLaunchKernel", lambda: plan.run(x.data_ptr(), w.data_ptr(), 0, d.data_ptr(), 1.0, 0.0, 0)),
        ("part: cuLaunchKernel", lambda: kept.launch(kept.function, *kept.grid, kept.threads, 1, 1, kept.smem,
                                                     kept.stream, kept.args, 0)),
    ]
    table = {
        "dense": [
            ("torch.matmul(x, w.t())", lambda: torch.matmul(x, w.t())),
            ("torch.matmul(x, w.t(), out=)", lambda: torch.matmul(x, w.t(), out=out)),
            ("F.linear(x, w, b)", lambda: F.linear(x, w, b)),
            ("torch.nn.Linear(x)", lambda: lin(x)),
            ("gemm.matmul(x, w.t())", lambda: gemm.matmul(x, w.t())),
            ("gemm.matmul(x, w.t(), out=)", lambda: gemm.matmul(x, w.t(), out=out)),
            ("gemm.matmul(x, w.t(), bias=b)", lambda: gemm.matmul(x, w.t(), bias=b)),
            ("ops.linear(x, w, b)", lambda: torch.ops.gemm_runtime.linear(x, w, b, "none", 0)),
            ("nn.Linear(x)", lambda: ours(x)),
            *parts,
        ],
        "packed": [
            ("torch.matmul(x, w.t())", lambda: torch.matmul(x, w.t())),
            ("F.linear(x, w, b)", lambda: F.linear(x, w, b)),
            ("gemm.matmul(x, packed)", lambda: gemm.matmul(x, packed)),
            ("gemm.matmul(x, packed, bias=b)", lambda: gemm.matmul(x, packed, bias=b)),
            ("ops.linear_packed(x, ..., b)", lambda: torch.ops.gemm_runtime.linear_packed(x, *meta, b, "none", 0)),
            ("QuantLinear(x)", lambda: qlin(x)),
        ],
    }
    if hasattr(torch, "_grouped_mm"):
        table["grouped"] = grouped_variants(gemm, m, n, k)
    return table


def grouped_variants(gemm, m: int, n: int, k: int, experts: int = 8) -> list:
    """Grouped launches of 2 m rows over ``experts`` experts (rows spread evenly, sorted)."""
    from gemm_runtime.experts import pack_experts
    from gemm_runtime.quant import quantize

    rows = 2 * m
    x = torch.randn(rows, k, device="cuda", dtype=torch.float16)
    w = torch.randn(experts, n, k, device="cuda", dtype=torch.float16) * 0.02
    offsets = torch.tensor([rows * e // experts for e in range(experts + 1)], device="cuda", dtype=torch.int32)
    ends = offsets[1:].contiguous()
    packed = pack_experts([quantize(we, bits=4, group_size=128) for we in w])
    sm90 = next((kn.name for kn in gemm.kernels if kn.spec.grouped and kn.spec.mainloop.value == "sm90"
                 and kn.spec.a_type.value == "f16" and not kn.spec.quantized), None)  # fmt: skip
    out = [
        ("torch._grouped_mm(x, w, offs)", lambda: torch._grouped_mm(x, w.transpose(1, 2), offs=ends)),
        ("gemm.grouped_matmul(x, w, offsets)", lambda: gemm.grouped_matmul(x, w, offsets)),
        ("gemm.grouped_matmul(x, packed, offsets)", lambda: gemm.grouped_matmul(x, packed, offsets)),
    ]
    if sm90 is not None:
        out.append(("gemm.grouped_matmul(..., kernel=sm90)", lambda: gemm.grouped_matmul(x, w, offsets, kernel=sm90)))
    return out


def measure(calls: int, rounds: int, m: int, n: int, k: int) -> dict[str, list[tuple[str, float]]]:
    table = variants(m, n, k)
    results: dict[str, dict[str, list[float]]] = {kind: {name: [] for name, _ in vs} for kind, vs in table.items()}
    order = [(kind, name, fn) for kind, vs in table.items() for name, fn in vs]
    rng = random.Random(0)
    with torch.inference_mode():
        for _ in range(rounds):
            # NOTE: interleaved and shuffled anew each round, so that drifts of the host's
            # clock, and whatever a position in the order costs, hit every variant alike.
            rng.shuffle(order)
            for kind, name, fn in order:
                results[kind][name].append(host_us_per_call(fn, calls))
    return {kind: [(name, statistics.median(ts)) for name, ts in vs.items()] for kind, vs in results.items()}


def report(results, m: int, n: int, k: int) -> list[str]:
    lines = [f"Host time per call, M={m} N={n} K={k} fp16 ({torch.cuda.get_device_name()}, torch {torch.__version__}),"
             " the GPU asleep, median of shuffled interleaved rounds, under torch.inference_mode; ratio = the call /"
             " its kind's first row (torch's) of the same run", "",
             "| kind | call | host µs | / torch |", "|---|---|---:|---:|"]  # fmt: skip
    for kind, rows in results.items():
        base = rows[0][1]
        for name, us in rows:
            lines.append(f"| {kind} | `{name}` | {us:.2f} | {us / base:.2f} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.host_time", description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=positive_int, default=500)
    parser.add_argument("--rounds", type=positive_int, default=11)
    parser.add_argument("--shape", type=positive_int, nargs=3, default=(4, 1024, 1024), metavar=("M", "N", "K"))
    parser.add_argument("--out", type=Path, help="also write the table here")
    args = parser.parse_args(argv)
    check_out(parser, "--out", args.out)
    m, n, k = args.shape
    lines = report(measure(args.calls, args.rounds, m, n, k), m, n, k)
    print("\n".join(lines))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)  # check_out accepts folders still to be made
        args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
