"""The sm80_staged family's kernels (codegen/families/sm80.py, Sm80StagedFamily: quantized
B dequantized once per CTA into shared memory) outside the default set: the tiles of
bench/experiments/sm80_staged.yaml, generated and built with NVRTC into a directory of
their own, alone or beside the default set's sm80 fp16 kernels (dense and 4-bit), for
the GPU test (tests/gpu/test_sm80_staged.py) and bench/experiments/sm80_staged.py."""

from __future__ import annotations

from pathlib import Path

from codegen.__main__ import main as codegen_main
from codegen.config import load_configs
from gemm_runtime import build as build_mod

ROOT = Path(__file__).resolve().parents[1]
YAML = ROOT / "bench" / "experiments" / "sm80_staged.yaml"


def kernel_names() -> list[str]:
    """The staged kernels of the YAML (no GPU needed)."""
    return [k.spec.name for k in load_configs([YAML])]


def is_sm80_f16_peer(name: str, spec: dict) -> bool:
    """A default-set, non-grouped sm80 kernel of fp16 activations and output with "nk" B,
    dense or 4-bit: what the staged W4 kernels are timed against."""
    return ("_sm80_m16n8k16_af16_bf16_" in name or "_sm80_m16n8k16_af16_bu4_" in name) and "_nk_" in name and \
        "grouped" not in name and spec["d_type"] == "f16"  # fmt: skip


def build(work: Path, arch: int, *, with_peers: bool = False) -> Path:
    """The staged kernels (and with ``with_peers`` the sm80 fp16 peers of the default
    set) generated and built for ``arch`` under ``work``: the build directory."""
    from bench.experiments.sm90_variants import subset_manifest

    generated = work / "generated"
    if with_peers:
        codegen_main(["--with-defaults", "--config", str(YAML), "--out", str(work / "all")])
        subset_manifest(work / "all", generated,
                        lambda name, spec: "_sm80_staged_" in name or is_sm80_f16_peer(name, spec))  # fmt: skip
    else:
        codegen_main(["--config", str(YAML), "--out", str(generated)])
    build_mod.build(generated, work / "build", archs=[arch], progress=False)
    return work / "build"
