"""The sm80_staged family (codegen/families/sm80.py, Sm80StagedFamily): its YAML rules
with the errors they give, what a kernel of it implies, and the tiles of its experiment
YAML (bench/experiments/sm80_staged.yaml) compiling for sm_80 and sm_90 without spills,
with the kernel's static_asserts (threads and shared memory equal to the family's)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from codegen.config import default_config_paths, load_configs
from codegen.families import Mainloop
from tests.codegen import test_config as cfg
from tests.helpers import compile_without_spills
from tests.sm80_staged_kernels import YAML, kernel_names

STAGED = Mainloop.SM80_STAGED
_FAMILY: dict[str, Any] = {
    "name": "staged",
    "arch": [80, 90],
    "mainloop": "sm80_staged",
    "mma": "m16n8k16",
    "b_type": "u4",
    "tiles": [{"cta": [128, 256, 64], "warps": [2, 4, 1], "stages": 3}],
}
TILE = "families[0] (staged).tiles[0]"


def family(**overrides: Any) -> dict[str, Any]:
    return cfg.family(**{**copy.deepcopy(_FAMILY), **overrides})


def test_the_experiment_yaml_loads_and_stays_out_of_the_default_set() -> None:
    loaded = load_configs([YAML])
    assert len(loaded) == 20 and {k.spec.mainloop for k in loaded} == {STAGED}
    assert {k.spec.b_type.value for k in loaded} == {"u4", "u8"}
    assert STAGED.experimental
    assert not {k.spec.name for k in loaded} & {k.spec.name for k in load_configs(default_config_paths())}
    assert kernel_names() == [k.spec.name for k in loaded]


@pytest.mark.parametrize(
    "tile, field, needle",
    [
        ({"cta": [128, 256, 64], "warps": [2, 2, 2], "stages": 3}, "warps", "no K slices"),
        ({"cta": [128, 256, 64], "warps": [2, 4, 1], "stages": 2}, "stages", "3 or more"),
        # 128 / 16 x 32 / 32 = 8 pair blocks over 16 warps
        ({"cta": [256, 128, 32], "warps": [4, 4, 1], "stages": 3}, "cta", "got 8 over 16 warps"),
        # 16 pair blocks over 16 warps: one k32 block each, not whole pairs
        ({"cta": [256, 128, 64], "warps": [4, 4, 1], "stages": 3}, "cta", "got 16 over 16 warps"),
        # K tiles must start on group boundaries: a power-of-two K tile
        ({"cta": [128, 128, 96], "warps": [2, 2, 1], "stages": 3}, "cta", "k = 96"),
    ],
)
def test_tile_rules(tmp_path: Path, tile: dict, field: str, needle: str) -> None:
    cfg.fam_error(tmp_path, family(tiles=[tile]), TILE, field, f"field {field!r}: got ", needle)


def test_kernel_rules(tmp_path: Path) -> None:
    cfg.fam_error(tmp_path, family(b_type="f16"), TILE, "b_type", "u4 or u8 (the sm80_staged family is for packed weights")
    cfg.fam_error(tmp_path, family(grouped=True), TILE, "grouped", "no grouped kernels yet")


def test_what_a_kernel_implies(tmp_path: Path) -> None:
    spec = load_configs([cfg.write(tmp_path, {"families": [family()]})])[0].spec
    assert spec.staged_b and not spec.direct_b and spec.threads == 256
    # The ring of the sm80 family plus two buffers of the tile's 16-bit weights.
    ring = 3 * (128 * (64 + 8) * 2 + 256 // 8 * (2 * 64 + 8) * 2 + 2 * 2 * (256 + 8) * 2)
    assert spec.smem_bytes == ring + 2 * 256 * 64 * 2
    assert spec.archs_that_fit([80, 86, 90]) == [80, 90]  # 150 KiB: not on sm_86's 99 KiB
    # Each weight is dequantized once per CTA: the cost model's per-warp-along-M count
    # is divided back out.
    assert STAGED.dequant_rate(spec) == 2.0 and Mainloop.SM80.dequant_rate(spec) == 1.0


@pytest.mark.parametrize("arch", [80, 90])
def test_the_experiment_tiles_compile_without_spills(arch: int) -> None:
    """One kernel per tile on sm_90 (f16 W4) and the other types' largest tile on sm_80."""
    loaded = [k.spec for k in load_configs([YAML])]
    if arch == 90:
        specs = [s for s in loaded if s.a_type.value == "f16" and s.b_type.value == "u4"]
    else:
        specs = [s for s in loaded if s.cta == (128, 256, 64) and s.stages == 3
                 and (s.a_type.value, s.b_type.value) != ("f16", "u4")]  # fmt: skip
    assert specs
    for spec in specs:
        compile_without_spills(spec, arch, "tests/codegen/test_family_sm80_staged.py")
