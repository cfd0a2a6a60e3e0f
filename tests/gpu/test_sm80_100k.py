"""GPU test of the prefill tiles for GPUs with 100 KB of shared memory an SM
(codegen/configs/sm80_f16.yaml and sm80_bf16.yaml, the ``*_100k`` families, built for
sm_86 / sm_89 only): the same kernels built for the GPU at hand (their arch range
widened to it; the code is the sm80 family's, the arch only the compile target), then
every one through the default set's dense checks: the fp32 reference at M from 1 to 1000
with residues on N and K, padded rows and NaN-poisoned outputs, many K tiles on interior
CTAs unsplit and split, alpha, beta and C aliasing D."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from codegen.__main__ import main as codegen_main
from codegen.config import default_config_paths, load_configs
from gemm_runtime import build as build_mod
from tests.gpu import test_dense_kernels as dense
from tests.gpu.util import experimental_gemm, registered_spec

pytestmark = pytest.mark.gpu

CONFIGS = Path(__file__).resolve().parents[2] / "codegen" / "configs"
SUFFIX = "_100k"
_NAMES = sorted(k.spec.name for k in load_configs(default_config_paths()) if k.spec.family.endswith(SUFFIX))


def build(work: Path, arch: int) -> Path:
    """The ``*_100k`` families of the default configs, generated with their arch range
    widened to ``arch`` and built for it under ``work``: the build directory."""
    families = []
    for name in ("sm80_f16.yaml", "sm80_bf16.yaml"):
        families += [f for f in yaml.safe_load((CONFIGS / name).read_text())["families"] if f["name"].endswith(SUFFIX)]
    for f in families:
        f["arch"] = [min(f["arch"][0], arch), max(f["arch"][1], arch)]
    config = work / "sm80_100k.yaml"
    config.write_text(yaml.safe_dump({"families": families}))
    codegen_main(["--config", str(config), "--out", str(work / "generated")])
    build_mod.build(work / "generated", work / "build", archs=[arch], progress=False)
    return work / "build"


@pytest.fixture(scope="module")
def gemm_100k(tmp_path_factory):
    return experimental_gemm(tmp_path_factory, "sm80_100k", build)


@pytest.mark.parametrize("check, name, args", list(dense.cases_for(_NAMES)))
def test_100k_kernel(gemm_100k, check, name, args):
    registered_spec(gemm_100k, name)
    check(gemm_100k, name, *args)
