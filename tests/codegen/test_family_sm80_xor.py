"""The sm80_xor family (codegen/families/sm80.py, Sm80XorRowsFamily: K tiles of 32 in
XOR-swizzled shared rows): its YAML rules with the errors they give, what a kernel of
it implies (the ring without padding, which the kernel's static_assert checks against
GemmConfig), and the tiles of its experiment YAML (bench/experiments/sm80_xor.yaml)
compiling for sm_80 and sm_90 without spills."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from codegen.config import default_config_paths, load_configs
from codegen.families import Mainloop
from tests.codegen import test_config as cfg
from tests.helpers import compile_without_spills
from tests.sm80_xor_kernels import YAML, kernel_names

XOR = Mainloop.SM80_XOR
_FAMILY: dict[str, Any] = {"name": "xor", "mainloop": "sm80_xor"}
TILE = "families[0] (xor).tiles[0]"


def family(**overrides: Any) -> dict[str, Any]:
    return cfg.family(**{**copy.deepcopy(_FAMILY), **overrides})


def spec_of(tmp_path: Path, **overrides: Any):
    return load_configs([cfg.write(tmp_path, {"families": [family(**overrides)]})])[0].spec


def test_the_experiment_yaml_loads_beside_the_default_set() -> None:
    """The experiment's kernels are named apart from the default set's swizzled tiles
    (sm80_f16.yaml, sm80_bf16.yaml: the family's prefill tiles, both B orders;
    sm80_grouped.yaml: its grouped 128x128x32)."""
    loaded = load_configs([YAML])
    assert len(loaded) == 27 and {k.spec.mainloop for k in loaded} == {XOR}
    assert {k.spec.cta[2] for k in loaded} == {32} and any(k.spec.grouped for k in loaded)
    assert not XOR.experimental
    default = [k.spec for k in load_configs(default_config_paths()) if k.spec.mainloop is XOR]
    assert not {k.spec.name for k in loaded} & {s.name for s in default}
    assert len(default) == 14 and {(s.b_order.value, s.cta[2], s.grouped) for s in default} == {
        ("nk", 32, False), ("kn", 32, False), ("nk", 32, True)}
    assert kernel_names() == [k.spec.name for k in loaded]


def test_tile_rules(tmp_path: Path) -> None:
    tile = {"cta": [128, 128, 64], "warps": [2, 2, 1], "stages": 3}
    cfg.fam_error(tmp_path, family(tiles=[tile]), TILE, "cta", "field 'cta': got ", "k = 32", "got k = 64")


def test_kernel_rules(tmp_path: Path) -> None:
    cfg.fam_error(tmp_path, family(b_type="u4"), TILE, "b_type", "f16 or bf16 (the sm80_xor family is for dense B")
    cfg.fam_error(tmp_path, family(align=[4]), TILE, "align", "8 (the sm80_xor family copies whole 16-byte units")
    cfg.fam_error(tmp_path, family(mma="m8n8k4"), "families[0] (xor)", "mma", "m16n8k16")


def test_what_a_kernel_implies(tmp_path: Path) -> None:
    spec = spec_of(tmp_path, tiles=[{"cta": [128, 128, 32], "warps": [2, 2, 1], "stages": 5}])
    padded = spec_of(tmp_path, mainloop="sm80", tiles=[{"cta": [128, 128, 32], "warps": [2, 2, 1], "stages": 5}])
    assert spec.xor_rows and not padded.xor_rows and not spec.direct_b and spec.threads == padded.threads == 128
    assert "_sm80_xor_" in spec.name and spec.name != padded.name
    # 64-byte rows of A and B: CUTLASS 2.x's 80 KiB for this tile, against 100 padded.
    assert spec.smem_bytes == 5 * (128 * 64 + 128 * 64) == 81920
    assert padded.smem_bytes == 5 * (128 * 80 + 128 * 80)
    # "kn" B keeps its padded rows of N: only A is swizzled.
    kn = spec_of(tmp_path, b_orders=["kn"], tiles=[{"cta": [128, 128, 32], "warps": [2, 2, 1], "stages": 4}])
    assert kn.smem_bytes == 4 * (128 * 64 + 32 * (128 + 8) * 2)
    # The cost model: the padded twin's MMA rate at 0.8 / 1.04 of the swizzled one's
    # (measured on the H100: 0.66 of the time for this tile, 0.85 for 128x256x32 s3).
    assert Mainloop.SM80.mma_efficiency(padded) == pytest.approx(0.8 / 1.04 * XOR.mma_efficiency(spec))


@pytest.mark.parametrize("arch", [80, 90])
def test_the_experiment_tiles_compile_without_spills(arch: int) -> None:
    """Every tile on sm_90 (the GPU it is to be timed on); on sm_80 the f16 ones whose
    ring fits its shared memory (the kernels' static_asserts check the ring's size
    against the family's on both)."""
    loaded = [k.spec for k in load_configs([YAML])]
    specs = loaded if arch == 90 else [s for s in loaded if s.a_type.value == "f16" and s.archs_that_fit([80])]
    assert specs
    for spec in specs:
        compile_without_spills(spec, arch, "tests/codegen/test_family_sm80_xor.py")
