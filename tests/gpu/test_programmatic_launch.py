"""Programmatic dependent launch (Gemm(programmatic_launch=True), compute capability 9.0
and up): chains of GEMMs where each reads the output the previous one just wrote, dense
and quantized, at decode and batch sizes (split-K hand-overs through one workspace
included), eager and replayed from a CUDA graph. Each kernel may start while the
previous one runs, so a read before its griddepcontrol.wait would see the previous
output's NaN poison or a stale value; the results must equal, bit for bit, the same
chain launched without the attribute, and the fp32 reference within the usual error."""

from __future__ import annotations

import pytest
import torch

from gemm_runtime import Gemm
from gemm_runtime.packed_weight import pack_for_gemm
from gemm_runtime.quant import quantize
from tests.gpu.util import rel_err

pytestmark = pytest.mark.gpu

WIDTHS = [1000, 1272, 1000, 744, 1000]  # residues against every tile; each layer's K is the last one's N


@pytest.fixture(scope="module")
def gemms() -> tuple[Gemm, Gemm]:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("programmatic dependent launch needs compute capability 9.0")
    return Gemm(programmatic_launch=True), Gemm()


def _chain(gemm: Gemm, x: torch.Tensor, weights: list, outs: list[torch.Tensor]) -> None:
    for i, w in enumerate(weights):
        gemm.matmul(x if i == 0 else outs[i - 1], w if not isinstance(w, torch.Tensor) else w.t(), out=outs[i])


def _weights(quantized: bool, dtype: torch.dtype, gen: torch.Generator) -> tuple[list, list[torch.Tensor]]:
    """The chain's operands for our kernels and the fp32 weights of the reference."""
    ours, ref = [], []
    for k, n in zip(WIDTHS, WIDTHS[1:]):
        w = torch.randn(n, k, device="cuda", generator=gen).to(dtype) / k**0.5
        if quantized:
            qw = quantize(w, bits=4, group_size=128)
            ours.append(pack_for_gemm(qw))
            ref.append(qw.dequantize().float())
        else:
            ours.append(w)
            ref.append(w.float())
    return ours, ref


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
@pytest.mark.parametrize("m", [1, 16, 130])
@pytest.mark.parametrize("quantized", [False, True], ids=["fp16", "w4"])
def test_dependent_chain_matches(gemms, quantized: bool, m: int, graph: bool) -> None:
    pdl, plain = gemms
    dtype = torch.float16
    gen = torch.Generator(device="cuda").manual_seed(m * 7 + quantized)
    weights, ref_weights = _weights(quantized, dtype, gen)
    x = torch.randn(m, WIDTHS[0], device="cuda", generator=gen).to(dtype)
    results = []
    for gemm in (pdl, plain):
        outs = [torch.full((m, n), float("nan"), device="cuda", dtype=dtype) for n in WIDTHS[1:]]
        _chain(gemm, x, weights, outs)  # plans (and, with the attribute, launches) outside a capture first
        if graph:
            for out in outs:
                out.fill_(float("nan"))
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                _chain(gemm, x, weights, outs)
            for out in outs:
                out.fill_(float("nan"))
            g.replay()
        torch.cuda.synchronize()
        results.append([o.clone() for o in outs])
    inputs = [x] + results[1][:-1]  # each layer's reference from the same input as the kernel's
    for i, w in enumerate(ref_weights):
        ref = inputs[i].float() @ w.t()
        got, expected = results[0][i], results[1][i]
        assert not torch.isnan(got).any(), f"layer {i}: NaN (read before the previous kernel wrote)"
        assert torch.equal(got, expected), f"layer {i}: differs from the launch without the attribute"
        assert rel_err(got, ref) < 2e-3, f"layer {i}: rel {rel_err(got, ref):.2e}"
