"""GPU test of the sm80_ring family (quantized decode tiles whose packed weights ride a
deep cp.async ring; tests/decode_ring_kernels.py builds its tiles, which the default set
does not have): every kernel against the fp32 product with the dequantized weight, with
groups of 32, 128 and one over all of K, N and K with residues against the tile, K =
7392 with groups of 32, M of 1, 8, 9 (the loop with rows 8-15), 16 and past one tile
row with a residue, symmetric and asymmetric weights, every split count a slice of K
allows up to 8; the bias and gated epilogues. Outputs are NaN-poisoned first."""

from __future__ import annotations

import pytest

from tests.decode_ring_kernels import build, kernel_names
from tests.gpu.util import (
    check_decode_tile,
    check_long_k_with_small_groups,
    check_quant_epilogues_and_split_k,
    experimental_gemm,
    registered_spec,
)

pytestmark = pytest.mark.gpu

@pytest.fixture(scope="module")
def ring_gemm(tmp_path_factory):
    return experimental_gemm(tmp_path_factory, "sm80_ring", build)


@pytest.mark.parametrize("group_size", [32, 128, -1])
@pytest.mark.parametrize("name", kernel_names())
def test_ring_kernel_matches_dequantized_reference(ring_gemm, name, group_size):
    check_decode_tile(ring_gemm, name, group_size, rows=(1, 8, 9, 16, 37))


@pytest.mark.parametrize("name", kernel_names())
def test_ring_kernel_long_k_with_small_groups(ring_gemm, name):
    check_long_k_with_small_groups(ring_gemm, name, rows=(1, 13))


@pytest.mark.parametrize("name", kernel_names())
def test_ring_kernel_epilogues_and_split_k(ring_gemm, name):
    check_quant_epilogues_and_split_k(ring_gemm, name, rows=registered_spec(ring_gemm, name).cta[0] + 3)
