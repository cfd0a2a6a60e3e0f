"""Dispatcher: feasibility, ranking, the policies and the check of every cached launch,
with fake kernels (real KernelSpecs) on CPU."""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass

import pytest

from codegen.spec import KernelSpec
from codegen.vocabulary import BOrder, DataType
from gemm_runtime.context import ProblemKey, arch_limit, make_key
from gemm_runtime.cost_model import DeviceModel
from gemm_runtime.dispatch_cache import DispatchCache, ImportReport
from gemm_runtime.dispatcher import Dispatcher
from gemm_runtime.errors import DispatchCacheWarning, GemmArgumentError, GraphCaptureError, UnsupportedProblemError
from gemm_runtime.plan import LaunchSpec
from gemm_runtime.tuner import Measurement
from gemm_runtime.types import DispatchPolicy
from tests.helpers import spec_for

ARCH = 90
H200 = DeviceModel.of(ARCH, 132, 1980000, 3201000, 6144)
WORKSPACE = (1 << 20, 32 << 20)


@dataclass(frozen=True)
class FakeKernel:
    spec: KernelSpec
    ctas_per_sm: int = 2

    @property
    def name(self) -> str:
        return self.spec.name


F16_NK8 = FakeKernel(spec_for())
THIN = FakeKernel(spec_for(cta=(16, 64, 128), warps=(1, 2, 2)), ctas_per_sm=4)
BF16_KN2 = FakeKernel(spec_for(a_type=DataType.BF16, b_type=DataType.BF16, d_type=DataType.BF16, b_order=BOrder.KN, align=2))


def dispatcher(*kernels: FakeKernel) -> Dispatcher:
    return Dispatcher(kernels or (F16_NK8, THIN, BF16_KN2), H200, DispatchCache(ARCH, "fake"), WORKSPACE)


def f16(m: int, n: int = 4096, k: int = 4096):
    return make_key(DataType.F16, BOrder.NK, DataType.F16, m, n, k, arch=ARCH)


def bf16_kn2(m: int, n: int = 4096, k: int = 4096):
    return make_key(DataType.BF16, BOrder.KN, DataType.BF16, m, n, k, align=2, arch=ARCH)


def never_measure() -> Measurement:
    raise AssertionError("measured")


# --- the cost model -----------------------------------------------------------------------


def test_feasible_ranked_and_predicted():
    d = dispatcher()
    assert d.feasible(bf16_kn2(16)) == [BF16_KN2]
    assert d.feasible(f16(16)) == [F16_NK8, THIN]
    ranking = d.ranked(f16(16))
    assert [c for c, _ in ranking] == sorted(c for c, _ in ranking)
    assert {p.kernel for _, p in ranking} == {F16_NK8.name, THIN.name}
    assert d.predicted(f16(16)) == ranking[0][1]
    assert d.predicted(f16(16)) is d.predicted(f16(16))  # memoized
    assert d.kernel(THIN.name) is THIN and d.kernel("nope") is None


def test_no_feasible_kernel_says_why():
    with pytest.raises(UnsupportedProblemError, match="operand type is not bf16") as info:
        dispatcher(F16_NK8, THIN).ranked(bf16_kn2(1))
    assert info.value.reasons == {"operand type is not bf16": 2}


def test_a_problem_the_gpu_cannot_run_says_so_first():
    """bf16 on a Turing GPU: the GPU's limit leads the message, not the kernels' reasons
    (which would read as a build that lacks kernels)."""
    turing = Dispatcher((F16_NK8, THIN), DeviceModel.of(75, 40, 1590000, 5001000, 4096), DispatchCache(75, "fake"),
                        WORKSPACE)  # fmt: skip
    key = make_key(DataType.BF16, BOrder.NK, DataType.BF16, 16, 4096, 4096, arch=75)
    with pytest.raises(UnsupportedProblemError, match=r"bf16 needs compute capability 8\.0 or later .* sm_75") as info:
        turing.ranked(key)
    assert info.value.limit.startswith("bf16 needs") and info.value.reasons == {"operand type is not bf16": 2}
    # The same kernels on sm_90 give no limit: there it is the build's choice of kernels.
    with pytest.raises(UnsupportedProblemError) as info:
        dispatcher(F16_NK8, THIN).ranked(make_key(DataType.BF16, BOrder.NK, DataType.BF16, 16, 4096, 4096, arch=ARCH))
    assert info.value.limit is None and "compute capability" not in str(info.value)


def test_arch_limits():
    def key(arch, a_type=DataType.F16, quant="none", experts=0):
        return ProblemKey(arch, a_type, a_type if quant == "none" else DataType.U4, BOrder.NK, a_type, 8, quant, "none",
                          4096, 4096, 16, experts)  # fmt: skip

    assert arch_limit(key(75, DataType.BF16)) and arch_limit(key(70, DataType.BF16))
    assert arch_limit(key(80, DataType.BF16)) is None and arch_limit(key(0, DataType.BF16)) is None
    assert "Volta" in arch_limit(key(70, quant="u4g128")) and arch_limit(key(75, quant="u4g128")) is None
    assert "grouped" in arch_limit(key(75, experts=8)) and arch_limit(key(80, experts=8)) is None
    assert arch_limit(key(70)) is None  # fp16 dense runs everywhere


# --- no cached decision launches the wrong kernel -------------------------------------------


def test_cached_launch_of_a_kernel_that_cannot_serve_the_problem_gives_way_to_the_cost_model():
    d = dispatcher()
    key = bf16_kn2(16)
    d.cache.put(key, LaunchSpec(F16_NK8.name))  # f16 / N x K / align 8 for a bf16 / K x N / align 2 problem
    assert d.select(key) == d.predicted(key) and d.select(key).kernel == BF16_KN2.name
    assert d.select(key, DispatchPolicy.REUSE).kernel == BF16_KN2.name
    assert d.plan(DispatchPolicy.DEFAULT, key, WORKSPACE, never_measure).kernel == BF16_KN2.name
    assert d.plan(DispatchPolicy.APPEND, key, WORKSPACE, never_measure).kernel == BF16_KN2.name


def test_imported_record_that_cannot_serve_its_key_is_skipped():
    source = DispatchCache(ARCH)
    source.put(bf16_kn2(16), LaunchSpec(F16_NK8.name))
    source.put(f16(16), LaunchSpec(THIN.name, splits=2, swizzle=1))
    d = dispatcher()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = d.import_cache(io.StringIO(source.to_json_text()))
    assert report == ImportReport(added=1, skipped_invalid=1)
    assert len(caught) == 1 and issubclass(caught[0].category, DispatchCacheWarning)
    assert "operand type is not bf16" in str(caught[0].message)
    assert d.cache.get(bf16_kn2(16)) is None
    assert d.select(f16(16)) == LaunchSpec(THIN.name, splits=2, swizzle=1)


def test_a_split_of_a_kernel_that_takes_none_is_not_imported_nor_served_from_the_cache():
    # The narrow dense decode tiles take no split-K (Sm80Family.max_splits): a record that
    # splits one, imported or cached, gives way to the cost model.
    narrow = FakeKernel(spec_for(cta=(16, 16, 256), warps=(1, 1, 4), stages=4), ctas_per_sm=3)
    assert narrow.spec.mainloop.max_splits(narrow.spec) == 1
    source = DispatchCache(ARCH)
    source.put(f16(1), LaunchSpec(narrow.name, splits=2))
    d = dispatcher(F16_NK8, THIN, narrow)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = d.import_cache(io.StringIO(source.to_json_text()))
    assert report == ImportReport(added=0, skipped_invalid=1)
    assert "kernel.splits: got 2; accepted: 1 (this kernel takes no split-K)" in str(caught[0].message)
    d.cache.put(f16(1), LaunchSpec(narrow.name, splits=2))
    assert d.select(f16(1)) == d.predicted(f16(1)) != LaunchSpec(narrow.name, splits=2)


@pytest.mark.parametrize(
    "plan",
    [
        LaunchSpec("not_in_this_build"),
        LaunchSpec(F16_NK8.name, swizzle=6),
        LaunchSpec(F16_NK8.name, splits=0),
        LaunchSpec(F16_NK8.name, splits=65),
    ],
)
def test_exact_and_reused_hits_out_of_range_give_way_to_the_cost_model(plan):
    d = dispatcher()
    d.cache.put(f16(64), plan)
    assert d.select(f16(64)) == d.predicted(f16(64))
    assert d.select(f16(20), DispatchPolicy.REUSE) == d.predicted(f16(20))


def test_hits_are_checked_against_the_grid_of_the_actual_problem():
    d = dispatcher()
    huge = f16(2**31 - 1, n=1024)
    d.cache.put(huge, LaunchSpec(THIN.name, swizzle=5))  # 2**27 M tiles x 32 CTAs: past gridDim.x
    assert d.select(huge) == d.predicted(huge)
    assert d.select(huge._replace(m=2**31 - 2), DispatchPolicy.REUSE) == d.predicted(huge._replace(m=2**31 - 2))
    # The same launch serves a smaller M, which REUSE maps to it.
    assert d.select(f16(2**20, n=1024), DispatchPolicy.REUSE) == LaunchSpec(THIN.name, swizzle=5)


def test_reused_hit_that_serves_the_problem_is_used():
    d = dispatcher()
    d.cache.put(f16(64), LaunchSpec(THIN.name, splits=2, swizzle=2))
    assert d.select(f16(20), DispatchPolicy.REUSE) == LaunchSpec(THIN.name, splits=2, swizzle=2)
    assert d.select(f16(20)) == d.predicted(f16(20))  # DEFAULT: exact hits only
    assert d.select(f16(65), DispatchPolicy.REUSE) == d.predicted(f16(65))


def test_split_k_that_does_not_fit_the_callers_workspace_runs_with_one_split():
    d = dispatcher()
    d.cache.put(f16(64), LaunchSpec(THIN.name, splits=4, swizzle=1))
    assert d.select(f16(64), workspace=(0, 0)) == LaunchSpec(THIN.name, splits=1, swizzle=1)
    assert d.select(f16(64), workspace=WORKSPACE) == LaunchSpec(THIN.name, splits=4, swizzle=1)
    assert d.select(f16(64), workspace=(0, 0)).splits == 1


def test_sm90_split_k_is_checked_against_its_split_tiles_only():
    """llama3-70b qkv at M = 1024 on 128 x 256 tiles (320, of which 56 split on 132
    CTAs): a cached 2-split launch runs split in the default workspace (7.3 MB of
    partials, not 41.9), is demoted to one split in a workspace one byte short, and a
    forced one is refused there naming kernel.splits."""
    from codegen.families import Mainloop
    from codegen.vocabulary import MmaAtom

    bf16 = dict(a_type=DataType.BF16, b_type=DataType.BF16, d_type=DataType.BF16)
    sm90 = FakeKernel(spec_for(mainloop=Mainloop.SM90, mma=MmaAtom.M64NK16, cta=(128, 256, 64), warps=(8, 1, 1),
                               stages=4, arch_min=90, arch_max=90, **bf16), ctas_per_sm=1)  # fmt: skip
    key = make_key(DataType.BF16, BOrder.NK, DataType.BF16, 1024, 10240, 8192, arch=ARCH)
    d = dispatcher(sm90)
    plan = LaunchSpec(sm90.name, splits=2, swizzle=3)
    d.cache.put(key, plan)
    assert d.select(key) == plan
    assert any(p.splits == 2 for _, p in d.ranked(key))
    short = (1 << 20, 56 * 128 * 256 * 4 - 1)
    assert d.select(key, workspace=short) == LaunchSpec(sm90.name, splits=1, swizzle=3)
    assert d.forced(plan, key, WORKSPACE) == plan
    with pytest.raises(GemmArgumentError) as info:
        d.forced(plan, key, short)
    assert info.value.argument == "kernel.splits" and "for the 56 tiles that split" in info.value.accepted


# --- forced kernels: the same check, as an error naming the argument -------------------------


@pytest.mark.parametrize(
    "plan, key, workspace, argument, accepted",
    [
        (LaunchSpec("nope"), f16(8), WORKSPACE, "kernel", "a kernel name from Gemm.kernels"),
        (LaunchSpec(F16_NK8.name), bf16_kn2(8), WORKSPACE, "kernel", "operand type is not bf16"),
        (LaunchSpec(F16_NK8.name, swizzle=6), f16(8), WORKSPACE, "kernel.swizzle", "0..5"),
        (LaunchSpec(F16_NK8.name, splits=0), f16(8), WORKSPACE, "kernel.splits", "1..64"),
        (LaunchSpec(F16_NK8.name, splits=65), f16(8), WORKSPACE, "kernel.splits", "1..64"),
        (LaunchSpec(F16_NK8.name, splits=2), f16(8), (0, 0), "kernel.splits", "fit the workspace"),
        (LaunchSpec(THIN.name, swizzle=5), f16(2**31 - 1, n=1024), WORKSPACE, "kernel.swizzle", "2147483647 columns"),
    ],
)
def test_forced_launch_errors(plan, key, workspace, argument, accepted):
    with pytest.raises(GemmArgumentError) as info:
        dispatcher().forced(plan, key, workspace)
    assert info.value.argument == argument and accepted in info.value.accepted


@pytest.mark.parametrize(
    "kernel, argument, given",
    [
        (["k"], "kernel", "['k']"),  # unhashable: raised TypeError from the name lookup
        ({"kernel": "k"}, "kernel", "{'kernel': 'k'}"),
        (LaunchSpec(F16_NK8.name, splits=2.5), "kernel.splits", "2.5"),  # passed every range check
        (LaunchSpec(F16_NK8.name, splits="2"), "kernel.splits", "'2'"),
        (LaunchSpec(F16_NK8.name, splits=None), "kernel.splits", "None"),
        (LaunchSpec(F16_NK8.name, swizzle=1.0), "kernel.swizzle", "1.0"),
        (LaunchSpec(F16_NK8.name, swizzle=True), "kernel.swizzle", "True"),
        (LaunchSpec(F16_NK8.name, unpack="no"), "kernel.unpack", "'no'"),
    ],
)
def test_forced_launch_of_the_wrong_types_is_named(kernel, argument, given):
    with pytest.raises(GemmArgumentError) as info:
        dispatcher().choose(DispatchPolicy.DEFAULT, f16(8), WORKSPACE, never_measure, kernel=kernel)
    assert (info.value.argument, info.value.given) == (argument, given)


def test_forced_launch_takes_numpy_integers():
    np = pytest.importorskip("numpy")
    plan = LaunchSpec(F16_NK8.name, splits=np.int64(2), swizzle=np.int32(3))
    assert dispatcher().forced(plan, f16(8), WORKSPACE) == plan


def test_forced_launch_in_range_is_used_as_given():
    plan = LaunchSpec(F16_NK8.name, splits=3, swizzle=5)
    assert dispatcher().forced(plan, f16(8), WORKSPACE) == plan


# --- policies that measure ------------------------------------------------------------------


def _measured(best: LaunchSpec | None):
    calls = []

    def measure() -> Measurement:
        calls.append(1)
        return Measurement({best: 1.0} if best is not None else {})

    return measure, calls


def test_measure_stores_the_winner_and_append_measures_only_once():
    d = dispatcher()
    winner = LaunchSpec(THIN.name, splits=2)
    measure, calls = _measured(winner)
    assert d.plan(DispatchPolicy.APPEND, f16(8), WORKSPACE, measure) == winner
    assert d.plan(DispatchPolicy.APPEND, f16(8), WORKSPACE, measure) == winner
    assert len(calls) == 1 and d.cache.get(f16(8)) == winner
    other = LaunchSpec(F16_NK8.name)
    measure, calls = _measured(other)
    assert d.plan(DispatchPolicy.MEASURE, f16(8), WORKSPACE, measure) == other
    assert len(calls) == 1 and d.cache.get(f16(8)) == other


def test_measure_with_every_candidate_failing_falls_back_to_the_cost_model():
    d = dispatcher()
    measure, calls = _measured(None)
    assert d.plan(DispatchPolicy.MEASURE, f16(8), WORKSPACE, measure) == d.predicted(f16(8))
    assert len(calls) == 1 and len(d.cache) == 0


@pytest.mark.parametrize(
    "winner",
    [
        LaunchSpec("not_in_this_build"),
        LaunchSpec(F16_NK8.name),  # cannot serve bf16 / K x N / align 2
        LaunchSpec(BF16_KN2.name, swizzle=6),
    ],
)
@pytest.mark.parametrize("policy", [DispatchPolicy.MEASURE, DispatchPolicy.APPEND])
def test_a_measured_winner_that_cannot_serve_the_problem_is_neither_used_nor_stored(policy, winner):
    """The tuner's winner is checked like every launch from the cache: one that cannot
    serve the key was returned as it was and stored (then exported) where the cost
    model's choice belongs."""
    d = dispatcher()
    measure, calls = _measured(winner)
    assert d.plan(policy, bf16_kn2(8), WORKSPACE, measure) == d.predicted(bf16_kn2(8))
    assert len(calls) == 1 and len(d.cache) == 0


def test_empty_k_is_never_measured_nor_stored():
    d = dispatcher()
    key = f16(8, k=0)
    assert d.plan(DispatchPolicy.MEASURE, key, WORKSPACE, never_measure) == d.predicted(key)
    assert len(d.cache) == 0


# --- a call's choice: forced, measured, or refused inside a capture ------------------------


def test_choose_forces_a_kernel_by_name_or_launch_and_checks_it():
    d = dispatcher()
    assert d.choose(DispatchPolicy.MEASURE, f16(8), WORKSPACE, never_measure, kernel=THIN.name) == LaunchSpec(THIN.name)
    forced = LaunchSpec(F16_NK8.name, splits=2)
    assert d.choose(DispatchPolicy.DEFAULT, f16(8), WORKSPACE, never_measure, kernel=forced) == forced
    with pytest.raises(GemmArgumentError) as info:
        d.choose(DispatchPolicy.DEFAULT, bf16_kn2(8), WORKSPACE, never_measure, kernel=F16_NK8.name)
    assert info.value.argument == "kernel"


@pytest.mark.parametrize("policy", [DispatchPolicy.MEASURE, DispatchPolicy.APPEND])
def test_choose_refuses_to_measure_while_the_stream_captures_and_says_what_was_asked(policy):
    d = dispatcher()
    asked = f"operation.dispatch is {policy} for 8x4096x4096"
    with pytest.raises(GraphCaptureError, match=f"{asked} while the stream captures a CUDA graph; tune before"):
        d.choose(policy, f16(8), WORKSPACE, never_measure, capturing=asked)
    assert len(d.cache) == 0


def test_choose_inside_a_capture_takes_the_cache_or_the_cost_model_and_outside_measures():
    d = dispatcher()
    # Policies that never measure are served inside a capture (what to capture with).
    for policy in (DispatchPolicy.DEFAULT, DispatchPolicy.REUSE):
        assert d.choose(policy, f16(8), WORKSPACE, never_measure, capturing="asked") == d.predicted(f16(8))
    winner = LaunchSpec(THIN.name, splits=2)
    measure, calls = _measured(winner)
    assert d.choose(DispatchPolicy.MEASURE, f16(8), WORKSPACE, measure) == winner and len(calls) == 1
    # APPEND with an exact entry measures nothing, so a capture may ask for it.
    assert d.choose(DispatchPolicy.APPEND, f16(8), WORKSPACE, never_measure, capturing="asked") == winner


# --- degenerate keys ------------------------------------------------------------------------


@pytest.mark.parametrize("m, n", [(0, 10240), (16, 0)])
def test_an_empty_output_is_ranked_and_a_reused_split_serves_it(m, n):
    """Gemm launches nothing for M or N = 0, but its ranked / predicted / select take
    such keys (and REUSE maps M = 0 to the smallest tuned M): the cost model and the
    sm90 workspace count divided by the empty grid (ZeroDivisionError from inside)."""
    from codegen.families import Mainloop
    from codegen.vocabulary import MmaAtom

    sm90 = FakeKernel(spec_for(mainloop=Mainloop.SM90, mma=MmaAtom.M64NK16, cta=(128, 256, 64), warps=(8, 1, 1),
                               stages=4, arch_min=90, arch_max=90), ctas_per_sm=1)  # fmt: skip
    d = dispatcher(sm90, F16_NK8)
    d.cache.put(f16(1024, n=10240, k=8192), LaunchSpec(sm90.name, splits=2))
    key = f16(m, n=n, k=8192)
    assert all(cost > 0 for cost, _ in d.ranked(key))
    assert d.predicted(key).splits == 1
    reused = d.select(key, DispatchPolicy.REUSE)  # N = 0 is another shape: no entry to reuse
    assert reused == (LaunchSpec(sm90.name, splits=2) if n else d.predicted(key))


# --- arguments of the wrong kind --------------------------------------------------------------


@pytest.mark.parametrize("policy", ["measure", "reuse", None, 2])
def test_a_policy_that_is_not_a_dispatch_policy_is_refused_by_name(policy):
    """Compared by identity, "measure" (or None) was DEFAULT, silently: nothing tuned."""
    d = dispatcher()
    with pytest.raises(GemmArgumentError, match=r"^policy: got .*; accepted: a DispatchPolicy: DEFAULT"):
        d.select(f16(16), policy)
    with pytest.raises(GemmArgumentError, match=r"^policy: "):
        d.choose(policy, f16(16), WORKSPACE, never_measure)


def test_a_key_with_a_negative_size_or_of_another_type_is_refused_by_name():
    """An M of -5 was ranked as a problem; REUSE served it the smallest tuned M's entry."""
    d = dispatcher()
    d.cache.put(f16(64), d.predicted(f16(64)))
    for key, field in ((f16(-5), "key.m"), (f16(16, n=-1), "key.n"), (f16(16, k=-8), "key.k")):
        with pytest.raises(GemmArgumentError, match=rf"^{field}: got -\d+; accepted: an integer >= 0"):
            d.ranked(key)
        with pytest.raises(GemmArgumentError, match=rf"^{field}: "):
            d.select(key, DispatchPolicy.REUSE)
    with pytest.raises(GemmArgumentError, match="^key: got str; accepted: a gemm_runtime.context.ProblemKey"):
        d.predicted("16x4096x4096")
    with pytest.raises(GemmArgumentError, match="^key.a_type: got 'f16'; accepted: a DataType"):
        d.ranked(make_key("f16", BOrder.NK, DataType.F16, 16, 4096, 4096, arch=ARCH))


@pytest.mark.parametrize("workspace", [(1,), "big", (-1, 1 << 20), (1.5, 2), [1 << 20, 32 << 20]])
def test_a_workspace_that_is_not_two_byte_counts_is_refused_by_name(workspace):
    """Before: ValueError 'not enough values to unpack' or a TypeError from inside, and a
    negative size ranked as if it were none."""
    d = dispatcher()
    name = d.predicted(f16(16)).kernel
    for call in (lambda: d.ranked(f16(16), workspace), lambda: d.select(f16(16), workspace=workspace),
                 lambda: d.forced(LaunchSpec(name), f16(16), workspace)):  # fmt: skip
        with pytest.raises(GemmArgumentError, match=r"^workspace: got .*; accepted: \(barrier bytes, partial bytes\)"):
            call()


def test_feasible_forced_and_plan_refuse_a_bad_key_by_name():
    """Before: feasible took an M of -5 (every kernel feasible) and forced served it; plan
    measured it on the GPU first, then the cache's put refused it; a key that is not a
    ProblemKey raised AttributeError from inside (feasible, select, plan, forced)."""
    d = dispatcher()
    name = d.predicted(f16(16)).kernel
    for key, said in ((f16(-5), r"^key.m: got -5; accepted: an integer >= 0"),
                      ("16x4096x4096", r"^key: got str; accepted: a gemm_runtime.context.ProblemKey")):  # fmt: skip
        with pytest.raises(GemmArgumentError, match=said):
            d.feasible(key)
        with pytest.raises(GemmArgumentError, match=said):
            d.select(key)
        with pytest.raises(GemmArgumentError, match=said):
            d.forced(LaunchSpec(name), key, WORKSPACE)
        with pytest.raises(GemmArgumentError, match=said):
            d.plan(DispatchPolicy.MEASURE, key, WORKSPACE, never_measure)
    assert d.feasible(f16(0)) == [F16_NK8, THIN]  # an empty problem stays feasible


def test_plan_checks_its_workspace_and_measure_before_measuring():
    """Before: a workspace that is not two byte counts raised TypeError from inside the
    workspace check after measure() had timed every candidate; a measure of None raised
    'NoneType' object is not callable, one returning None AttributeError 'best'."""
    d = dispatcher()
    with pytest.raises(GemmArgumentError, match=r"^workspace: got \(1,\); accepted: \(barrier bytes, partial bytes\)"):
        d.plan(DispatchPolicy.MEASURE, f16(16), (1,), never_measure)
    with pytest.raises(GemmArgumentError, match=r"^measure: got NoneType; accepted: a callable"):
        d.plan(DispatchPolicy.MEASURE, f16(16), WORKSPACE, None)
    with pytest.raises(GemmArgumentError, match=r"^measure: got a callable returning NoneType; accepted: one returning"):
        d.plan(DispatchPolicy.MEASURE, f16(16), WORKSPACE, lambda: None)


def test_a_plan_or_default_workspace_of_the_wrong_kind_is_refused_by_name():
    """Before: usable and forced of a kernel name raised AttributeError 'kernel'; a default
    workspace of (1,) failed at the first ranking (ValueError: not enough values to
    unpack), one of (-1, -1) was taken."""
    d = dispatcher()
    name = d.predicted(f16(16)).kernel
    with pytest.raises(GemmArgumentError, match=r"^plan: got str; accepted: a gemm_runtime.plan.LaunchSpec"):
        d.usable(name, f16(16))
    with pytest.raises(GemmArgumentError, match=r"^kernel: got str; accepted: a gemm_runtime.plan.LaunchSpec"):
        d.forced(name, f16(16), WORKSPACE)
    for bad in ((1,), (-1, -1), None):
        with pytest.raises(GemmArgumentError, match=r"^default_workspace: got .*; accepted: \(barrier bytes"):
            Dispatcher([F16_NK8], H200, DispatchCache(ARCH, "fake"), bad)
