"""The SM70 family: a register-staged double buffer without cp.async
(templates/include/gemm/mainloop_sm70.cuh), for Volta and Turing and, with the m16n8
atoms, natively everywhere after them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from codegen.families.base import MainloopFamily
from codegen.vocabulary import MmaAtom

if TYPE_CHECKING:
    from codegen.spec import KernelSpec


class Sm70Family(MainloopFamily):
    value = "sm70"
    min_arch = 70
    atoms = (MmaAtom.M16N8K16, MmaAtom.M16N8K8, MmaAtom.M8N8K4)
    header = "gemm/kernel_sm70.cuh"
    entry = "gemm::gemm_sm70"
    summary = "register-staged double buffer"

    def tile_error(self, cta, warps, stages, cluster=1):
        if stages != 2:
            return "stages", "2 (the sm70 mainloop is a register-staged double buffer)"
        return super().tile_error(cta, warps, stages, cluster)

    def mma_efficiency(self, spec: KernelSpec) -> float:
        return self.tile_efficiency(spec) * 0.85  # no copy in flight across the barrier

    def dequant_rate(self, spec: KernelSpec) -> float:
        return 0.7  # measured against the SM80 one on the same tiles
