"""Experiment: does the way L2 is emptied before a timed call change what small decode
GEMMs measure? gemm_runtime.timing.flush_l2 writes zeros over a buffer larger than L2,
which leaves L2 full of dirty lines; a GEMM timed right after may pay for writing them
back to memory while it streams its weights. A flush that reads a large buffer instead
leaves clean lines (what a real decode step leaves: the previous layer's weights).

Times, at M = 1 on llama3-8b and 70b layers, ours (W4 tuned, fp16 default), fp16
cuBLAS and torch's int4 kernel under four flushes (none, write, read, write then read)
and a one-element kernel for the floor, each flush's calls interleaved, medians:

    python -m bench.experiments.flush_kind [--m 1 16]
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable

import torch

from bench.decode_chain import GROUP, INT4_INNER_K_TILES
from bench.quant import tuned_choice, w4_layers
from gemm_runtime import Gemm
from gemm_runtime.timing import _SLEEP_CYCLES, event_ms, round_robin_order

_BYTES = 256 << 20


def flushes() -> dict[str, Callable[[], object] | None]:
    written = torch.empty(_BYTES, dtype=torch.int8, device="cuda")
    read = torch.ones(_BYTES // 2, dtype=torch.float16, device="cuda")
    sink = torch.empty((), dtype=torch.float32, device="cuda")

    def write() -> None:
        written.zero_()

    def read_only() -> None:
        torch.sum(read, dim=0, dtype=torch.float32, out=sink)

    def both() -> None:
        write()
        read_only()

    return {"none": None, "write": write, "read": read_only, "write+read": both}


def medians(fns: list[Callable[[], object]], flush: Callable[[], object] | None, rounds: int = 40) -> list[float]:
    for fn in fns:
        for _ in range(3):
            fn()
    torch.cuda.synchronize()
    times: list[list[float]] = [[] for _ in fns]
    for index in round_robin_order(len(fns), rounds):
        if flush is not None:
            flush()
        torch.cuda._sleep(_SLEEP_CYCLES)
        times[index].append(event_ms(fns[index]))
    return [statistics.median(t) * 1e3 for t in times]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--m", nargs="+", type=int, default=[1])
    ap.add_argument("--models", nargs="+", default=["llama3-8b", "llama3-70b"])
    args = ap.parse_args()
    gemm = Gemm()
    kinds = flushes()
    tiny = torch.zeros(1, device="cuda")
    print("| layer | M | flush | floor µs | ours W4 µs | ours fp16 µs | cuBLAS fp16 µs | torch int4 µs | "
          "cuBLAS / W4 | int4 / W4 |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for layer, n, k, w, packed in w4_layers(args.models):
        q = torch.randint(0, 16, (n, k), dtype=torch.int32, device="cuda")
        int4 = torch._convert_weight_to_int4pack((q[:, ::2] << 4 | q[:, 1::2]).to(torch.uint8), INT4_INNER_K_TILES)
        sz = torch.randn(k // GROUP, n, 2, device="cuda", dtype=torch.bfloat16) * 0.01
        for m in args.m:
            a = torch.randn(m, k, device="cuda", dtype=torch.float16)
            a_bf = a.to(torch.bfloat16)
            out = torch.empty(m, n, device="cuda", dtype=torch.float16)
            tuned_choice(gemm, a, packed, out)
            fns = [lambda: tiny.add_(1), lambda: gemm.matmul(a, packed, out=out),
                   lambda: gemm.matmul(a, w.t(), out=out), lambda: torch.matmul(a, w.t(), out=out),
                   lambda: torch._weight_int4pack_mm(a_bf, int4, GROUP, sz)]  # fmt: skip
            for name, flush in kinds.items():
                t = medians(fns, flush)
                print(f"| {layer} | {m} | {name} | {t[0]:.1f} | {t[1]:.1f} | {t[2]:.1f} | {t[3]:.1f} | "
                      f"{t[4]:.1f} | {t[3] / t[1]:.2f} | {t[4] / t[1]:.2f} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
