"""Pack a kernel's parameter block and launch.

The block is what the kernel's family says (codegen.families): the GemmParams struct
(declared once in codegen/params.py), after the TMA descriptors of the families that
take them (``MainloopFamily.tensor_maps``), which are encoded here from the problem's
operands.
"""

from __future__ import annotations

import ctypes
import math

from codegen.families import TensorMapBox
from codegen.vocabulary import BOrder, DataType
from codegen.params import PARAM_NAMES, PARAM_STRUCT, block_bytes
from codegen.spec import KernelSpec
from gemm_runtime.context import Problem
from gemm_runtime.cost_model import tiles_of
from gemm_runtime.errors import GemmArgumentError
from gemm_runtime.feasibility import grid_of
from gemm_runtime.plan import LaunchSpec
from gemm_runtime.registry import Kernel
from gemm_runtime.tensor_map import TENSOR_MAP_BYTES, Encoder, TensorMap2D
from gemm_runtime.types import Epilogue

_PARAM_INDEX = {name: i for i, name in enumerate(PARAM_NAMES)}
_EPILOGUE_CODES = {e.value: e.code for e in Epilogue}
# kEpilogueTmaStore (templates/include/gemm/epilogue.cuh): D has a tensor map, so the
# kernel may store through it.
EPILOGUE_TMA_STORE = 4
_NO_TENSOR_MAP = bytes(TENSOR_MAP_BYTES)


def geometry(
    spec: KernelSpec, problem: Problem, plan: LaunchSpec, resident: int
) -> tuple[tuple[int, int, int], int, int, int]:
    """(grid, tiles_m, tiles_n, k_tiles_per_split) of a launch; ``resident``: CTAs of
    the kernel the device holds at once (persistent families size their grid by it)."""
    key = problem.key
    tiles_m, tiles_n = tiles_of(spec, key)
    k_tiles = math.ceil(key.k / spec.cta[2])
    grid = grid_of(spec, key, plan, resident)
    return grid, tiles_m, tiles_n, math.ceil(k_tiles / plan.splits) if k_tiles else 0


def _operand_matrix(box: TensorMapBox, problem: Problem) -> tuple[int, int, int, int]:
    """(address, rows, cols, ld) of the stored matrix a tensor map describes."""
    key = problem.key
    if box.operand == "a":
        address, rows, cols, ld = problem.a, key.m, key.k, problem.lda
    elif box.operand == "b" and key.quant != "none":
        # Packed B as 32-bit words: a row per n8 tile, K padded to 32 (packed_weight);
        # the problem's ldb counts 16-bit units.
        words_per_k = key.b_type.bits // 4
        address, rows, cols, ld = problem.b, -(-key.n // 8), -(-key.k // 32) * 32 * words_per_k, problem.ldb // 2
    elif box.operand == "b":
        rows, cols = (key.n, key.k) if key.b_order is BOrder.NK else (key.k, key.n)
        address, ld = problem.b, problem.ldb
    elif box.operand == "v":
        address, rows, cols, ld = problem.v, 2 * problem.groups, key.n, problem.ldv
    elif box.operand == "d":
        # NOTE: the gated epilogues write N / 2 columns (gemm_runtime.types.Epilogue).
        cols = key.n // 2 if Epilogue(key.epilogue).gated else key.n
        address, rows, ld = problem.d, key.m, problem.ldd
    else:
        raise ValueError(f"tensor map operand {box.operand!r} is not 'a', 'b', 'v' or 'd'")
    if rows == 1:
        # NOTE: a one-row matrix's stride is never used, and may be any value (the row
        # alignment of the key ignores it): give TMA a legal one.
        ld = -(-cols // 8) * 8
    return address, rows, cols, ld


class TensorMaps:
    """The TMA descriptors a kernel's parameter block starts with, for one problem
    geometry: ``maps(a, b, d, v)`` encodes them for operands at those addresses.

    A and B always have one (the family refuses problems where they cannot). D's is
    optional: where D's base, rows or width are not 16-byte multiples its 128 bytes stay
    zero, ``stores_d`` is False, and the kernel stores D directly."""

    def __init__(self, spec: KernelSpec, problem: Problem) -> None:
        self._encoders = []
        self.stores_d = False
        key = problem.key
        for box in spec.mainloop.tensor_maps(spec, key):
            address, rows, cols, ld = _operand_matrix(box, problem)
            # NOTE: TMA moves packed words as bytes; a 4-byte type only sizes them.
            b_type = key.b_type if key.quant == "none" else DataType.F32
            dtype = {"a": key.a_type, "b": b_type, "v": key.a_type, "d": key.d_type}[box.operand]
            try:
                tmap = TensorMap2D(address, rows, cols, ld, dtype, box.box_rows, box.box_cols, box.swizzle)
            except GemmArgumentError:
                if box.operand != "d":
                    raise
                tmap = None
            # NOTE: TMA stores write the last 16-byte chunk of a row whole, past the
            # tensor's last column too (H200: an M = 1, N = 379 D lost its neighbours'
            # columns 379-381), so D must be whole chunks wide.
            if tmap is not None and box.operand == "d" and cols * tmap.element_bytes % 16:
                tmap = None
            encoder = None if tmap is None else Encoder(tmap)
            self.stores_d |= box.operand == "d" and encoder is not None
            self._encoders.append((box.operand, encoder))

    def __bool__(self) -> bool:
        return bool(self._encoders)

    def __call__(self, a: int, b: int, d: int, v: int = 0) -> bytes:
        address = {"a": a, "b": b, "d": d, "v": v}
        return b"".join(_NO_TENSOR_MAP if enc is None else enc(address[op]) for op, enc in self._encoders)


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
    tma_store: bool = False,
) -> bytes:
    """GemmParams for one launch; ``tma_store``: the kernel may store D through its
    tensor map (EPILOGUE_TMA_STORE)."""
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
        ("epilogue", _EPILOGUE_CODES[key.epilogue] | (EPILOGUE_TMA_STORE if tma_store else 0)),
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
) -> tuple[tuple[int, int, int], bytes, TensorMaps]:
    """The grid, the packed parameter block and the tensor maps (to re-encode for
    other operand addresses) of one launch."""
    grid, tiles_m, tiles_n, per_split = geometry(kernel.spec, problem, plan, kernel.resident)
    maps = TensorMaps(kernel.spec, problem)
    packed = pack_params(
        problem,
        alpha,
        beta,
        tiles=(tiles_m, tiles_n),
        plan=plan,
        k_tiles_per_split=per_split,
        semaphores=semaphores,
        partials=partials,
        tma_store=maps.stores_d,
    )
    if maps:
        block = block_bytes(kernel.spec.mainloop.params_offset(kernel.spec))
        packed = maps(problem.a, problem.b, problem.d, problem.v) + packed
        packed += bytes(block - len(packed))  # the C++ block is padded to CUtensorMap's 64-byte alignment
    return grid, packed, maps


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
    grid, packed, _ = prepare(kernel, problem, plan, alpha, beta, semaphores, partials)
    buf = ctypes.create_string_buffer(packed, len(packed))
    args = (ctypes.c_void_p * 1)(ctypes.addressof(buf))
    kernel.function.launch(grid, kernel.spec.threads, kernel.spec.smem_bytes, stream, ctypes.addressof(args))
