"""Every grouped kernel of the build (docs/MOE.md), forced through Gemm.grouped_matmul,
against experts.grouped_reference: sorted and gathered A (the sm80 kernels read it
through the index, the sm90 launches sort it first), uneven row groups (empty experts,
one row, one expert with every row, rows past the last expert that must stay
untouched, more experts than one round of the expert scan takes), split K (the sm80 kernels), residues against the tile on N and K, fp16 and
bf16, dense and quantized experts (4 and 8 bits, grouped and per-channel scales,
asymmetric and symmetric: against their dequantized weights), row scales, per-expert
bias, gated SiLU and beta * C, outputs poisoned with NaN before each launch."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from gemm_runtime.experts import check_routing, grouped_reference, pack_experts
from gemm_runtime.plan import LaunchSpec
from gemm_runtime.quant import quantize
from gemm_runtime.types import torch_dtype
from tests.gpu.util import shared_gemm

pytestmark = pytest.mark.gpu
TOL = 1e-2


def _kernel_names():
    if not torch.cuda.is_available():
        return ["no-gpu"]
    return [k.name for k in shared_gemm().kernels if k.spec.grouped]


def _seventy_experts() -> tuple[int, ...]:
    """70 experts, 20 of them empty, most rows on expert 66 (in the scan's third
    round), 261 rows in all: the rows past the last expert must stay untouched."""
    rows = [(0, 3, 1, 0, 7, 2, 0, 5, 1, 4)[e % 10] for e in range(70)]
    rows[66] = 100
    starts = [0]
    for r in rows:
        starts.append(starts[-1] + r)
    return tuple(starts)


# Row starts of each expert, then the end; the last of the grouped rows (`ROWS`) may lie
# past it. Gathered launches read their rows from `TOKENS` rows of A through an index.
ROWS, TOKENS = 300, 173
ROUTINGS = {
    "uneven-with-empty-experts": (0, 37, 37, 200, 201, 260, 300),
    "one-row": (0, 0, 1, 1),
    "one-expert-holds-all": (0, 300, 300),
    "rows-past-the-last-expert": (0, 129, 250),
    # 128 rows: the most a 256-token tile runs at half its wgmma width (kernel_sm90_quant.cuh)
    "half-a-token-tile": (0, 128, 300),
    # Three one-row experts and 297 rows: as many tile rows as the launch's bound
    # (cost_model.tiles_of) allows at every CTA M from 16 to 256, so the grid's last
    # tile row holds work.
    "as-many-tile-rows-as-the-bound": (0, 1, 2, 3, 300),
    # Three rounds of the expert scan (32 experts a round, gemm/grouped.cuh).
    "70-experts": _seventy_experts(),
}




def _rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.float() - ref).norm() / ref.norm().clamp_min(1e-6)).item()


def _launch(gemm, name: str | LaunchSpec, x, w, routing, out, **epilogue) -> None:
    gemm.grouped_matmul(x, w, routing.offsets, index=routing.index, row_scale=routing.row_scale, out=out, kernel=name,
                        **epilogue)  # fmt: skip
    torch.cuda.synchronize()  # surfaces a fault here, with the buffers alive


def _problem(spec, starts: tuple[int, ...], gen: torch.Generator, past: int = 16, group_size: int = 32,
             symmetric: bool = False, k: int | None = None):  # fmt: skip
    """(A, the weights the kernel takes, the weights the reference takes, offsets, N).
    N is ``past`` beyond two tiles: 16 keeps the gated output's N / 2 columns whole
    16-byte rows (the sm90 kernels store whole boxes through TMA), 12 leaves D's rows
    a partial chunk (they store directly). K is ``k``, or three K tiles less 8. A
    quantized kernel's experts are quantized with ``group_size`` (-1: one group over K)
    and packed; the reference takes them dequantized."""
    cm, cn, ck = spec.cta
    experts, n, k = len(starts) - 1, 2 * cn + past, k if k is not None else 3 * ck - 8
    dt = torch_dtype(spec.a_type)
    a = torch.randn(ROWS, k, device="cuda", dtype=dt, generator=gen)
    w = torch.randn(experts, n, k, device="cuda", dtype=dt, generator=gen) / k**0.5
    offsets = torch.tensor(starts, dtype=torch.int32, device="cuda")
    if not spec.quantized:
        return a, w, w, offsets, n
    packed = pack_experts([quantize(we, bits=spec.b_type.bits, group_size=group_size, symmetric=symmetric) for we in w])
    return a, packed, packed.dequantize(torch.float32), offsets, n


@pytest.mark.parametrize("routing_name", list(ROUTINGS))
@pytest.mark.parametrize("name", _kernel_names())
def test_grouped_kernel_matches_the_reference(gemm, name: str, routing_name: str) -> None:
    spec = gemm.registry.get(name).spec
    starts = ROUTINGS[routing_name]
    gen = torch.Generator(device="cuda").manual_seed(hash((name, routing_name)) % 2**31)
    a, w, w_ref, offsets, n = _problem(spec, starts, gen, past=12 if routing_name == "uneven-with-empty-experts" else 16)
    tokens = torch.randn(TOKENS, a.shape[1], device="cuda", dtype=a.dtype, generator=gen)
    index = torch.randint(0, TOKENS, (ROWS,), device="cuda", dtype=torch.int32, generator=gen)
    failures = []
    # The families that split K (sm80) also in 3 slices, twice: the workspace's
    # semaphores must be back at zero after each launch, the skipped tiles' included.
    # NOTE: 70 experts bound the tile rows at about 70, so 3 splits of a 256-row or
    # 256-column tile need more partials than the default workspace holds (a refusal,
    # measured on the H200); 2 fit.
    splits = (2 if routing_name == "70-experts" else 3) if spec.mainloop.max_splits(spec) is None else 1
    cases = [(False, False, 1), (True, False, 1), (True, True, 1)] + [(True, True, splits)] * 2 * (splits > 1)
    for scaled, gathered, split in cases:
        scale = torch.rand(ROWS, device="cuda", generator=gen) + 0.5 if scaled else None
        x = tokens if gathered else a
        routing = check_routing(offsets, experts=len(starts) - 1, rows=ROWS, device=a.device, row_scale=scale,
                                tokens=TOKENS if gathered else None, index=index if gathered else None,
                                check_values=True)  # fmt: skip
        ref = grouped_reference(x, w_ref, routing)
        # Padding columns, and the rows past the last expert, must stay NaN.
        out = torch.full((ROWS, (n + 7) // 8 * 8 + 8), float("nan"), device="cuda", dtype=a.dtype)
        _launch(gemm, LaunchSpec(name, split), x, w, routing, out[:, :n])
        done = starts[-1]
        err = _rel_err(out[:done, :n], ref[:done])
        if not err < TOL:
            failures.append(f"scaled={scaled} gathered={gathered} splits={split}: rel err {err}")
        if not torch.isnan(out[:, n:].float()).all() or not torch.isnan(out[done:].float()).all():
            failures.append(f"scaled={scaled} gathered={gathered} splits={split}: wrote outside the experts' rows or "
                            "columns")  # fmt: skip
    assert not failures, "; ".join(failures)


@pytest.mark.parametrize("name", _kernel_names())
def test_grouped_kernel_over_many_k_tiles(gemm, name: str) -> None:
    """K of 2 x stages + 4 whole tiles and a partial one, so that each tile's K loop
    wraps its ring of stages and an expert's inner tiles run the SM80 mainloop's lean
    copies (the shapes above span at most three K tiles), and a first split of two has
    K inside past its own share; sorted and gathered A, unsplit and, where the kernel
    splits K, in two."""
    spec = gemm.registry.get(name).spec
    starts = ROUTINGS["uneven-with-empty-experts"]
    gen = torch.Generator(device="cuda").manual_seed(hash((name, "many-k-tiles")) % 2**31)
    k = (2 * spec.stages + 4) * spec.cta[2] + 8
    a, w, w_ref, offsets, n = _problem(spec, starts, gen, k=k)
    tokens = torch.randn(TOKENS, k, device="cuda", dtype=a.dtype, generator=gen)
    index = torch.randint(0, TOKENS, (ROWS,), device="cuda", dtype=torch.int32, generator=gen)
    failures = []
    for gathered in (False, True):
        for split in (1, 2) if spec.mainloop.max_splits(spec) is None else (1,):
            x = tokens if gathered else a
            routing = check_routing(offsets, experts=len(starts) - 1, rows=ROWS, device=a.device,
                                    tokens=TOKENS if gathered else None, index=index if gathered else None,
                                    check_values=True)  # fmt: skip
            ref = grouped_reference(x, w_ref, routing)
            out = torch.full((ROWS, n), float("nan"), device="cuda", dtype=a.dtype)
            _launch(gemm, LaunchSpec(name, split), x, w, routing, out)
            err = _rel_err(out[:starts[-1]], ref[:starts[-1]])
            if not err < TOL:
                failures.append(f"K={k} gathered={gathered} splits={split}: rel err {err}")
    assert not failures, "; ".join(failures)


@pytest.mark.parametrize("name", [n for n in _kernel_names() if n == "no-gpu" or "_sm90_quant_" in n])
@pytest.mark.parametrize("sms", [1, 2])
def test_persistent_quantized_ctas_walk_many_tiles(gemm, name: str, sms: int, monkeypatch) -> None:
    """The sm90_quant grouped kernels on one or two SMs' worth of CTAs: each CTA walks
    tiles of several experts in turn, the next tile's copies landing while the previous
    tile's epilogue stores (kernel_sm90_quant.cuh), gathered and row-scaled, with every
    epilogue's extra (bias, beta * C, gated SiLU)."""
    kernel = gemm.registry.get(name)
    monkeypatch.setitem(gemm.dispatcher._by_name, name, dataclasses.replace(kernel, sms=sms))
    spec = kernel.spec
    starts = ROUTINGS["uneven-with-empty-experts"]
    gen = torch.Generator(device="cuda").manual_seed(hash((name, sms)) % 2**31)
    a, w, w_ref, offsets, n = _problem(spec, starts, gen, group_size=128)
    experts = len(starts) - 1
    tokens = torch.randn(TOKENS, a.shape[1], device="cuda", dtype=a.dtype, generator=gen)
    index = torch.randint(0, TOKENS, (ROWS,), device="cuda", dtype=torch.int32, generator=gen)
    scale = torch.rand(ROWS, device="cuda", generator=gen) + 0.5
    routing = check_routing(offsets, experts=experts, rows=ROWS, device=a.device, row_scale=scale, tokens=TOKENS,
                            index=index, check_values=True)  # fmt: skip
    bias = torch.randn(experts, n, device="cuda", dtype=a.dtype, generator=gen)
    failures = []
    for gated in (False, True):
        _, _, err = _epilogue_case(gemm, name, tokens, w, w_ref, routing, bias, n, gated, gen)
        if not err < TOL:
            failures.append(f"gated={gated}: rel err {err}")
    assert not failures, "; ".join(failures)


def _epilogue_case(gemm, name: str, x, w, w_ref, routing, bias, n: int, gated: bool, gen: torch.Generator):
    """One launch with alpha, beta * C (a fresh C), the bias and optionally the gated
    SiLU, into a NaN-poisoned D: (C, the reference, the relative error)."""
    cols = n // 2 if gated else n
    c = torch.randn(ROWS, cols, device="cuda", dtype=x.dtype, generator=gen)
    ref = grouped_reference(x, w_ref, routing, bias=bias, alpha=0.75, beta=0.5, c=c, gated=gated)
    out = torch.full((ROWS, cols), float("nan"), device="cuda", dtype=x.dtype)
    _launch(gemm, name, x, w, routing, out, alpha=0.75, beta=0.5, c=c, bias=bias, gated=gated)
    return c, ref, _rel_err(out, ref)


@pytest.mark.parametrize("name", _kernel_names())
def test_grouped_epilogues(gemm, name: str) -> None:
    """Per-expert bias, the gated SiLU over (gate, up) pairs and beta * C, with row scales
    (quantized experts: one symmetric group over K)."""
    spec = gemm.registry.get(name).spec
    starts = ROUTINGS["uneven-with-empty-experts"]
    gen = torch.Generator(device="cuda").manual_seed(hash(name) % 2**31)
    a, w, w_ref, offsets, n = _problem(spec, starts, gen, group_size=-1, symmetric=True)
    experts = len(starts) - 1
    scale = torch.rand(ROWS, device="cuda", generator=gen) + 0.5
    routing = check_routing(offsets, experts=experts, rows=ROWS, device=a.device, row_scale=scale, check_values=True)
    bias = torch.randn(experts, n, device="cuda", dtype=a.dtype, generator=gen)
    failures = []
    for gated in (False, True):
        c, ref, err = _epilogue_case(gemm, name, a, w, w_ref, routing, bias, n, gated, gen)
        if not err < TOL:
            failures.append(f"gated={gated}: rel err {err}")
        # C aliasing D: every element read and written by the same thread.
        d = c.clone()
        _launch(gemm, name, a, w, routing, d, alpha=0.75, beta=0.5, c=d, bias=bias, gated=gated)
        err = _rel_err(d, ref)
        if not err < TOL:
            failures.append(f"gated={gated}, C aliasing D: rel err {err}")
    assert not failures, "; ".join(failures)
