"""The sm80_ring family's kernels (codegen/families/sm80.py, Sm80RingFamily: quantized
decode tiles whose packed weights ride a deep cp.async ring) outside the default set:
the tiles of bench/experiments/decode_ring_tiles.yaml, generated and built with NVRTC
into a directory of their own, for the GPU test (tests/gpu/test_sm80_ring.py) and
bench/experiments/decode_ring.py."""

from __future__ import annotations

from pathlib import Path

from codegen.__main__ import main as codegen_main
from codegen.config import load_configs
from gemm_runtime import build as build_mod

ROOT = Path(__file__).resolve().parents[1]
YAML = ROOT / "bench" / "experiments" / "decode_ring_tiles.yaml"


def kernel_names() -> list[str]:
    """The ring kernels of the YAML (no GPU needed)."""
    return [k.spec.name for k in load_configs([YAML])]


def build(work: Path, arch: int, yaml: Path = YAML) -> Path:
    """The ring kernels (or another YAML's) generated and built for ``arch`` under ``work``:
    the build directory."""
    generated = work / "generated"
    codegen_main(["--config", str(yaml), "--out", str(generated)])
    build_mod.build(generated, work / "build", archs=[arch], progress=False)
    return work / "build"
