"""Default-set kernels whose families target only GPUs the tests may not have (sm_75's
fallbacks, the 100 KB GPUs' prefill tiles): the same YAML families generated with their
arch range widened to the GPU at hand and built for it, so the GPU tests run their code
there (the family's template is the same; only the compile target differs)."""

from __future__ import annotations

from pathlib import Path

import yaml

from codegen.__main__ import main as codegen_main
from codegen.config import default_config_paths, load_configs
from gemm_runtime import build as build_mod

CONFIGS = Path(__file__).resolve().parents[1] / "codegen" / "configs"


def kernel_names(families: set[str]) -> list[str]:
    """The default set's kernels of ``families`` (no GPU needed)."""
    return sorted(k.spec.name for k in load_configs(default_config_paths()) if k.spec.family in families)


def build(work: Path, arch: int, families: set[str]) -> Path:
    """``families`` of codegen/configs, their arch range widened to ``arch``, generated and
    built for ``arch`` under ``work``: the build directory."""
    found = []
    for path in sorted(CONFIGS.glob("*.yaml")):
        found += [f for f in yaml.safe_load(path.read_text())["families"] if f["name"] in families]
    assert {f["name"] for f in found} == families, families
    for f in found:
        f["arch"] = [min(f["arch"][0], arch), max(f["arch"][1], arch)]
    config = work / "families.yaml"
    config.write_text(yaml.safe_dump({"families": found}))
    codegen_main(["--config", str(config), "--out", str(work / "generated")])
    build_mod.build(work / "generated", work / "build", archs=[arch], progress=False)
    return work / "build"
