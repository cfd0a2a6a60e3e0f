"""The sm80_rows8 family (codegen/families/sm80.py, Sm80Rows8Family: quantized decode tiles
for at most 8 rows of A): its YAML rules with the errors they give, what a kernel of it
implies (A's stages of 8 rows, which the kernel's static_assert checks against
GemmConfig; the register caps), that the runtime refuses it more than 8 rows with the
reason, and the tiles of its experiment YAML compiling for sm_80 and sm_90 without
spills."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from codegen.config import default_config_paths, load_configs
from codegen.families import Mainloop
from codegen.vocabulary import BOrder, DataType
from gemm_runtime.context import infeasible_reason, make_key
from tests.codegen import test_config as cfg
from tests.helpers import compile_without_spills

ROWS8 = Mainloop.SM80_ROWS8
YAML = Path(__file__).resolve().parents[2] / "bench" / "experiments" / "decode_rows8_tiles.yaml"
_FAMILY: dict[str, Any] = {"name": "r8", "mainloop": "sm80_rows8", "b_type": "u4",
                           "tiles": [{"cta": [16, 16, 1024], "warps": [1, 1, 8], "stages": 3}]}  # fmt: skip
TILE = "families[0] (r8).tiles[0]"


def family(**overrides: Any) -> dict[str, Any]:
    return cfg.family(**{**copy.deepcopy(_FAMILY), **overrides})


def spec_of(tmp_path: Path, **overrides: Any):
    return load_configs([cfg.write(tmp_path, {"families": [family(**overrides)]})])[0].spec


def test_the_experiment_yaml_is_the_family_alone() -> None:
    loaded = [k.spec for k in load_configs([YAML])]
    assert len(loaded) == 7 and {s.mainloop for s in loaded} == {ROWS8}
    assert ROWS8.experimental and not any(k.spec.mainloop is ROWS8 for k in load_configs(default_config_paths()))


def test_tile_and_kernel_rules(tmp_path: Path) -> None:
    cfg.fam_error(tmp_path, family(tiles=[{"cta": [32, 128, 64], "warps": [1, 4, 1], "stages": 4}]), TILE, "cta",
                  "16 rows on one warp along M", "got 32 on 1")  # fmt: skip
    cfg.fam_error(tmp_path, family(tiles=[{"cta": [16, 128, 64], "warps": [2, 2, 1], "stages": 4}]), TILE, "cta",
                  "got 16 on 2")  # fmt: skip
    cfg.fam_error(tmp_path, family(b_type="f16"), TILE, "b_type", "u4 or u8 (the sm80_rows8 family is for packed weights")
    cfg.fam_error(tmp_path, family(grouped=True), TILE, "grouped", "no grouped kernels yet")


def test_what_a_kernel_implies(tmp_path: Path) -> None:
    spec = spec_of(tmp_path)
    rows16 = spec_of(tmp_path, mainloop="sm80")
    assert spec.direct_b and rows16.direct_b and spec.a_rows == 8 and rows16.a_rows == 16
    assert "_sm80_rows8_" in spec.name and spec.name != rows16.name
    # Three stages of A (8 or 16 rows of 1024 + 8 padding halves) and the scale / zero rows
    # (two per k32 block of the tile: 32 rows of 16 + 8 columns).
    v_bytes = 2 * 32 * (16 + 8) * 2
    assert spec.smem_bytes == 3 * (8 * 1032 * 2 + v_bytes) == 58752
    assert rows16.smem_bytes == 3 * (16 * 1032 * 2 + v_bytes)
    # Registers for three CTAs of 8 warps, or five of 4 (a tile's ctas_per_sm overrides).
    assert spec.min_ctas_per_sm == spec.min_ctas_per_sm_hopper == 3
    four_warps = spec_of(tmp_path, tiles=[{"cta": [16, 16, 512], "warps": [1, 1, 4], "stages": 4}])
    assert four_warps.min_ctas_per_sm == 5
    capped = spec_of(tmp_path, tiles=[{"cta": [16, 16, 512], "warps": [1, 1, 8], "stages": 4, "ctas_per_sm": 4}])
    assert capped.min_ctas_per_sm == 4 and "ctas4" in capped.name


def test_the_runtime_refuses_more_than_8_rows(tmp_path: Path) -> None:
    """One answer to "can this kernel serve this problem" (gemm_runtime.context): rows
    8 and fewer pass, 9 get the family's reason; the 16-row tile serves both."""
    spec = spec_of(tmp_path)
    rows16 = spec_of(tmp_path, mainloop="sm80")
    for m in (1, 8, 9, 16):
        key = make_key(DataType.F16, BOrder.NK, DataType.F16, m, 4096, 4096, arch=90)._replace(
            b_type=DataType.U4, quant="u4g128")
        reason = infeasible_reason(spec, key)
        if m <= 8:
            assert reason is None, (m, reason)
        else:
            assert reason == f"serves at most 8 rows of A (M = {m}; the sm80_rows8 family's decode tiles)", reason
        assert infeasible_reason(rows16, key) is None


@pytest.mark.parametrize("arch", [80, 90])
def test_the_experiment_tiles_compile_without_spills(arch: int) -> None:
    for spec in (k.spec for k in load_configs([YAML])):
        compile_without_spills(spec, arch, "tests/codegen/test_family_sm80_rows8.py")
