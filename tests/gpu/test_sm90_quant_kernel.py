"""GPU test of the SM90 quantized kernel (templates/include/gemm/sm90/kernel_sm90_quant.cuh,
launched directly: tests/sm90_quant_kernel.py) against the fp32 product with the
dequantized weight, with the common epilogue: bias, gated SiLU, beta * C with C aliasing
D, 16-bit and fp32 outputs. D is NaN-poisoned and padded by rows and columns it must not
touch. Shapes have residues against the CTA's tokens and weight rows, against 8 (n8
tiles) and against the 64-wide K tile and 32 (the packed K blocks); groups of 32 (two
per K tile), 128 (across K tiles) and one over all of K. Compute capability 9.0."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from gemm_runtime.packed_weight import pack_for_gemm
from gemm_runtime.quant import quantize
from tests import sm90_quant_kernel
from tests.sm90_quant_kernel import QuantKernel, launch

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("hopper")]

TORCH = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}
TOLERANCE = {"f16": (1e-3, 2e-3), "bf16": (6e-3, 1e-2)}  # as tests/gpu/test_quant_kernels.py
PAD = 8
SHAPES = [(64, 128, 64), (1, 128, 4096), (65, 261, 1000), (130, 392, 328), (7, 4096, 7392), (300, 200, 520)]
# (tokens, weight rows, stages, form): the register-A tiles of the YAML and more (the
# decode widths of 8, 16 and 32 tokens among them; three and four consumer warpgroups:
# 128x192, 64x256; "b2": two m64 blocks of weight rows per consumer warpgroup, half the
# warps; "ks": two consumer warpgroups per 64 weight rows taking the K tiles in turn,
# warps [1, 4, 2]; "kp": the same with a pair of K tiles a ring stage, cta K 128; "kw": a
# pair of K tiles a stage for one warpgroup per 64 rows taking both), and the shared-B
# form's ("smem",
# codegen/families/sm90_quant.py: experimental), with three and two buffers of
# dequantized weights.
TILES = [(64, 128, 8, ""), (128, 128, 6, ""), (256, 128, 4, ""), (64, 64, 8, ""), (128, 64, 4, ""),
         (8, 64, 8, ""), (8, 128, 8, ""), (16, 64, 8, ""), (16, 128, 8, ""), (32, 128, 8, ""),
         (128, 192, 6, ""), (64, 256, 8, ""), (64, 256, 8, "b2"), (64, 128, 8, "b2"), (32, 256, 8, "b2"),
         (64, 64, 8, "ks"), (128, 64, 6, "ks"), (32, 64, 8, "ks"), (64, 128, 8, "ks"), (32, 128, 8, "ks"),
         (64, 64, 8, "kp"), (128, 64, 4, "kp"), (32, 64, 8, "kp"), (64, 128, 6, "kp"), (32, 128, 8, "kp"),
         (64, 128, 4, "kw"), (128, 128, 4, "kw"), (128, 128, 3, "kw"), (64, 256, 4, "kw"), (128, 192, 3, "kw"),
         (64, 64, 4, "kw"), (32, 128, 4, "kw"),
         (64, 256, 6, "smem"), (128, 256, 4, "smem"), (64, 128, 4, "smem")]  # fmt: skip


def _tile_id(tile) -> str:
    return f"{tile[0]}x{tile[1]}_s{tile[2]}" + (f"_{tile[3]}" if tile[3] else "")


def _kernel(dtype: str, bits: int, out: str, tile) -> QuantKernel:
    return QuantKernel(dtype, bits, out, *tile[:3], smem=tile[3] == "smem", blocks=2 if tile[3] == "b2" else 1,
                       k_split=2 if tile[3] in ("ks", "kp") else 1, cta_k=128 if tile[3] in ("kp", "kw") else 64)


def _check(got: torch.Tensor, ref: torch.Tensor, full: torch.Tensor, m: int, n: int, dtype: str) -> str | None:
    if not torch.isnan(full[m:]).all() or not torch.isnan(full[:, n:]).all():
        return "wrote outside D"
    if torch.isnan(got).any():
        bad = torch.isnan(got).nonzero()
        return f"{bad.shape[0]} NaN, first {bad[:4].tolist()}"
    diff = (got - ref).abs()
    rel, worst = (diff.norm() / ref.norm()).item(), (diff.max() / ref.abs().max()).item()
    rel_tol, max_tol = TOLERANCE[dtype]
    if rel < rel_tol and worst < max_tol:
        return None
    r, c = divmod(int(diff.argmax()), got.shape[1])
    return f"rel {rel:.2e} max {worst:.2e} at ({r}, {c}): {got[r, c].item():.5g} vs {ref[r, c].item():.5g}"


def _matches_reference(dtype: str, bits: int, out: str, group_size: int, symmetric: bool, tile) -> None:
    out = dtype if out == "same" else out
    kernel = _kernel(dtype, bits, out, tile)
    gen = torch.Generator(device="cuda").manual_seed(bits * 1009 + group_size + 7 * symmetric + tile[0] + tile[1])
    failures = []
    for m, n, k in SHAPES:
        w = torch.randn(n, k, device="cuda", generator=gen).to(TORCH[dtype]) * 0.05
        qw = quantize(w, bits=bits, group_size=group_size, symmetric=symmetric)
        x = torch.randn(m, k, device="cuda", generator=gen).to(TORCH[dtype])
        full = torch.full((m + PAD, n + PAD), float("nan"), device="cuda", dtype=TORCH[out])
        launch(kernel, x, pack_for_gemm(qw), full)
        error = _check(full[:m, :n].float(), x.float() @ qw.dequantize().float().t(), full, m, n, dtype)
        if error:
            failures.append(f"M={m} N={n} K={k}: {error}")
    assert not failures, f"{kernel.name} group {group_size} symmetric={symmetric}: " + "; ".join(failures)


@pytest.mark.parametrize("tile", TILES, ids=_tile_id)
@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize("group_size", [32, 128, -1])
@pytest.mark.parametrize("out", ["same", "f32"])
@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_quant_kernel_matches_dequantized_reference(dtype, bits, out, group_size, symmetric, tile) -> None:
    _matches_reference(dtype, bits, out, group_size, symmetric, tile)


@pytest.mark.parametrize("tile", [t for t in TILES if t[3] in ("kp", "kw")], ids=_tile_id)
@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_pair_stage_halves_take_their_own_groups(dtype, bits, symmetric, tile) -> None:
    """Groups of 64 on the pair tiles: a stage's two halves each have their own group
    (Sm90QuantConfig::v_rows 2), the second half's lane offsets (the second warpgroup's,
    or with one warpgroup taking both its second set) starting at it; K = 1000 and 7392
    end inside a stage's second half."""
    _matches_reference(dtype, bits, "same", 64, symmetric, tile)


@pytest.mark.parametrize("tile", TILES, ids=_tile_id)
@pytest.mark.parametrize("case", ["bias", "gated", "beta_c_aliasing_d", "all"])
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_quant_kernel_epilogues(dtype, case, tile) -> None:
    """The common epilogue through the transposed fragment: bias per column of D (a
    weight row), gated SiLU over adjacent (gate, up) columns, which lie in neighbouring
    lanes' fragments, and beta * C read from D itself."""
    kernel = _kernel(dtype, 4, dtype, tile)
    gen = torch.Generator(device="cuda").manual_seed(hash((dtype, case, tile)) % 2**31)
    failures = []
    for m, n, k in [(65, 262, 1000), (130, 392, 328), (3, 128, 4096)]:
        w = torch.randn(n, k, device="cuda", generator=gen).to(TORCH[dtype]) * 0.05
        qw = quantize(w, bits=4, group_size=128)
        x = torch.randn(m, k, device="cuda", generator=gen).to(TORCH[dtype])
        alpha = 0.5 if case == "all" else 1.0
        v = alpha * (x.float() @ qw.dequantize().float().t())
        bias = torch.randn(n, device="cuda", generator=gen).to(TORCH[dtype]) if case in ("bias", "all") else None
        if bias is not None:
            v = v + bias.float()
        gated = case in ("gated", "all")
        cols = n // 2 if gated else n
        if gated:
            v = F.silu(v[:, 0::2]) * v[:, 1::2]
        full = torch.full((m + PAD, cols + PAD), float("nan"), device="cuda", dtype=TORCH[dtype])
        beta = 0.0
        if case in ("beta_c_aliasing_d", "all"):
            full[:m, :cols] = torch.randn(m, cols, device="cuda", generator=gen).to(TORCH[dtype])
            beta = 0.5
            v = v + beta * full[:m, :cols].float()
        launch(kernel, x, pack_for_gemm(qw), full, alpha=alpha, beta=beta, c=full if beta else None, bias=bias,
               epilogue=(1 if bias is not None else 0) | (2 if gated else 0))  # fmt: skip
        error = _check(full[:m, :cols].float(), v, full, m, cols, dtype)
        if error:
            failures.append(f"M={m} N={n} K={k}: {error}")
    assert not failures, f"{kernel.name} {case}: " + "; ".join(failures)


@pytest.mark.parametrize("tile", [t for t in TILES if t[3] != "smem"], ids=_tile_id)
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_plain_rows_of_d_four_columns_at_a_time(dtype, tile) -> None:
    """The plain 16-bit epilogue of the register-A form (store_plain_rows: alpha and the
    bias, four columns per 8-byte store) where D's rows start on 4 elements: N = 261-264
    leave a last quad of 1, 2, 3 and 4 columns, written element by element; the columns
    past N stay NaN."""
    kernel = _kernel(dtype, 4, dtype, tile)
    gen = torch.Generator(device="cuda").manual_seed(hash((dtype, tile, "plain")) % 2**31)
    failures = []
    for m, n, k in [(65, 261, 328), (130, 262, 1000), (7, 263, 520), (300, 264, 328)]:
        w = torch.randn(n, k, device="cuda", generator=gen).to(TORCH[dtype]) * 0.05
        qw = quantize(w, bits=4, group_size=128)
        x = torch.randn(m, k, device="cuda", generator=gen).to(TORCH[dtype])
        bias = torch.randn(n, device="cuda", generator=gen).to(TORCH[dtype])
        ref = 0.5 * (x.float() @ qw.dequantize().float().t()) + bias.float()
        full = torch.full((m + PAD, 264 + PAD), float("nan"), device="cuda", dtype=TORCH[dtype])
        launch(kernel, x, pack_for_gemm(qw), full[:, :n], alpha=0.5, bias=bias, epilogue=1)
        error = _check(full[:m, :n].float(), ref, full, m, n, dtype)
        if error:
            failures.append(f"M={m} N={n} K={k}: {error}")
    assert not failures, f"{kernel.name}: " + "; ".join(failures)


@pytest.mark.parametrize("tile", TILES, ids=_tile_id)
@pytest.mark.parametrize("splits, resident", [(2, 132), (3, 132), (7, 132), (2, 5), (5, 3), (4, 1), (1, 5), (1, 3),
                                              (1, 1)])  # fmt: skip
@pytest.mark.parametrize("bits", [4, 8])
def test_quant_kernel_stream_k(bits, splits, resident, tile) -> None:
    """Stream-K (stream_k.cuh): shares of all tiles' K tiles on min(resident, tiles x
    splits) CTAs, tiles cut inside a group of 128 and handed over through the workspace.
    With 132 CTAs a tile is cut between two to seven of them, and with 7 splits of K =
    328 (6 K tiles) some CTAs' shares are empty; with 5, 3 and 1 CTAs each runs many
    tiles in turn through one ring (and one CTA hands nothing over). Unsplit (splits 1)
    on 5, 3 and 1 CTAs: the persistent walk, each CTA's next tile filling the stages
    below the staging while its epilogue stores. fp32 output and a 16-bit one with
    beta * C aliasing D. The flags must be back at zero after each launch, or the next
    one's hand-over would not wait. The K = 4096 problem's weights are per channel (one
    group over all of K: the V rows of every K tile are the same)."""
    kernel16, kernel32 = _kernel("bf16", bits, "bf16", tile), _kernel("bf16", bits, "f32", tile)
    gen = torch.Generator(device="cuda").manual_seed(bits * 31 + splits * 7 + resident + tile[0] + tile[1])
    failures = []
    for m, n, k in [(65, 261, 1000), (300, 392, 328), (3, 520, 4096)]:
        w = torch.randn(n, k, device="cuda", generator=gen).to(torch.bfloat16) * 0.05
        qw = quantize(w, bits=bits, group_size=-1 if k == 4096 else 128)
        x = torch.randn(m, k, device="cuda", generator=gen).to(torch.bfloat16)
        ref = x.float() @ qw.dequantize().float().t()
        full = torch.full((m + PAD, n + PAD), float("nan"), device="cuda", dtype=torch.float32)
        launch(kernel32, x, pack_for_gemm(qw), full, splits=splits, resident=resident)
        error = _check(full[:m, :n], ref, full, m, n, "bf16")
        full16 = torch.full((m + PAD, n + PAD), float("nan"), device="cuda", dtype=torch.bfloat16)
        full16[:m, :n] = torch.randn(m, n, device="cuda", generator=gen).to(torch.bfloat16)
        ref16 = ref + 0.5 * full16[:m, :n].float()
        launch(kernel16, x, pack_for_gemm(qw), full16, beta=0.5, c=full16, splits=splits, resident=resident)
        error = error or _check(full16[:m, :n].float(), ref16, full16, m, n, "bf16")
        if error:
            failures.append(f"M={m} N={n} K={k}: {error}")
    semaphores, _ = sm90_quant_kernel._workspace_tensors(torch.cuda.current_device())
    assert not failures, f"{kernel16.name} splits {splits} on {resident} CTAs: " + "; ".join(failures)
    assert not semaphores.any(), "stream-K left flags raised"
