"""GPU timing like triton.testing.do_bench: warm-up, an L2 flush before every
repetition, one CUDA event pair per repetition, the median.

NOTE: the GPU is kept busy (a sleep kernel) while the host enqueues the start event,
the call and the end event; otherwise an idle GPU records the start at once and the
interval includes the host's time to validate and launch, not the kernel's."""

from __future__ import annotations

import statistics
from typing import Callable

import torch

_flush_buffer: torch.Tensor | None = None
_SLEEP_CYCLES = 400_000  # ~0.2 ms at 2 GHz: longer than any host-side launch path


def _flush_l2() -> None:
    global _flush_buffer
    if _flush_buffer is None:
        # Larger than any current L2 (H200: 60 MB).
        _flush_buffer = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
    _flush_buffer.zero_()


def median_ms(fn: Callable[[], object], *, warmup: int = 5, reps: int = 30, max_ms: float = 2000.0) -> float:
    """Median time of ``fn`` in milliseconds, measured on the current stream."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    # Bound the total time for slow candidates: estimate from one run.
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    reps = max(3, min(reps, int(max_ms / max(start.elapsed_time(end), 1e-3))))
    times = []
    for _ in range(reps):
        _flush_l2()
        torch.cuda._sleep(_SLEEP_CYCLES)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def host_us_per_call(fn: Callable[[], object], calls: int = 2000) -> float:
    """Host time of one call (validation, dispatch, launch), in microseconds."""
    import time

    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / calls * 1e6
