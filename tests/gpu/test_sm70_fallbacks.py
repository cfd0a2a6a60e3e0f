"""GPU test of Turing's quantized fallbacks (codegen/configs/sm70_quant.yaml, the sm70
family's align-1 W4 / W8 tiles for unaligned activations and fp32 outputs, built for
sm_75 alone): the same kernels built for the GPU at hand (tests/other_arch_kernels.py),
then through the default set's quantized checks: the fp32 product with the dequantized
weight, groups of 32 / 128 / all of K at and across the K tile, symmetric and not, M
from 1 to 257, K off 16-byte rows; the epilogues and split K."""

from __future__ import annotations

import functools

import pytest

from tests import other_arch_kernels
from tests.gpu import test_quant_kernels as quant
from tests.gpu.util import check_quant_epilogues_and_split_k, experimental_gemm, registered_spec

pytestmark = pytest.mark.gpu

FAMILIES = {"sm70_f16_w4_lowalign", "sm70_f16_w8_lowalign"}
_NAMES = other_arch_kernels.kernel_names(FAMILIES)


@pytest.fixture(scope="module")
def gemm_sm70(tmp_path_factory):
    build = functools.partial(other_arch_kernels.build, families=FAMILIES)
    return experimental_gemm(tmp_path_factory, "sm70_fallbacks", build, min_arch=75)


@pytest.mark.parametrize("group_size", [32, 128, -1])
@pytest.mark.parametrize("name", _NAMES)
def test_fallback_matches_the_dequantized_reference(gemm_sm70, name, group_size):
    registered_spec(gemm_sm70, name)
    quant.test_quant_kernel_matches_dequantized_reference(gemm_sm70, name, group_size)


@pytest.mark.parametrize("name", _NAMES)
def test_fallback_epilogues_and_split_k(gemm_sm70, name):
    registered_spec(gemm_sm70, name)
    check_quant_epilogues_and_split_k(gemm_sm70, name, rows=19)
