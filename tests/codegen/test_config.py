"""codegen.config: every validation error names file, entry, field and what is accepted."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml

from codegen.config import ConfigError, default_config_paths, display_path, load_configs
from codegen.families import families
from codegen.vocabulary import KNOWN_ARCHS, BOrder, MmaAtom

FAMILY: dict[str, Any] = {
    "name": "fam",
    "arch": [80, 90],
    "mainloop": "sm80",
    "mma": "m16n8k16",
    "a_type": "f16",
    "b_type": "f16",
    "acc_type": "f32",
    "d_types": ["f16"],
    "b_orders": ["nk"],
    "align": [8],
    "tiles": [{"cta": [128, 128, 32], "warps": [2, 2, 1], "stages": 4}],
}
FAM = "families[0] (fam)"
TILE = f"{FAM}.tiles[0]"


def family(**overrides: Any) -> dict[str, Any]:
    fam = copy.deepcopy(FAMILY)
    fam.update(overrides)
    return fam


def tile(**overrides: Any) -> dict[str, Any]:
    return {**FAMILY["tiles"][0], **overrides}


def write(tmp_path: Path, data: Any, name: str = "x.yaml") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    return path


def error(tmp_path: Path, data: Any, entry: str | None, field: str | None, *needles: str) -> ConfigError:
    """Load ``data`` expecting a ConfigError at ``entry``/``field`` whose text holds ``needles``."""
    path = write(tmp_path, data)
    with pytest.raises(ConfigError) as info:
        load_configs([path])
    err = info.value
    text = str(err)
    assert isinstance(err, ValueError)
    assert (err.path, err.entry, err.field) == (display_path(path), entry, field), text
    assert text.startswith(display_path(path) + ": "), text
    if entry:
        assert f": {entry}: " in text, text
    if field:
        assert f"field {field!r}" in text, text
    for needle in needles:
        assert needle in text, f"{needle!r} not in {text!r}"
    return err


def fam_error(tmp_path: Path, fam: dict[str, Any], entry: str | None, field: str | None, *needles: str) -> None:
    error(tmp_path, {"families": [fam]}, entry, field, *needles)


# ---- file structure -------------------------------------------------------------------


def test_valid_family_loads(tmp_path: Path) -> None:
    loaded = load_configs([write(tmp_path, {"families": [family()]})])
    assert len(loaded) == 1
    assert loaded[0].source == f"{display_path(tmp_path / 'x.yaml')}:{TILE}"
    assert (loaded[0].spec.arch_min, loaded[0].spec.arch_max) == (80, 90)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_configs([tmp_path / "nope.yaml"])


def test_malformed_yaml_names_line(tmp_path: Path) -> None:
    text = "families:\n  - name: fam\n    arch: [80, 90\n    mma: m16n8k16\n"
    error(tmp_path, text, None, None, "invalid YAML at line 4", "expected ',' or ']'")


def test_duplicate_yaml_key_is_an_error(tmp_path: Path) -> None:
    # PyYAML would keep the last value silently.
    text = "families:\n  - name: fam\n    name: other\n"
    error(tmp_path, text, None, None, "line 3", "duplicate key 'name'")


def test_a_value_that_holds_itself_is_shown_cut_short(tmp_path: Path) -> None:
    # A YAML alias inside its own anchor makes a list that contains itself: shown to a
    # bounded depth, not a RecursionError.
    fam = yaml.safe_dump({"families": [family(tiles=[])]}, sort_keys=False)
    text = fam.replace("tiles: []", "tiles: &t [*t]")
    err = error(tmp_path, text, TILE, None, "got [[[", "...]]]", "(a tile must be a mapping)")
    assert len(str(err)) < 600


@pytest.mark.parametrize("text, got", [("", "got null"), ("- 1\n", "got [1]"), ("families\n", "got 'families'")])
def test_top_level_not_a_mapping(tmp_path: Path, text: str, got: str) -> None:
    error(tmp_path, text, None, None, got, "accepted: a mapping with the key 'families'")


def test_no_families_key(tmp_path: Path) -> None:
    error(tmp_path, {}, None, "families", "missing", "accepted: a non-empty list of families")


def test_unknown_top_level_key(tmp_path: Path) -> None:
    error(tmp_path, {"familes": []}, None, "familes", "did you mean 'families'?", "accepted keys: families")


def test_family_not_a_mapping(tmp_path: Path) -> None:
    error(tmp_path, {"families": ["sm80_f16"]}, "families[0]", None, "got 'sm80_f16'", "accepted: a mapping")


def test_tile_not_a_mapping(tmp_path: Path) -> None:
    fam_error(tmp_path, family(tiles=[[128, 128, 32]]), TILE, None, "got [128, 128, 32]", "cta, warps, stages")


# ---- keys -----------------------------------------------------------------------------


def test_unknown_family_key_lists_accepted(tmp_path: Path) -> None:
    fam = family()
    fam["d_type"] = fam.pop("d_types")
    fam_error(tmp_path, fam, FAM, "d_type", "unknown key", "did you mean 'd_types'?",
              "accepted keys: name, arch, mainloop, mma, a_type, b_type, acc_type, d_types, b_orders, align, tiles")


def test_unknown_tile_key(tmp_path: Path) -> None:
    fam_error(tmp_path, family(tiles=[{**tile(), "stage": 3}]), TILE, "stage", "did you mean 'stages'?",
              "accepted keys: cta, warps, stages")


@pytest.mark.parametrize(
    "key, accepted",
    [
        ("arch", "[min, max]"),
        ("mainloop", "'sm80', 'sm70'"),
        ("mma", "'m16n8k16', 'm16n8k8', 'm8n8k4'"),
        ("a_type", "'f16', 'bf16'"),
        ("acc_type", "'f32'"),
        ("d_types", "a_type or 'f32'"),
        ("b_orders", "'nk', 'kn'"),
        ("align", "8, 4, 2, 1"),
        ("tiles", "cta: [m, n, k]"),
    ],
)
def test_missing_family_key(tmp_path: Path, key: str, accepted: str) -> None:
    fam = family()
    del fam[key]
    fam_error(tmp_path, fam, FAM, key, "missing, accepted: ", accepted)


def test_missing_name(tmp_path: Path) -> None:
    fam = family()
    del fam["name"]
    fam_error(tmp_path, fam, "families[0]", "name", "missing", "[a-z0-9_]+")


@pytest.mark.parametrize("name", ["SM80", "sm-80", "", 7])
def test_bad_name(tmp_path: Path, name: Any) -> None:
    fam_error(tmp_path, family(name=name), "families[0]", "name", "got ", "accepted: a name matching [a-z0-9_]+")


@pytest.mark.parametrize("key", ["cta", "warps", "stages"])
def test_missing_tile_key(tmp_path: Path, key: str) -> None:
    t = tile()
    del t[key]
    fam_error(tmp_path, family(tiles=[t]), TILE, key, "missing", "accepted: ")


# ---- types ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "tile_kw, field, got, accepted",
    [
        ({"stages": True}, "stages", "got true (a boolean)", "an integer >= 2"),
        ({"stages": "4"}, "stages", "got '4'", "an integer >= 2"),
        ({"stages": 4.0}, "stages", "got 4.0", "an integer >= 2"),
        ({"cta": [128, 128]}, "cta", "got [128, 128]", "a list of 3 integers > 0"),
        ({"cta": [128, True, 32]}, "cta", "got [128, true, 32]", "a list of 3 integers > 0"),
        ({"warps": "2x2x1"}, "warps", "got '2x2x1'", "a list of 3 integers > 0"),
    ],
)
def test_tile_wrong_types(tmp_path: Path, tile_kw: dict, field: str, got: str, accepted: str) -> None:
    fam_error(tmp_path, family(tiles=[tile(**tile_kw)]), TILE, field, got, f"accepted: {accepted}")


@pytest.mark.parametrize(
    "fam_kw, field, got",
    [
        ({"arch": 80}, "arch", "got 80"),
        ({"arch": [80, True]}, "arch", "got [80, true]"),
        ({"d_types": "f16"}, "d_types", "got 'f16'"),
        ({"b_orders": None}, "b_orders", "got null"),
        ({"align": [True]}, "align[0]", "got true"),
        ({"align": [8.0]}, "align[0]", "got 8.0"),
        ({"tiles": {"cta": [128, 128, 32]}}, "tiles", "got {'cta': [128, 128, 32]}"),
        ({"mma": 16}, "mma", "got 16"),
    ],
)
def test_family_wrong_types(tmp_path: Path, fam_kw: dict, field: str, got: str) -> None:
    fam_error(tmp_path, family(**fam_kw), FAM, field, got, "accepted: ")


# ---- vocabulary -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "fam_kw, field, got, accepted",
    [
        ({"a_type": "f8"}, "a_type", "got 'f8'", "'f16', 'bf16'"),
        ({"a_type": "f32", "b_type": "f32"}, "a_type", "got 'f32'", "'f16', 'bf16'"),
        ({"mainloop": "sm90"}, "mainloop", "got 'sm90'", "'sm80', 'sm70'"),
        ({"mma": "m16n8k32"}, "mma", "got 'm16n8k32'", "'m16n8k16', 'm16n8k8', 'm8n8k4'"),
        ({"b_orders": ["nk", "mn"]}, "b_orders[1]", "got 'mn'", "'nk', 'kn'"),
        ({"d_types": ["f16", "f64"]}, "d_types[1]", "got 'f64'", "'f16', 'f32'"),
        ({"acc_type": "f16"}, "acc_type", "got 'f16'", "'f32'"),
        ({"align": [8, 3]}, "align[1]", "got 3", "8, 4, 2, 1"),
        ({"align": [16]}, "align[0]", "got 16", "8, 4, 2, 1"),
    ],
)
def test_unknown_values_list_accepted(tmp_path: Path, fam_kw: dict, field: str, got: str, accepted: str) -> None:
    fam_error(tmp_path, family(**fam_kw), FAM, field, got, f"accepted: {accepted}")


def test_unknown_arch_lists_known(tmp_path: Path) -> None:
    known = ", ".join(map(str, KNOWN_ARCHS))
    fam_error(tmp_path, family(arch=[80, 85]), FAM, "arch", "got [80, 85]", "85 is not a known arch", known)


def test_arch_min_above_max(tmp_path: Path) -> None:
    fam_error(tmp_path, family(arch=[90, 80]), FAM, "arch", "got [90, 80]", "min > max", "min <= max")


def test_mainloop_needs_higher_arch(tmp_path: Path) -> None:
    fam_error(tmp_path, family(arch=[75, 90]), FAM, "mainloop", "got 'sm80'", "needs arch >= 80",
              "arch starts at 75", "accepted: 'sm70'")


def test_mma_must_multiply_a_type(tmp_path: Path) -> None:
    fam = family(mma="m8n8k4", a_type="bf16", b_type="bf16", d_types=["bf16"])
    fam_error(tmp_path, fam, FAM, "mma", "got 'm8n8k4'", "does not multiply a_type 'bf16'",
              "accepted: 'm16n8k16', 'm16n8k8'")


def test_mma_not_native_in_range_is_fine(tmp_path: Path) -> None:
    # m8n8k4 is native on sm_70..75 only; emulating it elsewhere is decided later, not here.
    fam = family(mainloop="sm70", mma="m8n8k4", arch=[70, 90], tiles=[tile(stages=2)])
    loaded = load_configs([write(tmp_path, {"families": [fam]})])
    assert loaded[0].spec.mma.value == "m8n8k4"


def test_mma_must_be_implemented_by_the_mainloop(tmp_path: Path) -> None:
    fam_error(tmp_path, family(mma="m8n8k4"), FAM, "mma", "got 'm8n8k4'",
              "accepted: 'm16n8k16', 'm16n8k8' (the atoms the sm80 mainloop implements)")


def test_sm70_mainloop_has_two_stages(tmp_path: Path) -> None:
    fam = family(mainloop="sm70", tiles=[tile(stages=3)])
    fam_error(tmp_path, fam, TILE, "stages", "got 3", "accepted: 2 (the sm70 mainloop is a register-staged")


def test_atom_must_exist_on_the_first_arch(tmp_path: Path) -> None:
    fam = family(mainloop="sm70", arch=[75, 90], tiles=[tile(stages=2)])
    fam_error(tmp_path, fam, FAM, "arch", "mma 'm16n8k16' does not exist before sm_80")


def test_bf16_needs_sm80(tmp_path: Path) -> None:
    fam = family(mainloop="sm70", mma="m16n8k8", arch=[75, 90], a_type="bf16", b_type="bf16", d_types=["bf16"],
                 tiles=[tile(stages=2)])
    fam_error(tmp_path, fam, FAM, "arch", "bf16 arithmetic needs sm_80")


def test_threads_must_cover_whole_tile_rows(tmp_path: Path) -> None:
    # 1 warp, cta K = 128 at align 2: 64 vectors per A row, more than the 32 threads.
    fam = family(align=[2], tiles=[tile(cta=[16, 16, 128], warps=[1, 1, 1], stages=2)])
    fam_error(tmp_path, fam, TILE, "warps", "32 threads", "multiple of the 64 vectors in a row of tile A")


def test_each_thread_copies_at_most_32_vectors_of_a_tile(tmp_path: Path) -> None:
    # TileCopy keeps a thread's copies in a 32-bit row mask (its static_assert kIters <= 32):
    # 128 rows of A at align 1 and K 64 are 8192 vectors, 64 for each of 128 threads.
    fam = family(align=[1], tiles=[tile(cta=[128, 64, 64], stages=2)])
    fam_error(tmp_path, fam, TILE, "warps", "got [2, 2, 1] (128 threads for 128 rows of 64 vectors of 1 elements: 64 each)",
              "accepted: at least 256 threads, so that each copies at most 32 vectors of tile A (cta K)")
    fam = family(align=[1], b_orders=["kn"], tiles=[tile(cta=[64, 128, 64], stages=2)])
    fam_error(tmp_path, fam, TILE, "warps", "64 rows of 128 vectors", "of tile B (cta N)")
    # 32 each is the most: 64 x 64 at align 1 over 128 threads loads (and compiles).
    assert load_configs([write(tmp_path, {"families": [family(align=[1], tiles=[tile(cta=[64, 64, 64], stages=2)])]},
                               "ok.yaml")])  # fmt: skip


def test_b_type_is_a_type_or_a_quantized_type(tmp_path: Path) -> None:
    fam_error(tmp_path, family(b_type="bf16"), FAM, "b_type", "got 'bf16'", "u4 / u8 for weight-only",
              "accepted: 'f16', 'u4', 'u8'")


def test_quantized_families_rules(tmp_path: Path) -> None:
    quant = dict(b_type="u4", b_orders=["nk"], tiles=[tile(cta=[64, 64, 64], warps=[2, 2, 1], stages=3)])
    assert load_configs([write(tmp_path, {"families": [family(**quant)]})])[0].spec.quantized
    fam_error(tmp_path, family(**{**quant, "b_orders": ["kn"]}), TILE, "b_orders", "'nk' (quantized weights")
    # Both mainloops take quantized B, with either m16n8 atom, and u8 with bf16 too.
    sm70 = family(**{**quant, "mainloop": "sm70", "mma": "m16n8k8", "arch": [75, 90], "tiles": [tile(stages=2)]})
    assert load_configs([write(tmp_path, {"families": [sm70]})])[0].spec.quantized
    u8_bf16 = family(**{**quant, "b_type": "u8", "a_type": "bf16", "d_types": ["bf16"]})
    assert load_configs([write(tmp_path, {"families": [u8_bf16]})])[0].spec.b_type.value == "u8"
    fam_error(tmp_path, family(**{**quant, "mainloop": "sm70", "mma": "m8n8k4", "arch": [70, 90],
                                  "tiles": [tile(stages=2)]}), FAM, "mma",
              "'m16n8k16', 'm16n8k8' for quantized B", "the m16n8 B fragment")
    # The warp tile's K, not only the CTA's, must hold whole k32 blocks.
    fam_error(tmp_path, family(**{**quant, "tiles": [tile(cta=[64, 64, 16], warps=[2, 2, 1], stages=3)]}), TILE,
              "cta", "multiple of 32")
    fam_error(tmp_path, family(**{**quant, "tiles": [tile(cta=[64, 64, 64], warps=[2, 2, 4], stages=3)]}), TILE,
              "cta", "warp tile K (cta K / warps K) that is a multiple of 32")

def test_d_type_must_be_a_type_or_f32(tmp_path: Path) -> None:
    fam_error(tmp_path, family(d_types=["bf16"]), FAM, "d_types[0]", "got 'bf16'", "accepted: 'f16', 'f32'")


# ---- tile legality --------------------------------------------------------------------


@pytest.mark.parametrize(
    "tile_kw, field, needles",
    [
        ({"stages": 1}, "stages", ["got 1, accepted: an integer >= 2"]),
        ({"stages": 9}, "stages", ["got 9", "accepted: an integer <= 8"]),
        ({"cta": [128, 0, 32]}, "cta", ["got [128, 0, 32]", "integers > 0"]),
        ({"cta": [-128, 128, 32]}, "cta", ["got [-128, 128, 32]", "integers > 0"]),
        ({"warps": [2, 0, 1]}, "warps", ["got [2, 0, 1]", "integers > 0"]),
        ({"warps": [3, 2, 1]}, "warps", ["got [3, 2, 1] for cta [128, 128, 32]", "cta M = 128 is not a multiple of 3",
                                         "accepted: warp counts that divide the cta tile"]),
        ({"cta": [32, 64, 32], "warps": [4, 2, 1]}, "cta", ["warp tile [8, 32, 32], M = 8",
                                                            "M is a multiple of the MMA's M 16"]),
        ({"cta": [64, 32, 32], "warps": [2, 4, 1]}, "cta", ["warp tile [32, 8, 32], N = 8",
                                                            "N is a multiple of 16: two n8 MMAs per ldmatrix.x4"]),
        ({"cta": [64, 64, 32], "warps": [2, 2, 4]}, "cta", ["warp tile [32, 32, 8], K = 8",
                                                            "K is a multiple of 16: every atom is driven in k16"]),
        ({"cta": [256, 256, 64], "warps": [4, 4, 4]}, "warps", ["2048 threads", "at most 32 warps (1024 threads)"]),
    ],
)
def test_tile_rules(tmp_path: Path, tile_kw: dict, field: str, needles: list[str]) -> None:
    fam_error(tmp_path, family(tiles=[tile(**tile_kw)]), TILE, field, *needles)


def test_warp_tile_k_is_whole_k16_steps_for_every_atom(tmp_path: Path) -> None:
    fam = family(mma="m16n8k8", tiles=[tile(cta=[64, 64, 32], warps=[2, 2, 4])])
    fam_error(tmp_path, fam, TILE, "cta", "K = 8", "K is a multiple of 16")


def test_smem_over_the_largest_limit(tmp_path: Path) -> None:
    fam = family(tiles=[tile(cta=[256, 256, 64], warps=[2, 4, 1], stages=8)])
    fam_error(tmp_path, fam, TILE, "stages", "needs 589824 bytes", "limit is 232448 bytes, on sm_90",
              "arch [80, 90]", "accepted: a tile and stage count within 232448 bytes")


def test_smem_limit_is_the_largest_in_range(tmp_path: Path) -> None:
    # 115200 bytes: too big for sm_86 (101376) alone, fine once sm_87 (166912) is in range.
    big = tile(cta=[32, 128, 64], warps=[1, 4, 1], stages=5)
    fam_error(tmp_path, family(arch=[86, 86], tiles=[big]), TILE, "stages", "needs 115200 bytes",
              "limit is 101376 bytes, on sm_86")
    assert len(load_configs([write(tmp_path, {"families": [family(arch=[86, 87], tiles=[big])]}, "ok.yaml")])) == 1


# ---- lists and duplicates -------------------------------------------------------------


@pytest.mark.parametrize("key", ["d_types", "b_orders", "align", "tiles"])
def test_empty_lists(tmp_path: Path, key: str) -> None:
    fam_error(tmp_path, family(**{key: []}), FAM, key, "got []", "accepted: a non-empty list")


def test_empty_families(tmp_path: Path) -> None:
    error(tmp_path, {"families": []}, None, "families", "got []", "accepted: a non-empty list of families")


@pytest.mark.parametrize(
    "key, value", [("d_types", ["f16", "f16"]), ("b_orders", ["kn", "nk", "kn"]), ("align", [8, 8])]
)
def test_repeated_list_items(tmp_path: Path, key: str, value: list) -> None:
    fam_error(tmp_path, family(**{key: value}), FAM, key, "is listed twice", "without repeats")


def test_duplicate_kernel_names_both_sources(tmp_path: Path) -> None:
    path = display_path(tmp_path / "x.yaml")
    fam_error(tmp_path, family(tiles=[tile(), tile(stages=3), tile()]), f"{FAM}.tiles[2]", None,
              "is defined twice", f"{path}:{FAM}.tiles[0]", "gemm_fam_")


def test_duplicate_family_names_across_files(tmp_path: Path) -> None:
    first = write(tmp_path, {"families": [family()]}, "a.yaml")
    second = write(tmp_path, {"families": [family(name="other"), family(d_types=["f32"])]}, "b.yaml")
    with pytest.raises(ConfigError) as info:
        load_configs([first, second])
    err = info.value
    assert (err.path, err.entry, err.field) == (display_path(second), "families[1] (fam)", "name")
    assert f"also the name of {display_path(first)}:families[0] (fam)" in str(err)


# ---- order and the default set --------------------------------------------------------


def test_expansion_order(tmp_path: Path) -> None:
    tiles = [tile(), tile(cta=[64, 64, 32])]
    fam = family(d_types=["f32", "f16"], b_orders=["kn", "nk"], align=[8, 2], tiles=tiles)
    loaded = load_configs([write(tmp_path, {"families": [fam, family(name="second")]})])
    got = [(k.spec.family, k.spec.cta[0], k.spec.d_type.value, k.spec.b_order.value, k.spec.align) for k in loaded]
    expected = [("fam", m, d, b, a) for m in (128, 64) for d in ("f32", "f16") for b in ("kn", "nk") for a in (8, 2)]
    assert got == expected + [("second", 128, "f16", "nk", 8)]
    assert loaded[-1].source.endswith(":families[1] (second).tiles[0]")


def test_default_configs() -> None:
    paths = default_config_paths()
    assert [p.name for p in paths] == [
        "sm70_dense.yaml", "sm70_quant.yaml", "sm80_bf16.yaml", "sm80_f16.yaml", "sm80_f32out.yaml",
        "sm80_grouped.yaml", "sm80_lowalign.yaml", "sm80_quant.yaml", "sm90_dense.yaml", "sm90_grouped.yaml",
        "sm90_quant.yaml",
    ]
    loaded = load_configs(paths)
    # 254, then (thirtieth session) 8 prefill tiles for sm_86 / sm_89, 16 fallbacks for
    # sm_75 and sm_70 (fp32 outputs, unaligned rows, packed weights at any alignment) and 6
    # prefill tiles of the sm80_xor family; (thirty-third session) their "kn" forms, 6;
    # (thirty-fourth) W8 32x128x64 and 64x128x64 tiles for each activation type, 4;
    # (thirty-fifth) bf16 W4's 32x128x64 (fp16 W4 had it), 1; (forty-third) 16x16x512
    # with three stages for fp16 and bf16 W4, 2; (fifty-second) the sm90_quant W4 tiles
    # taking K tiles in turn, 64x64, 32x64 and 32x128 for each activation and output type, 12;
    # (fifty-third) the same tiles for W8, 12; (fifty-fifth) 128x64 in turn for each
    # activation type, bits and output type, 8; (fifty-seventh) W4 128x128 taking a pair
    # of K tiles a stage whole for each activation and output type, 4.
    assert len(loaded) == 333
    assert sum(k.spec.family.endswith("_100k") for k in loaded) == 8
    # Swizzled: the dense prefill tiles (3 an a type and B order) and the grouped 128x128x32
    # (one an a type).
    assert sum(k.spec.mainloop.value == "sm80_xor" for k in loaded) == 14
    assert sum(k.spec.mainloop.value == "sm80_xor" and k.spec.b_order.value == "kn" for k in loaded) == 6
    assert sum(k.spec.mainloop.value == "sm80_xor" and k.spec.grouped for k in loaded) == 2
    # Register-cap twins (a tile's ctas_per_sm): sm_90 only, the bf16 4-bit decode tiles
    # that spill under the family's cap, each beside its capped form.
    twins = [k.spec for k in loaded if k.spec.ctas_per_sm]
    assert len(twins) == 2 and all(s.ctas_per_sm == 1 and (s.arch_min, s.arch_max) == (90, 90) for s in twins)
    specs = {k.spec for k in loaded}
    for s in twins:
        capped = dataclasses.replace(s, ctas_per_sm=0, family=s.family.removesuffix("_uncapped"), arch_min=80)
        assert capped in specs and capped.min_ctas_per_sm_hopper > 1 and s.min_ctas_per_sm_hopper == 1
    grouped = [k.spec for k in loaded if k.spec.grouped]
    # Grouped kernels (docs/MOE.md): the sm80 and sm90 families, both 16-bit types, stacked
    # nn.Linear weights; 16-row tiles for decode, 128-row wgmma tiles for prefill; quantized
    # experts (4- and 8-bit, both activation types) on the sm80 and sm90_quant families.
    assert len(grouped) == 51 and {(s.mainloop.value, s.b_order.value) for s in grouped} == {
        ("sm80", "nk"), ("sm80_xor", "nk"), ("sm90", "nk"), ("sm90_quant", "nk")}
    assert {(s.a_type.value, s.b_type.value) for s in grouped if s.quantized} == {
        (a, b) for a in ("f16", "bf16") for b in ("u4", "u8")}
    assert {s.mainloop.value for s in grouped if s.quantized} == {"sm80", "sm90_quant"}
    assert {s.a_type.value for s in grouped} == {"f16", "bf16"} and {s.cta[0] for s in grouped} == {16, 32, 64, 128, 256}
    assert {s.cluster for s in grouped} == {1}
    hopper = [k.spec for k in loaded if k.spec.mainloop.value == "sm90" and not k.spec.grouped]
    # Both 16-bit types, both B orders, both output kinds, one and two consumers.
    assert {(s.a_type.value, s.d_type.value, s.b_order.value) for s in hopper} == {
        (a, d, b) for a in ("f16", "bf16") for d in (a, "f32") for b in ("nk", "kn")}
    assert {s.cta[0] for s in hopper} == {64, 128} and {s.cta[1] for s in hopper} == {64, 128, 192, 256}
    assert {s.cluster for s in hopper} == {1, 2} and {k.spec.cluster for k in loaded if k.spec not in hopper} == {1}
    quantized = [k.spec for k in loaded if k.spec.quantized]
    # Every (activation, weight) pair, on both mainloops, with decode and prefill tiles.
    assert {(s.a_type.value, s.b_type.value) for s in quantized} == {
        ("f16", "u4"), ("bf16", "u4"), ("f16", "u8"), ("bf16", "u8")}
    assert {s.mainloop.value for s in quantized} == {"sm70", "sm80", "sm90_quant"}
    assert {s.cta[0] for s in quantized} >= {16, 128}
    # Narrow decode tiles (16 columns, all of K per CTA) for every (activation, weight) pair.
    assert {(s.a_type.value, s.b_type.value) for s in quantized if s.cta[:2] == (16, 16) and not s.grouped} == {
        ("f16", "u4"), ("bf16", "u4"), ("f16", "u8"), ("bf16", "u8")}
    # sm90_quant has tiles of three and four consumer warpgroups as well (the 192- and
    # 256-row ones), for both widths.
    wide = {(s.b_type.value, s.cta[:2]) for s in quantized if s.mainloop.value == "sm90_quant" and not s.grouped
            and s.cta[1] > 128}  # fmt: skip
    assert wide == {(b, t) for b in ("u4", "u8") for t in ((64, 256), (128, 192))}
    assert {k.spec.mma for k in loaded} == set(MmaAtom)
    # Every family but the experimental ones (measured slower; tested by direct launch).
    assert {k.spec.mainloop for k in loaded} == {f for f in families() if not f.experimental}
    names = [k.spec.name for k in loaded]
    assert len(set(names)) == len(names)
    assert {2, 3, 4, 5, 6} <= {k.spec.stages for k in loaded}
    assert {k.spec.b_order for k in loaded} == set(BOrder)
    assert {k.spec.align for k in loaded} == {8, 2, 1}
    assert all(k.source.startswith("codegen/configs/") for k in loaded)
    # Loading is deterministic.
    assert [k.spec for k in load_configs(paths)] == [k.spec for k in loaded]


# ---- YAML merge keys, name length, --out ----------------------------------------------

MERGE_YAML = """\
families:
  - &base
    name: base
    arch: [80, 90]
    mainloop: sm80
    mma: m16n8k16
    a_type: f16
    b_type: f16
    acc_type: f32
    d_types: [f16]
    b_orders: [nk]
    align: [8]
    tiles:
      - &tile {cta: [128, 128, 32], warps: [2, 2, 1], stages: 4}
  - <<: *base
    name: derived
    tiles:
      - {<<: *tile, stages: 3}
      - <<: [{stages: 2}, *tile]
"""


def test_yaml_merge_keys_merge_and_explicit_keys_override(tmp_path: Path) -> None:
    specs = [k.spec for k in load_configs([write(tmp_path, MERGE_YAML)])]
    assert [(s.family, s.cta, s.stages) for s in specs] == [
        ("base", (128, 128, 32), 4), ("derived", (128, 128, 32), 3), ("derived", (128, 128, 32), 2),
    ]  # fmt: skip  (in a merged list the earlier mapping wins: stages 2, not the tile's 4)
    assert specs[1].a_type == specs[0].a_type and specs[1].arch_min == 80


def test_duplicate_keys_beside_merge_keys_are_still_errors(tmp_path: Path) -> None:
    text = MERGE_YAML.replace("    name: derived\n", "    name: derived\n    name: again\n")
    error(tmp_path, text, None, None, "duplicate key 'name'")
    text = MERGE_YAML.replace("{<<: *tile, stages: 3}", "{<<: {stages: 2, stages: 3}, cta: [64, 64, 32]}")
    error(tmp_path, text, None, None, "duplicate key 'stages'")


def test_family_name_too_long_for_file_names(tmp_path: Path) -> None:
    from codegen.config import MAX_KERNEL_NAME

    name = "f" * 240
    fam_error(tmp_path, family(name=name), f"families[0] ({name})", "name", f"at most {MAX_KERNEL_NAME} bytes",
                    "255-byte file name limit", "accepted: a name of at most")  # fmt: skip
    longest = max(len(k.spec.name) for k in load_configs([write(tmp_path, {"families": [family(name="f")]})]))
    fits = "f" * (MAX_KERNEL_NAME - longest + 1)
    assert load_configs([write(tmp_path, {"families": [family(name=fits)]})])
    fam_error(tmp_path, family(name=fits + "f"), f"families[0] ({fits}f)", "name", f"at most {len(fits)} characters")


def test_codegen_out_is_a_file(tmp_path: Path, capsys) -> None:
    from codegen.__main__ import main

    out = tmp_path / "file"
    out.write_text("")
    assert main(["--config", str(write(tmp_path, {"families": [family()]})), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --out ") and "not a directory" in err and len(err.strip().splitlines()) == 1
    assert main(["--config", str(tmp_path / "x.yaml"), "--out", str(out / "sub")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: cannot write ") and "Traceback" not in err


# ---- grouped kernels (docs/MOE.md) ---------------------------------------------------


def test_a_grouped_family_makes_grouped_kernels_named_so(tmp_path: Path) -> None:
    plain = load_configs([write(tmp_path, {"families": [family()]}, "plain.yaml")])
    grouped = load_configs([write(tmp_path, {"families": [family(grouped=True)]}, "grouped.yaml")])
    assert [k.spec.grouped for k in plain] == [False] and [k.spec.grouped for k in grouped] == [True]
    assert grouped[0].spec.name == plain[0].spec.name + "_grouped"
    assert grouped[0].spec.smem_bytes == plain[0].spec.smem_bytes


@pytest.mark.parametrize(
    "overrides, needle",
    [
        (dict(mainloop="sm90_quant_smem", mma="m64nNk16", arch=[90, 90], b_type="u4",
              tiles=[{"cta": [64, 128, 64], "warps": [1, 8, 1], "stages": 4}]), "the sm90_quant_smem form has no grouped"),
        (dict(b_orders=["kn"]), "stacked [E, N, K]"),
        # Gathered rows of A are copied by cp.async, which moves 4 bytes or more: the
        # template's static_assert (TileCopy::issue_gathered) otherwise.
        (dict(align=[8, 1]), "false for align 1 (a grouped kernel gathers A's rows by cp.async"),
        (dict(align=[1], b_type="u4", tiles=[{"cta": [16, 128, 128], "warps": [1, 4, 1], "stages": 4}]),
         "false for align 1"),
        (dict(mainloop="sm70", mma="m16n8k16", tiles=[{"cta": [128, 128, 32], "warps": [2, 2, 1], "stages": 2}]),
         "the sm70 family has no grouped kernels"),
        (dict(mainloop="sm90", mma="m64nNk16", arch=[90, 90], b_orders=["kn"],
              tiles=[{"cta": [128, 128, 64], "warps": [8, 1, 1], "stages": 4}]), "stacked [E, N, K]"),
        (dict(mainloop="sm90", mma="m64nNk16", arch=[90, 90],
              tiles=[{"cta": [128, 128, 64], "warps": [8, 1, 1], "stages": 4, "cluster": 2}]), "with a cluster"),
    ],
    ids=["sm90_quant_smem", "kn-sm80", "align1-sm80", "align1-sm80-w4", "sm70", "kn-sm90", "cluster-sm90"],
)
def test_grouped_kernels_only_where_the_family_has_them(tmp_path: Path, overrides, needle) -> None:
    error(tmp_path, {"families": [family(grouped=True, **overrides)]}, f"{FAM}.tiles[0]", "grouped", "got true",
          needle)  # fmt: skip


def test_quantized_grouped_sm80_kernels_take_the_weights_directly_without_a_register_cap(tmp_path: Path) -> None:
    tiles = [{"cta": [16, 128, 128], "warps": [1, 4, 1], "stages": 4}, {"cta": [64, 128, 64], "warps": [1, 4, 1], "stages": 4}]
    data = {"families": [family(grouped=True, b_type="u4", tiles=tiles)]}
    decode, prefill = (k.spec for k in load_configs([write(tmp_path, data)]))
    assert decode.grouped and decode.quantized and decode.direct_b and not prefill.direct_b
    # The dense 16-row W4 tile runs 4 CTAs of 128 registers; the grouped one's expert
    # pointers and gather index do not fit that cap.
    assert decode.min_ctas_per_sm == 1
    dense = load_configs([write(tmp_path, {"families": [family(b_type="u4", tiles=tiles[:1])]}, "dense.yaml")])[0].spec
    assert dense.min_ctas_per_sm == 4


def test_grouped_must_be_a_boolean(tmp_path: Path) -> None:
    error(tmp_path, {"families": [family(grouped=1)]}, FAM, "grouped", "got 1", "true or false")


# ---- a tile's own register cap ----------------------------------------------------------


def test_a_tile_may_set_its_register_cap(tmp_path: Path) -> None:
    data = {"families": [family(tiles=[tile(), tile(ctas_per_sm=2)])]}
    family_choice, own = (k.spec for k in load_configs([write(tmp_path, data)]))
    assert family_choice.ctas_per_sm == 0 and own.ctas_per_sm == 2
    assert own.name == family_choice.name + "_ctas2" and own.min_ctas_per_sm == own.min_ctas_per_sm_hopper == 2


@pytest.mark.parametrize(
    "value, needles",
    [(0, ("got 0", "an integer from 1 to 16")), (17, ("got 17", "an integer from 1 to 16")),
     (True, ("got true", "(a boolean)")), ("2", ("got '2'",))],
    ids=["zero", "beyond-threads", "boolean", "string"],
)
def test_a_tile_register_cap_is_an_integer_the_sm_holds(tmp_path: Path, value, needles) -> None:
    # 128 threads a CTA: at most 2048 / 128 = 16 CTAs per SM.
    fam_error(tmp_path, family(tiles=[tile(ctas_per_sm=value)]), TILE, "ctas_per_sm", *needles)


def test_the_sm90_families_set_their_own_registers(tmp_path: Path) -> None:
    fam = family(mainloop="sm90", mma="m64nNk16", arch=[90, 90],
                 tiles=[{"cta": [128, 128, 64], "warps": [8, 1, 1], "stages": 4, "ctas_per_sm": 1}])  # fmt: skip
    fam_error(tmp_path, fam, TILE, "ctas_per_sm", "got 1", "the sm90 family sets its kernels' registers itself")
