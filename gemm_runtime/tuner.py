"""Measure dispatch candidates (LaunchSpec) on the GPU and pick the fastest.

The timing function is injected (``Timer``), so everything here runs on CPU in tests
with a fake timer and fake callables. A candidate that fails (its callable or its
timing raises, or the timer returns something that is not a time) scores infinity and
is recorded in ``Measurement.failures``; it never aborts a search.

Nothing is stored on ``self`` per call: a ``Measurer`` can be shared between threads,
each ``measure`` / ``tune`` returns its own ``Measurement``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from gemm_runtime.plan import LaunchSpec

__all__ = ["Measurement", "Measurer", "Timer", "default_timer", "tune"]

# (fn, reps, max_seconds) -> median milliseconds of fn. At most ``reps`` timed calls,
# and about ``max_seconds`` of them in all (a slow fn gets fewer repetitions).
Timer = Callable[[Callable[[], object], int, float], float]

# Untimed calls before timing a candidate: the first launch of a kernel loads its
# module and warms the instruction cache.
_WARMUP = 2

# The finalists of a search: candidates whose first time is within this fraction of the
# fastest. A GPU at its power cap drifts by several percent over a search (its clock
# follows its temperature), which alone can rank two kernels this far apart.
CONFIRM_MARGIN = 0.10


def default_timer(fn: Callable[[], object], reps: int, max_seconds: float) -> float:
    """CUDA-event timing with an L2 flush before each repetition (gemm_runtime.timing)."""
    from gemm_runtime.timing import median_ms

    return median_ms(fn, warmup=min(_WARMUP, reps), reps=reps, max_ms=max_seconds * 1e3, min_reps=1)


@dataclass
class Measurement:
    """What one search measured.

    ``times``: median milliseconds per candidate, in the order the candidates were
    given (for ``tune``: the cost-model order), ``math.inf`` for a failure.
    ``failures``: the error text of each candidate that failed.
    ``seconds``: wall-clock time the search took, preparation of the calls included.
    ``confirmed``: the finalists' times from the confirmation passes (``tune``'s
    ``confirm``), in the same order as ``times``; empty when there were none."""

    times: dict[LaunchSpec, float] = field(default_factory=dict)
    failures: dict[LaunchSpec, str] = field(default_factory=dict)
    seconds: float = 0.0
    confirmed: dict[LaunchSpec, float] = field(default_factory=dict)

    @property
    def best(self) -> LaunchSpec | None:
        """The fastest candidate that did not fail, among the confirmed finalists where
        there are any (their times were taken side by side, the others' were not); ties
        go to the earlier one. None when nothing was measured or everything failed."""
        best, best_ms = None, math.inf
        for spec, ms in (self.confirmed or self.times).items():
            if ms < best_ms:
                best, best_ms = spec, ms
        return best

    @property
    def results(self) -> list[tuple[LaunchSpec, float]]:
        """(candidate, median ms) in order."""
        return list(self.times.items())

    def __iter__(self) -> Iterator[tuple[LaunchSpec, float]]:
        return iter(self.times.items())

    def __len__(self) -> int:
        return len(self.times)

    def merged(self, other: Measurement) -> Measurement:
        """Both measurements in one (``other`` wins where both hold a candidate); the
        seconds add up."""
        return Measurement(
            {**self.times, **other.times},
            {**{s: e for s, e in self.failures.items() if s not in other.times}, **other.failures},
            self.seconds + other.seconds,
            {**self.confirmed, **other.confirmed},
        )

    def ordered(self, order: Sequence[LaunchSpec]) -> Measurement:
        """The same measurement with its candidates in ``order`` (those not in it last)."""
        rank: dict[LaunchSpec, int] = {}
        for i, s in enumerate(order):
            rank.setdefault(s, i)
        keys = sorted(self.times, key=lambda s: rank.get(s, len(order)))
        confirmed = {s: self.confirmed[s] for s in keys if s in self.confirmed}
        return Measurement({s: self.times[s] for s in keys}, dict(self.failures), self.seconds, confirmed)


def _failure(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


class Measurer:
    """Times candidates with ``timer`` (default: CUDA events, L2 flushed), each with at
    most ``reps`` timed repetitions and about ``max_time`` seconds."""

    def __init__(self, timer: Timer | None = None, reps: int = 10, max_time: float = 0.5):
        if not isinstance(reps, int) or isinstance(reps, bool) or reps < 1:
            raise ValueError(f"reps: got {reps!r}; accepted: an integer >= 1")
        if isinstance(max_time, bool) or not isinstance(max_time, (int, float)) or not 0 < max_time < math.inf:
            raise ValueError(f"max_time: got {max_time!r}; accepted: a number of seconds > 0")
        if timer is not None and not callable(timer):
            raise ValueError(f"timer: got {type(timer).__name__}; accepted: a callable (fn, reps, max_seconds) -> ms")
        self.timer: Timer = timer if timer is not None else default_timer
        self.reps = reps
        self.max_time = float(max_time)

    def __repr__(self) -> str:
        return f"Measurer(timer={getattr(self.timer, '__name__', self.timer)!r}, reps={self.reps}, max_time={self.max_time})"

    def time_one(self, fn: Callable[[], object]) -> tuple[float, str | None]:
        """(median ms, None), or (inf, error text) when ``fn`` or the timer fails."""
        try:
            ms = self.timer(fn, self.reps, self.max_time)
        except Exception as e:  # any failure of a candidate scores infinity
            return math.inf, _failure(e)
        if isinstance(ms, bool) or not isinstance(ms, (int, float)) or not 0 <= ms < math.inf:
            return math.inf, f"the timer returned {ms!r}, not a finite time in ms"
        return float(ms), None

    def measure(self, candidates: Sequence[tuple[LaunchSpec, Callable[[], object]]]) -> Measurement:
        """Each candidate's median ms, in the order given; a candidate given twice is
        measured once (its first callable)."""
        t0 = time.perf_counter()
        result = Measurement()
        for spec, fn in candidates:
            if spec in result.times:
                continue
            result.times[spec], error = self.time_one(fn)
            if error is not None:
                result.failures[spec] = error
        result.seconds = time.perf_counter() - t0
        return result


def tune(
    candidates_ranked: Sequence[LaunchSpec],
    make_call: Callable[[LaunchSpec], Callable[[], object]],
    *,
    top_k: int,
    measurer: Measurer,
    confirm: int = 0,
) -> Measurement:
    """Measure a cost-model ranking of candidates and return what was measured.

    Strategy (the ranking is only trusted so far):

    1. The first ``top_k`` candidates of ``candidates_ranked`` (best predicted first).
    2. Diversity: for every kernel name not among them, its best-ranked candidate, so
       that one bad cost-model ordering cannot hide a kernel entirely.
    3. Refinement: for the winner of rounds 1-2, every other (splits, swizzle) variant
       of the same kernel present in ``candidates_ranked`` and not measured yet.
       Nothing is refined when every candidate failed.
    4. Confirmation (``confirm`` >= 2): the fastest ``confirm`` candidates within
       CONFIRM_MARGIN of the best are timed again, side by side, in two passes (the
       second in the reverse order of the first), and the best is chosen among them by
       the mean of their two passes. One pass through a list favours whatever runs
       first or last while the GPU's clock drifts; a drift that is linear over the two
       passes adds the same to every finalist's mean. A finalist that fails now scores
       infinity. With fewer than two finalists nothing is timed again.

    ``make_call(spec)`` prepares the callable that launches ``spec`` once; when it
    raises, the candidate scores infinity like one whose launch fails. Duplicates in
    the ranking are measured once. The result holds every measured candidate in the
    ranking's order (so equal times go to the better-ranked one), all failures, and
    the wall-clock seconds of the whole search.
    """
    if not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 0:
        raise ValueError(f"top_k: got {top_k!r}; accepted: an integer >= 0")
    # NOTE: a make_call that is not callable failed every candidate, and tune returned a
    # measurement whose best is None, as if every kernel had failed on the GPU.
    if not callable(make_call):
        raise ValueError(f"make_call: got {type(make_call).__name__}; accepted: a callable (LaunchSpec) -> callable")
    if not callable(getattr(measurer, "measure", None)):
        raise ValueError(f"measurer: got {type(measurer).__name__}; accepted: a gemm_runtime.tuner.Measurer")
    if not isinstance(confirm, int) or isinstance(confirm, bool) or confirm < 0:
        raise ValueError(f"confirm: got {confirm!r}; accepted: an integer >= 0 (0 or 1: no confirmation)")
    # NOTE: one LaunchSpec (or None) in place of the ranking raised TypeError "object is
    # not iterable", naming no argument.
    if isinstance(candidates_ranked, LaunchSpec) or not isinstance(candidates_ranked, Iterable):
        raise ValueError(f"candidates_ranked: got {candidates_ranked!r}; accepted: a sequence of LaunchSpecs "
                         "(gemm_runtime.plan), best predicted first")
    t0 = time.perf_counter()
    ranked = list(dict.fromkeys(candidates_ranked))  # ordered de-duplication
    bad = next((c for c in ranked if not isinstance(c, LaunchSpec)), None)
    if bad is not None:
        raise ValueError(f"candidates_ranked: got an item {bad!r}; accepted: LaunchSpecs (gemm_runtime.plan)")

    first = ranked[:top_k]
    kernels = {c.kernel for c in first}
    for c in ranked[top_k:]:
        if c.kernel not in kernels:
            kernels.add(c.kernel)
            first.append(c)
    result = _measure_round(first, make_call, measurer)

    winner = result.best
    if winner is not None:
        refine = [c for c in ranked if c.kernel == winner.kernel and c not in result.times]
        if refine:
            result = result.merged(_measure_round(refine, make_call, measurer))

    finalists = _finalists(result, confirm)
    if len(finalists) >= 2:
        again = _confirm(finalists, make_call, measurer)
        result.confirmed = again.times
        result.failures.update(again.failures)

    result = result.ordered(ranked)
    result.seconds = time.perf_counter() - t0
    return result


def _finalists(result: Measurement, count: int) -> list[LaunchSpec]:
    """The ``count`` fastest candidates within CONFIRM_MARGIN of the fastest, fastest first."""
    fastest = min(result.times.values(), default=math.inf)
    if not math.isfinite(fastest):
        return []
    close = [s for s, ms in result.times.items() if ms <= fastest * (1 + CONFIRM_MARGIN)]
    return sorted(close, key=lambda s: result.times[s])[:count]


def _confirm(
    finalists: Sequence[LaunchSpec], make_call: Callable[[LaunchSpec], Callable[[], object]], measurer: Measurer
) -> Measurement:
    """Each finalist's mean of two passes, the second reversed (see ``tune``), in the
    finalists' order, with the failures of either pass."""
    forward = _measure_round(finalists, make_call, measurer)
    backward = _measure_round(list(reversed(finalists)), make_call, measurer)
    means = {s: (forward.times[s] + backward.times[s]) / 2 for s in finalists}
    return Measurement(means, {**backward.failures, **forward.failures})


def _measure_round(
    specs: Sequence[LaunchSpec], make_call: Callable[[LaunchSpec], Callable[[], object]], measurer: Measurer
) -> Measurement:
    prepared: list[tuple[LaunchSpec, Callable[[], object]]] = []
    failed: dict[LaunchSpec, str] = {}
    for spec in specs:
        try:
            prepared.append((spec, make_call(spec)))
        except Exception as e:  # a candidate that cannot even be prepared scores infinity
            failed[spec] = "cannot prepare the call: " + _failure(e)
    result = measurer.measure(prepared)
    for spec, error in failed.items():
        result.times[spec] = math.inf
        result.failures[spec] = error
    return result
