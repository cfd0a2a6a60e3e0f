"""GPU test of the sm80_ring family (quantized decode tiles whose packed weights ride a
deep cp.async ring; tests/decode_ring_kernels.py builds its tiles, which the default set
does not have): every kernel against the fp32 product with the dequantized weight, with
groups of 32, 128 and one over all of K, N and K with residues against the tile, K =
7392 with groups of 32, M of 1, 8, 9 (the loop with rows 8-15), 16 and past one tile
row with a residue, symmetric and asymmetric weights, every split count a slice of K
allows up to 8; the bias and gated epilogues. Outputs are NaN-poisoned first."""

from __future__ import annotations

import pytest
import torch

from gemm_runtime.packed_weight import pack_for_gemm
from gemm_runtime.plan import LaunchSpec
from gemm_runtime.quant import quantize
from gemm_runtime.types import torch_dtype
from tests.decode_ring_kernels import build, kernel_names
from tests.gpu.util import (
    check_long_k_with_small_groups,
    check_quant_epilogues_and_split_k,
    experimental_gemm,
    registered_spec,
)

pytestmark = pytest.mark.gpu

_TOLERANCE = {torch.float16: (1e-3, 2e-3), torch.bfloat16: (6e-3, 1e-2)}  # as test_quant_kernels.py


@pytest.fixture(scope="module")
def ring_gemm(tmp_path_factory):
    return experimental_gemm(tmp_path_factory, "sm80_ring", build)


def _check(gemm, name, a, packed, ref, splits, failures, label):
    """The plan (name, splits) on ``a @ packed`` against ``ref``; a NaN or an error past
    test_quant_kernels.py's tolerance appends to ``failures``."""
    spec = gemm.registry.get(name).spec
    rel_tol, max_tol = _TOLERANCE[torch_dtype(spec.a_type)]
    out = torch.full((a.shape[0], ref.shape[1]), float("nan"), device="cuda", dtype=torch_dtype(spec.d_type))
    gemm.matmul(a, packed, out=out, kernel=LaunchSpec(name, splits))
    if torch.isnan(out).any():
        failures.append(f"{label} splits={splits}: {int(torch.isnan(out).sum())} NaN")
        return
    diff = (out.float() - ref).abs()
    rel, worst = (diff.norm() / ref.norm()).item(), (diff.max() / ref.abs().max()).item()
    if not (rel < rel_tol and worst < max_tol):
        failures.append(f"{label} splits={splits}: rel {rel:.2e} max {worst:.2e}")


@pytest.mark.parametrize("group_size", [32, 128, -1])
@pytest.mark.parametrize("name", kernel_names())
def test_ring_kernel_matches_dequantized_reference(ring_gemm, name, group_size):
    spec = registered_spec(ring_gemm, name)
    dt = torch_dtype(spec.a_type)
    gen = torch.Generator(device="cuda").manual_seed(hash((name, group_size)) % 2**31)
    _, cn, ck = spec.cta
    failures = []
    for n, k, symmetric in [(2 * cn + 8, 3 * ck + 32, False), (cn + 27, 3 * 128 + 72, True), (cn // 2 + 8, ck, False)]:
        w = torch.randn(n, k, device="cuda", generator=gen).to(dt) * 0.05
        qw = quantize(w, bits=spec.b_type.bits, group_size=group_size, symmetric=symmetric)
        packed, ref_w = pack_for_gemm(qw), qw.dequantize().float()
        k_tiles = -(-k // ck)
        for m in (1, 8, 9, 16, 37):
            a = torch.randn(m, k, device="cuda", dtype=dt, generator=gen)
            ref = a.float() @ ref_w.t()
            for splits in sorted({1, 2, min(3, k_tiles), min(8, k_tiles)}):
                _check(ring_gemm, name, a, packed, ref, splits, failures, f"M={m} N={n} K={k} sym={symmetric}")
    assert not failures, f"{name} group {group_size}: " + "; ".join(failures)


@pytest.mark.parametrize("name", kernel_names())
def test_ring_kernel_long_k_with_small_groups(ring_gemm, name):
    check_long_k_with_small_groups(ring_gemm, name, rows=(1, 13), check=_check)


@pytest.mark.parametrize("name", kernel_names())
def test_ring_kernel_epilogues_and_split_k(ring_gemm, name):
    check_quant_epilogues_and_split_k(ring_gemm, name, rows=registered_spec(ring_gemm, name).cta[0] + 3)
