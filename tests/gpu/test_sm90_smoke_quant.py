"""GPU test of the register-A wgmma path for quantized weights (issue 16's building
block): templates/include/gemm/sm90/smoke_quant.cuh computes D^T = W . X^T with the
packed weight (the sm80 layout, pack_for_gemm) dequantized in registers as wgmma's A
operand, against the fp32 product with the dequantized weight. Compute capability 9.0.

D is NaN-poisoned and padded by rows and columns it must not touch; shapes have residues
against the CTA's 128 weight rows and 64 tokens, against 8 (the packed n8 tiles) and
against the 64-wide K tile and 32 (the packed K blocks); groups of 32 (one per k32 block),
128 (across the K tile) and one over all of K; symmetric and asymmetric weights."""

from __future__ import annotations

import pytest
import torch

from gemm_runtime.packed_weight import pack_for_gemm
from gemm_runtime.quant import quantize
from tests.sm90_smoke_quant import QuantSmokeKernel, launch

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("hopper")]

TORCH = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}
# (norm-wise, max over max |ref|) against the fp32 product with the 16-bit dequantized
# weight: the output's rounding and the accumulation order (as tests/gpu/test_quant_kernels.py).
TOLERANCE = {"f16": (1e-3, 2e-3), "bf16": (6e-3, 1e-2)}
PAD = 8
# (M, N, K): one CTA exactly; residues on every axis (N = 8k + 5, K = 32k + 8 with a
# last K tile of one k32 block and a bit, M across the 64-token tiles); a long K.
SHAPES = [(64, 128, 64), (1, 128, 4096), (65, 261, 1000), (130, 392, 328), (7, 4096, 7392)]



@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize("group_size", [32, 128, -1])
@pytest.mark.parametrize("out", ["same", "f32"])
@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_quantized_smoke_matches_dequantized_reference(dtype: str, bits: int, out: str, group_size: int,
                                                        symmetric: bool) -> None:  # fmt: skip
    out = dtype if out == "same" else out
    kernel = QuantSmokeKernel(dtype, bits, out)
    rel_tol, max_tol = TOLERANCE[dtype]
    gen = torch.Generator(device="cuda").manual_seed(bits * 1009 + group_size + 7 * symmetric)
    failures = []
    for m, n, k in SHAPES:
        w = torch.randn(n, k, device="cuda", generator=gen).to(TORCH[dtype]) * 0.05
        qw = quantize(w, bits=bits, group_size=group_size, symmetric=symmetric)
        packed = pack_for_gemm(qw)
        x = torch.randn(m, k, device="cuda", generator=gen).to(TORCH[dtype])
        full = torch.full((m + PAD, n + PAD), float("nan"), device="cuda", dtype=TORCH[out])
        launch(kernel, x, packed, full)
        got, ref = full[:m, :n].float(), x.float() @ qw.dequantize().float().t()
        if not torch.isnan(full[m:]).all() or not torch.isnan(full[:, n:]).all():
            failures.append(f"M={m} N={n} K={k}: wrote outside D")
        if torch.isnan(got).any():
            bad = torch.isnan(got).nonzero()
            failures.append(f"M={m} N={n} K={k}: {bad.shape[0]} NaN, first {bad[:4].tolist()}")
            continue
        diff = (got - ref).abs()
        rel, worst = (diff.norm() / ref.norm()).item(), (diff.max() / ref.abs().max()).item()
        if not (rel < rel_tol and worst < max_tol):
            r, c = divmod(int(diff.argmax()), n)
            failures.append(f"M={m} N={n} K={k}: rel {rel:.2e} max {worst:.2e} at ({r}, {c}): "
                            f"{got[r, c].item():.5g} vs {ref[r, c].item():.5g}")  # fmt: skip
    assert not failures, f"{kernel.name} group {group_size} symmetric={symmetric}: " + "; ".join(failures)
