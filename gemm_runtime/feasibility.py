"""One answer to "can this launch serve this problem": the kernel is in this build, its
spec computes the key, its splits and swizzle are in range, the grid stays within the
device's limits and split-K fits the workspace. Forced kernels, every dispatch-cache
hit (exact, lower-bound reuse, imported or tuned) and every imported record ask here."""

from __future__ import annotations

import numbers

from codegen.spec import KernelSpec
from gemm_runtime import whole_weight
from gemm_runtime.context import MAX_GRID_Y, ProblemKey, describe, infeasible_reason
from gemm_runtime.cost_model import fits_workspace, tiles_of, workspace_bytes
from gemm_runtime.errors import GemmArgumentError
from gemm_runtime.plan import MAX_SPLITS, SWIZZLES, LaunchSpec

_MAX_GRID_X = 2**31 - 1  # CUDA's limit on gridDim.x


def grid_of(spec: KernelSpec, key: ProblemKey, plan: LaunchSpec, resident: int = _MAX_GRID_X) -> tuple[int, int, int]:
    """The launch grid, as the kernel's family lays it out (MainloopFamily.grid).
    ``resident``: CTAs of the kernel the device holds at once; the default, no limit,
    gives the largest grid a persistent family may launch (for the limit checks)."""
    return spec.mainloop.grid(spec, tiles_of(spec, key), plan.splits, plan.swizzle, resident)


def plan_type_error(plan: LaunchSpec, argument: str = "kernel") -> GemmArgumentError | None:
    """Why a caller's ``kernel=`` is not even of LaunchSpec's field types (a name that is
    not a string, a split count of 2.5, ...), or None. LaunchSpec.from_json checks a
    file's records so; a forced launch is checked here before anything looks it up, and
    a launch stored in the dispatch cache (``argument`` "spec": DispatchCache.put)."""
    if not isinstance(plan, LaunchSpec):  # Dispatcher.forced of a name: AttributeError 'kernel'
        return GemmArgumentError(argument, type(plan).__name__, "a gemm_runtime.plan.LaunchSpec")
    if not isinstance(plan.kernel, str):
        accepted = "a kernel name (a str) from Gemm.kernels" + (", or a LaunchSpec" if argument == "kernel" else "")
        return GemmArgumentError(argument if argument == "kernel" else f"{argument}.kernel", repr(plan.kernel), accepted)
    for name in ("splits", "swizzle"):
        value = getattr(plan, name)
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            return GemmArgumentError(f"{argument}.{name}", repr(value), "an integer")
    if not isinstance(plan.unpack, bool):
        return GemmArgumentError(f"{argument}.unpack", repr(plan.unpack), "True or False")
    return None


def launch_error(
    spec: KernelSpec | None,
    plan: LaunchSpec,
    key: ProblemKey,
    workspace: tuple[int, int] | None = None,
    resident: int | None = None,
) -> GemmArgumentError | None:
    """Why ``plan`` cannot serve ``key``, as the error a forced ``kernel=`` argument gets,
    or None if it can. ``spec`` is the registry's spec of ``plan.kernel`` (None: this build
    does not have it). ``workspace`` is (barrier bytes, partial bytes); None skips the
    workspace check (an import, where no workspace is known yet). ``resident``: CTAs of
    the kernel the device holds at once (cost_model.resident_ctas), needed with a
    workspace: a persistent family's grid, and so which tiles split, depends on it."""
    if spec is None:
        return GemmArgumentError("kernel", plan.kernel, "a kernel name from Gemm.kernels")
    if plan.unpack:
        # A whole-weight plan: its kernel serves the dense problem on the unpacked buffer.
        why = whole_weight.unpack_error(key)
        if why is not None:
            return GemmArgumentError("kernel.unpack", True, f"False for {describe(key)}: {why}")
        key = whole_weight.dense_key(key)
    reason = infeasible_reason(spec, key)
    if reason is not None:
        return GemmArgumentError("kernel", plan.kernel, f"a kernel that can serve {describe(key)} ({reason})")
    if plan.swizzle not in SWIZZLES:
        return GemmArgumentError("kernel.swizzle", plan.swizzle, f"{SWIZZLES[0]}..{SWIZZLES[-1]}")
    if spec.grouped and plan.swizzle and not spec.mainloop.persistent:
        return GemmArgumentError("kernel.swizzle", plan.swizzle, "0 (grouped launches of this family take tiles in order)")
    most = min(MAX_SPLITS, spec.mainloop.max_splits(spec) or MAX_SPLITS)
    if not 1 <= plan.splits <= most:
        accepted = "1 (this kernel takes no split-K)" if most == 1 else f"1..{most}"
        return GemmArgumentError("kernel.splits", plan.splits, accepted)
    if plan.splits > 1 and workspace is not None:
        if resident is None:
            raise TypeError("launch_error: a workspace check needs resident (the CTAs the device holds at once)")
        # The same count split_options ranks by (one answer to "does this split fit").
        if not fits_workspace(spec, key, plan.splits, *workspace, resident=resident):
            semaphores, partials = workspace_bytes(spec, key, plan.splits, resident=resident)
            split = spec.mainloop.split_tiles(spec, tiles_of(spec, key), plan.splits, resident)
            return GemmArgumentError(
                "kernel.splits",
                plan.splits,
                "1, or a split count whose semaphores and partials fit the workspace "
                f"({plan.splits} splits need {semaphores} bytes of semaphores and {partials} of partials "
                f"for the {split} tiles that split; the workspace has {workspace[0]} and {workspace[1]})",
            )
    x, y, _ = grid_of(spec, key, plan)
    if y > MAX_GRID_Y:
        return GemmArgumentError("kernel.swizzle", plan.swizzle, f"a group size that keeps the grid within {MAX_GRID_Y} rows")
    if x > _MAX_GRID_X:
        return GemmArgumentError("kernel.swizzle", plan.swizzle, f"a group size that keeps the grid within {_MAX_GRID_X} columns")
    return None
