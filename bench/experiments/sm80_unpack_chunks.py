"""Experiment: whole-weight plans whose unpacked weight stays in L2 (issue 17: SM80-family
W4A16 at most 1.1x the family's fp16 kernel at M >= 1024; the whole-weight plans read
1.14 at M = 1024 on the H200, perf/sm80_unpack_then_dense.md).

A whole-weight plan (gemm_runtime/whole_weight.py) unpacks the packed weight into a
dense buffer, then runs a dense kernel on it. The unpack moves ~2.5 bytes a weight
through DRAM (0.5 read, 2 written) and its time adds to the dense kernel's: at M = 1024
it is 12-15% of it. Here the weight goes in chunks of N columns instead, each unpacked
into a buffer small enough to stay in L2 and consumed by the chunk's dense GEMM (into
its columns of D) right after, so that the 2 bytes a weight are written to L2 and read
back from it, and DRAM sees only the packed half byte:

* ``serial/MiB``: one stream; per chunk of about MiB of unpacked weight (whole packed
  rows of 8 columns) the unpack into one buffer (the same addresses each time: its lines
  are overwritten in L2, not written back), then the chunk's tuned dense plan. Each
  chunk's GEMM has only its share of the whole one's tiles.
* ``overlap/MiB``: the unpacks on a side stream into a ring of S + 1 buffers, ahead of
  the chunks' GEMMs, which go round S streams (``--streams``), so that several chunks'
  tiles share the GPU; events order each chunk's GEMM after its unpack and each unpack
  after the GEMM that last read its buffer. L2 holds S + 1 chunks.
* ``unpack/MiB``: the chunked unpacks alone into one buffer (what an unpack whose writes
  stay in L2 costs), beside ``unpack`` (the whole buffer, as the shipped plan does).

Beside them, in the same interleaved rounds (L2 flushed before each, medians): the fp16
plan on the unquantized weight (the reference) and dispatch as shipped (tuned; a
whole-weight plan at these M). Builds the default set's sm80-class kernels alone, as on
an Ampere GPU (sm80_quant_vs_dense.sm80_build).

    python -m bench.experiments.sm80_unpack_chunks [--m 1024 2048] [--chunk-mib 8 16] [--streams 2]
        [--models llama3-8b llama3-70b]

Prints each problem's times and ratios to fp16 (asked: at most 1.1), the medians per M
and variant, and the largest difference of each chunked output from the shipped plan's.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch

from bench.experiments.sm80_quant_vs_dense import sm80_build
from bench.quant import tuned_choice, w4_layers
from gemm_runtime import Gemm
from gemm_runtime.packed_weight import PackedWeight
from gemm_runtime.timing import interleaved_medians_ms
from gemm_runtime.unpack import UnpackStep, row_pitch, unpack_weight


def column_chunks(n: int, k: int, mib: float) -> list[tuple[int, int]]:
    """(first column, columns) of each chunk covering N whose unpacked rows (row_pitch(k)
    16-bit values each) take at most ``mib`` MiB, in whole packed rows of 8 columns (at
    least one), the last chunk narrower."""
    if not mib > 0:
        raise ValueError(f"chunk size {mib} MiB: a positive size")
    width = max(8, int(mib * 2**20) // (2 * row_pitch(k)) // 8 * 8)
    return [(n0, min(width, n - n0)) for n0 in range(0, n, width)]


class ChunkedUnpack:
    """The unpack of a packed weight's column chunks, each into a given buffer, on one
    stream: an UnpackStep per chunk width (the last chunk may be narrower)."""

    def __init__(self, packed: PackedWeight, chunks: list[tuple[int, int]], stream: torch.cuda.Stream) -> None:
        self.packed, self.chunks = packed, chunks
        ldb, ldv = packed.b.stride(0) * packed.b.element_size(), packed.v.stride(0)
        self.steps = {nc: UnpackStep(packed.b.device, packed.dtype, packed.bits, ldb, ldv, nc, packed.k,
                                     packed.groups, packed.group_shift, stream.cuda_stream)
                      for nc in {nc for _, nc in chunks}}  # fmt: skip
        self.ldb, self.vsize = ldb, packed.v.element_size()

    def launch(self, i: int, buffer: torch.Tensor) -> None:
        n0, nc = self.chunks[i]
        b = self.packed.b.data_ptr() + (n0 // 8) * self.ldb
        v = self.packed.v.data_ptr() + n0 * self.vsize  # column n0 of the scales' (and zeros') rows
        self.steps[nc].launch(b, v, buffer.data_ptr())


def chunk_variants(gemm: Gemm, a: torch.Tensor, packed: PackedWeight, out: torch.Tensor, mib: float, streams: int
                   ) -> dict[str, Callable[[], None]]:  # fmt: skip
    """The serial, overlapped and unpack-only callables for chunks of about ``mib`` MiB,
    their dense plans tuned first. Each callable queues its work on the current stream
    (the side streams join it before it returns)."""
    k = packed.k
    chunks = column_chunks(packed.n, k, mib)
    main = torch.cuda.current_stream()
    side, gemm_streams = torch.cuda.Stream(), [torch.cuda.Stream() for _ in range(streams)]
    ring = len(gemm_streams) + 1
    buffers = [torch.empty(chunks[0][1], row_pitch(k), dtype=packed.dtype, device=a.device) for _ in range(ring)]
    serial_unpack, side_unpack = ChunkedUnpack(packed, chunks, main), ChunkedUnpack(packed, chunks, side)

    def dense(buffer: torch.Tensor, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        n0, nc = chunks[i]
        return buffer[:nc, :k].t(), out[:, n0 : n0 + nc]

    for i in {0, len(chunks) - 1}:  # both chunk widths' plans, measured once and cached
        w, d = dense(buffers[0], i)
        serial_unpack.launch(i, buffers[0])
        tuned_choice(gemm, a, w, d)

    def serial() -> None:
        for i in range(len(chunks)):
            serial_unpack.launch(i, buffers[0])
            w, d = dense(buffers[0], i)
            gemm.matmul(a, w, out=d)

    def overlap() -> None:
        start = torch.cuda.Event()
        start.record(main)
        for s in (side, *gemm_streams):
            s.wait_event(start)
        consumed: list[torch.cuda.Event] = []
        for i in range(len(chunks)):
            if i >= ring:
                side.wait_event(consumed[i - ring])  # the GEMM that last read this buffer
            side_unpack.launch(i, buffers[i % ring])
            unpacked = torch.cuda.Event()
            unpacked.record(side)
            g = gemm_streams[i % len(gemm_streams)]
            g.wait_event(unpacked)
            w, d = dense(buffers[i % ring], i)
            gemm.matmul(a, w, out=d, stream=g)
            done = torch.cuda.Event()
            done.record(g)
            consumed.append(done)
        for s in (side, *gemm_streams):
            main.wait_stream(s)

    def unpack_only() -> None:
        for i in range(len(chunks)):
            serial_unpack.launch(i, buffers[0])

    tag = f"{mib:g}"
    return {f"serial/{tag}": serial, f"overlap/{tag}": overlap, f"unpack/{tag}": unpack_only}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["llama3-8b", "llama3-70b"])
    ap.add_argument("--m", nargs="+", type=int, default=[1024, 2048])
    ap.add_argument("--chunk-mib", nargs="+", type=float, default=[8.0, 16.0], help="unpacked bytes a chunk")
    ap.add_argument("--streams", type=int, default=2, help="the overlapped chunks' GEMM streams")
    args = ap.parse_args()
    gemm = Gemm(build_dir=sm80_build(Path(tempfile.mkdtemp(prefix="sm80_unpack_chunks_"))))
    ratios: dict[tuple[int, str], list[float]] = {}
    for layer, n, k, w, packed in w4_layers(args.models):
        dense = unpack_weight(packed)
        for m in args.m:
            a = torch.randn(m, k, device="cuda", dtype=torch.float16)
            out_h, out_t = (torch.empty(m, n, device="cuda", dtype=torch.float16) for _ in range(2))
            fp16_plan, tuned_plan = tuned_choice(gemm, a, w.t(), out_h), tuned_choice(gemm, a, packed, out_t)
            fns: dict[str, Callable[[], object]] = {
                "fp16": lambda: gemm.matmul(a, w.t(), out=out_h),
                "tuned": lambda: gemm.matmul(a, packed, out=out_t),
                "unpack": lambda: unpack_weight(packed, out=dense),
            }
            outs: dict[str, torch.Tensor] = {}
            for mib in args.chunk_mib:
                if len(column_chunks(n, k, mib)) < 2:
                    continue
                outs[f"{mib:g}"] = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)
                fns.update(chunk_variants(gemm, a, packed, outs[f"{mib:g}"], mib, args.streams))
            times = dict(zip(fns, interleaved_medians_ms(list(fns.values()))))
            diffs = []
            for tag, o in outs.items():
                for name in (f"serial/{tag}", f"overlap/{tag}"):
                    o.fill_(float("nan"))
                    fns[name]()
                    diffs.append(f"{name} {(o.float() - out_t.float()).abs().max().item():.1e}")
            torch.cuda.synchronize()
            cells = [f"{name} {t * 1e3:.1f} us ({t / times['fp16']:.3f})" for name, t in times.items()]
            chunked = ", ".join(f"{tag} MiB: {len(column_chunks(n, k, float(tag)))} chunks" for tag in outs)
            print(f"{layer} M={m} (fp16 plan {fp16_plan}; tuned {tuned_plan}; {chunked}): " + ", ".join(cells)
                  + " | max diff from tuned: " + ", ".join(diffs), flush=True)  # fmt: skip
            for name, t in times.items():
                ratios.setdefault((m, name), []).append(t / times["fp16"])
    for (m, name), r in sorted(ratios.items()):
        print(f"- M = {m}, {name}: median time / fp16's {statistics.median(r):.3f} (max {max(r):.3f}, "
              f"{len(r)} layers); asked: at most 1.1")  # fmt: skip


if __name__ == "__main__":
    main()
