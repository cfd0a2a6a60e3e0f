"""codegen.spec: kernel names are stable and complete; JSON round-trips; smem matches config.cuh."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from codegen.spec import KernelSpec
from tests.helpers import spec_for
from codegen.families import Mainloop
from codegen.vocabulary import BOrder, DataType, MmaAtom

SPEC = spec_for(family="sm80_f16", arch_min=80, arch_max=90)

# A different value for every field, to show each one reaches the name (or not).
OTHER: dict[str, Any] = {
    "family": "sm80_bf16",
    "mainloop": Mainloop.SM70,
    "mma": MmaAtom.M16N8K8,
    "a_type": DataType.BF16,
    "b_type": DataType.BF16,
    "acc_type": DataType.F16,
    "d_type": DataType.F32,
    "cta": (128, 64, 32),
    "warps": (2, 1, 1),
    "stages": 3,
    "b_order": BOrder.KN,
    "align": 4,
    "cluster": 2,
    "grouped": True,
    "ctas_per_sm": 1,
    "arch_min": 86,
    "arch_max": 89,
}
NOT_IN_NAME = {"arch_min", "arch_max"}  # where a kernel runs does not change its code


def test_name_is_stable() -> None:
    # Hard-coded on purpose: kernel names are cache keys and symbol names, so a rename
    # must be a deliberate change to this line.
    assert SPEC.name == "gemm_sm80_f16_sm80_m16n8k16_af16_bf16_accf32_df16_128x128x32_w2x2x1_s4_nk_align8"


def test_every_field_is_covered() -> None:
    assert set(OTHER) == {f.name for f in dataclasses.fields(KernelSpec)}


@pytest.mark.parametrize("field", sorted(OTHER))
def test_field_changes_name(field: str) -> None:
    changed = dataclasses.replace(SPEC, **{field: OTHER[field]})
    assert changed != SPEC
    if field in NOT_IN_NAME:
        assert changed.name == SPEC.name
    else:
        assert changed.name != SPEC.name


def test_a_cluster_of_one_is_not_named() -> None:
    """Kernels without a cluster kept their names (caches and symbols name them); a
    cluster of two ends the name."""
    assert SPEC.cluster == 1 and "_c1" not in SPEC.name
    assert dataclasses.replace(SPEC, cluster=2).name == SPEC.name + "_c2"


def test_a_tile_register_cap_is_named_and_overrides_the_family() -> None:
    """A tile's own ctas_per_sm ends the name (the family's choice, 0, is not named) and
    replaces the family's cap on every arch."""
    capped = spec_for(cta=(16, 128, 256), warps=(1, 4, 2), stages=3, a_type=DataType.BF16, b_type=DataType.U4,
                      d_type=DataType.BF16)  # fmt: skip
    assert (capped.min_ctas_per_sm, capped.min_ctas_per_sm_hopper) == (1, 2)
    twin = dataclasses.replace(capped, ctas_per_sm=1)
    assert twin.name == capped.name + "_ctas1"
    assert (twin.min_ctas_per_sm, twin.min_ctas_per_sm_hopper) == (1, 1)
    assert twin.spill_budget(90) == 0 and capped.spill_budget(90) == 128
    assert dataclasses.replace(capped, ctas_per_sm=3).min_ctas_per_sm == 3


def test_records_written_before_the_cluster_field_read_back() -> None:
    data = SPEC.to_json()
    del data["cluster"]
    assert KernelSpec.from_json(data) == SPEC


@pytest.mark.parametrize("spec", [SPEC, dataclasses.replace(SPEC, **OTHER)])
def test_json_round_trip(spec: KernelSpec) -> None:
    data = spec.to_json()
    assert KernelSpec.from_json(data) == spec
    assert data["cta"] == list(spec.cta) and data["b_order"] == spec.b_order.value


def test_from_json_missing_field() -> None:
    data = SPEC.to_json()
    del data["stages"]
    with pytest.raises(ValueError, match="stages"):
        KernelSpec.from_json(data)


def test_smem_bytes_known_tiles() -> None:
    # Padded rows (K + 8 halves) per stage: A 128*40*2 = 10240, B nk 128*40*2 = 10240.
    assert SPEC.smem_bytes == 4 * (10240 + 10240)
    # kn: B is 32 rows of 128 + 8 halves = 8704 bytes.
    assert dataclasses.replace(SPEC, b_order=BOrder.KN).smem_bytes == 4 * (10240 + 8704)
    # Split K: the pipeline (4 * (16*136*2 + 64*136*2) = 87040) beats the reduction (16*64*4).
    skinny = dataclasses.replace(SPEC, cta=(16, 64, 128), warps=(1, 2, 2))
    assert skinny.smem_bytes == 87040
    # A wide split with shallow tiles: the reduction buffer dominates (3 * 64*64*4).
    wide = dataclasses.replace(SPEC, cta=(64, 64, 64), warps=(1, 1, 4), stages=2)
    assert wide.smem_bytes == 3 * 64 * 64 * 4


def test_derived() -> None:
    assert SPEC.threads == 128
    assert SPEC.warp_tile == (64, 64, 32)
    assert SPEC.archs_that_fit([70, 80, 86, 90]) == [80, 86, 90]


def test_direct_b_only_for_one_warp_along_m_sm80_quantized() -> None:
    decode = spec_for(b_type=DataType.U4, cta=(16, 128, 256), warps=(1, 4, 2), stages=3)
    assert decode.direct_b
    assert not dataclasses.replace(decode, b_type=DataType.F16).direct_b  # dense B
    assert not dataclasses.replace(decode, mainloop=Mainloop.SM70, mma=MmaAtom.M16N8K8, stages=2).direct_b
    assert not dataclasses.replace(decode, cta=(32, 128, 256), warps=(2, 2, 2)).direct_b  # weights shared by 2 warps
    assert not dataclasses.replace(decode, cta=(64, 128, 64), warps=(1, 4, 1)).direct_b  # prefill rows


def test_direct_b_smem_has_no_b_tile() -> None:
    # Per stage: A 16 * (256 + 8) * 2 = 8448, scales and zeros 2 * 8 * (128 + 8) * 2 = 4352.
    decode = spec_for(b_type=DataType.U4, cta=(16, 128, 256), warps=(1, 4, 2), stages=3)
    assert decode.smem_bytes == 3 * (8448 + 4352)
    # The SM70 mainloop stages B: 16 rows of 8 * 256 / 32 * 16 + 8 units.
    sm70 = dataclasses.replace(decode, mainloop=Mainloop.SM70, mma=MmaAtom.M16N8K8, stages=2)
    assert sm70.smem_bytes == 2 * (8448 + 16 * (8 * 64 + 8) * 2 + 4352)


def test_min_ctas_per_sm_caps_registers_of_f16_direct_b_tiles_at_128() -> None:
    decode = spec_for(b_type=DataType.U4, cta=(16, 128, 256), warps=(1, 4, 2), stages=3)
    assert decode.min_ctas_per_sm == 2  # 2 x 8 warps
    four_warps = dataclasses.replace(decode, cta=(16, 128, 128), warps=(1, 4, 1))
    assert four_warps.min_ctas_per_sm == 4  # 4 x 4 warps
    assert dataclasses.replace(four_warps, b_type=DataType.U8).min_ctas_per_sm == 1  # spills at 128
    assert dataclasses.replace(decode, a_type=DataType.BF16).min_ctas_per_sm == 1  # spills at 128 on sm_80
    assert SPEC.min_ctas_per_sm == 1


def test_on_sm90_every_4_bit_16_row_direct_b_tile_is_capped() -> None:
    """bf16 activations and grouped kernels too (they fit 128 registers there with a few
    spills); 8-bit, 32-row and non-direct-B tiles keep min_ctas_per_sm."""
    decode = spec_for(b_type=DataType.U4, cta=(16, 128, 256), warps=(1, 4, 2), stages=3)
    four_warps = dataclasses.replace(decode, cta=(16, 128, 128), warps=(1, 4, 1))
    for spec, ctas in ((decode, 2), (four_warps, 4)):
        for variant in (spec, dataclasses.replace(spec, a_type=DataType.BF16, d_type=DataType.BF16),
                        dataclasses.replace(spec, grouped=True)):  # fmt: skip
            assert variant.min_ctas_per_sm_hopper == ctas, variant.name
    bf16 = dataclasses.replace(decode, a_type=DataType.BF16, d_type=DataType.BF16)
    assert bf16.min_ctas_per_sm == 1 and bf16.spill_budget(80) == 0 and bf16.spill_budget(90) == 128
    assert decode.spill_budget(90) == 0  # capped on both: as before
    assert dataclasses.replace(four_warps, b_type=DataType.U8).min_ctas_per_sm_hopper == 1
    assert dataclasses.replace(four_warps, cta=(32, 128, 64)).min_ctas_per_sm_hopper == 1
    assert SPEC.min_ctas_per_sm_hopper == 1


def test_spill_budget_only_for_capped_4_bit_tiles_below_sm90() -> None:
    decode = spec_for(b_type=DataType.U4, cta=(16, 128, 128), warps=(1, 4, 1), stages=4)
    assert decode.spill_budget(80) == 16
    assert decode.spill_budget(90) == 0
    assert dataclasses.replace(decode, b_type=DataType.U8).spill_budget(80) == 0
    assert SPEC.spill_budget(80) == 0
