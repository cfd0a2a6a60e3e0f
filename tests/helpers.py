"""Small factories shared by CPU tests."""

from __future__ import annotations

from codegen.spec import KernelSpec
from codegen.vocabulary import BOrder, DataType, Mainloop, MmaAtom


def spec_for(**overrides) -> KernelSpec:
    fields = dict(
        family="test",
        mainloop=Mainloop.SM80,
        mma=MmaAtom.M16N8K16,
        a_type=DataType.F16,
        b_type=DataType.F16,
        acc_type=DataType.F32,
        d_type=DataType.F16,
        cta=(128, 128, 32),
        warps=(2, 2, 1),
        stages=4,
        b_order=BOrder.NK,
        align=8,
    )
    fields.update(overrides)
    return KernelSpec(**fields)
