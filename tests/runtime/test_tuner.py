"""gemm_runtime.tuner on CPU: fake callables and a fake timer, no GPU."""

from __future__ import annotations

import math
import subprocess
import sys
import threading
import time

import pytest

from gemm_runtime import tuner
from gemm_runtime.plan import LaunchSpec
from gemm_runtime.settings import REPO_ROOT
from gemm_runtime.tuner import Measurement, Measurer, tune


class FakeCall:
    """A candidate's launch: counts calls, raises ``error`` if set; ``ms`` is what the
    fake timer reports for it."""

    def __init__(self, ms: float = 1.0, error: Exception | None = None):
        self.ms, self.error, self.calls = ms, error, 0

    def __call__(self) -> None:
        self.calls += 1
        if self.error is not None:
            raise self.error


class FakeTimer:
    """Calls ``fn`` once (so a raising candidate raises here, as in a real warm-up) and
    reports its ``ms``; records every (reps, max_seconds) it was given."""

    def __init__(self):
        self.args: list[tuple[int, float]] = []

    def __call__(self, fn, reps, max_seconds):
        self.args.append((reps, max_seconds))
        fn()
        return fn.ms


def S(kernel: str, splits: int = 1, swizzle: int = 0) -> LaunchSpec:
    return LaunchSpec(kernel, splits, swizzle)


# ---- Measurer -------------------------------------------------------------------------
def test_measure_returns_timer_medians_in_order():
    timer = FakeTimer()
    cands = [(S("a"), FakeCall(3.0)), (S("b"), FakeCall(1.5)), (S("c", 2), FakeCall(2.0))]
    result = Measurer(timer).measure(cands)
    assert isinstance(result, Measurement)
    assert result.results == [(S("a"), 3.0), (S("b"), 1.5), (S("c", 2), 2.0)]
    assert list(result) == result.results and len(result) == 3
    assert result.best == S("b") and result.failures == {}
    assert all(call.calls == 1 for _, call in cands)


def test_measure_passes_reps_and_max_time_to_the_timer():
    timer = FakeTimer()
    Measurer(timer, reps=7, max_time=0.25).measure([(S("a"), FakeCall()), (S("b"), FakeCall())])
    assert timer.args == [(7, 0.25), (7, 0.25)]


def test_failing_candidates_score_infinity_and_never_abort():
    def timer(fn, reps, max_seconds):
        if fn.ms == "timer":
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        fn()
        return fn.ms

    cands = [
        (S("raises"), FakeCall(error=ValueError("bad launch"))),
        (S("ok"), FakeCall(2.0)),
        (S("timer"), FakeCall("timer")),
        (S("nan"), FakeCall(float("nan"))),
        (S("negative"), FakeCall(-1.0)),
        (S("none"), FakeCall(None)),
        (S("ok2"), FakeCall(1.0)),
    ]
    result = Measurer(timer).measure(cands)
    assert list(result.times) == [s for s, _ in cands]  # every candidate measured, in order
    assert result.times[S("ok")] == 2.0 and result.times[S("ok2")] == 1.0
    bad = [S("raises"), S("timer"), S("nan"), S("negative"), S("none")]
    assert all(result.times[s] == math.inf for s in bad)
    assert set(result.failures) == set(bad)
    assert result.failures[S("raises")] == "ValueError: bad launch"
    assert "illegal memory access" in result.failures[S("timer")]
    assert "nan" in result.failures[S("nan")]
    assert result.best == S("ok2")


def test_keyboard_interrupt_is_not_swallowed():
    with pytest.raises(KeyboardInterrupt):
        Measurer(FakeTimer()).measure([(S("a"), FakeCall(error=KeyboardInterrupt()))])


def test_best_ties_go_to_the_earlier_candidate_and_none_when_all_fail():
    result = Measurer(FakeTimer()).measure([(S("a"), FakeCall(1.0)), (S("b"), FakeCall(1.0))])
    assert result.best == S("a")
    failed = Measurer(FakeTimer()).measure([(S("a"), FakeCall(error=RuntimeError("x")))])
    assert failed.best is None and failed.times == {S("a"): math.inf}
    assert Measurer(FakeTimer()).measure([]).best is None


def test_a_candidate_given_twice_is_measured_once():
    first, second = FakeCall(2.0), FakeCall(1.0)
    result = Measurer(FakeTimer()).measure([(S("a"), first), (S("a"), second)])
    assert result.times == {S("a"): 2.0} and first.calls == 1 and second.calls == 0


def test_measure_reports_total_seconds():
    def slow_timer(fn, reps, max_seconds):
        time.sleep(0.02)
        return 1.0

    result = Measurer(slow_timer).measure([(S("a"), FakeCall()), (S("b"), FakeCall())])
    assert 0.04 <= result.seconds < 5


@pytest.mark.parametrize(
    "kwargs", [dict(reps=0), dict(reps=1.5), dict(reps=True), dict(max_time=0), dict(max_time=-1.0),
               dict(max_time=math.inf), dict(max_time="1"), dict(timer=42)]
)  # fmt: skip
def test_measurer_validates_its_arguments(kwargs):
    with pytest.raises(ValueError) as e:
        Measurer(**kwargs)
    assert "accepted" in str(e.value)


def test_measure_keeps_no_per_call_state_so_threads_do_not_mix():
    """Two measure calls at once on one Measurer, interleaved inside the timer."""
    barrier = threading.Barrier(2)

    def timer(fn, reps, max_seconds):
        barrier.wait(timeout=5)  # both threads are inside measure at the same time
        fn()
        return fn.ms

    measurer = Measurer(timer, reps=3, max_time=0.1)
    before = dict(vars(measurer))
    lists = {
        "x": [(S("x1"), FakeCall(1.0)), (S("x2"), FakeCall(error=RuntimeError("x2 failed"))), (S("x3"), FakeCall(0.5))],
        "y": [(S("y1"), FakeCall(4.0)), (S("y2"), FakeCall(3.0)), (S("y3"), FakeCall(error=OSError("y3 failed")))],
    }
    results: dict[str, Measurement] = {}
    threads = [threading.Thread(target=lambda n=n: results.__setitem__(n, measurer.measure(lists[n]))) for n in lists]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert results["x"].times == {S("x1"): 1.0, S("x2"): math.inf, S("x3"): 0.5}
    assert results["x"].failures == {S("x2"): "RuntimeError: x2 failed"} and results["x"].best == S("x3")
    assert results["y"].times == {S("y1"): 4.0, S("y2"): 3.0, S("y3"): math.inf}
    assert results["y"].failures == {S("y3"): "OSError: y3 failed"} and results["y"].best == S("y2")
    assert vars(measurer) == before


def test_default_timer_is_the_flushed_event_timer(monkeypatch):
    from gemm_runtime import timing

    seen = {}

    def fake_median_ms(fn, **kwargs):
        seen.update(kwargs)
        return 0.125

    monkeypatch.setattr(timing, "median_ms", fake_median_ms)
    m = Measurer(reps=4, max_time=0.3)
    assert m.timer is tuner.default_timer
    assert m.measure([(S("a"), FakeCall())]).times == {S("a"): 0.125}
    assert seen["reps"] == 4 and seen["max_ms"] == pytest.approx(300.0)
    assert seen.get("flush", True) is True  # the L2 flush is on


def test_importing_tuner_and_timing_does_not_import_torch():
    code = "import sys, gemm_runtime.tuner, gemm_runtime.timing; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False, cwd=REPO_ROOT).returncode == 0


# ---- tune -----------------------------------------------------------------------------
class FakeProblem:
    """make_call for tune: a FakeCall per candidate with a given time (default 5 ms);
    records which candidates were prepared."""

    def __init__(self, times: dict[LaunchSpec, float] | None = None, errors: dict[LaunchSpec, Exception] | None = None,
                 unpreparable: set[LaunchSpec] = frozenset()):  # fmt: skip
        self.times, self.errors, self.unpreparable = dict(times or {}), dict(errors or {}), set(unpreparable)
        self.prepared: list[LaunchSpec] = []

    def __call__(self, spec: LaunchSpec) -> FakeCall:
        self.prepared.append(spec)
        if spec in self.unpreparable:
            raise RuntimeError(f"no workspace for {spec.splits} splits")
        return FakeCall(self.times.get(spec, 5.0), self.errors.get(spec))


# Cost-model ranking: kernel a's variants, b, c, a again, d last.
RANKED = [S("a"), S("a", 2), S("b"), S("a", 1, 1), S("c"), S("b", 4), S("a", 4, 2), S("c", 2), S("d"), S("d", 2, 1)]


def test_tune_measures_top_k_plus_the_best_ranked_candidate_of_every_other_kernel():
    problem = FakeProblem({S("a"): 1.0})
    result = tune(RANKED, problem, top_k=2, measurer=Measurer(FakeTimer()))
    first_round = [S("a"), S("a", 2), S("b"), S("c"), S("d")]
    assert problem.prepared[: len(first_round)] == first_round
    assert {s.kernel for s in result.times} == {"a", "b", "c", "d"}
    # no other variant of the losers b, c, d
    assert S("b", 4) not in result.times and S("c", 2) not in result.times and S("d", 2, 1) not in result.times


def test_tune_respects_top_k():
    # Every kernel is already in the top 4: nothing is added for diversity.
    ranked = [S("a"), S("b"), S("a", 2), S("b", 2), S("a", 4), S("b", 4)]
    problem = FakeProblem({S("b"): 1.0})  # b wins: its other variants are refined
    result = tune(ranked, problem, top_k=3, measurer=Measurer(FakeTimer()))
    assert problem.prepared[:3] == [S("a"), S("b"), S("a", 2)]
    assert S("a", 4) not in result.times  # beyond top_k, a loser's variant
    assert set(result.times) == {S("a"), S("b"), S("a", 2), S("b", 2), S("b", 4)}


def test_tune_refines_the_winners_split_and_swizzle_variants():
    # b is ranked third but fastest in round 1; its split-K variant is faster still.
    problem = FakeProblem({S("a"): 3.0, S("b"): 2.0, S("b", 4): 0.5, S("c"): 2.5})
    result = tune(RANKED, problem, top_k=1, measurer=Measurer(FakeTimer()))
    assert problem.prepared == [S("a"), S("b"), S("c"), S("d"), S("b", 4)]
    assert result.best == S("b", 4) and result.times[S("b", 4)] == 0.5
    # the result is in ranking order whatever order things were measured in
    assert list(result.times) == [s for s in RANKED if s in result.times]


def test_tune_refines_every_unmeasured_variant_of_the_winner_only():
    problem = FakeProblem({S("a", 2): 1.0})
    result = tune(RANKED, problem, top_k=2, measurer=Measurer(FakeTimer()))
    refined = problem.prepared[5:]
    assert refined == [S("a", 1, 1), S("a", 4, 2)]  # a's variants not in round 1, in rank order
    assert result.best == S("a", 2)
    assert len(problem.prepared) == len(set(problem.prepared))  # nothing measured twice


def test_tune_failures_score_infinity_and_do_not_stop_the_search():
    problem = FakeProblem(
        {S("c"): 2.0, S("c", 2): 1.0},
        errors={S("a"): RuntimeError("launch failed")},
        unpreparable={S("b")},
    )
    result = tune(RANKED, problem, top_k=1, measurer=Measurer(FakeTimer()))
    assert result.times[S("a")] == math.inf and result.failures[S("a")] == "RuntimeError: launch failed"
    assert result.times[S("b")] == math.inf and "no workspace for 1 splits" in result.failures[S("b")]
    assert result.best == S("c", 2)  # c won round 1, then its split variant


def test_tune_with_every_candidate_failing_returns_no_best_and_refines_nothing():
    ranked = [S("a"), S("a", 2), S("b")]
    problem = FakeProblem(errors={s: RuntimeError("boom") for s in ranked})
    result = tune(ranked, problem, top_k=1, measurer=Measurer(FakeTimer()))
    assert result.best is None
    assert problem.prepared == [S("a"), S("b")]  # no refinement round
    assert set(result.failures) == {S("a"), S("b")}


def test_tune_ties_go_to_the_better_ranked_candidate():
    ranked = [S("a"), S("b"), S("b", 2)]
    problem = FakeProblem({S("a"): 2.0, S("b"): 3.0, S("b", 2): 2.0})
    assert tune(ranked, problem, top_k=1, measurer=Measurer(FakeTimer())).best == S("a")


def test_tune_edge_cases_of_top_k_and_duplicates():
    ranked = [S("a"), S("a"), S("b"), S("a", 2)]
    problem = FakeProblem()
    result = tune(ranked, problem, top_k=100, measurer=Measurer(FakeTimer()))
    assert problem.prepared == [S("a"), S("b"), S("a", 2)]
    assert list(result.times) == [S("a"), S("b"), S("a", 2)]
    problem = FakeProblem({S("b"): 1.0})
    result = tune(ranked, problem, top_k=0, measurer=Measurer(FakeTimer()))  # diversity only, then refinement
    assert problem.prepared == [S("a"), S("b")] and result.best == S("b")
    assert tune([], FakeProblem(), top_k=3, measurer=Measurer(FakeTimer())).best is None
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError):
            tune(ranked, FakeProblem(), top_k=bad, measurer=Measurer(FakeTimer()))


def test_tune_reports_the_total_seconds_of_both_rounds():
    def slow_timer(fn, reps, max_seconds):
        time.sleep(0.01)
        return fn.ms

    ranked = [S("a"), S("a", 2), S("b")]
    result = tune(ranked, FakeProblem({S("a"): 1.0}), top_k=1, measurer=Measurer(slow_timer))
    assert len(result.times) == 3 and 0.03 <= result.seconds < 5


def test_tune_docstring_documents_the_strategy():
    doc = tune.__doc__ or ""
    assert "top_k" in doc and "Diversity" in doc and "Refinement" in doc and "Confirmation" in doc


class DriftingTimer:
    """A GPU whose clock falls as it heats: each timing reports the candidate's own time
    times (1 + ``drift`` x the number of timings before it)."""

    def __init__(self, drift: float):
        self.drift, self.count, self.order = drift, 0, []

    def __call__(self, fn, reps, max_seconds):
        fn()
        self.order.append(fn.ms)
        ms = fn.ms * (1 + self.drift * self.count)
        self.count += 1
        return ms


def test_confirmation_undoes_the_first_rounds_drift():
    # b is truly 2% faster than a, but a is timed first on a GPU that slows 3% per
    # timing: the first round ranks a ahead.
    ranked = [S("a"), S("b"), S("c")]
    problem = FakeProblem({S("a"): 1.00, S("b"): 0.98, S("c"): 1.5})
    plain = tune(ranked, problem, top_k=3, measurer=Measurer(DriftingTimer(0.03)))
    assert plain.best == S("a") and plain.confirmed == {}
    confirmed = tune(ranked, FakeProblem(problem.times), top_k=3, measurer=Measurer(DriftingTimer(0.03)), confirm=3)
    assert confirmed.best == S("b")
    assert set(confirmed.confirmed) == {S("a"), S("b")}  # c is beyond CONFIRM_MARGIN
    assert confirmed.confirmed[S("b")] < confirmed.confirmed[S("a")]
    assert confirmed.times == plain.times  # the first round's times are kept as measured


def test_confirmation_times_the_finalists_twice_the_second_time_reversed():
    ranked = [S("a"), S("b"), S("c"), S("d")]
    times = {S("a"): 1.05, S("b"): 1.0, S("c"): 1.08, S("d"): 1.2}
    problem = FakeProblem(times)
    result = tune(ranked, problem, top_k=4, measurer=Measurer(FakeTimer()), confirm=2)
    # round 1 (no variants to refine), then the two fastest: fastest first, then reversed
    assert problem.prepared == ranked + [S("b"), S("a"), S("a"), S("b")]
    assert result.confirmed == {S("a"): 1.05, S("b"): 1.0} and list(result.confirmed) == [S("a"), S("b")]
    assert result.best == S("b")
    assert tuner.CONFIRM_MARGIN == pytest.approx(0.10)


def test_confirmation_ties_go_to_the_better_ranked_and_lone_winners_are_not_retimed():
    problem = FakeProblem({S("a"): 1.0, S("b"): 1.0})
    result = tune([S("a"), S("b")], problem, top_k=2, measurer=Measurer(FakeTimer()), confirm=3)
    assert result.best == S("a") and len(problem.prepared) == 6
    problem = FakeProblem({S("a"): 1.0, S("b"): 2.0})  # b is 100% slower: no finalist but a
    result = tune([S("a"), S("b")], problem, top_k=2, measurer=Measurer(FakeTimer()), confirm=3)
    assert problem.prepared == [S("a"), S("b")] and result.confirmed == {} and result.best == S("a")
    problem = FakeProblem({S("a"): 1.0, S("b"): 1.0})
    result = tune([S("a"), S("b")], problem, top_k=2, measurer=Measurer(FakeTimer()), confirm=1)
    assert problem.prepared == [S("a"), S("b")] and result.confirmed == {}


def test_a_finalist_failing_its_confirmation_scores_infinity():
    class FailsLater(FakeProblem):
        def __call__(self, spec):
            call = super().__call__(spec)
            if spec == S("a") and self.prepared.count(spec) > 1:
                call.error = RuntimeError("lost the context")
            return call

    problem = FailsLater({S("a"): 0.95, S("b"): 1.0})
    result = tune([S("a"), S("b")], problem, top_k=2, measurer=Measurer(FakeTimer()), confirm=2)
    assert result.confirmed[S("a")] == math.inf and result.best == S("b")
    assert "lost the context" in result.failures[S("a")]


@pytest.mark.parametrize("bad", [-1, 1.5, True, "3"])
def test_tune_validates_confirm(bad):
    with pytest.raises(ValueError, match="confirm: got"):
        tune([S("a")], FakeProblem(), top_k=1, measurer=Measurer(FakeTimer()), confirm=bad)


def test_tune_refuses_a_make_call_measurer_or_candidate_of_the_wrong_kind():
    """Before: a make_call that is not callable failed every candidate and tune returned a
    measurement whose best is None (as if every kernel failed on the GPU); a measurer of
    None or a candidate that is a kernel name raised AttributeError from inside."""
    problem, measurer = FakeProblem(), Measurer(FakeTimer())
    with pytest.raises(ValueError, match=r"^make_call: got NoneType; accepted: a callable"):
        tune(RANKED, None, top_k=2, measurer=measurer)
    with pytest.raises(ValueError, match=r"^measurer: got NoneType; accepted: a gemm_runtime.tuner.Measurer"):
        tune(RANKED, problem, top_k=2, measurer=None)
    with pytest.raises(ValueError, match=r"^candidates_ranked: got an item 'a'; accepted: LaunchSpecs"):
        tune(["a", "b"], problem, top_k=2, measurer=measurer)


@pytest.mark.parametrize("ranking", [S("a"), None, 3])
def test_tune_refuses_a_ranking_that_is_not_a_sequence_by_name(ranking):
    """Before: one LaunchSpec (or None) in place of the ranking raised TypeError 'object is
    not iterable', naming no argument."""
    with pytest.raises(ValueError, match=r"^candidates_ranked: got .*; accepted: a sequence of LaunchSpecs"):
        tune(ranking, FakeProblem(), top_k=2, measurer=Measurer(FakeTimer()))
