"""KernelSpec: one kernel's identity. Frozen; its name is derived from its fields."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from codegen import families
from codegen.families import MainloopFamily
from codegen.vocabulary import ARCH_SMEM_LIMIT, QUANT_TYPES, BOrder, DataType, MmaAtom, parse_enum

def _dims(v: tuple[int, ...]) -> str:
    return "x".join(str(x) for x in v)


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


@dataclass(frozen=True)
class KernelSpec:
    """Everything that makes one generated kernel distinct.

    Each field's metadata ``token`` renders it into the kernel name, in field
    order, so a field added here appears in every name by itself. Fields with
    ``token=None`` do not change the code and stay out of the name.
    """

    family: str = field(metadata={"token": str})
    mainloop: MainloopFamily = field(metadata={"token": lambda v: v.value})
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
    # CTAs of a thread-block cluster along M sharing each B tile (TMA multicast); 1: none.
    # Named only when used, so the kernels without one keep their names.
    cluster: int = field(default=1, metadata={"token": lambda v: f"c{v}" if v > 1 else ""})
    # Where the kernel is meant to run (inclusive); not part of the code, so not of the name.
    arch_min: int = field(default=80, metadata={"token": None})
    arch_max: int = field(default=90, metadata={"token": None})
    # A grouped kernel (mixture-of-experts, docs/MOE.md): one launch over E experts' row
    # groups and stacked weights. Named only when set. NOTE: last, so that the specs built
    # positionally (arch_min, arch_max after align and cluster) keep their meaning.
    grouped: bool = field(default=False, metadata={"token": lambda v: "grouped" if v else ""})
    # CTAs per SM the compiler must leave registers for, where a tile asks for it
    # (``ctas_per_sm`` in the YAML); 0: the family's choice (min_ctas_per_sm and
    # min_ctas_per_sm_hopper). Named only when set, e.g. a tile's uncapped twin beside
    # the family's capped form.
    ctas_per_sm: int = field(default=0, metadata={"token": lambda v: f"ctas{v}" if v else ""})

    # ---- identity -------------------------------------------------------------------
    @property
    def name(self) -> str:
        tokens = []
        for f in dataclasses.fields(self):
            fmt = f.metadata.get("token")
            token = fmt(getattr(self, f.name)) if fmt is not None else ""
            if token:
                tokens.append(token)
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
                if f.default is not dataclasses.MISSING:
                    continue  # a field added since the record was written, at its default
                raise ValueError(f"kernel spec is missing field {f.name!r}")
            v = data[f.name]
            if f.name == "mainloop":
                v = families.get(v)
            elif f.name in kinds:
                v = parse_enum(kinds[f.name], v)
            elif f.name in ("cta", "warps"):
                if not isinstance(v, (list, tuple)) or len(v) != 3 or not all(_is_int(x) and x > 0 for x in v):
                    raise ValueError(f"field {f.name!r}: got {v!r:.80}, accepted: three positive integers")
                v = tuple(v)
            elif f.name == "family":
                if not isinstance(v, str) or not v:
                    raise ValueError(f"field 'family': got {v!r:.80}, accepted: a non-empty string")
            elif f.name == "grouped":
                if not isinstance(v, bool):
                    raise ValueError(f"field 'grouped': got {v!r:.80}, accepted: true or false")
            elif not _is_int(v) or v < 0:
                # NOTE: a str "3" would render the same name token as 3 and pass the
                # manifest's name check, then fail deep inside the first comparison.
                raise ValueError(f"field {f.name!r}: got {v!r:.80}, accepted: an integer >= 0")
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

    # ---- what the mainloop family makes of the kernel (codegen.families) -----------
    @property
    def direct_b(self) -> bool:
        """Quantized B travels global -> registers, not through shared memory."""
        return self.mainloop.direct_b(self)

    @property
    def staged_b(self) -> bool:
        """Quantized B is dequantized once per CTA into shared memory."""
        return self.mainloop.staged_b(self)

    @property
    def decode_ring(self) -> bool:
        """Quantized decode tile whose packed weights ride the cp.async ring."""
        return self.mainloop.decode_ring(self)

    @property
    def xor_rows(self) -> bool:
        """Shared rows of A and of "nk" B are 64 bytes unpadded, XOR-swizzled."""
        return self.mainloop.xor_rows(self)

    @property
    def lean_kn(self) -> bool:
        """"kn" B copies its K tiles from a carried pointer, as "nk" B does."""
        return self.mainloop.lean_kn(self)

    @property
    def a_rows(self) -> int:
        """Rows of A a stage holds: the CTA's M, or 8 for the decode tiles that serve at
        most 8 rows (sm80_rows8)."""
        return self.mainloop.a_rows(self)

    @property
    def min_ctas_per_sm(self) -> int:
        """CTAs per SM the compiler must leave registers for (1: no constraint)."""
        return self.ctas_per_sm or self.mainloop.min_ctas_per_sm(self)

    @property
    def min_ctas_per_sm_hopper(self) -> int:
        """The same where the kernel is compiled for sm_90 or later."""
        return self.ctas_per_sm or self.mainloop.min_ctas_per_sm_hopper(self)

    def spill_budget(self, arch: int) -> int:
        """Bytes of register spill (stores, and as many loads) accepted on ``arch``."""
        return self.mainloop.spill_budget(self, arch)

    @property
    def threads(self) -> int:
        """Threads per CTA (the family's rule: one warp per ``warps`` entry, plus any
        warps of its own such as a producer warpgroup)."""
        return self.mainloop.threads(self)

    @property
    def warp_tile(self) -> tuple[int, int, int]:
        return tuple(c // w for c, w in zip(self.cta, self.warps))  # type: ignore[return-value]

    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory of one CTA (the family's rule)."""
        return self.mainloop.smem_bytes(self)

    def archs_that_fit(self, archs: tuple[int, ...] | list[int]) -> list[int]:
        """The archs of ``archs`` inside this kernel's range whose shared memory holds it."""
        return [
            a
            for a in archs
            if self.arch_min <= a <= self.arch_max and self.smem_bytes <= ARCH_SMEM_LIMIT.get(a, 0)
        ]
