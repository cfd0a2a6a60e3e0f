"""Random GEMM problems over everything ``Gemm.matmul`` accepts, shared by the fuzz
tests: a seeded description (``FuzzCase``) that the GPU test turns into tensors and
the CPU test into a ``ProblemKey`` (which kernels could serve it, without a GPU).

Dense and packed (4/8-bit) B, both B orders, every epilogue, f32 outputs, C separate
from or aliasing D, rows padded and bases offset (so every alignment 1/2/4/8 occurs),
N and K with residues 0/1/2/4 against 8, forced split-K launches. A small share of
cases breaks a documented rule on purpose (``invalid``): those must be refused with a
GemmArgumentError naming the argument.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from codegen.vocabulary import BOrder, DataType
from gemm_runtime.context import ProblemKey, quant_name, vector_align
from gemm_runtime.types import Epilogue

_EPILOGUES = tuple(Epilogue)
# Invalid on purpose: an odd N for a gated epilogue, an output that aliases A.
INVALID_KINDS = ("gated_odd_n", "out_aliases_a")


@dataclass(frozen=True)
class FuzzCase:
    index: int
    dtype: DataType  # A's (and dense B's) type: f16 or bf16
    out_dtype: DataType  # dtype or f32
    quant: tuple[int, int, bool] | None  # (bits, group size (-1: per channel), symmetric)
    b_order: BOrder  # dense B: N x K (nk, passed as w.t()) or K x N (kn); packed: nk
    m: int
    n: int  # columns of A @ B (twice the output's for gated epilogues)
    k: int
    a_pad: int  # A's leading dimension is k + a_pad
    a_offset: int  # elements between A's buffer start and its first element
    b_pad: int
    b_offset: int
    d_pad: int
    d_offset: int
    epilogue: Epilogue
    alpha: float
    beta: float
    c_mode: str  # "none" (beta = 0), "separate", "alias" (C is D)
    splits: int  # > 1: force a feasible kernel with this many K splits
    swizzle: int
    invalid: str | None  # one of INVALID_KINDS, or None for a valid problem

    @property
    def n_out(self) -> int:
        return self.n // 2 if self.epilogue.gated else self.n

    @property
    def lda(self) -> int:
        return self.k + self.a_pad

    @property
    def ldb(self) -> int:
        return (self.k if self.b_order is BOrder.NK else self.n) + self.b_pad

    @property
    def ldd(self) -> int:
        return self.n_out + self.d_pad

    def describe(self) -> str:
        q = "dense" if self.quant is None else f"u{self.quant[0]} g{self.quant[1]} sym={self.quant[2]}"
        return (
            f"case {self.index}: M={self.m} N={self.n} K={self.k} {self.dtype.value}->{self.out_dtype.value} {q} "
            f"{self.b_order.value} lda={self.lda}+{self.a_offset} ldb={self.ldb}+{self.b_offset} "
            f"ldd={self.ldd}+{self.d_offset} {self.epilogue.value} alpha={self.alpha} beta={self.beta} "
            f"c={self.c_mode} splits={self.splits} swizzle={self.swizzle} invalid={self.invalid}"
        )


def _extent(rng: random.Random, even: bool) -> int:
    """Up to 4100, log-spread, with a residue of 0, 1, 2 or 4 against 8."""
    base = 8 * min(512, int(2 ** rng.uniform(0, 9.1)))
    residue = rng.choice((0, 2, 4) if even else (0, 1, 2, 4))
    return max(base + residue, 2 if even else 1)


def make_cases(count: int, seed: int = 2026) -> list[FuzzCase]:
    rng = random.Random(seed)
    cases = []
    for i in range(count):
        dtype = rng.choice((DataType.F16, DataType.BF16))
        quant = None
        if rng.random() < 0.35:
            quant = (rng.choice((4, 8)), rng.choice((32, 64, 128, -1)), rng.random() < 0.3)
        epilogue = rng.choice(_EPILOGUES)
        invalid = rng.choice(INVALID_KINDS) if rng.random() < 0.02 else None
        n = _extent(rng, even=epilogue.gated)
        if invalid == "gated_odd_n":
            epilogue = rng.choice([e for e in _EPILOGUES if e.gated])
            n = n | 1
        c_mode = rng.choice(("none", "none", "separate", "alias"))
        forced = rng.random() < 0.2
        cases.append(
            FuzzCase(
                index=i,
                dtype=dtype,
                out_dtype=DataType.F32 if rng.random() < 0.25 else dtype,
                quant=quant,
                b_order=BOrder.NK if quant is not None else rng.choice((BOrder.NK, BOrder.KN)),
                m=max(1, int(2 ** rng.uniform(0, 10.55))),
                n=n,
                k=_extent(rng, even=False),
                a_pad=rng.choice((0, 0, 0, 1, 2, 3, 8)),
                a_offset=rng.choice((0, 0, 0, 1, 2, 4)),
                b_pad=rng.choice((0, 0, 0, 1, 2, 3, 8)),
                b_offset=rng.choice((0, 0, 0, 1, 2, 4)),
                d_pad=rng.choice((0, 0, 1, 5)),
                d_offset=rng.choice((0, 0, 1, 2)),
                epilogue=epilogue,
                alpha=rng.choice((1.0, 1.0, 0.5, -1.25)),
                beta=0.0 if c_mode == "none" else rng.choice((1.0, -0.5, 2.0)),
                c_mode=c_mode,
                splits=rng.randint(2, 8) if forced else 1,
                swizzle=rng.randint(0, 5) if forced else 0,
                invalid=invalid,
            )
        )
    return cases


# Allocations (torch's caching allocator, cudaMalloc) start on 256-byte boundaries,
# so a buffer's base is aligned for every vector width: only offsets and pads decide.
_BASE = 1 << 40


def problem_key(case: FuzzCase, arch: int) -> ProblemKey:
    """The key ``Gemm`` derives for the case's tensors (context.make_problem)."""
    elem = case.dtype.bits // 8
    align = vector_align(_BASE + case.a_offset * elem, case.lda, elem, case.m)
    if case.quant is None:
        outer = case.n if case.b_order is BOrder.NK else case.k
        align = min(align, vector_align(_BASE + case.b_offset * elem, case.ldb, elem, outer))
        b_type, quant = case.dtype, "none"
    else:
        # pack_for_gemm's rows are whole 16-byte n8 x k32 blocks: B never narrows align.
        bits, group, _ = case.quant
        b_type = DataType.U4 if bits == 4 else DataType.U8
        quant = quant_name(b_type, case.k if group == -1 else group, case.k)
    return ProblemKey(arch, case.dtype, b_type, case.b_order, case.out_dtype, align, quant, case.epilogue.value,
                      case.n, case.k, case.m)  # fmt: skip
