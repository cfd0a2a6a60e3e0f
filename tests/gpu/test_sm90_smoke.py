"""GPU smoke test of the SM90 blocks (TMA + mbarrier ring + wgmma + setmaxnreg):
templates/include/gemm/sm90/smoke_gemm.cuh compiled with NVRTC for sm_90a at test time,
launched through cuda.bindings on torch's current stream, and compared with a
float64 reference. Compute capability 9.0 only (an sm_90a cubin runs nowhere else).

The output is NaN-poisoned and padded by rows and columns it must not touch, so a
missing store, a store out of bounds and a wrong fragment mapping all show up; on a
mismatch the message lists the first wrong elements and which 128 x 128 tiles and
64-row consumer halves hold errors.
"""

from __future__ import annotations

import pytest
import torch

from tests.sm90_smoke import BLOCK_M, BLOCK_N, SmokeKernel, launch

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("hopper")]

SHAPES = [(128, 128, 64), (256, 384, 1024), (200, 300, 1000), (1, 128, 4096)]
TORCH = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}
PAD = 8  # rows and columns of D beyond M and N that must stay NaN



def _diagnose(got: torch.Tensor, want: torch.Tensor, bad: torch.Tensor, limit: int = 12) -> str:
    idx = bad.nonzero()
    lines = [f"{idx.shape[0]} of {bad.numel()} elements wrong; first ones (row, col: got vs want):"]
    for r, c in idx[:limit].tolist():
        lines.append(f"  ({r}, {c}): {got[r, c].item():.5g} vs {want[r, c].item():.5g}")
    tiles = sorted({(r // BLOCK_M, c // BLOCK_N, (r % BLOCK_M) // 64) for r, c in idx[:4096].tolist()})
    lines.append(f"(tile row, tile col, consumer half) holding errors: {tiles[:16]}")
    rows = torch.unique(idx[:, 0] % 16)[:16].tolist()
    cols = torch.unique(idx[:, 1] % 8)[:8].tolist()
    lines.append(f"wrong rows mod 16: {rows}; wrong cols mod 8: {cols}")
    return "\n".join(lines)


# The 2-stage ring is checked with f32 output only.
@pytest.mark.parametrize("out, stages", [("f32", 4), ("f16", 4), ("bf16", 4), ("f32", 2)])
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_smoke_gemm_matches_reference(shape: tuple[int, int, int], dtype: str, out: str, stages: int) -> None:
    m, n, k = shape
    kernel = SmokeKernel(dtype, out, stages)
    gen = torch.Generator(device="cuda").manual_seed(m * 7919 + n * 31 + k)
    a = torch.randn(m, k, device="cuda", generator=gen).to(TORCH[dtype])
    b = torch.randn(n, k, device="cuda", generator=gen).to(TORCH[dtype])
    ldd = n + PAD
    d_full = torch.full((m + PAD, ldd), float("nan"), device="cuda", dtype=TORCH[out])

    launch(kernel, a, b, d_full, ldd)

    want = a.double() @ b.double().T
    got = d_full[:m, :n].double()
    assert torch.isnan(d_full[m:, :]).all() and torch.isnan(d_full[:m, n:]).all(), (
        f"{kernel.name} {shape}: wrote outside the {m} x {n} output"
    )
    nan = torch.isnan(got)
    assert not nan.any(), f"{kernel.name} {shape}: elements never written\n" + _diagnose(got, want, nan)
    scale = want.pow(2).mean().sqrt().item()
    bad = (got - want).abs() > 2e-2 * (want.abs() + scale)
    rel = ((got - want).norm() / want.norm()).item()
    assert rel < 1e-2 and not bad.any(), f"{kernel.name} {shape}: relative error {rel:.3g}\n" + _diagnose(
        got, want, bad
    )
