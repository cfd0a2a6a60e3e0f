"""GPU timing like triton.testing.do_bench: warm-up, an L2 flush before every
repetition, one CUDA event pair per repetition, the median.

NOTE: the GPU is kept busy (a sleep kernel) while the host enqueues the start event,
the call and the end event; otherwise an idle GPU records the start at once and the
interval includes the host's time to validate and launch, not the kernel's.

torch is imported inside the functions, so importing this module is cheap (the tuner
imports it; its tests run without a GPU and with a fake timer)."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

_flush_buffer: Any = None  # torch.Tensor once allocated
_flush_sink: Any = None  # the read's one-element result
_FLUSH_BYTES = 256 << 20  # larger than any current L2 (H200: 60 MB)
_SLEEP_CYCLES = 400_000  # ~0.2 ms at 2 GHz: longer than any host-side launch path


def flush_l2() -> None:
    """Evict the L2 cache of the current device by reading a buffer larger than it.

    NOTE: a read, so that L2 is left holding clean lines, as a model step leaves it (the
    previous layer's weights). Zeroing the buffer instead (until 2026-12-04) left L2
    full of dirty lines, whose write-back then shared DRAM with the timed call: on the
    H200 it added 5-8 us to fp16 GEMMs of llama3-8b layers at M = 1 and about 1 us to
    W4 ones, which read fewer bytes and so evict fewer of them (docs/NOTES.md,
    bench/experiments/flush_kind.py)."""
    import torch

    global _flush_buffer, _flush_sink
    if _flush_buffer is None or _flush_buffer.device.index != torch.cuda.current_device():
        _flush_buffer = torch.zeros(_FLUSH_BYTES // 2, dtype=torch.float16, device="cuda")
        _flush_sink = torch.empty((), dtype=torch.float32, device="cuda")
    torch.sum(_flush_buffer, dim=0, dtype=torch.float32, out=_flush_sink)


_written: Any = None  # write_flush_l2's buffer


def write_flush_l2() -> None:
    """Evict L2 by zeroing a buffer larger than it, leaving dirty lines behind (the
    measure until 2026-12-04; for experiments that compare the two, as flush_kind)."""
    import torch

    global _written
    if _written is None or _written.device.index != torch.cuda.current_device():
        _written = torch.empty(_FLUSH_BYTES, dtype=torch.int8, device="cuda")
    _written.zero_()


Flush = bool | Callable[[], object]  # True: flush_l2; False: none; or the function to run


def median_ms(
    fn: Callable[[], object],
    *,
    warmup: int = 5,
    reps: int = 30,
    max_ms: float = 2000.0,
    min_reps: int = 3,
    flush: Flush = True,
) -> float:
    """Median time of ``fn`` in milliseconds, measured on the current stream.

    ``warmup`` untimed calls, then one timed call estimates the cost; the timed
    repetitions are then ``reps``, lowered so that they take about ``max_ms`` in all,
    but never below ``min_reps`` (so a slow ``fn`` costs at most
    ``warmup + 1 + max(min_reps, ...)`` calls). ``flush`` empties L2 before each
    repetition, so the operands are read from memory as in a real model step."""
    return interleaved_medians_ms([fn], warmup=warmup, reps=reps, max_ms=max_ms, min_reps=min_reps, flush=flush)[0]


def interleaved_medians_ms(
    fns: Sequence[Callable[[], object]],
    *,
    warmup: int = 5,
    reps: int = 30,
    max_ms: float = 2000.0,
    min_reps: int = 3,
    flush: Flush = True,
) -> list[float]:
    """Median time of each of ``fns`` in milliseconds, their repetitions interleaved.

    Each round times every function once, in alternating order (forward, then
    reversed), so that all of them see the same clock: under its power cap the H200's
    clock drifts by several percent over a few hundred milliseconds of work, and
    timing one function's repetitions after another's biases their ratio by as much
    as the gap being measured. ``max_ms`` bounds the whole measurement; the other
    arguments are :func:`median_ms`'s."""
    import torch

    if not fns or not all(callable(fn) for fn in fns):
        raise ValueError(f"fns: got {fns!r:.80}; accepted: a non-empty sequence of functions")
    # NOTE: checked before the GPU runs anything: 2.5 repetitions, a NaN budget or a flush
    # of "yes" failed only after the warm-up, as a TypeError from range() or a call.
    for name, value, lo in (("reps", reps, 1), ("min_reps", min_reps, 1), ("warmup", warmup, 0)):
        if not isinstance(value, int) or isinstance(value, bool) or value < lo:
            raise ValueError(f"{name}: got {value!r}; accepted: an integer >= {lo}")
    if isinstance(max_ms, bool) or not isinstance(max_ms, (int, float)) or not math.isfinite(max_ms) or max_ms < 0:
        raise ValueError(f"max_ms: got {max_ms!r}; accepted: a finite number of milliseconds >= 0")
    if not isinstance(flush, bool) and not callable(flush):
        raise ValueError(f"flush: got {flush!r:.80}; accepted: True (flush_l2), False (none) or a function")
    for fn in fns:
        for _ in range(warmup):
            fn()
    torch.cuda.synchronize()
    # Bound the total time for slow candidates: estimate from one run of each.
    round_ms = sum(event_ms(fn) for fn in fns)
    rounds = max(min(min_reps, reps), min(reps, int(max_ms / max(round_ms, 1e-3))))
    times: list[list[float]] = [[] for _ in fns]
    for index in round_robin_order(len(fns), rounds):
        if flush is True:
            flush_l2()
        elif flush:
            flush()
        torch.cuda._sleep(_SLEEP_CYCLES)
        times[index].append(event_ms(fns[index]))
    return [statistics.median(t) for t in times]


def round_robin_order(count: int, rounds: int) -> list[int]:
    """The order in which :func:`interleaved_medians_ms` times ``count`` functions over
    ``rounds`` rounds: forward in even rounds, reversed in odd ones, so that no function
    always runs first (ABBA for two)."""
    forward = list(range(count))
    return [i for r in range(rounds) for i in (forward if r % 2 == 0 else forward[::-1])]


def event_ms(fn: Callable[[], object]) -> float:
    """Milliseconds of one call of ``fn`` on the current stream, between two CUDA events
    (waits for the end event)."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def host_us_per_call(fn: Callable[[], object], calls: int = 500) -> float:
    """Host time of one call (validation, dispatch, launch), in microseconds.

    NOTE: the GPU sleeps through the timed loop, so the loop times the host alone: a
    GPU slower than the host would fill the launch queue and make the launches wait
    for it. ``calls`` stays below the queue's depth (1024 launches)."""
    import torch

    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(20):
        fn()
    estimate = (time.perf_counter() - t0) / 20
    torch.cuda.synchronize()
    # Cycles at up to 2 GHz for three times the loop's estimate, and a millisecond.
    torch.cuda._sleep(int(2e9 * (3 * calls * estimate + 1e-3)))
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / calls * 1e6
