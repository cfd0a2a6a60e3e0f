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
    assert len(loaded) == 24  # f16/bf16 x u4/u8 x 16-bit/f32 out x 3 tiles
    assert {k.spec.mainloop for k in loaded} == {SM90Q}
    assert {(k.spec.cta, k.spec.stages) for k in loaded} == {((64, 128, 64), 8), ((128, 128, 64), 6), ((256, 128, 64), 4)}
    assert YAML in default_config_paths()
    assert {k.spec.name for k in loaded} <= {k.spec.name for k in load_configs(default_config_paths())}


@pytest.mark.parametrize(
    "tile, field, needle",
    [
        ({"cta": [64, 128, 128], "warps": [1, 8, 1], "stages": 4}, "cta", "a K of 64"),
        ({"cta": [32, 128, 64], "warps": [1, 8, 1], "stages": 4}, "cta", "tokens per CTA"),
        ({"cta": [64, 256, 64], "warps": [1, 16, 1], "stages": 4}, "cta", "64 per consumer warpgroup"),
        ({"cta": [64, 128, 64], "warps": [4, 1, 1], "stages": 4}, "warps", "[1, 8, 1]"),
        ({"cta": [64, 128, 64], "warps": [1, 8, 1], "stages": 9}, "stages", "an integer <= 8"),
    ],
)
def test_tile_rules(tmp_path: Path, tile: dict, field: str, needle: str) -> None:
    cfg.fam_error(tmp_path, family(tiles=[tile]), TILE, field, f"field {field!r}: got ", needle)


def test_kernel_rules(tmp_path: Path) -> None:
    cfg.fam_error(tmp_path, family(b_type="f16"), TILE, "b_type", "u4 or u8 (dense B is the sm90 family's)")
    cfg.fam_error(tmp_path, family(align=[4]), TILE, "align", "8 (TMA needs 16-byte aligned rows of X)")
    cfg.fam_error(tmp_path, family(arch=[80, 90]), "families[0] (hopq)", "mainloop", "needs arch >= 90")


def test_what_a_kernel_implies() -> None:
    for k in load_configs([YAML]):
        s = k.spec
        tokens, rows, _ = s.cta
        # The GPU test's harness launches this very kernel.
        assert QuantKernel(s.a_type.value, s.b_type.bits, s.d_type.value, tokens, rows, s.stages).name == s.name
        assert s.threads == 128 * (rows // 64 + 1)
        # Per stage: X (tokens x 64 x 2 bytes), the packed K tile, two groups' scales and
        # zeros; rounded up to 1024 bytes, and 1024 more to align the base.
        stage = tokens * 128 + rows // 8 * 64 * (s.b_type.bits // 4) * 4 + 2 * 2 * rows * 2
        # ... or the D tile the epilogue stages there (fp32 rows of weight rows + 4).
        ring = max(s.stages * -(-stage // 1024) * 1024, tokens * (rows + 4) * 4)
        assert s.smem_bytes == ring + 1024 <= 227 * 1024
        # Unsplit: weight tiles in x, token tiles in y. Split: stream-K on the resident
        # CTAs, or on tiles x splits where fewer; a flag and a partial tile per CTA.
        assert SM90Q.grid(s, (3, 7), 1, 0, 132) == (7, 3, 1)
        assert SM90Q.grid(s, (3, 7), 4, 0, 132) == (84, 1, 1)
        assert SM90Q.grid(s, (3, 7), 7, 0, 132) == (132, 1, 1)
        assert SM90Q.split_tiles(s, (3, 7), 4, 132) == SM90Q.partial_tiles(s, (3, 7), 4, 132) == 84
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


@pytest.mark.parametrize("k", [32, 40, 64, 1000, 4096])
@pytest.mark.parametrize("group", [32, 64, 128, -1])
def test_v_box_rows_agree_with_the_kernels_shift_rule(k: int, group: int) -> None:
    """The host's box rows and the kernel's quant_v_rows (two below a shift of 6) must
    agree, or a full barrier never completes: one group (of any size) has a shift of 30."""
    groups = quant_groups(group, k)
    size = k if groups == 1 else group
    kernel_rows = 2 if group_shift(group, groups) < 6 else 1
    assert v_box_rows(size, k) == kernel_rows


def test_the_box_sizes_the_kernel_expects_are_the_hosts() -> None:
    """A full barrier counts the bytes of every box: X's (tokens, or M's rows in groups
    of 8 below them: a_box_rows) and V's (v_box_rows) must be what the kernel computes
    from M and group_shift, or the barrier never completes and the kernel hangs."""
    from codegen.render import INCLUDE_DIR

    header = (INCLUDE_DIR / "gemm" / "sm90" / "kernel_sm90_quant.cuh").read_text()
    assert "(M >= kTokens ? kTokens : (M + 7) / 8 * 8) * kCtaK * 2" in header
    assert "return group_shift < 6 ? 2 : 1;" in header
    assert "Cfg::x_box_bytes(p.M)) +" in header  # X's box, then W's and V's
    assert "Cfg::kTileBytesW + 2 * v_rows * Cfg::kRows * 2));" in header
    spec = next(k.spec for k in load_configs([YAML]) if k.spec.cta[0] == 128)
    from gemm_runtime.context import make_key

    for m, rows in ((1, 8), (17, 24), (127, 128), (128, 128), (1000, 128)):
        key = make_key(DataType.F16, spec.b_order, DataType.F16, m, 4096, 4096, arch=90)._replace(
            b_type=spec.b_type, quant=f"{spec.b_type.value}g128")
        assert SM90Q.tensor_maps(spec, key)[0].box_rows == rows


@pytest.mark.parametrize("tokens, rows", [(64, 128), (128, 128), (256, 128), (128, 64)])
def test_the_staged_epilogue_covers_the_tile_without_bank_conflicts(tokens: int, rows: int) -> None:
    """StagedTransposedTile (kernel_sm90_quant.cuh), emulated from the header's index
    rules: the consumers' D^T fragments land on every (token, weight row) of the tile
    once, a warp's 32 stores of one accumulator fall on 32 banks (the pitch of rows + 4
    floats), and the staging fits the family's shared memory however few the stages."""
    from codegen.render import INCLUDE_DIR

    header = (INCLUDE_DIR / "gemm" / "sm90" / "kernel_sm90_quant.cuh").read_text()
    assert "const int row = 64 * wg + 16 * ((threadIdx.x / 32) % 4) + lane / 4;" in header
    assert "const int token = 8 * (i / 4) + 2 * (lane % 4) + i % 2;" in header
    assert "rows[token * Cfg::kStagedPitch + row + 8 * ((i / 2) % 2)] = acc[i];" in header
    assert "static constexpr int kStagedPitch = kRows + 4;" in header
    pitch, consumers = rows + 4, rows // 64 * 128
    written: dict[int, int] = {}
    for t in range(consumers):
        wg, warp, lane = t // 128, t // 32 % 4, t % 32
        for i in range(tokens // 2):
            token = 8 * (i // 4) + 2 * (lane % 4) + i % 2
            row = 64 * wg + 16 * warp + lane // 4 + 8 * (i // 2 % 2)
            written[token * pitch + row] = written.get(token * pitch + row, 0) + 1
    assert sorted(written) == sorted(tok * pitch + r for tok in range(tokens) for r in range(rows))
    assert set(written.values()) == {1}
    for i in range(tokens // 2):  # warp 0's store of acc[i]; every warp is this shifted by 16 rows
        addresses = {(8 * (i // 4) + 2 * (lane % 4) + i % 2) * pitch + lane // 4 + 8 * (i // 2 % 2) for lane in range(32)}
        assert len({a % 32 for a in addresses}) == 32, i
    # The staging fits the shared memory the family asks for, with a ring of any depth.
    assert QuantKernel("f16", 4, "f16", tokens, rows, 2).spec.smem_bytes >= tokens * pitch * 4 + 1024


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
