"""bench.experiments.dense_plans: which plans a problem times (CPU)."""

from bench.experiments.dense_plans import candidates
from gemm_runtime.plan import LaunchSpec


def test_candidates_take_the_top_then_every_matching_kernel_once():
    ranked = [
        (1.0, LaunchSpec("sm90_128x256", 1, 3)),
        (2.0, LaunchSpec("sm90_128x192", 1, 3)),
        (3.0, LaunchSpec("sm80_128x128", 1, 3)),
        (4.0, LaunchSpec("sm90_128x256", 2, 3)),
        (5.0, LaunchSpec("sm80_64x64", 1, 0)),
    ]
    got = candidates(ranked, top=2, match=["128x256"])
    assert [plan for _, plan in got] == [
        LaunchSpec("sm90_128x256", 1, 3),
        LaunchSpec("sm90_128x192", 1, 3),
        LaunchSpec("sm90_128x256", 2, 3),
    ]
    assert [t for t, _ in got] == [1.0, 2.0, 4.0]  # each with its own prediction


def test_candidates_without_match_are_the_top():
    ranked = [(float(i), LaunchSpec(f"k{i}", 1, 0)) for i in range(5)]
    assert [plan.kernel for _, plan in candidates(ranked, top=3, match=[])] == ["k0", "k1", "k2"]


def test_candidates_add_each_plan_at_other_swizzles():
    ranked = [(1.0, LaunchSpec("sm90_128x256", 1, 3)), (2.0, LaunchSpec("sm90_128x192", 1, 3)),
              (3.0, LaunchSpec("sm90_128x256", 1, 4))]  # fmt: skip
    got = candidates(ranked, top=1, match=["128x192"], swizzles=[4, 5])
    assert [plan for _, plan in got] == [
        LaunchSpec("sm90_128x256", 1, 3),
        LaunchSpec("sm90_128x256", 1, 4),
        LaunchSpec("sm90_128x256", 1, 5),
        LaunchSpec("sm90_128x192", 1, 3),
        LaunchSpec("sm90_128x192", 1, 4),
        LaunchSpec("sm90_128x192", 1, 5),
    ]
    assert [t for t, _ in got] == [1.0, 1.0, 1.0, 2.0, 2.0, 2.0]  # the varied plan's prediction
