"""Pack the kernel parameter struct (declared once in codegen/params.py) and launch."""

from __future__ import annotations

import ctypes
import math

from codegen.params import PARAM_NAMES, PARAM_STRUCT
from codegen.spec import KernelSpec
from gemm_runtime.context import Problem
from gemm_runtime.cost_model import tiles_of
from gemm_runtime.feasibility import grid_of
from gemm_runtime.plan import LaunchSpec
from gemm_runtime.registry import Kernel
from gemm_runtime.types import Epilogue

_PARAM_INDEX = {name: i for i, name in enumerate(PARAM_NAMES)}
_EPILOGUE_CODES = {e.value: e.code for e in Epilogue}


def geometry(spec: KernelSpec, problem: Problem, plan: LaunchSpec) -> tuple[tuple[int, int, int], int, int, int]:
    """(grid, tiles_m, tiles_n, k_tiles_per_split) of a launch."""
    key = problem.key
    tiles_m, tiles_n = tiles_of(spec, key)
    k_tiles = math.ceil(key.k / spec.cta[2])
    return grid_of(spec, key, plan), tiles_m, tiles_n, math.ceil(k_tiles / plan.splits) if k_tiles else 0


def pack_params(
    problem: Problem,
    alpha: float,
    beta: float,
    *,
    tiles: tuple[int, int] = (0, 0),
    plan: LaunchSpec | None = None,
    k_tiles_per_split: int = 0,
    semaphores: int = 0,
    partials: int = 0,
) -> bytes:
    key = problem.key
    values = [0] * len(PARAM_NAMES)
    for name, value in (
        ("A", problem.a),
        ("B", problem.b),
        ("C", problem.c),
        ("D", problem.d),
        ("semaphores", semaphores),
        ("partials", partials),
        ("bias", problem.bias),
        ("V", problem.v),
        ("ldv", problem.ldv),
        ("groups", problem.groups),
        ("group_shift", problem.group_shift),
        ("epilogue", _EPILOGUE_CODES[key.epilogue]),
        ("lda", problem.lda),
        ("ldb", problem.ldb),
        ("ldc", problem.ldc),
        ("ldd", problem.ldd),
        ("M", key.m),
        ("N", key.n),
        ("K", key.k),
        ("tiles_m", tiles[0]),
        ("tiles_n", tiles[1]),
        ("splits", plan.splits if plan else 1),
        ("k_tiles_per_split", k_tiles_per_split),
        ("swizzle", plan.swizzle if plan else 0),
    ):
        values[_PARAM_INDEX[name]] = value
    values[_PARAM_INDEX["alpha"]] = float(alpha)
    values[_PARAM_INDEX["beta"]] = float(beta) if problem.read_c else 0.0
    return PARAM_STRUCT.pack(*values)


def prepare(
    kernel: Kernel, problem: Problem, plan: LaunchSpec, alpha: float, beta: float, semaphores: int = 0, partials: int = 0
) -> tuple[tuple[int, int, int], bytes]:
    """The grid and the packed parameter struct of one launch."""
    grid, tiles_m, tiles_n, per_split = geometry(kernel.spec, problem, plan)
    packed = pack_params(
        problem,
        alpha,
        beta,
        tiles=(tiles_m, tiles_n),
        plan=plan,
        k_tiles_per_split=per_split,
        semaphores=semaphores,
        partials=partials,
    )
    return grid, packed


def launch(
    kernel: Kernel,
    problem: Problem,
    plan: LaunchSpec,
    alpha: float,
    beta: float,
    stream: int,
    semaphores: int = 0,
    partials: int = 0,
) -> None:
    """Queue one launch. Split-K (plan.splits > 1) needs the workspace pointers."""
    if problem.key.m == 0 or problem.key.n == 0:
        return  # an empty output: nothing to write
    grid, packed = prepare(kernel, problem, plan, alpha, beta, semaphores, partials)
    buf = ctypes.create_string_buffer(packed, PARAM_STRUCT.size)
    args = (ctypes.c_void_p * 1)(ctypes.addressof(buf))
    kernel.function.launch(grid, kernel.spec.threads, kernel.spec.smem_bytes, stream, ctypes.addressof(args))
