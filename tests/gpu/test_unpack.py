"""GPU test of gemm_runtime.unpack (templates/include/gemm/unpack.cuh): a packed weight
dequantized on the GPU equals the reference dequantization (fp32, rounded once)
bit for bit, for both activation types, 4 and 8 bits, groups of 32 and 128 and one
over all of K, symmetric and asymmetric weights, N not a multiple of 8 and K not a
multiple of 32 (odd: the last column stored alone), into a NaN-poisoned output."""

from __future__ import annotations

import pytest
import torch

from gemm_runtime.errors import GemmArgumentError
from gemm_runtime.packed_weight import pack_for_gemm
from gemm_runtime.quant import quantize
from gemm_runtime.unpack import unpack_weight

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _needs_gpu():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")


def _packed(n, k, dtype, bits, group_size, symmetric, seed):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    w = torch.randn(n, k, device="cuda", generator=gen).to(dtype) * 0.05
    qw = quantize(w, bits=bits, group_size=group_size, symmetric=symmetric)
    return qw, pack_for_gemm(qw)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("group_size, symmetric", [(32, False), (128, False), (128, True), (-1, False)])
@pytest.mark.parametrize("n, k", [(75, 201), (264, 7392), (4096, 1024)])
@pytest.mark.parametrize("pitch", ["whole", "pairs"])  # rows at 16-byte multiples (whole-run stores) or not
def test_unpacked_weight_is_the_reference_dequantization(dtype, bits, group_size, symmetric, n, k, pitch):
    qw, packed = _packed(n, k, dtype, bits, group_size, symmetric, seed=n * 7 + k + bits)
    ld = -(-k // 8) * 8 if pitch == "whole" else k + k % 2 + 2
    assert (ld % 8 == 0) == (pitch == "whole")
    full = torch.full((n, ld), float("nan"), dtype=dtype, device="cuda")
    out = full[:, :k]
    unpack_weight(packed, out=out)
    ref = qw.dequantize(dtype)
    assert not torch.isnan(out).any()
    assert torch.isnan(full[:, k:]).all()  # a row's pitch past K is the caller's: never written
    assert torch.equal(out, ref), (out.float() - ref.float()).abs().max().item()


def test_unpacked_weight_allocates_aligned_rows():
    qw, packed = _packed(40, 100, torch.float16, 4, 32, False, seed=1)
    out = unpack_weight(packed)
    assert out.shape == (40, 100) and out.stride(0) == 104 and out.dtype == torch.float16
    assert torch.equal(out, qw.dequantize(torch.float16))


def test_unpack_refuses_an_output_it_cannot_write():
    _, packed = _packed(16, 64, torch.float16, 4, 32, False, seed=2)
    for bad in (torch.empty(16, 63, dtype=torch.float16, device="cuda"),  # shape
                torch.empty(16, 64, dtype=torch.bfloat16, device="cuda"),  # dtype
                torch.empty(16, 65, dtype=torch.float16, device="cuda")[:, :64],  # odd row stride
                torch.empty(64, 16, dtype=torch.float16, device="cuda").t()):  # columns strided
        with pytest.raises(GemmArgumentError, match="^out: got"):
            unpack_weight(packed, out=bad)
