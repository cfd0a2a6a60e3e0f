"""The SM90 family (codegen/families/sm90.py) on CPU: its YAML rules reject with the
loader's one message shape (file, entry, field, got, accepted), the default YAML gives
the expected kernels, and what a kernel implies (threads, shared memory, NVRTC target,
registry filtering, tensor-map boxes, the parameter block, the persistent grid, the
K = 0 refusal) is what the device code (templates/include/gemm/sm90/kernel_sm90.cuh,
templates/kernel_sm90.cu.j2) assumes."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import pytest

from codegen.config import DEFAULT_CONFIG_DIR, load_configs
from codegen.families import Mainloop, TensorMapBox
from codegen.families.sm90 import a_box_rows
from codegen.params import PARAM_STRUCT, block_bytes
from codegen.render import INCLUDE_DIR, render_kernel
from codegen.vocabulary import ARCH_SMEM_LIMIT, BOrder, DataType, MmaAtom
from gemm_runtime.context import infeasible_reason, make_key
from gemm_runtime.feasibility import grid_of
from gemm_runtime.plan import LaunchSpec
from gemm_runtime.registry import filter_reason
from tests.codegen import test_config as cfg
from tests.helpers import spec_for

SM90 = Mainloop.SM90
H200_SMEM = ARCH_SMEM_LIMIT[90]

# The family of tests/codegen/test_config.py, made an SM90 one.
_SM90: dict[str, Any] = {
    "name": "hop",
    "arch": [90, 90],
    "mainloop": "sm90",
    "mma": "m64nNk16",
    "tiles": [{"cta": [128, 128, 64], "warps": [8, 1, 1], "stages": 4}],
}
FAM = "families[0] (hop)"
TILE = f"{FAM}.tiles[0]"


def family(**overrides: Any) -> dict[str, Any]:
    return cfg.family(**{**copy.deepcopy(_SM90), **overrides})


def tile(**overrides: Any) -> dict[str, Any]:
    return {**_SM90["tiles"][0], **overrides}


def load(tmp_path: Path, fam: dict[str, Any]):
    return load_configs([cfg.write(tmp_path, {"families": [fam]})])


def error(tmp_path: Path, fam: dict[str, Any], entry: str, field: str, *needles: str) -> None:
    """Load ``fam`` expecting a ConfigError at ``entry``/``field`` in the loader's one
    message shape, holding ``needles`` (test_config.fam_error checks file and entry)."""
    cfg.fam_error(tmp_path, fam, entry, field, f"field {field!r}: got ", ", accepted: ", *needles)


def sm90_spec(**overrides: Any):
    fields = dict(mainloop=SM90, mma=MmaAtom.M64NK16, cta=(128, 128, 64), warps=(8, 1, 1), stages=4,
                  arch_min=90, arch_max=90)  # fmt: skip
    fields.update(overrides)
    return spec_for(**fields)


# ---- YAML validation ------------------------------------------------------------------


def test_a_valid_sm90_family_loads(tmp_path: Path) -> None:
    (k,) = load(tmp_path, family())
    assert k.spec.mainloop is SM90 and k.spec.mma is MmaAtom.M64NK16
    assert "_sm90_m64nNk16_" in k.spec.name and k.spec.name.endswith("_128x128x64_w8x1x1_s4_nk_align8")


@pytest.mark.parametrize(
    "tile_kw, field, needles",
    [
        ({"cta": [128, 128, 32]}, "cta",
         ["got [128, 128, 32]", "accepted: a K of 64 (one 128-byte swizzled row of 16-bit elements per K tile)"]),
        ({"cta": [128, 128, 128]}, "cta", ["got [128, 128, 128]", "accepted: a K of 64"]),
        ({"cta": [256, 128, 64], "warps": [16, 1, 1]}, "cta",
         ["got [256, 128, 64]", "accepted: an M of 64 (one consumer warpgroup) or 128 (two)"]),
        ({"cta": [32, 128, 64], "warps": [2, 1, 1]}, "cta", ["got [32, 128, 64]", "accepted: an M of 64"]),
        ({"cta": [128, 96, 64]}, "cta",
         ["got [128, 96, 64]", "accepted: an N of 64, 128, 192, 256 (the wgmma widths implemented)"]),
        ({"cta": [128, 512, 64]}, "cta", ["got [128, 512, 64]", "accepted: an N of 64, 128, 192, 256"]),
        ({"warps": [4, 2, 1]}, "warps",
         ["got [4, 2, 1]", "accepted: [8, 1, 1] for cta M 128: the consumer warps, 4 per 64 rows (wgmma m64)"]),
        ({"cta": [64, 128, 64]}, "warps", ["got [8, 1, 1]", "accepted: [4, 1, 1] for cta M 64"]),
        ({"warps": [8, 1, 2]}, "warps", ["got [8, 1, 2]", "accepted: [8, 1, 1] for cta M 128"]),
    ],
)  # fmt: skip
def test_tile_rules(tmp_path: Path, tile_kw: dict, field: str, needles: list[str]) -> None:
    error(tmp_path, family(tiles=[tile(**tile_kw)]), TILE, field, *needles)


@pytest.mark.parametrize("align", [4, 2, 1])
def test_alignments_below_8_stay_with_sm80(tmp_path: Path, align: int) -> None:
    error(tmp_path, family(align=[align]), TILE, "align", f"got {align}",
          "accepted: 8 (TMA needs 16-byte aligned rows; lower alignments stay with sm80)")  # fmt: skip
    # The kernel of the good alignment comes first and is fine; the next one is refused.
    error(tmp_path, family(align=[8, align]), TILE, "align", f"got {align}")


def test_quantized_b_is_refused(tmp_path: Path) -> None:
    """u4 B is refused by the family's own rule. (The family-level check that quantized B
    has an m16n8 atom would ask for m16n8k16, which the sm90 mainloop does not implement:
    advice that the atom check then refuses.)"""
    for b_type in ("u4", "u8"):
        error(tmp_path, family(b_type=b_type), TILE, "b_type", f"got {b_type!r}",
              "accepted: f16 (quantized B: the sm90_quant family)")  # fmt: skip
    error(tmp_path, family(b_type="u4", mma="m16n8k16"), FAM, "mma", "got 'm16n8k16'",
          "accepted: 'm64nNk16' (the atoms the sm90 mainloop implements)")  # fmt: skip
    spec = sm90_spec(b_type=DataType.U4)
    assert SM90.kernel_error(spec) == ("b_type", "u4", "f16 (quantized B: the sm90_quant family)")


def test_arch_below_90_is_refused(tmp_path: Path) -> None:
    error(tmp_path, family(arch=[80, 90]), FAM, "mainloop", "got 'sm90' (needs arch >= 90, but arch starts at 80)",
          "accepted: 'sm80', 'sm70', 'sm80_staged', 'sm80_ring', 'sm80_xor', 'sm80_rows8' (a mainloop running on arch 80)")  # fmt: skip
    # 90 is the last known arch, so a YAML range is [90, 90] or refused above; the
    # family's own rule covers specs made elsewhere (an sm_90a cubin runs on 9.0 only).
    assert SM90.kernel_error(sm90_spec()) is None
    assert SM90.kernel_error(sm90_spec(arch_max=100)) == (
        "arch", [90, 100], "[90, 90] (wgmma is an sm_90a instruction)")


def test_stages_over_the_shared_memory_limit(tmp_path: Path) -> None:
    # 5 * (128 + 256) * 64 * 2 + 2 * 8192 (one staging box per consumer) + 1024 = 263168
    # bytes; 4 stages (230400, with two boxes each) fit.
    fam = family(tiles=[tile(cta=[128, 256, 64], stages=5)])
    error(tmp_path, fam, TILE, "stages", "got 5", "accepted: a tile and stage count within 232448 bytes",
          "cta [128, 256, 64] with b_order 'nk' needs 263168 bytes of shared memory",
          "the limit is 232448 bytes, on sm_90, the largest in arch [90, 90]")  # fmt: skip
    assert len(load(tmp_path, family(tiles=[tile(cta=[128, 256, 64], stages=4)]))) == 1


def test_every_rule_is_checked_for_both_b_orders(tmp_path: Path) -> None:
    # kn B differs only in its TMA box; the rules and the shared memory are the same.
    specs = [k.spec for k in load(tmp_path, family(b_orders=["nk", "kn"]))]
    assert [s.b_order for s in specs] == [BOrder.NK, BOrder.KN]
    assert specs[0].smem_bytes == specs[1].smem_bytes
    error(tmp_path, family(b_orders=["kn"], align=[4]), TILE, "align", "got 4")


def test_a_64x192_kn_tile_loads(tmp_path: Path) -> None:
    """sm90's own rule asks warps [4, 1, 1] for cta M 64 and allows N 192; the rule that
    each thread copies whole vectors of a B row (tile_copy.cuh: 256 threads would have to
    be a multiple of 192 / 8 = 24) is not a TMA family's, and the sm80 family keeps it."""
    (k,) = load(tmp_path, family(b_orders=["kn"], tiles=[tile(cta=[64, 192, 64], warps=[4, 1, 1], stages=6)]))
    assert k.spec.threads == 256 and k.spec.b_order is BOrder.KN
    sm80 = cfg.family(b_orders=["kn"], tiles=[cfg.tile(cta=[64, 192, 32], warps=[1, 4, 1], stages=3)])
    cfg.fam_error(tmp_path, sm80, "families[0] (fam).tiles[0]", "warps", "(128 threads; 8 elements per vector)",
                  "multiple of the 24 vectors in a row of tile B (cta N)")  # fmt: skip


def _default_sm90() -> list:
    return load_configs([DEFAULT_CONFIG_DIR / "sm90_dense.yaml"])


def test_the_default_sm90_yaml() -> None:
    loaded = _default_sm90()
    assert len(loaded) == 44
    big = [((128, 256), 4, 1), ((128, 192), 4, 1), ((128, 128), 6, 1), ((128, 256), 4, 2), ((128, 192), 4, 2),
           ((128, 128), 6, 2), ((64, 256), 5, 1), ((64, 128), 8, 1), ((64, 64), 8, 1)]  # fmt: skip
    f32out = [((128, 256), 4, 1), ((128, 128), 6, 1)]
    expected = []
    for fam, t, tiles in (("sm90_f16", "f16", big), ("sm90_bf16", "bf16", big),
                          ("sm90_f16_f32out", "f16", f32out), ("sm90_bf16_f32out", "bf16", f32out)):  # fmt: skip
        d = "f32" if fam.endswith("f32out") else t
        for (m, n), s, c in tiles:
            for order in ("nk", "kn"):
                # A cluster of one CTA is not named, so those kernels keep their names.
                expected.append(f"gemm_{fam}_sm90_m64nNk16_a{t}_b{t}_accf32_d{d}_{m}x{n}x64_w{m // 16}x1x1_s{s}_"
                                f"{order}_align8" + (f"_c{c}" if c > 1 else ""))  # fmt: skip
    assert [k.spec.name for k in loaded] == expected
    for k in loaded:
        s = k.spec
        assert s.mainloop is SM90 and (s.arch_min, s.arch_max) == (90, 90)
        assert s.smem_bytes <= H200_SMEM
        assert k.source.startswith("codegen/configs/sm90_dense.yaml:families[")


# ---- what a kernel implies ------------------------------------------------------------


@pytest.mark.parametrize("m, threads", [(64, 256), (128, 384)])
def test_threads_are_the_consumer_warps_and_a_producer_warpgroup(m: int, threads: int) -> None:
    spec = sm90_spec(cta=(m, 128, 64), warps=(m // 16, 1, 1))
    assert spec.threads == threads == 32 * spec.warps[0] + 128
    # The base rule (one warp per warps entry) is what sm80 still gets.
    assert dataclasses.replace(spec, mainloop=Mainloop.SM80).threads == 32 * spec.warps[0]


def test_threads_of_the_default_set() -> None:
    assert {(k.spec.cta[0], k.spec.threads) for k in _default_sm90()} == {(64, 256), (128, 384)}


@pytest.mark.parametrize(
    "cta, stages, boxes, smem",
    [((128, 256, 64), 4, 2, 230400), ((128, 256, 64), 3, 4, 214016), ((128, 192, 64), 5, 1, 222208),
     ((128, 192, 64), 4, 3, 214016), ((128, 128, 64), 6, 2, 230400), ((64, 256, 64), 5, 2, 222208),
     ((64, 128, 64), 8, 2, 214016), ((64, 64, 64), 2, 1, 41984)],
)  # fmt: skip
def test_smem_is_the_unpadded_ring_the_staging_boxes_and_the_swizzle_alignment(cta, stages, boxes, smem) -> None:
    m, n, k = cta
    for order in BOrder:
        spec = sm90_spec(cta=cta, warps=(m // 16, 1, 1), stages=stages, b_order=order)
        # A consumer warpgroup's 8 KiB staging boxes: its whole share of the tile where
        # that fits beside the ring, else two, else one (128x192 with 5 stages would
        # need 238592 bytes for two).
        assert SM90.store_buffers(spec) == boxes
        assert spec.smem_bytes == stages * (m + n) * k * 2 + boxes * (m // 64) * 8192 + 1024 == smem
        assert spec.smem_bytes <= 232448
    # sm80's ring pads every shared row (SMEM_PAD): more for the same tile.
    ring = stages * (m + n) * k * 2
    assert spec_for(cta=cta, warps=(2, 2, 1), stages=stages).smem_bytes > ring


def test_the_nvrtc_target_is_arch_specific() -> None:
    assert SM90.nvrtc_target(90) == "sm_90a"
    assert Mainloop.SM80.nvrtc_target(90) == "sm_90" and Mainloop.SM70.nvrtc_target(90) == "sm_90"


def test_the_registry_keeps_sm90_kernels_on_sm90_only() -> None:
    spec = sm90_spec()
    assert filter_reason(spec, 90, H200_SMEM, False) is None
    assert filter_reason(spec, 90, H200_SMEM, False, cubin_arch=90) is None
    for arch in (80, 86, 89):
        assert filter_reason(spec, arch, ARCH_SMEM_LIMIT[arch], False, cubin_arch=80) == (
            f"family arch range sm_90..sm_90 excludes sm_{arch}")
    # An sm_90a cubin on any other device in the range (a range no YAML can write
    # today) is refused for its target, where a plain sm_90 cubin would be loaded.
    wide = dataclasses.replace(spec, arch_max=99)
    assert filter_reason(wide, 91, H200_SMEM, False, cubin_arch=90) == "built for sm_90a, which runs only on sm_90"
    assert filter_reason(spec_for(arch_min=90, arch_max=99), 91, H200_SMEM, False, cubin_arch=90) is None
    # Shared memory is still checked.
    assert "shared memory" in filter_reason(spec, 90, spec.smem_bytes - 1, False)


def test_a_box_covers_the_rows_an_m_below_the_tile_has() -> None:
    # Whole 8-row groups up to the tile; from the tile's M up, the tile.
    assert [a_box_rows(64, m) for m in (1, 7, 8, 9, 63, 64, 65, 1000)] == [8, 8, 8, 16, 64, 64, 64, 64]
    assert [a_box_rows(128, m) for m in (1, 16, 64, 72, 127, 128, 4096)] == [8, 16, 64, 72, 128, 128, 128]
    spec = sm90_spec(cta=(64, 128, 64), warps=(4, 1, 1))
    at_17 = SM90.tensor_maps(spec, make_key(DataType.F16, BOrder.NK, DataType.F16, 17, 4096, 4096, arch=90))
    assert at_17[0] == TensorMapBox("a", 24, 64)
    # The B and D boxes are M's business no more than the tile's.
    assert at_17[1:] == SM90.tensor_maps(spec)[1:]
    # The kernel expects the bytes of the same rows on each full barrier; a mismatch
    # would hang it, so its rule reads like this one.
    header = (INCLUDE_DIR / "gemm" / "sm90" / "kernel_sm90.cuh").read_text()
    assert "(M >= kCtaM ? kCtaM : (M + 7) / 8 * 8) * kCtaK * 2" in header


@pytest.mark.parametrize("m, n", [(128, 256), (128, 192), (128, 128), (64, 256), (64, 128), (64, 64)])
def test_tensor_map_boxes(m: int, n: int) -> None:
    nk = sm90_spec(cta=(m, n, 64), warps=(m // 16, 1, 1))
    kn = dataclasses.replace(nk, b_order=BOrder.KN)
    # A: the CTA's M x 64 tile; nk B: the N x 64 tile; kn B: 64-column boxes of K x N
    # (the 128-byte swizzle span), cta N / 64 of them per stage (kernel_sm90.cuh); D: a
    # 64-row staging box, 128 bytes wide (store_sm90.cuh).
    d = TensorMapBox("d", 64, 64)
    assert SM90.tensor_maps(nk) == (TensorMapBox("a", m, 64), TensorMapBox("b", n, 64), d)
    assert SM90.tensor_maps(kn) == (TensorMapBox("a", m, 64), TensorMapBox("b", 64, 64), d)
    f32 = dataclasses.replace(nk, d_type=DataType.F32)
    assert SM90.tensor_maps(f32)[2] == TensorMapBox("d", 64, 32)
    for spec in (nk, kn):
        boxes = SM90.tensor_maps(spec)
        # Every box row fits the 128-byte swizzle span and every box dimension TMA's 256.
        assert all(b.box_cols * 2 <= 128 and b.box_rows <= 256 for b in boxes)
        # What TMA moves per stage is the stage of the shared-memory ring; D's box is
        # one staging buffer.
        b_box = boxes[1].box_rows * boxes[1].box_cols * (1 if spec.b_order is BOrder.NK else n // 64)
        ring = (boxes[0].box_rows * boxes[0].box_cols + b_box) * 2 * spec.stages
        staging = SM90.store_buffers(spec) * (m // 64) * boxes[2].box_rows * boxes[2].box_cols * 2
        assert ring + staging == spec.smem_bytes - 1024
    assert Mainloop.SM80.tensor_maps(spec_for()) == () and Mainloop.SM70.tensor_maps(spec_for()) == ()


def test_params_offset_and_block_bytes() -> None:
    assert SM90.params_offset(sm90_spec()) == 384
    assert SM90.params_offset(sm90_spec(b_order=BOrder.KN)) == 384
    assert Mainloop.SM80.params_offset(spec_for()) == 0
    size = PARAM_STRUCT.size
    assert block_bytes(0) == size  # the bare struct: no padding
    assert block_bytes(256) == 448 == -(-(256 + size) // 64) * 64
    for offset in (128, 256, 384):
        got = block_bytes(offset)
        assert got % 64 == 0 and offset + size <= got < offset + size + 64


def test_the_rendered_kernel_asserts_the_block_layout() -> None:
    """The Python side of the parameter block (params_offset, block_bytes, threads,
    smem_bytes) reaches the generated kernel's static_asserts, which NVRTC checks
    against the C++ struct (tests/runtime/test_build.py compiles the default set)."""
    for order in BOrder:
        spec = sm90_spec(b_order=order)
        text = render_kernel(spec, "hop.yaml:families[0] (hop).tiles[0]")
        assert "sizeof(gemm::CUtensorMap) * 3 == 384 &&" in text
        assert f"sizeof(Sm90Params) == {block_bytes(384)}" in text
        assert f"Config::kThreads == {spec.threads}" in text and f"Config::kSmemBytes == {spec.smem_bytes}" in text
        assert f"Sm90Config<gemm::Half, gemm::Half, 128, 128, 4, {order.cpp}" in text
        assert "const __grid_constant__ Sm90Params params" in text and "__launch_bounds__(384, 1)" in text


@pytest.mark.parametrize(
    "tiles, splits, resident, grid",
    [
        ((4, 33), 1, 132, (132, 1, 1)),  # one round exactly: one CTA per SM
        ((64, 32), 1, 132, (128, 1, 1)),  # more tiles than SMs: CTAs loop over 16 rounds, 128 each
        ((16, 32), 1, 132, (128, 1, 1)),  # 4 rounds of 128 rather than 3 of 132 and a partial one
        ((25, 10), 1, 132, (125, 1, 1)),  # 2 rounds of 125
        ((7, 19), 1, 132, (132, 1, 1)),  # 133 tiles: evened out, 67 CTAs would leave half the SMs idle
        ((2, 3), 1, 132, (6, 1, 1)),  # fewer: one CTA per tile
        ((2, 3), 4, 132, (24, 1, 1)),  # split-K units count
        ((10, 10), 2, 132, (132, 1, 1)),
        ((10, 10), 5, 132, (130, 1, 1)),  # split-K: whole tiles per round of the grid
        ((10, 10), 7, 132, (126, 1, 1)),
        ((1, 1), 7, 4, (7, 1, 1)),  # fewer resident CTAs than splits: one tile's slices still

        ((0, 5), 1, 132, (1, 1, 1)),  # no tiles (M = 0): still a legal grid
        ((3, 3), 1, 0, (1, 1, 1)),  # no occupancy known: at least one CTA
    ],
)
def test_the_persistent_grid(tiles, splits, resident, grid) -> None:
    assert SM90.grid(sm90_spec(), tiles, splits, 3, resident) == grid
    # The swizzle reorders the units inside the kernel, not the grid.
    assert SM90.grid(sm90_spec(), tiles, splits, 0, resident) == grid


@pytest.mark.parametrize("splits", [2, 3, 5, 7, 64])
@pytest.mark.parametrize("resident", [1, 4, 131, 132])
def test_split_k_never_waits_across_rounds(splits: int, resident: int) -> None:
    """Every K slice a last slice waits for is on a lower CTA of the same round. The
    kernel (Sm90Schedule::unit, schedule_sm90.cuh) runs unit u on CTA u % grid; units
    below `whole` are whole tiles, and unit whole + v is slice v % splits of tile
    whole + v // splits."""
    for tiles in [(1, 1), (3, 7), (40, 40), (12, 12)]:
        grid = SM90.grid(sm90_spec(), tiles, splits, 0, resident)[0]
        units, whole = SM90.split_units(tiles[0] * tiles[1], splits, grid)
        assert whole % grid == 0 and units == whole + (tiles[0] * tiles[1] - whole) * splits
        for u in range(whole, min(units, whole + 5 * grid)):
            if (u - whole) % splits == splits - 1:
                for waited in range(u - splits + 1, u):
                    assert waited // grid == u // grid and waited % grid < u % grid


@pytest.mark.parametrize(
    "tiles, splits, whole, units",
    [
        (192, 2, 132, 132 + 60 * 2),  # llama3-8b qkv at M = 1024: the last 60 tiles split
        (100, 2, 0, 200),  # fewer tiles than CTAs: all split
        (264, 4, 264, 264),  # whole rounds: nothing left to split
        (1600, 7, 1512, 1512 + 88 * 7),  # grid 126, a multiple of 7
    ],
)
def test_split_k_splits_only_the_tiles_beyond_whole_rounds(tiles, splits, whole, units) -> None:
    grid = max(splits, 132 // splits * splits)
    assert SM90.split_units(tiles, splits, grid) == (units, whole)


@pytest.mark.parametrize(
    "tiles, splits, resident, split",
    [
        ((8, 40), 2, 132, 56),  # llama3-70b qkv at M = 1024: 320 tiles, 264 whole
        ((8, 24), 2, 132, 60),  # llama3-8b qkv at M = 1024: 192 tiles, 132 whole
        ((8, 40), 2, 160, 0),  # the count is not monotonic in the grid: 2 whole rounds
        ((8, 40), 5, 132, 60),  # grid 130, a multiple of 5: 260 whole
        ((10, 10), 3, 132, 100),  # fewer tiles than CTAs: all split
        ((1, 1), 7, 4, 1),
        ((8, 40), 1, 132, 0),  # unsplit: nothing hands over
    ],
)
def test_split_tiles_are_the_tiles_beyond_whole_rounds(tiles, splits, resident, split) -> None:
    """The workspace hook counts tiles - whole, for the grid the family launches."""
    spec = sm90_spec(cta=(128, 256, 64))
    assert SM90.split_tiles(spec, tiles, splits, resident) == split
    count = tiles[0] * tiles[1]
    if splits > 1:
        grid = SM90.grid(spec, tiles, splits, 0, resident)[0]
        assert split == count - SM90.split_units(count, splits, grid)[1]
    # The sm80 family (the default) hands every tile over, whatever the residency.
    sm80 = spec_for(cta=(128, 256, 32), warps=(2, 4, 1), stages=3)
    assert Mainloop.SM80.split_tiles(sm80, tiles, splits, resident) == (count if splits > 1 else 0)


@pytest.mark.parametrize("splits", [2, 3, 5, 7])
@pytest.mark.parametrize("resident", [4, 114, 132])
def test_split_units_use_exactly_the_counted_workspace_slots(splits: int, resident: int) -> None:
    """Sm90Schedule::unit's split_tile (tile - whole), mirrored here: every slot below
    the hook's count takes exactly `splits` units, one per K slice, and no unit a slot
    beyond it."""
    for tiles in [(8, 40), (12, 13), (3, 7), (40, 40)]:
        grid = SM90.grid(sm90_spec(), tiles, splits, 0, resident)[0]
        units, whole = SM90.split_units(tiles[0] * tiles[1], splits, grid)
        slices: dict[int, list[int]] = {}
        for u in range(whole, units):
            tile = whole + (u - whole) // splits
            slices.setdefault(tile - whole, []).append((u - whole) - (tile - whole) * splits)
        count = SM90.split_tiles(sm90_spec(), tiles, splits, resident)
        assert sorted(slices) == list(range(count))
        assert all(v == list(range(splits)) for v in slices.values())


def test_grid_of_sizes_by_residency() -> None:
    spec = sm90_spec()
    key = make_key(DataType.F16, BOrder.NK, DataType.F16, 8192, 8192, 4096, arch=90)  # 64 x 64 tiles
    # 4096 tiles on 132 SMs: 32 rounds, of 128 CTAs (balanced_units).
    assert grid_of(spec, key, LaunchSpec(spec.name, 1, 2), 132) == (128, 1, 1)
    assert grid_of(spec, key, LaunchSpec(spec.name, 1, 2), 128) == (128, 1, 1)
    # Without a residency (the limit checks) the largest grid: one CTA per unit.
    assert grid_of(spec, key, LaunchSpec(spec.name, 2, 2)) == (64 * 64 * 2, 1, 1)
    # sm80's grid is the tile grid whatever the residency.
    sm80 = spec_for(cta=(128, 128, 32))
    assert grid_of(sm80, key, LaunchSpec(sm80.name, 2, 1), 132) == (64 * 2, 32, 2)


def test_k_zero_is_infeasible_for_sm90_only() -> None:
    key = make_key(DataType.F16, BOrder.NK, DataType.F16, 128, 128, 0, arch=90)
    assert SM90.problem_error(sm90_spec(), 0) == "K = 0 leaves A and B empty, which TMA cannot describe"
    assert infeasible_reason(sm90_spec(), key) == "K = 0 leaves A and B empty, which TMA cannot describe"
    assert infeasible_reason(sm90_spec(b_order=BOrder.KN), key._replace(b_order=BOrder.KN)) is not None
    assert infeasible_reason(spec_for(), key) is None  # sm80 writes beta * C (or zeros)
    assert infeasible_reason(sm90_spec(), key._replace(k=1)) is None
    # The key's own checks come first.
    assert infeasible_reason(sm90_spec(), key._replace(align=4)) == "needs rows aligned to 8 elements, problem has 4"
