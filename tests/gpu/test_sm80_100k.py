"""GPU test of the prefill tiles for GPUs with 100 KB of shared memory an SM
(codegen/configs/sm80_f16.yaml and sm80_bf16.yaml, the ``*_100k`` families, built for
sm_86 / sm_89 only): the same kernels built for the GPU at hand
(tests/other_arch_kernels.py), then every one through the default set's dense checks:
the fp32 reference at M from 1 to 1000 with residues on N and K, padded rows and
NaN-poisoned outputs, many K tiles on interior CTAs unsplit and split, alpha, beta and C
aliasing D."""

from __future__ import annotations

import functools

import pytest

from tests import other_arch_kernels
from tests.gpu import test_dense_kernels as dense
from tests.gpu.util import experimental_gemm, registered_spec

pytestmark = pytest.mark.gpu

FAMILIES = {"sm80_f16_100k", "sm80_bf16_100k"}
_NAMES = other_arch_kernels.kernel_names(FAMILIES)


@pytest.fixture(scope="module")
def gemm_100k(tmp_path_factory):
    return experimental_gemm(tmp_path_factory, "sm80_100k", functools.partial(other_arch_kernels.build,
                                                                              families=FAMILIES))  # fmt: skip


@pytest.mark.parametrize("check, name, args", list(dense.cases_for(_NAMES)))
def test_100k_kernel(gemm_100k, check, name, args):
    registered_spec(gemm_100k, name)
    check(gemm_100k, name, *args)
