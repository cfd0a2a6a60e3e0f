"""The SM90 quantized family (codegen/families/sm90_quant.py): its YAML (in the default
set, whose sm_90a compiles tests/runtime/test_build.py checks), validation with the
loader's error shape, what a kernel implies (threads, shared memory, grid, the V box rows
its barriers count on). CPU only (tests/gpu/ runs the kernels)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from codegen.config import DEFAULT_CONFIG_DIR, default_config_paths, load_configs
from codegen.families import Mainloop
from codegen.families.sm90_quant import v_box_rows
from codegen.vocabulary import DataType
from gemm_runtime.context import quant_groups
from gemm_runtime.packed_weight import group_shift
from tests.codegen import test_config as cfg
from tests.sm90_quant_kernel import QuantKernel

SM90Q = Mainloop.SM90_QUANT
YAML = DEFAULT_CONFIG_DIR / "sm90_quant.yaml"

_FAMILY: dict[str, Any] = {
    "name": "hopq",
    "arch": [90, 90],
    "mainloop": "sm90_quant",
    "mma": "m64nNk16",
    "b_type": "u4",
    "tiles": [{"cta": [64, 128, 64], "warps": [1, 8, 1], "stages": 4}],
}
TILE = "families[0] (hopq).tiles[0]"


def family(**overrides: Any) -> dict[str, Any]:
    return cfg.family(**{**copy.deepcopy(_FAMILY), **overrides})


def test_the_yaml_loads_into_the_default_set() -> None:
    loaded = load_configs([YAML])
    assert len(loaded) == 76  # f16/bf16 x 16-bit/f32 out x (u4 x 10 tiles + u8 x 9)
    assert {k.spec.mainloop for k in loaded} == {SM90Q}
    tiles = {((64, 128, 64), 8), ((128, 128, 64), 6), ((256, 128, 64), 4)}
    whole = {((64, 256, 128), 4), ((128, 192, 128), 3)}  # a pair of K tiles a stage, both a warpgroup's
    whole_w4 = {((128, 128, 128), 4)}  # the same, 4-bit only
    in_turn = {((64, 64, 128), 8), ((32, 64, 128), 8), ((32, 128, 128), 8), ((128, 64, 128), 4)}  # pairs of K tiles
    assert {(k.spec.cta, k.spec.stages) for k in loaded if k.spec.b_type.bits == 4} == tiles | whole | whole_w4 | in_turn
    assert {(k.spec.cta, k.spec.stages) for k in loaded if k.spec.b_type.bits == 8} == tiles | whole | in_turn
    # The tiles taking K tiles in turn: warps [1, rows / 16, 2], a pair of them a stage.
    assert {(k.spec.cta, k.spec.stages) for k in loaded if SM90Q.k_split(k.spec) == 2} == in_turn
    pairs = {(k.spec.cta, k.spec.stages) for k in loaded if SM90Q.k_per_stage(k.spec) == 2}
    assert pairs == in_turn | whole | whole_w4
    assert all(k.spec.warps == (1, k.spec.cta[1] // 16, SM90Q.k_split(k.spec)) for k in loaded)
    assert YAML in default_config_paths()
    assert {k.spec.name for k in loaded} <= {k.spec.name for k in load_configs(default_config_paths())}


@pytest.mark.parametrize(
    "tile, field, needle",
    [
        ({"cta": [256, 128, 128], "warps": [1, 8, 1], "stages": 2}, "cta", "a K of 64"),
        ({"cta": [24, 128, 64], "warps": [1, 8, 1], "stages": 4}, "cta", "tokens per CTA"),
        ({"cta": [512, 128, 64], "warps": [1, 8, 1], "stages": 4}, "cta", "tokens per CTA"),
        ({"cta": [64, 320, 64], "warps": [1, 20, 1], "stages": 4}, "cta", "64 per consumer warpgroup"),
        ({"cta": [128, 256, 64], "warps": [1, 16, 1], "stages": 4}, "cta", "at most 64 tokens"),
        ({"cta": [256, 192, 64], "warps": [1, 12, 1], "stages": 4}, "cta", "at most 128 tokens"),
        ({"cta": [64, 128, 64], "warps": [4, 1, 1], "stages": 4}, "warps", "[1, 8, 1]"),
        # Two m64 blocks per consumer warpgroup: half the warps, up to 64 tokens, for 128
        # and 256 weight rows only.
        ({"cta": [128, 256, 64], "warps": [1, 8, 1], "stages": 4}, "cta", "at most 64 tokens"),
        ({"cta": [64, 192, 64], "warps": [1, 6, 1], "stages": 4}, "warps", "[1, 12, 1] for cta N 192"),
        ({"cta": [64, 256, 64], "warps": [1, 4, 1], "stages": 4}, "warps", "or [1, 8, 1]: two m64 blocks"),
        # K tiles in turn: two consumer warpgroups on 64 weight rows, up to 128 tokens.
        ({"cta": [64, 64, 64], "warps": [1, 4, 3], "stages": 4}, "warps", "or [1, 4, 2]: two consumer warpgroups"),
        ({"cta": [64, 256, 64], "warps": [1, 16, 2], "stages": 4}, "warps", "[1, 16, 1] for cta N 256"),
        ({"cta": [256, 64, 64], "warps": [1, 4, 2], "stages": 4}, "cta", "at most 128 tokens"),
        ({"cta": [128, 128, 64], "warps": [1, 8, 2], "stages": 4}, "cta", "at most 64 tokens"),
        ({"cta": [64, 128, 64], "warps": [1, 8, 1], "stages": 9}, "stages", "an integer <= 8"),
    ],
)
def test_tile_rules(tmp_path: Path, tile: dict, field: str, needle: str) -> None:
    cfg.fam_error(tmp_path, family(tiles=[tile]), TILE, field, f"field {field!r}: got ", needle)


def test_kernel_rules(tmp_path: Path) -> None:
    cfg.fam_error(tmp_path, family(b_type="f16"), TILE, "b_type", "u4 or u8 (dense B is the sm90 family's)")
    cfg.fam_error(tmp_path, family(align=[4]), TILE, "align", "8 (TMA needs 16-byte aligned rows of X)")
    cfg.fam_error(tmp_path, family(arch=[80, 90]), "families[0] (hopq)", "mainloop", "needs arch >= 90")


def test_two_blocks_per_consumer(tmp_path: Path) -> None:
    """[1, rows / 32, 1] warps: each consumer warpgroup takes two m64 blocks of weight rows
    (Sm90QuantConfig's Blocks), so 64x256 has two consumers and 64x128 one; the staging
    then starts at the ring's start as for any single consumer."""
    fam = family(tiles=[{"cta": [64, 256, 64], "warps": [1, 8, 1], "stages": 8},
                        {"cta": [64, 128, 64], "warps": [1, 4, 1], "stages": 8},
                        {"cta": [64, 256, 64], "warps": [1, 16, 1], "stages": 8}])  # fmt: skip
    two, one, four = (k.spec for k in load_configs([cfg.write(tmp_path, {"families": [fam]})]))
    assert [SM90Q.blocks(s) for s in (two, one, four)] == [2, 2, 1]
    assert [s.threads for s in (two, one, four)] == [128 * 3, 128 * 2, 128 * 5]
    assert SM90Q.staged_offset(one) == 0 < SM90Q.staged_offset(two)
    assert QuantKernel("f16", 4, "f16", 64, 256, 8, blocks=2).spec.warps == two.warps
    # The cost model's consumer term counts warpgroups, not m64 blocks.
    assert SM90Q.mma_efficiency(two) < SM90Q.mma_efficiency(four)


def test_k_tiles_in_turn(tmp_path: Path) -> None:
    """[1, 4, 2] warps on 64 weight rows: two consumer warpgroups hold the same rows and
    take a run's K tiles in turn (Sm90QuantConfig's KSplit), so the tile has two
    consumers' threads and registers, a staging after the ring that also takes a landed
    give of both K halves' sums, no hand-off epilogue (the halves meet in the staging
    first), one CTA per SM, twice the partials per stream-K CTA, and no grouped form."""
    from gemm_runtime.context import make_key
    from gemm_runtime.cost_model import workspace_bytes

    fam = family(tiles=[{"cta": [64, 64, 64], "warps": [1, 4, 2], "stages": 8},
                        {"cta": [64, 64, 64], "warps": [1, 4, 1], "stages": 8}])  # fmt: skip
    turns, alone = (k.spec for k in load_configs([cfg.write(tmp_path, {"families": [fam]})]))
    assert (SM90Q.k_split(turns), SM90Q.k_split(alone)) == (2, 1)
    assert (SM90Q.consumers(turns), SM90Q.consumers(alone)) == (2, 1)
    assert (turns.threads, alone.threads) == (384, 256)
    assert (SM90Q.min_ctas_per_sm(turns), SM90Q.min_ctas_per_sm(alone)) == (1, 2)
    assert SM90Q.staged_offset(alone) == 0 < SM90Q.staged_offset(turns) == 8 * SM90Q.stage_bytes(turns)
    assert SM90Q.staged_bytes(turns) == 64 * 64 * 2 * 4 > SM90Q.staged_bytes(alone) == 64 * 68 * 4
    assert SM90Q.handoff_bytes(turns) == 0
    assert SM90Q.partial_tiles(turns, (1, 64), 2, 132) == 2 * SM90Q.partial_tiles(alone, (1, 64), 2, 132) == 256
    key = make_key(DataType.F16, turns.b_order, DataType.F16, 64, 4096, 4096, arch=90)._replace(
        b_type=turns.b_type, quant="u4g128")
    assert workspace_bytes(turns, key, 2, resident=132)[1] == 2 * workspace_bytes(alone, key, 2, resident=132)[1]
    assert "no grouped form" in SM90Q.grouped_error(turns) and SM90Q.grouped_error(alone) is None
    # The cost model prices X's tile fetched once per 64 rows (dequant_rate).
    assert SM90Q.dequant_rate(turns) < SM90Q.dequant_rate(alone) == 1.0
    assert QuantKernel("f16", 4, "f16", 64, 64, 8, k_split=2).spec.warps == turns.warps


@pytest.mark.parametrize("cta_k", [64, 128])
@pytest.mark.parametrize("dtype, bits, out", [("f16", 4, "f16"), ("bf16", 8, "f32")])
def test_k_turn_kernels_compile(dtype: str, bits: int, out: str, cta_k: int) -> None:
    """The GPU test's tiles taking K tiles in turn, a K tile a stage (cta K 64) and a pair
    (128), compile for sm_90a without spilling and without ptxas serializing their wgmma
    (C7515: the accumulators a warpgroup zeroes when a run's only K tile is the other's;
    with a pair each warpgroup has a half of every stage, and that zeroing is compiled
    out), with the kernel's static_asserts (the host's stage size among them)."""
    from codegen.render import render_kernel
    from tests.sm90_smoke import nvrtc_compile, report

    tiles = [(32, 64, 8), (64, 64, 8), (128, 64, 6)] if cta_k == 64 else [(64, 64, 8), (32, 64, 8), (32, 128, 8)]
    for tokens, rows, stages in tiles:
        spec = QuantKernel(dtype, bits, out, tokens, rows, stages, k_split=2, cta_k=cta_k).spec
        ok, log, _ = nvrtc_compile(render_kernel(spec, "tests/codegen/test_family_sm90_quant.py"), spec.name)
        assert ok, log
        rep = report(log, spec.name)
        assert rep["spill_stores"] == rep["spill_loads"] == 0, log
        assert "serialized" not in log, log


def test_a_pair_of_k_tiles_a_stage() -> None:
    """cta K 128 with warps [1, rows / 16, 2]: a stage holds the pair of K tiles the two
    warpgroups of a row block read at once, each its half (Sm90QuantConfig::kKPerStage):
    X's two boxes of 64 K, one weight box twice as wide, the pair's groups; every consumer
    reads every stage. Only with the K tiles in turn, register A."""
    from gemm_runtime.context import make_key

    pair = QuantKernel("f16", 4, "f16", 64, 64, 8, k_split=2, cta_k=128).spec
    single = QuantKernel("f16", 4, "f16", 64, 64, 8, k_split=2).spec
    assert SM90Q.tile_error(pair.cta, pair.warps, pair.stages) is None
    assert (SM90Q.k_per_stage(pair), SM90Q.k_per_stage(single)) == (2, 1)
    for cta, warps in [((256, 64, 128), (1, 4, 1)), ((64, 256, 128), (1, 8, 1)), ((64, 256, 128), (1, 16, 2)),
                       ((64, 64, 192), (1, 4, 2))]:
        field, rule = SM90Q.tile_error(cta, warps, 8)
        assert field == "cta" and "with warps [1, rows / 16, 2] or, up to 128 tokens" in rule, (cta, warps, rule)
    smem = Mainloop.SM90_QUANT_SMEM
    assert smem.tile_error((64, 256, 128), (1, 8, 1), 4)[0] == "cta"
    # X 64 x 128 x 2, the packed pair (8 n8 tiles x 4 k32 blocks x 32 lanes x 4 bytes), four
    # groups' scales and zeros; 1024-byte multiples.
    assert SM90Q.stage_bytes(pair) == -(-(64 * 128 * 2 + 8 * 4 * 32 * 4 + 2 * 4 * 64 * 2) // 1024) * 1024
    assert SM90Q.stage_bytes(pair) > 2 * SM90Q.stage_bytes(single) - 2048
    key = make_key(DataType.F16, pair.b_order, DataType.F16, 64, 4096, 4096, arch=90)._replace(
        b_type=pair.b_type, quant="u4g32")
    x, w, v = SM90Q.tensor_maps(pair, key)
    assert (x.box_rows, x.box_cols) == (64, 64)  # a 128-byte swizzled row of X: two boxes a stage
    assert (w.box_rows, w.box_cols) == (8, 128)  # n8 tiles x the pair's words (one a K a lane: u4)
    assert v.box_rows == 4  # groups of 32 over 128 K
    for quant, rows in (("u4g64", 2), ("u4g128", 1), ("u4g4096", 1)):
        assert SM90Q.tensor_maps(pair, key._replace(quant=quant))[2].box_rows == rows
    # Stream-K and the cost model count stages: K / 128.
    assert SM90Q.staged_bytes(pair) == SM90Q.staged_bytes(single)
    assert SM90Q.partial_tiles(pair, (1, 64), 2, 132) == SM90Q.partial_tiles(single, (1, 64), 2, 132)


def test_a_pair_of_k_tiles_a_stage_for_one_warpgroup() -> None:
    """cta K 128 with warps [1, rows / 16, 1]: each consumer warpgroup takes both halves of
    every stage (one full-barrier wait and one release per two K tiles), up to 128 tokens
    and one m64 block a warpgroup; the one-warpgroup tiles' staging, hand-off and
    partials, a pair's stage, no grouped form."""
    for tokens, rows in [(64, 128), (128, 128), (64, 256), (128, 192), (64, 64), (32, 128)]:
        whole = QuantKernel("f16", 4, "f16", tokens, rows, 4, cta_k=128).spec
        single = QuantKernel("f16", 4, "f16", tokens, rows, 4).spec
        assert whole.warps == single.warps == (1, rows // 16, 1)
        assert SM90Q.tile_error(whole.cta, whole.warps, whole.stages) is None
        assert (SM90Q.k_per_stage(whole), SM90Q.k_split(whole), SM90Q.consumers(whole)) == (2, 1, rows // 64)
        assert SM90Q.stage_bytes(whole) > 2 * SM90Q.stage_bytes(single) - 2048
        assert SM90Q.staged_bytes(whole) == SM90Q.staged_bytes(single)
        assert SM90Q.handoff_bytes(whole) in (0, SM90Q.handoff_bytes(single))
        assert SM90Q.partial_tiles(whole, (1, 64), 2, 132) == SM90Q.partial_tiles(single, (1, 64), 2, 132)
        assert "no grouped form" in SM90Q.grouped_error(whole) and SM90Q.grouped_error(single) is None
    # 256 tokens: 64 KiB of X a stage; two m64 blocks a warpgroup: not this form.
    assert SM90Q.tile_error((256, 128, 128), (1, 8, 1), 2)[0] == "cta"
    assert SM90Q.tile_error((64, 256, 128), (1, 8, 1), 4)[0] == "cta"


@pytest.mark.parametrize("dtype, bits, out", [("f16", 4, "f16"), ("bf16", 8, "f32")])
def test_whole_stage_kernels_compile(dtype: str, bits: int, out: str) -> None:
    """The GPU test's tiles taking both halves of a pair stage compile for sm_90a without
    spilling and without ptxas serializing their wgmma, with the kernel's static_asserts."""
    from codegen.render import render_kernel
    from tests.sm90_smoke import nvrtc_compile, report

    for tokens, rows, stages in [(128, 128, 4), (64, 256, 4), (128, 192, 3)]:
        spec = QuantKernel(dtype, bits, out, tokens, rows, stages, cta_k=128).spec
        ok, log, _ = nvrtc_compile(render_kernel(spec, "tests/codegen/test_family_sm90_quant.py"), spec.name)
        assert ok, log
        rep = report(log, spec.name)
        assert rep["spill_stores"] == rep["spill_loads"] == 0, log
        assert "serialized" not in log, log


def test_what_a_kernel_implies() -> None:
    for k in load_configs([YAML]):
        s = k.spec
        tokens, rows, cta_k = s.cta
        turns = s.warps[2]  # consumer warpgroups per weight row, taking the K tiles in turn
        # The GPU test's harness launches this very kernel.
        assert QuantKernel(s.a_type.value, s.b_type.bits, s.d_type.value, tokens, rows, s.stages,
                           k_split=turns, cta_k=cta_k).name == s.name  # fmt: skip
        assert s.threads == 128 * (rows // 64 * turns + 1)
        # Per stage and K tile (one, or a pair where they go in turn): X (tokens x 64 x 2
        # bytes), the packed K tile, two groups' scales and zeros; rounded up to 1024
        # bytes, and 1024 more to align the base.
        stage = cta_k // 64 * (tokens * 128 + rows // 8 * 64 * (s.b_type.bits // 4) * 4 + 2 * 2 * rows * 2)
        stage = -(-stage // 1024) * 1024
        # The D tile the epilogue stages (fp32 rows of weight rows + 4): after the ring
        # where both fit, else over the ring's last stages; at its start for one
        # consumer warpgroup (two CTAs per SM).
        # In turn, it also takes a landed give: the tile once per K half.
        staged = max(tokens * (rows + 4), tokens * rows * turns) * 4
        room = 227 * 1024 - 1024 - staged
        one_consumer = rows == 64 and turns == 1
        offset = 0 if one_consumer else s.stages * stage if s.stages * stage <= room else room // stage * stage
        assert SM90Q.staged_offset(s) == offset and offset % stage == 0
        if ((tokens, rows) in ((64, 128), (128, 128)) and cta_k == 64) or (rows == 64 and (cta_k == 64 or s.b_type.bits == 4)):
            assert offset == s.stages * stage  # no stage waits for the epilogue
        if (tokens, rows, cta_k) == (128, 128, 128):
            assert offset == 3 * stage  # the last of the four stages (42 KiB each) waits for it
        if (tokens, rows, cta_k, s.b_type.bits) == (64, 64, 128, 8):
            assert offset == (s.stages - 1) * stage  # the last stage: 8 of them are 200 KiB
        if (tokens, rows) == (256, 128):
            assert offset == 2 * stage  # two of the four stages take the next tile's copies
        # The hand-off epilogue's 16-bit D tile (rows of weight rows + 8) right after the
        # stages, where it fits, for two or more consumer warpgroups and a 16-bit D; not
        # where the K tiles go in turn (the halves' sums meet in the fp32 staging first).
        handoff = tokens * (rows + 8) * 2
        if rows == 64 or turns > 1 or s.d_type.bits != 16 or s.stages * stage + handoff + 1024 > 227 * 1024:
            handoff = 0
        assert SM90Q.handoff_bytes(s) == handoff
        if (tokens, rows, s.b_type.bits, s.d_type.bits) in ((256, 128, 4, 16), (128, 128, 8, 16), (64, 256, 4, 16)):
            assert handoff > 0
        end = max(s.stages * stage, offset + staged, s.stages * stage + handoff)
        assert s.smem_bytes == -(-end // 1024) * 1024 + 1024 <= 227 * 1024
        # Unsplit: persistent over the resident CTAs (fewer where the tiles are fewer).
        # Split: stream-K on the resident CTAs, or on tiles x splits where fewer; a flag
        # and a partial tile per CTA.
        assert SM90Q.grid(s, (3, 7), 1, 0, 132) == (21, 1, 1)
        assert SM90Q.grid(s, (30, 7), 1, 0, 132) == (132, 1, 1)
        assert SM90Q.grid(s, (3, 7), 4, 0, 132) == (84, 1, 1)
        assert SM90Q.grid(s, (3, 7), 7, 0, 132) == (132, 1, 1)
        assert SM90Q.split_tiles(s, (3, 7), 4, 132) == 84
        assert SM90Q.partial_tiles(s, (3, 7), 4, 132) == 84 * turns  # each K half's sums apart
        assert SM90Q.split_tiles(s, (3, 7), 1, 132) == SM90Q.partial_tiles(s, (3, 7), 1, 132) == 0
        # Every split count that fills the device is one launch; none is offered from two
        # waves of tiles up (split_options keeps one count per key); waves are fractional.
        assert SM90Q.split_key(s, (3, 7), 64, 7, 132) == SM90Q.split_key(s, (3, 7), 64, 9, 132) == 132
        assert SM90Q.split_key(s, (3, 7), 64, 2, 132) == 42 != SM90Q.split_key(s, (3, 7), 64, 1, 132)
        assert SM90Q.split_key(s, (4, 66), 64, 2, 132) == SM90Q.split_key(s, (4, 66), 64, 1, 132)
        assert SM90Q.rounds(s, 224, 2, 132) == (224 * 2 / 132, 1)
        assert SM90Q.rounds(s, 21, 4, 132) == (1.0, 1)
        assert SM90Q.max_splits(s) is None
        assert SM90Q.nvrtc_target(90) == "sm_90a"


@pytest.mark.parametrize("k", [32, 40, 64, 96, 1000, 4096])
@pytest.mark.parametrize("group", [32, 64, 128, -1])
def test_v_box_rows_agree_with_the_kernels_shift_rule(k: int, group: int) -> None:
    """The host's box rows and the kernel's Sm90QuantConfig::v_rows must agree, or a full
    barrier never completes: a K tile a stage, two below a shift of 6; a pair, four below 6
    and two below 7; one group (of any size) has a shift of 30."""
    groups = quant_groups(group, k)
    size = k if groups == 1 else group
    shift = group_shift(group, groups)
    assert v_box_rows(size, k) == (2 if shift < 6 else 1)
    assert v_box_rows(size, k, 128) == (4 if shift < 6 else 2 if shift < 7 else 1)


def test_the_box_sizes_the_kernel_expects_are_the_hosts() -> None:
    """A full barrier counts the bytes of every box: X's (tokens, or M's rows in groups
    of 8 below them: a_box_rows) and V's (v_box_rows) must be what the kernel computes
    from M and group_shift, or the barrier never completes and the kernel hangs."""
    from codegen.render import INCLUDE_DIR

    config = (INCLUDE_DIR / "gemm" / "sm90" / "quant_config.cuh").read_text()
    kernel = (INCLUDE_DIR / "gemm" / "sm90" / "kernel_sm90_quant.cuh").read_text()
    assert "(M >= kTokens ? kTokens : (M + 7) / 8 * 8) * kCtaK * 2" in config
    assert "return group_shift < 6 ? 2 : 1;" in config
    assert "Cfg::x_box_bytes(p.M)) +" in kernel  # X's box, then W's and V's
    assert "Cfg::kTileBytesW + 2 * v_rows * Cfg::kRows * 2));" in kernel
    spec = next(k.spec for k in load_configs([YAML]) if k.spec.cta[0] == 128)
    from gemm_runtime.context import make_key

    for m, rows in ((1, 8), (17, 24), (127, 128), (128, 128), (1000, 128)):
        key = make_key(DataType.F16, spec.b_order, DataType.F16, m, 4096, 4096, arch=90)._replace(
            b_type=spec.b_type, quant=f"{spec.b_type.value}g128")
        assert SM90Q.tensor_maps(spec, key)[0].box_rows == rows


@pytest.mark.parametrize("tokens, rows, blocks", [(64, 128, 1), (128, 128, 1), (256, 128, 1), (128, 64, 1),
                                                  (128, 192, 1), (64, 256, 1), (64, 256, 2), (64, 128, 2)])  # fmt: skip
def test_the_staged_epilogue_covers_the_tile_without_bank_conflicts(tokens: int, rows: int, blocks: int) -> None:
    """StagedTransposedTile (quant_epilogue.cuh), emulated from the header's index
    rules: the consumers' D^T fragments (of every m64 block of a warpgroup) land on every
    (token, weight row) of the tile once, a warp's 32 stores of one accumulator fall on
    32 banks (the pitch of rows + 4 floats), and the staging fits the family's shared
    memory however few the stages."""
    from codegen.render import INCLUDE_DIR

    header = (INCLUDE_DIR / "gemm" / "sm90" / "quant_epilogue.cuh").read_text()
    config = (INCLUDE_DIR / "gemm" / "sm90" / "quant_config.cuh").read_text()
    assert "const int row = 64 * (wg * Cfg::kBlocks + b) + 16 * ((threadIdx.x / 32) % 4) + lane / 4;" in header
    assert "const int token = 8 * (i / 4) + 2 * (lane % 4) + i % 2;" in header
    assert "float& r = rows[token * Cfg::kStagedPitch + row + 8 * ((i / 2) % 2)];" in header
    assert "r = acc[b * Cfg::kBlockAcc + i];" in header and "r += acc[b * Cfg::kBlockAcc + i];" in header
    assert "static constexpr int kStagedPitch = kRows + (kSharedB ? 8 : 4);" in config
    pitch, threads = rows + 4, rows // (64 * blocks) * 128
    written: dict[int, int] = {}
    for t in range(threads):
        wg, warp, lane = t // 128, t // 32 % 4, t % 32
        for b in range(blocks):
            for i in range(tokens // 2):
                token = 8 * (i // 4) + 2 * (lane % 4) + i % 2
                row = 64 * (wg * blocks + b) + 16 * warp + lane // 4 + 8 * (i // 2 % 2)
                written[token * pitch + row] = written.get(token * pitch + row, 0) + 1
    assert sorted(written) == sorted(tok * pitch + r for tok in range(tokens) for r in range(rows))
    assert set(written.values()) == {1}
    for i in range(tokens // 2):  # warp 0's store of acc[i]; every warp and block is this shifted by 16 rows
        addresses = {(8 * (i // 4) + 2 * (lane % 4) + i % 2) * pitch + lane // 4 + 8 * (i // 2 % 2) for lane in range(32)}
        assert len({a % 32 for a in addresses}) == 32, i
    # The staging fits the shared memory the family asks for, with a ring of any depth.
    assert QuantKernel("f16", 4, "f16", tokens, rows, 2, blocks=blocks).spec.smem_bytes >= tokens * pitch * 4 + 1024


def _stream_k_shares(total: int, ctas: int) -> list[tuple[int, int]]:
    """stream_k.cuh's StreamK::begin, per rank: [begin(r), begin(r + 1))."""
    return [(r * total // ctas, (r + 1) * total // ctas) for r in range(ctas)]


def _rank_of(g: int, total: int, ctas: int) -> int:
    """stream_k.cuh's StreamK::rank_of."""
    return ((g + 1) * ctas - 1) // total


@pytest.mark.parametrize("tiles, k_tiles, ctas", [(224, 64, 132), (21, 64, 84), (20, 6, 132), (7, 5, 3), (1, 1, 1)])
def test_stream_k_partition(tiles: int, k_tiles: int, ctas: int) -> None:
    """The kernel's stream-K arithmetic (stream_k.cuh, mirrored here): the shares cover
    every K tile once; rank_of names the share holding an iteration; the rank holding a
    tile's K tile 0 finishes it, waiting on the ranks above it (of lower block index:
    started first), whose shares start inside the tile, so each hands over at most once."""
    total = tiles * k_tiles
    shares = _stream_k_shares(total, ctas)
    assert [g for b, e in shares for g in range(b, e)] == list(range(total))
    for g in range(total):
        b, e = shares[_rank_of(g, total, ctas)]
        assert b <= g < e
    given = [0] * ctas
    for t in range(tiles):
        head, last = _rank_of(t * k_tiles, total, ctas), _rank_of((t + 1) * k_tiles - 1, total, ctas)
        for r in range(head + 1, last + 1):
            b, e = shares[r]
            assert b == e or t * k_tiles < b < (t + 1) * k_tiles  # empty, or starts inside the tile
            given[r] += b != e
    assert max(given) <= 1


# ---- the shared-B form (Sm90QuantSmemFamily: experimental, no default kernels) ----------

SMEM = Mainloop.SM90_QUANT_SMEM
SMEM_TILES = [(64, 256, 6), (64, 256, 8), (128, 256, 4), (64, 128, 4)]  # tests/gpu/test_sm90_quant_kernel.py's and more


@pytest.mark.parametrize(
    "tile, field, needle",
    [
        ({"cta": [256, 256, 64], "warps": [1, 8, 1], "stages": 4}, "cta", "wgmma M slices of 64"),
        ({"cta": [64, 64, 64], "warps": [1, 8, 1], "stages": 4}, "cta", "two consumer warpgroups"),
        ({"cta": [64, 256, 64], "warps": [1, 16, 1], "stages": 4}, "warps", "[1, 8, 1]"),
        ({"cta": [64, 256, 64], "warps": [1, 8, 1], "stages": 12}, "stages", "an integer <= 8"),
    ],
)
def test_smem_tile_rules(tmp_path: Path, tile: dict, field: str, needle: str) -> None:
    cfg.fam_error(tmp_path, family(mainloop="sm90_quant_smem", tiles=[tile]), TILE, field, f"field {field!r}: got ",
                  needle)  # fmt: skip


def test_smem_family_is_experimental_and_loads_from_a_users_yaml(tmp_path: Path) -> None:
    assert SMEM.experimental and not SM90Q.experimental
    assert not {k for k in load_configs(default_config_paths()) if k.spec.mainloop is SMEM}
    tile = {"cta": [64, 256, 64], "warps": [1, 8, 1], "stages": 6}
    loaded = load_configs([cfg.write(tmp_path, {"families": [family(mainloop="sm90_quant_smem", tiles=[tile])]})])
    assert {k.spec.mainloop for k in loaded} == {SMEM} and loaded[0].spec.threads == 384


@pytest.mark.parametrize("tile", SMEM_TILES, ids=lambda t: "x".join(map(str, t)))
@pytest.mark.parametrize("bits", [4, 8])
def test_smem_shared_memory(bits: int, tile: tuple[int, int, int]) -> None:
    """The ring (or the staged D tile, rows of weight rows + 8 floats), then three
    buffers of a K tile of dequantized weights per consumer warpgroup where they fit
    under 227 KiB, else two; the kernel's own kSmemBytes is checked against this by a
    static_assert when it compiles (test_smem_kernels_compile)."""
    tokens, rows, stages = tile
    spec = QuantKernel("f16", bits, "f16", tokens, rows, stages, smem=True).spec
    if bits == 8 and tile == (64, 256, 8):  # a ring of 8 stages of 8-bit weights is past the limit
        assert spec.smem_bytes > 227 * 1024
        return
    stage = tokens * 128 + rows // 8 * 64 * (bits // 4) * 4 + 2 * 2 * rows * 2
    ring = max(stages * -(-stage // 1024) * 1024, tokens * (rows + 8) * 4)
    buffers = 3 if ring + 3 * rows * 128 + 1024 <= 227 * 1024 else 2
    assert SMEM.b_buffers(spec) == buffers
    assert spec.smem_bytes == ring + buffers * rows * 128 + 1024 <= 227 * 1024
    assert spec.threads == 384 and SMEM.min_ctas_per_sm(spec) == 1


@pytest.mark.parametrize("rows", [128, 256])
def test_smem_dequantized_tile_layout(rows: int) -> None:
    """SharedBWeights::store (quant_fragments.cuh), emulated from the header's index
    rules: a warpgroup's stmatrix.x4 of every (n8 tile, k32 block) land each (weight row,
    8 K) chunk of its buffer once, where TMA's 128-byte swizzle (smem_desc_kmajor_sw128)
    puts it, and the 8 row addresses of each 8 x 8 matrix fall on 8 different 16-byte
    bank groups."""
    from codegen.render import INCLUDE_DIR

    header = (INCLUDE_DIR / "gemm" / "sm90" / "quant_fragments.cuh").read_text()
    kernel = (INCLUDE_DIR / "gemm" / "sm90" / "kernel_sm90_quant.cuh").read_text()
    assert "const int n = (local_tile0 + t) * 8 + lane % 8, chunk = 4 * kb + lane / 8;" in header
    assert "stmatrix_x4(buffer + static_cast<u32>(n * 128 + ((chunk ^ (n % 8)) << 4)), f[t][kb][0][0]" in header
    assert "const int local_tile0 = W::kTiles * warp;" in kernel
    consumer_rows = rows // 2
    tiles_per_warp = consumer_rows // 32
    written: dict[int, tuple[int, int]] = {}
    for warp in range(4):
        for t in range(tiles_per_warp):
            for kb in range(2):
                local_tile = tiles_per_warp * warp + t
                rows_at = []
                for lane in range(32):
                    n, chunk = local_tile * 8 + lane % 8, 4 * kb + lane // 8
                    address = n * 128 + ((chunk ^ (n % 8)) << 4)
                    assert address not in written
                    written[address] = (n, chunk)
                    rows_at.append(address)
                for matrix in range(4):
                    assert len({a // 16 % 8 for a in rows_at[8 * matrix: 8 * matrix + 8]}) == 8
    # Every chunk of every row once, in the swizzled place wgmma's descriptor reads.
    assert sorted(written.values()) == [(n, c) for n in range(consumer_rows) for c in range(8)]
    assert all(a == n * 128 + ((c ^ (n % 8)) << 4) for a, (n, c) in written.items())


@pytest.mark.parametrize("tokens, rows", [(64, 256), (128, 256), (64, 128)])
def test_smem_staged_epilogue_covers_the_tile(tokens: int, rows: int) -> None:
    """StagedTile (quant_epilogue.cuh), emulated from the header's index rules: the
    consumers' D fragments (wgmma_ss's layout, token slices of 64, half the weight rows
    per warpgroup) land on every (token, weight row) once, and a half-warp's 8-byte
    stores fall on 32 different banks (the pitch of rows + 8 floats)."""
    from codegen.render import INCLUDE_DIR

    header = (INCLUDE_DIR / "gemm" / "sm90" / "quant_epilogue.cuh").read_text()
    assert "const int token0 = 16 * ((threadIdx.x / 32) % 4) + lane / 4;" in header
    assert "const int col0 = Cfg::kConsumerRows * wg + 2 * (lane % 4);" in header
    assert "const int token = 64 * ts + token0 + 8 * ((i / 2) % 2), col = col0 + 8 * (i / 4);" in header
    pitch, half = rows + 8, rows // 2
    written: dict[int, int] = {}
    for thread in range(256):
        wg, warp, lane = thread // 128, thread // 32 % 4, thread % 32
        for ts in range(tokens // 64):
            for i in range(0, half // 2, 2):
                token = 64 * ts + 16 * warp + lane // 4 + 8 * (i // 2 % 2)
                col = half * wg + 2 * (lane % 4) + 8 * (i // 4)
                for c in (col, col + 1):
                    written[token * pitch + c] = written.get(token * pitch + c, 0) + 1
    assert sorted(written) == sorted(t * pitch + r for t in range(tokens) for r in range(rows))
    assert set(written.values()) == {1}
    for i in range(0, half // 2, 2):  # a half-warp's float2 stores (lanes 0-15) of warp 0
        banks = set()
        for lane in range(16):
            word = (lane // 4 + 8 * (i // 2 % 2)) * pitch + 2 * (lane % 4) + 8 * (i // 4)
            banks |= {word % 32, (word + 1) % 32}
        assert len(banks) == 32, i


@pytest.mark.parametrize("dtype, bits", [("f16", 4), ("bf16", 8)])
def test_smem_kernels_compile(dtype: str, bits: int) -> None:
    """Every shared-B tile of the GPU test compiles for sm_90a without spilling, with the
    kernel's static_asserts (threads and shared memory equal to the family's)."""
    from codegen.render import render_kernel
    from tests.sm90_smoke import nvrtc_compile, report

    for tokens, rows, stages in SMEM_TILES:
        if bits == 8 and (tokens, rows, stages) == (64, 256, 8):
            continue  # beyond 227 KiB with 8-bit weights
        spec = QuantKernel(dtype, bits, dtype, tokens, rows, stages, smem=True).spec
        ok, log, _ = nvrtc_compile(render_kernel(spec, "tests/codegen/test_family_sm90_quant.py"), spec.name)
        assert ok, log
        rep = report(log, spec.name)
        assert rep["spill_stores"] == rep["spill_loads"] == 0, log


def test_consumer_registers_mirror_the_header_and_fit_the_register_file() -> None:
    """Three and four consumer warpgroups share the SM's registers after the producer's
    setmaxnreg.dec: the header's formula and the family's agree, every split fits 64 K
    registers, and the tokens the tile rules allow leave the accumulators room."""
    from codegen.families.sm90_quant import PRODUCER_REGS, consumer_registers, launch_registers, max_tokens
    from codegen.render import INCLUDE_DIR

    header = (INCLUDE_DIR / "gemm" / "sm90" / "quant_config.cuh").read_text()
    assert "kLaunchRegs = 65536 / kThreads / 8 * 8;" in header
    assert "(kLaunchRegs * kThreads - 128 * kProducerRegs) / kConsumerThreads / 8 * 8" in header
    assert f"kProducerRegs = {PRODUCER_REGS};" in header
    assert [launch_registers(128 * (c + 1)) for c in (2, 3, 4)] == [168, 128, 96]
    assert [consumer_registers(c) for c in (2, 3, 4)] == [232, 152, 104]
    assert [max_tokens(c) for c in (1, 2, 3, 4)] == [256, 256, 128, 64]
    for c in (2, 3, 4):
        # setmaxnreg.inc is served from what the producer's .dec gave back, nothing more:
        # the four-consumer tile hung on the H200 when it asked for 112 of a 96 launch.
        threads = 128 * (c + 1)
        assert 128 * PRODUCER_REGS + 128 * c * consumer_registers(c) <= launch_registers(threads) * threads


@pytest.mark.parametrize("dtype, bits", [("f16", 4), ("bf16", 8)])
def test_two_block_kernels_compile(dtype: str, bits: int) -> None:
    """The GPU test's tiles of two m64 blocks per consumer warpgroup compile for sm_90a
    without spilling (two accumulator sets and twice the A registers a thread) and without
    ptxas serializing their wgmma (C7515: an accumulator defined by anything but a wgmma
    inside the K loop; a variant of the thirty-fifth session that zeroed them there ran
    12-20% slower), with the kernel's static_asserts (threads and shared memory equal to
    the family's); the default 64-token tile too."""
    from codegen.render import render_kernel
    from tests.sm90_smoke import nvrtc_compile, report

    for tokens, rows, blocks in [(64, 256, 2), (64, 128, 2), (32, 256, 2), (64, 128, 1)]:
        spec = QuantKernel(dtype, bits, dtype, tokens, rows, 8, blocks=blocks).spec
        ok, log, _ = nvrtc_compile(render_kernel(spec, "tests/codegen/test_family_sm90_quant.py"), spec.name)
        assert ok, log
        rep = report(log, spec.name)
        assert rep["spill_stores"] == rep["spill_loads"] == 0, log
        assert "serialized" not in log, log


def _consumer_ptx(kernel: QuantKernel) -> str:
    """The PTX NVRTC makes of ``kernel`` as the registry would render it."""
    from codegen.render import render_kernel
    from tests.sm90_smoke import nvrtc_ptx

    spec = kernel.spec
    ok, log, ptx = nvrtc_ptx(render_kernel(spec, "tests/codegen/test_family_sm90_quant.py"), spec.name)
    assert ok, log
    return ptx


@pytest.mark.parametrize("tokens, rows, stages", [(64, 128, 8), (128, 128, 6)])
def test_the_consumer_derives_its_lane_offsets_once(tokens: int, rows: int, stages: int) -> None:
    """The consumer's lane-dependent shared-memory offsets (LaneOffsets) and its ring
    leader are made once, before the K loop, and pinned (pin_register): in the PTX %tid.x
    is read a few times at the kernel's start. Unpinned, NVVM sank those reads (and the
    arithmetic after them) into the K loop beside each K tile's loads: 8 reads, 10 before
    LaneOffsets (docs/NOTES.md, thirty-seventh session). Each re-derivation is
    instructions a consumer warp issues every K tile, which beside a 64- or 128-token
    wgmma cost about an issue slot each."""
    ptx = _consumer_ptx(QuantKernel("f16", 4, "f16", tokens, rows, stages))
    assert ptx.count("%tid.x;") <= 3, ptx.count("%tid.x;")


@pytest.mark.parametrize("dtype, bits", [("f16", 4), ("bf16", 4), ("f16", 8)])
def test_a_groups_scale_and_zero_reach_the_dequantization_as_16_bit_pairs(dtype: str, bits: int) -> None:
    """Dequant::make pairs a scale or zero with itself as {h, h} (gemm::twice), which
    ptxas folds into the paired multiplies' .H0_H0 operand selector. A 32-bit multiply by
    0x10001 pairs it too, but as an IMAD per constant: four or eight a K tile in every
    consumer warp (groups of 128, 32), each about an issue slot beside a 64- or 128-token
    wgmma (docs/perf/wgmma_rate_kinds.md)."""
    import re

    ptx = _consumer_ptx(QuantKernel(dtype, bits, dtype, 64, 128, 8))
    assert not re.findall(r"mul\.lo\.\w+\s+[^;]*,\s*65537;", ptx)
    assert re.search(r"mov\.b32\s+%r\d+, \{%rs(\d+), %rs\1\};", ptx)
