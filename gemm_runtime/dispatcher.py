"""Dispatch decisions, without a GPU: which kernels can serve a problem, how the cost
model ranks their launches, and which launch a policy picks (the dispatch cache, its
lower-bound reuse, a forced kernel, or a measurement the caller runs). ``Gemm`` owns the
GPU side (validation of the call, workspaces, streams, timing, launching) and asks here.

The kernels are anything with ``name``, ``spec`` (a KernelSpec) and ``ctas_per_sm``, so
tests pass fakes."""

from __future__ import annotations

import dataclasses
import numbers
import threading
from collections.abc import Callable, Iterable
from typing import Protocol

from codegen.spec import KernelSpec
from gemm_runtime import whole_weight
from gemm_runtime.context import KEY_FIELD_TYPES, ProblemKey, arch_limit, describe, infeasible_reason
from gemm_runtime.cost_model import DeviceModel, rank, resident_ctas
from gemm_runtime.dispatch_cache import DispatchCache, ImportReport, PathOrFile
from gemm_runtime.errors import GemmArgumentError, GraphCaptureError, UnsupportedProblemError
from gemm_runtime.feasibility import launch_error, plan_type_error
from gemm_runtime.plan import LaunchSpec
from gemm_runtime.settings import settings
from gemm_runtime.tuner import Measurement
from gemm_runtime.types import DispatchPolicy


class DispatchKernel(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def spec(self) -> KernelSpec: ...

    @property
    def ctas_per_sm(self) -> int: ...


# (barrier bytes, partial bytes) of a split-K workspace.
WorkspaceSizes = tuple[int, int]


def _check_key(key: object) -> None:
    """GemmArgumentError unless ``key`` is a ProblemKey with its fields' types and M, N and
    K >= 0 (empty problems are ranked: Gemm asks for K = 0, callers for M or N = 0): of an
    M of -5, the cost model ranked launches as if it were a problem. The stricter
    ProblemKey.validate is the dispatch cache's."""
    if not isinstance(key, ProblemKey):
        raise GemmArgumentError("key", type(key).__name__, "a gemm_runtime.context.ProblemKey (context.make_key)")
    for f, kind in KEY_FIELD_TYPES.items():
        v = getattr(key, f)
        if not isinstance(v, kind):
            raise GemmArgumentError(f"key.{f}", repr(v), f"a {kind.__name__}")
    for f in ("m", "n", "k"):
        v = getattr(key, f)
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 0:
            raise GemmArgumentError(f"key.{f}", repr(v), "an integer >= 0")


def _check_workspace(workspace: object, argument: str = "workspace") -> None:
    """GemmArgumentError unless ``workspace`` is (barrier bytes, partial bytes)."""
    if not (
        isinstance(workspace, tuple)
        and len(workspace) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in workspace)
    ):
        raise GemmArgumentError(argument, repr(workspace), "(barrier bytes, partial bytes), two integers >= 0")


def _check_plan(plan: object) -> None:
    """GemmArgumentError unless ``plan`` is a LaunchSpec (a name is the caller's to wrap:
    ``choose`` takes either)."""
    if not isinstance(plan, LaunchSpec):
        raise GemmArgumentError("plan", type(plan).__name__, "a gemm_runtime.plan.LaunchSpec")


def _check_policy(policy: object) -> None:
    # NOTE: the policies are compared by identity: "measure" (or None) was DEFAULT, silently.
    if not isinstance(policy, DispatchPolicy):
        raise GemmArgumentError("policy", repr(policy), "a DispatchPolicy: " + ", ".join(p.name for p in DispatchPolicy))


class Dispatcher:
    """Decisions for one device: its kernels, its DeviceModel, its DispatchCache.

    Thread-safe: the memo of cost-model choices is behind a lock, the cache has its own."""

    def __init__(
        self,
        kernels: Iterable[DispatchKernel],
        device_model: DeviceModel,
        cache: DispatchCache,
        default_workspace: WorkspaceSizes,
    ) -> None:
        # NOTE: a default workspace that is not two byte counts was found by the first
        # ranking (ValueError: not enough values to unpack); a negative one ranked splits.
        _check_workspace(default_workspace, "default_workspace")
        self._kernels = list(kernels)
        self._by_name = {k.name: k for k in self._kernels}
        self.device_model = device_model
        self.cache = cache
        self.default_workspace = default_workspace
        self._lock = threading.Lock()
        self._predicted: dict[tuple, LaunchSpec] = {}  # cost-model choices (never exported)

    @property
    def kernels(self) -> list[DispatchKernel]:
        return list(self._kernels)

    def kernel(self, name: str) -> DispatchKernel | None:
        return self._by_name.get(name)

    # ---- the cost model -------------------------------------------------------------
    def _resident(self, kern: DispatchKernel) -> int:
        """The CTAs of ``kern`` the device holds at once, as rank counts them (the
        workspace check of a split must count the split tiles the ranking did)."""
        return resident_ctas(self.device_model, kern.ctas_per_sm)

    def feasible(self, key: ProblemKey) -> list[DispatchKernel]:
        # NOTE: of an M of -5 every kernel was feasible; of a key that is not a ProblemKey,
        # AttributeError from inside infeasible_reason.
        _check_key(key)
        return [k for k in self._kernels if infeasible_reason(k.spec, key) is None]

    def ranked(self, key: ProblemKey, workspace: WorkspaceSizes | None = None) -> list[tuple[float, LaunchSpec]]:
        """Every feasible (kernel, splits, swizzle), and for quantized prefill the
        whole-weight plans of the best few dense kernels (whole_weight), cheapest predicted
        first; raises UnsupportedProblemError (with each kernel's reason, counted) when
        there is none."""
        _check_key(key)
        if workspace is not None:
            _check_workspace(workspace)
        ranking = self._rank(self.feasible(key), key, workspace)
        if whole_weight.ranked(key):
            ranking = sorted(ranking + self._whole_weight_ranked(key, workspace), key=lambda item: item[0])
        if not ranking:
            reasons: dict[str, int] = {}
            for k in self._kernels:
                r = infeasible_reason(k.spec, key) or "?"
                reasons[r] = reasons.get(r, 0) + 1
            raise UnsupportedProblemError(describe(key), reasons, arch_limit(key))
        return ranking

    def _rank(self, kernels: list[DispatchKernel], key: ProblemKey, workspace: WorkspaceSizes | None):
        barriers, partials = workspace or self.default_workspace
        return rank(
            kernels,
            key,
            self.device_model,
            max_splits=settings().tune.max_splits,
            barriers_bytes=barriers,
            partials_bytes=partials,
        )

    def _whole_weight_ranked(self, key: ProblemKey, workspace: WorkspaceSizes | None) -> list[tuple[float, LaunchSpec]]:
        """The whole-weight plans of the whole_weight.KERNELS dense kernels ranked best
        on ``key``'s dense problem, each priced with the unpack."""
        dense = whole_weight.dense_key(key)
        unpack = whole_weight.unpack_seconds(key, self.device_model)
        chosen: list[str] = []
        plans = []
        for cost, plan in self._rank(self.feasible(dense), dense, workspace):
            if plan.kernel not in chosen:
                if len(chosen) == whole_weight.KERNELS:
                    continue
                chosen.append(plan.kernel)
            plans.append((cost + unpack, dataclasses.replace(plan, unpack=True)))
        return plans

    def predicted(self, key: ProblemKey) -> LaunchSpec:
        """The cost model's choice for the default workspace (memoized, with the settings
        that change the ranking: the splits tried and the whole-weight buffer's limit)."""
        memo = (key, settings().tune.max_splits, settings().unpack_max_mib)
        with self._lock:
            hit = self._predicted.get(memo)
        if hit is None:
            hit = self.ranked(key)[0][1]
            with self._lock:
                self._predicted[memo] = hit
        return hit

    # ---- decisions ------------------------------------------------------------------
    def usable(
        self, plan: LaunchSpec | None, key: ProblemKey, workspace: WorkspaceSizes | None = None
    ) -> LaunchSpec | None:
        """``plan`` where it can serve ``key``, with one split where its split-K does not
        fit ``workspace`` (smaller than the one it was chosen for); None where it cannot
        serve ``key`` at all. Every launch taken from the cache passes here.

        NOTE: checked on every lookup rather than memoized: it is a dozen comparisons,
        small beside the validation of the call on the same path, and matmul's fast path
        replays its result."""
        if plan is None:
            return None
        _check_plan(plan)
        kern = self._by_name.get(plan.kernel)
        spec = kern.spec if kern is not None else None
        if launch_error(spec, plan, key) is not None:
            return None
        sizes = workspace or self.default_workspace
        if plan.splits > 1 and launch_error(spec, plan, key, sizes, self._resident(kern)) is not None:
            return dataclasses.replace(plan, splits=1)
        return plan

    def select(
        self, key: ProblemKey, policy: DispatchPolicy = DispatchPolicy.DEFAULT, workspace: WorkspaceSizes | None = None
    ) -> LaunchSpec:
        """The launch for ``key`` without measuring: the exact cache entry (REUSE: else the
        entry of the nearest tuned M at or above), if it can serve ``key``; else the
        cost model's choice."""
        _check_policy(policy)
        # A key that is not a ProblemKey raised AttributeError from the cache's lookup; an
        # M of -5 took, with REUSE, the entry of the smallest tuned M.
        _check_key(key)
        if workspace is not None:
            _check_workspace(workspace)
        return self._select(key, policy, workspace)

    def _select(self, key: ProblemKey, policy: DispatchPolicy, workspace: WorkspaceSizes | None) -> LaunchSpec:
        """select without its checks: plan's arguments come checked (Gemm's, from a checked
        Problem), and each call that misses the fast path comes through here."""
        hit = self.usable(self.cache.get(key), key, workspace)
        if hit is None and policy is DispatchPolicy.REUSE:
            hit = self.usable(self.cache.get_at_or_above(key), key, workspace)
        if hit is not None:
            return hit
        plan = self.usable(self.predicted(key), key, workspace)
        assert plan is not None, "the cost model ranks only feasible launches"
        return plan

    def forced(self, plan: LaunchSpec, key: ProblemKey, workspace: WorkspaceSizes) -> LaunchSpec:
        """A caller's ``kernel=`` choice, or the GemmArgumentError saying why it cannot serve."""
        error = plan_type_error(plan)
        if error is not None:
            raise error
        _check_key(key)  # an M of -5 was served
        _check_workspace(workspace)
        kern = self._by_name.get(plan.kernel)
        spec, resident = (kern.spec, self._resident(kern)) if kern is not None else (None, None)
        error = launch_error(spec, plan, key, workspace, resident)
        if error is not None:
            raise error
        return plan

    def plan(
        self,
        policy: DispatchPolicy,
        key: ProblemKey,
        workspace: WorkspaceSizes,
        measure: Callable[[], Measurement],
    ) -> LaunchSpec:
        """The launch ``policy`` picks. MEASURE, and APPEND without an exact entry, call
        ``measure`` (the caller times the ranking on the GPU) and store its winner."""
        _check_policy(policy)
        if policy is DispatchPolicy.MEASURE or policy is DispatchPolicy.APPEND:
            # NOTE: each of these was found only after measure() had timed the candidates on
            # the GPU: a key of M -5 (refused by the cache's put), a workspace that is not two
            # byte counts; a key that is not a ProblemKey raised AttributeError (APPEND: from
            # the cache's lookup below). Checked for the policies that may measure only: the
            # others' path is select's, run on every call that misses the fast path, with
            # arguments Gemm has checked.
            _check_key(key)
            _check_workspace(workspace)
            if not callable(measure):
                raise GemmArgumentError("measure", type(measure).__name__,
                                        "a callable () -> gemm_runtime.tuner.Measurement")  # fmt: skip
        # K = 0 computes D = beta * C whatever the kernel: nothing worth measuring or
        # keeping (ProblemKey.validate refuses such keys).
        tunes = policy is DispatchPolicy.MEASURE or (policy is DispatchPolicy.APPEND and self.cache.get(key) is None)
        if tunes and key.k > 0:
            # NOTE: the winner is checked like any other launch from the cache before it is
            # stored: one that cannot serve the key was returned and kept (and exported).
            measured = measure()
            if not isinstance(measured, Measurement):
                raise GemmArgumentError(
                    "measure", f"a callable returning {type(measured).__name__}", "one returning a tuner.Measurement"
                )
            best = self.usable(measured.best, key, workspace)
            if best is not None:
                self.cache.put(key, best, replace=policy is DispatchPolicy.MEASURE)
                # Another thread may have stored its own winner first (APPEND keeps it).
                return self.usable(self.cache.get(key), key, workspace) or best
        return self._select(key, policy, workspace)

    def choose(
        self,
        policy: DispatchPolicy,
        key: ProblemKey,
        workspace: WorkspaceSizes,
        measure: Callable[[], Measurement],
        *,
        kernel: str | LaunchSpec | None = None,
        capturing: str | None = None,
    ) -> LaunchSpec:
        """A call's launch: ``kernel`` (a registry name or a LaunchSpec) forced, else what
        ``policy`` picks (``plan``). ``capturing``: where the caller's stream captures a
        CUDA graph, what the call asked for (e.g. "operation.dispatch is MEASURE for
        16x4096x4096"); a policy that would measure then raises GraphCaptureError saying
        so, since timing the candidates would record them into the graph and synchronize
        the capturing stream (which invalidates the capture)."""
        if kernel is not None:
            return self.forced(kernel if isinstance(kernel, LaunchSpec) else LaunchSpec(kernel), key, workspace)

        def measure_outside_a_capture() -> Measurement:
            if capturing is not None:
                raise GraphCaptureError(
                    f"{capturing} while the stream captures a CUDA graph; tune before capturing (one call outside "
                    "the capture; the tune CLI for dense problems) or capture with DispatchPolicy.DEFAULT / REUSE"
                )
            return measure()

        return self.plan(policy, key, workspace, measure_outside_a_capture)

    # ---- the cache file -------------------------------------------------------------
    def import_cache(self, path: PathOrFile) -> ImportReport:
        return self.cache.import_(path, {k.name: k.spec for k in self._kernels})
