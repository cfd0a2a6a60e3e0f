"""What a mainloop family is: everything the generator, the build, the registry and the
cost model need to know about one kind of mainloop, in one object.

A family plugs in by subclassing ``MainloopFamily`` and calling
``codegen.families.register`` (docs/EXTENDING.md). Nothing outside a family's module
asks which family a kernel belongs to; it asks the family.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from codegen.vocabulary import BOrder, MmaAtom

if TYPE_CHECKING:
    from codegen.spec import KernelSpec

SMEM_PAD = 8  # elements of padding per shared row; mirrors GemmConfig::kPad


class MainloopFamily:
    """A mainloop family. Subclasses set the class attributes and override the rules
    that differ; the defaults are those of a plain multi-stage shared-memory pipeline."""

    value: str  # its YAML spelling and the kernel-name token
    min_arch: int  # the oldest arch its device code runs on
    atoms: tuple[MmaAtom, ...]  # the MMA atoms its headers implement
    header: str  # the header a generated kernel includes
    entry: str  # the device function a generated kernel calls with its Config
    summary: str = ""  # one line for listings and error messages

    # ---- validation (codegen.config) --------------------------------------------------
    def tile_error(self, cta: tuple[int, int, int], warps: tuple[int, int, int], stages: int) -> tuple[str, str] | None:
        """(field, accepted) where a tile breaks a rule of this family, else None."""
        return None

    # ---- what a kernel of the family implies (codegen.spec) ---------------------------
    def direct_b(self, spec: KernelSpec) -> bool:
        """Quantized B goes global -> registers, with no B tile in the stages."""
        return False

    def min_ctas_per_sm(self, spec: KernelSpec) -> int:
        """CTAs per SM the compiler must leave registers for (1: no constraint)."""
        return 1

    def spill_budget(self, spec: KernelSpec, arch: int) -> int:
        """Bytes of register spill accepted on ``arch``."""
        return 0

    def smem_bytes(self, spec: KernelSpec) -> int:
        """Dynamic shared memory: the stage ring, or the K-slice reduction if larger."""
        m, n, k = spec.cta
        a_bytes = m * (k + SMEM_PAD) * 2
        v_bytes = 0
        if spec.quantized:
            # Fragment-ordered rows of 8 columns, plus scale and zero rows per stage.
            b_bytes = 0 if spec.direct_b else n // 8 * (k // 32 * spec.quant_block_units + SMEM_PAD) * 2
            v_bytes = 2 * max(1, k // 32) * (n + SMEM_PAD) * 2
        elif spec.b_order is BOrder.NK:
            b_bytes = n * (k + SMEM_PAD) * 2
        else:
            b_bytes = k * (n + SMEM_PAD) * 2
        pipeline = spec.stages * (a_bytes + b_bytes + v_bytes)
        reduce = (spec.warps[2] - 1) * m * n * 4
        return max(pipeline, reduce)

    # ---- the build (gemm_runtime.build, gemm_runtime.compiler) ------------------------
    def nvrtc_target(self, arch: int) -> str:
        """The --gpu-architecture NVRTC compiles this family's kernels for on ``arch``
        (a family needing arch-specific instructions, such as wgmma, says "sm_90a")."""
        return f"sm_{arch}"

    # ---- the cost model (gemm_runtime.cost_model) -------------------------------------
    def mma_efficiency(self, spec: KernelSpec) -> float:
        """The share of the SM's MMA rate the mainloop sustains, beyond tile shape."""
        return 1.0

    def dequant_rate(self, spec: KernelSpec) -> float:
        """The mainloop's dequantization rate against the SM80 one's (quantized B)."""
        return 1.0

    # ---- identity ---------------------------------------------------------------------
    def __repr__(self) -> str:
        return f"<mainloop family {self.value!r}>"

    def __reduce__(self):
        # Kernel specs travel to build workers (spawned processes): a family goes by
        # name and is the registered instance there too.
        from codegen.families import get

        return get, (self.value,)
