"""GPU test of the sm80_rows8 family (quantized decode tiles for at most 8 rows of A,
bench/experiments/decode_rows8_tiles.yaml; the default set does not have them): every
kernel against the fp32 product with the dequantized weight, with groups of 32, 64, 128
and one over all of K, N and K with residues against the tile, K = 7392 with groups of
32, M of 1, 3 and 8, symmetric and asymmetric weights, every split count a slice of K
allows up to 8; the bias and gated epilogues; and a clear refusal of 9 rows. Outputs
are NaN-poisoned first."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from codegen.config import load_configs
from gemm_runtime import GemmArgumentError
from gemm_runtime.packed_weight import pack_for_gemm
from gemm_runtime.quant import quantize
from gemm_runtime.types import torch_dtype
from tests.decode_ring_kernels import build
from tests.gpu.util import (
    check_decode_tile,
    check_long_k_with_small_groups,
    check_quant_epilogues_and_split_k,
    experimental_gemm,
    registered_spec,
)

pytestmark = pytest.mark.gpu

YAML = Path(__file__).resolve().parents[2] / "bench" / "experiments" / "decode_rows8_tiles.yaml"
NAMES = [k.spec.name for k in load_configs([YAML])]


@pytest.fixture(scope="module")
def rows8_gemm(tmp_path_factory):
    return experimental_gemm(tmp_path_factory, "sm80_rows8", lambda work, arch: build(work, arch, YAML))


@pytest.mark.parametrize("group_size", [32, 64, 128, -1])
@pytest.mark.parametrize("name", NAMES)
def test_rows8_kernel_matches_dequantized_reference(rows8_gemm, name, group_size):
    check_decode_tile(rows8_gemm, name, group_size, rows=(1, 3, 8))


@pytest.mark.parametrize("name", NAMES)
def test_rows8_kernel_long_k_with_small_groups(rows8_gemm, name):
    check_long_k_with_small_groups(rows8_gemm, name, rows=(1, 8))


@pytest.mark.parametrize("name", NAMES)
def test_rows8_kernel_epilogues_and_split_k(rows8_gemm, name):
    registered_spec(rows8_gemm, name)
    check_quant_epilogues_and_split_k(rows8_gemm, name, rows=7)


def test_rows8_kernels_refuse_9_rows(rows8_gemm):
    name = NAMES[0]
    spec = registered_spec(rows8_gemm, name)
    qw = quantize(torch.randn(64, 2048, device="cuda").to(torch_dtype(spec.a_type)) * 0.05, bits=spec.b_type.bits,
                  group_size=128)  # fmt: skip
    a = torch.randn(9, 2048, device="cuda", dtype=torch_dtype(spec.a_type))
    with pytest.raises(GemmArgumentError, match=r"at most 8 rows of A \(M = 9"):
        rows8_gemm.matmul(a, pack_for_gemm(qw), kernel=name)
