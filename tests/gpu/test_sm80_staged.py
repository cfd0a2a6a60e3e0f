"""GPU test of the sm80_staged family (quantized B dequantized once per CTA into shared
memory; tests/sm80_staged_kernels.py builds its tiles, which the default set does not
have): every kernel against the fp32 product with the dequantized weight, with groups
of 32 (two per K tile), 128 (across K tiles) and one over all of K, N and K with
residues against the tile, 8 and 32, M from one row to several tile rows with a
residue, symmetric and asymmetric weights; the bias and gated epilogues and split-K."""

from __future__ import annotations

import pytest
import torch

from gemm_runtime.packed_weight import pack_for_gemm
from gemm_runtime.quant import quantize
from gemm_runtime.types import torch_dtype
from tests.gpu.util import check_quant_epilogues_and_split_k, experimental_gemm, registered_spec
from tests.sm80_staged_kernels import build, kernel_names

pytestmark = pytest.mark.gpu

_TOLERANCE = {torch.float16: (1e-3, 2e-3), torch.bfloat16: (6e-3, 1e-2)}  # as test_quant_kernels.py


@pytest.fixture(scope="module")
def staged_gemm(tmp_path_factory):
    return experimental_gemm(tmp_path_factory, "sm80_staged", build)


@pytest.mark.parametrize("group_size", [32, 128, -1])
@pytest.mark.parametrize("name", kernel_names())
def test_staged_kernel_matches_dequantized_reference(staged_gemm, name, group_size):
    spec = registered_spec(staged_gemm, name)
    dt, out_dt = torch_dtype(spec.a_type), torch_dtype(spec.d_type)
    rel_tol, max_tol = _TOLERANCE[dt]
    gen = torch.Generator(device="cuda").manual_seed(hash((name, group_size)) % 2**31)
    cm, cn, ck = spec.cta
    failures = []
    for n, k, symmetric in [(2 * cn + 8, 2 * ck + 32, False), (cn + 27, 3 * 128 + 72, True), (cn // 2 + 8, ck, False)]:
        w = torch.randn(n, k, device="cuda", generator=gen).to(dt) * 0.05
        qw = quantize(w, bits=spec.b_type.bits, group_size=group_size, symmetric=symmetric)
        packed, ref_w = pack_for_gemm(qw), qw.dequantize().float()
        for m in (1, 37, cm + 1, 2 * cm + 44):
            a = torch.randn(m, k, device="cuda", dtype=dt, generator=gen)
            out = torch.full((m, n), float("nan"), device="cuda", dtype=out_dt)
            staged_gemm.matmul(a, packed, out=out, kernel=name)
            ref = a.float() @ ref_w.t()
            if torch.isnan(out).any():
                failures.append(f"M={m} N={n} K={k}: {int(torch.isnan(out).sum())} NaN")
                continue
            diff = (out.float() - ref).abs()
            rel, worst = (diff.norm() / ref.norm()).item(), (diff.max() / ref.abs().max()).item()
            if not (rel < rel_tol and worst < max_tol):
                failures.append(f"M={m} N={n} K={k} symmetric={symmetric}: rel {rel:.2e} max {worst:.2e}")
    assert not failures, f"{name} group {group_size}: " + "; ".join(failures)


@pytest.mark.parametrize("name", kernel_names())
def test_staged_kernel_epilogues_and_split_k(staged_gemm, name):
    check_quant_epilogues_and_split_k(staged_gemm, name, rows=registered_spec(staged_gemm, name).cta[0] + 19)
