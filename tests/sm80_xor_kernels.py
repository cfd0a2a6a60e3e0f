"""The sm80_xor family's kernels (codegen/families/sm80.py, Sm80XorRowsFamily: K tiles of
32 in XOR-swizzled shared rows) outside the default set: the tiles of
bench/experiments/sm80_xor.yaml, generated and built with NVRTC into a directory of
their own, alone or beside their padded twins of the default set (the sm80 kernels of
the same tile, types and B order), for the GPU test (tests/gpu/test_sm80_xor.py) and
bench/experiments/sm80_xor.py."""

from __future__ import annotations

from pathlib import Path

from codegen.__main__ import main as codegen_main
from codegen.config import load_configs
from gemm_runtime import build as build_mod

ROOT = Path(__file__).resolve().parents[1]
YAML = ROOT / "bench" / "experiments" / "sm80_xor.yaml"
PREFILL_YAML = ROOT / "bench" / "experiments" / "prefill_tiles.yaml"


def kernel_names() -> list[str]:
    """The swizzled kernels of the YAML (no GPU needed)."""
    return [k.spec.name for k in load_configs([YAML])]


def twin_key(spec: dict) -> tuple:
    """What a swizzled kernel and its padded twin share: all but the family (a spec's
    manifest fields, as bench.experiments.sm90_variants.subset_manifest passes them)."""
    fields = ("mma", "a_type", "b_type", "d_type", "cta", "warps", "stages", "b_order", "align", "grouped")
    return tuple(tuple(v) if isinstance(v, list) else v for v in (spec.get(f) for f in fields))


def build(work: Path, arch: int, *, with_twins: bool = False) -> Path:
    """The swizzled kernels (and with ``with_twins`` their padded twins: the sm80 kernels of
    the same tiles in the default set and bench/experiments/prefill_tiles.yaml)
    generated and built for ``arch`` under ``work``: the build directory."""
    from bench.experiments.sm90_variants import subset_manifest

    generated = work / "generated"
    if with_twins:
        codegen_main(["--with-defaults", "--config", str(YAML), str(PREFILL_YAML), "--out", str(work / "all")])
        swizzled = {twin_key(k.spec.to_json()) for k in load_configs([YAML])}

        def keep(name: str, spec: dict) -> bool:
            return spec["mainloop"] in ("sm80", "sm80_xor") and twin_key(spec) in swizzled

        subset_manifest(work / "all", generated, keep)
    else:
        codegen_main(["--config", str(YAML), "--out", str(generated)])
    build_mod.build(generated, work / "build", archs=[arch], progress=False)
    return work / "build"
