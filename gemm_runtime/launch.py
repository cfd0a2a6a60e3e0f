"""Pack the kernel parameter struct (declared once in codegen/params.py) and launch."""

from __future__ import annotations

import ctypes

from codegen.params import PARAM_NAMES, PARAM_STRUCT
from gemm_runtime.context import Problem
from gemm_runtime.registry import Kernel

_PARAM_INDEX = {name: i for i, name in enumerate(PARAM_NAMES)}


def pack_params(problem: Problem, alpha: float, beta: float) -> bytes:
    key = problem.key
    values = [0] * len(PARAM_NAMES)
    for name, value in (
        ("A", problem.a),
        ("B", problem.b),
        ("C", problem.c),
        ("D", problem.d),
        ("lda", problem.lda),
        ("ldb", problem.ldb),
        ("ldc", problem.ldc),
        ("ldd", problem.ldd),
        ("M", key.m),
        ("N", key.n),
        ("K", key.k),
    ):
        values[_PARAM_INDEX[name]] = value
    values[_PARAM_INDEX["alpha"]] = float(alpha)
    values[_PARAM_INDEX["beta"]] = float(beta) if problem.read_c else 0.0
    return PARAM_STRUCT.pack(*values)


def grid_of(kernel: Kernel, problem: Problem) -> tuple[int, int, int]:
    cm, cn, _ = kernel.spec.cta
    return (-(-problem.key.m // cm), -(-problem.key.n // cn), 1)


def launch(kernel: Kernel, problem: Problem, alpha: float, beta: float, stream: int) -> None:
    if problem.key.m == 0 or problem.key.n == 0:
        return  # an empty output: nothing to write
    packed = ctypes.create_string_buffer(pack_params(problem, alpha, beta), PARAM_STRUCT.size)
    args = (ctypes.c_void_p * 1)(ctypes.addressof(packed))
    spec = kernel.spec
    kernel.function.launch(grid_of(kernel, problem), spec.threads, spec.smem_bytes, stream, ctypes.addressof(args))
