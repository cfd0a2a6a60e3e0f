"""KernelSpec: one kernel's identity. Frozen; its name is derived from its fields."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from codegen.vocabulary import ARCH_SMEM_LIMIT, QUANT_TYPES, BOrder, DataType, Mainloop, MmaAtom, parse_enum

_SMEM_PAD = 8  # elements of padding per shared row; mirrors GemmConfig::kPad


def _dims(v: tuple[int, ...]) -> str:
    return "x".join(str(x) for x in v)


@dataclass(frozen=True)
class KernelSpec:
    """Everything that makes one generated kernel distinct.

    Each field's metadata ``token`` renders it into the kernel name, in field
    order, so a field added here appears in every name by itself. Fields with
    ``token=None`` do not change the code and stay out of the name.
    """

    family: str = field(metadata={"token": str})
    mainloop: Mainloop = field(metadata={"token": lambda v: v.value})
    mma: MmaAtom = field(metadata={"token": lambda v: v.value})
    a_type: DataType = field(metadata={"token": lambda v: "a" + v.value})
    b_type: DataType = field(metadata={"token": lambda v: "b" + v.value})
    acc_type: DataType = field(metadata={"token": lambda v: "acc" + v.value})
    d_type: DataType = field(metadata={"token": lambda v: "d" + v.value})
    cta: tuple[int, int, int] = field(metadata={"token": _dims})
    warps: tuple[int, int, int] = field(metadata={"token": lambda v: "w" + _dims(v)})
    stages: int = field(metadata={"token": lambda v: f"s{v}"})
    b_order: BOrder = field(metadata={"token": lambda v: v.value})
    align: int = field(metadata={"token": lambda v: f"align{v}"})
    # Where the kernel is meant to run (inclusive); not part of the code, so not of the name.
    arch_min: int = field(default=80, metadata={"token": None})
    arch_max: int = field(default=90, metadata={"token": None})

    # ---- identity -------------------------------------------------------------------
    @property
    def name(self) -> str:
        tokens = []
        for f in dataclasses.fields(self):
            fmt = f.metadata.get("token")
            if fmt is not None:
                tokens.append(fmt(getattr(self, f.name)))
        return "gemm_" + "_".join(tokens)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            out[f.name] = v.value if hasattr(v, "value") else (list(v) if isinstance(v, tuple) else v)
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "KernelSpec":
        kinds = {
            "mainloop": Mainloop,
            "mma": MmaAtom,
            "a_type": DataType,
            "b_type": DataType,
            "acc_type": DataType,
            "d_type": DataType,
            "b_order": BOrder,
        }
        kwargs: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            if f.name not in data:
                raise ValueError(f"kernel spec is missing field {f.name!r}")
            v = data[f.name]
            if f.name in kinds:
                v = parse_enum(kinds[f.name], v)
            elif f.name in ("cta", "warps"):
                v = tuple(int(x) for x in v)
            kwargs[f.name] = v
        return cls(**kwargs)

    # ---- derived quantities (mirrors templates/include/gemm/config.cuh) -------------
    @property
    def quantized(self) -> bool:
        """B holds 4- or 8-bit integers with group-wise scales and zeros (the V operand)."""
        return self.b_type in QUANT_TYPES

    @property
    def quant_block_units(self) -> int:
        """16-bit units of one n8 x k32 block of packed quantized B (0 when dense)."""
        return 16 * self.b_type.bits if self.quantized else 0

    @property
    def align_b(self) -> int:
        """Elements per vector copy of B: ``align`` for dense B; packed quantized rows
        (pack_for_gemm) are always 16-byte vectors, so there ``align`` narrows only A's
        copies (mirrors GemmConfig::kAlignB)."""
        return 8 if self.quantized else self.align

    @property
    def direct_b(self) -> bool:
        """Quantized B travels global -> registers, not through shared memory: SM80
        mainloop tiles whose weights each feed one warp (one warp along M, <= 32 rows)."""
        return self.quantized and self.mainloop is Mainloop.SM80 and self.warps[0] == 1 and self.cta[0] <= 32

    @property
    def min_ctas_per_sm(self) -> int:
        """CTAs per SM the compiler must leave registers for (1: no constraint).

        Direct-B kernels hide the weights' latency with warps: 16 warps per SM cap a
        thread at 65536 / (16 * 32) = 128 registers, two CTAs of 8 warps or four of 4.
        Four of 4 only for 4-bit weights: their decode loop is compiled twice (with and
        without rows 8-15, MainloopSm80), which NVRTC 13 allocates at 142 registers
        uncapped against 128 and 116 for either loop alone. Not asked of 8-bit 4-warp
        CTAs nor 32-row ones (they spill at 128), nor of bf16 activations (their 4-bit
        8-warp tile spills 4 bytes at 128 on sm_80; NVRTC 13).
        """
        if not self.direct_b or self.a_type is not DataType.F16:
            return 1
        if self.threads == 256:
            return 2
        if self.threads == 128 and self.b_type.bits == 4 and self.cta[0] == 16:
            return 4
        return 1

    def spill_budget(self, arch: int) -> int:
        """Bytes of register spill (stores, and as many loads) accepted on ``arch``.

        The register-capped 4-bit direct-B tiles (min_ctas_per_sm) spill 16 bytes on
        sm_80 (NVRTC 13): the row-sum MMA's constant operand, in the loop for 9-16
        rows only; the loop for at most 8 rows, which decode runs, spills nothing.
        Uncapped, sm_80 would run 3 (4-warp) or 1 (8-warp) CTAs per SM instead of 4
        or 2. Every other kernel: none.
        """
        capped_w4 = self.min_ctas_per_sm > 1 and self.b_type.bits == 4
        return 16 if capped_w4 and arch < 90 else 0

    @property
    def threads(self) -> int:
        wm, wn, wk = self.warps
        return 32 * wm * wn * wk

    @property
    def warp_tile(self) -> tuple[int, int, int]:
        return tuple(c // w for c, w in zip(self.cta, self.warps))  # type: ignore[return-value]

    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory: the stage ring, or the K-slice reduction if larger."""
        m, n, k = self.cta
        a_bytes = m * (k + _SMEM_PAD) * 2
        v_bytes = 0
        if self.quantized:
            # Fragment-ordered rows of 8 columns, plus scale and zero rows per stage.
            b_bytes = 0 if self.direct_b else n // 8 * (k // 32 * self.quant_block_units + _SMEM_PAD) * 2
            v_bytes = 2 * max(1, k // 32) * (n + _SMEM_PAD) * 2
        elif self.b_order is BOrder.NK:
            b_bytes = n * (k + _SMEM_PAD) * 2
        else:
            b_bytes = k * (n + _SMEM_PAD) * 2
        pipeline = self.stages * (a_bytes + b_bytes + v_bytes)
        reduce = (self.warps[2] - 1) * m * n * 4
        return max(pipeline, reduce)

    def archs_that_fit(self, archs: tuple[int, ...] | list[int]) -> list[int]:
        """The archs of ``archs`` inside this kernel's range whose shared memory holds it."""
        return [
            a
            for a in archs
            if self.arch_min <= a <= self.arch_max and self.smem_bytes <= ARCH_SMEM_LIMIT.get(a, 0)
        ]
