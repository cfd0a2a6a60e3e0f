"""Every dense kernel built for this GPU (emulated MMAs included) against an fp32
reference on random data.

Shapes have residues against every tile dimension; rows are padded (leading dimension
> extent) so K and N tails below the vector width are exercised on the fast kernels;
outputs are NaN-poisoned and their padding must stay untouched."""

from __future__ import annotations

import pytest
import torch

from codegen.vocabulary import BOrder
from gemm_runtime.plan import LaunchSpec
from gemm_runtime.types import torch_dtype
from tests.gpu.util import rel_err, round_up, shared_gemm, strided

pytestmark = pytest.mark.gpu

M_VALUES = [1, 7, 16, 33, 128, 257, 1000]
TOL = 1e-2


def _kernel_names():
    if not torch.cuda.is_available():
        return ["no-gpu"]
    # Quantized kernels take a packed weight: tests/gpu/test_quant_kernels.py covers them.
    # Grouped kernels (docs/MOE.md) serve grouped launches: tests/gpu/test_grouped_matmul.py.
    return [k.name for k in shared_gemm(allow_emulated=True).kernels if not k.spec.quantized and not k.spec.grouped]


def _shapes(spec):
    """(N, K) pairs with residues against the CTA tile and below the vector width."""
    cm, cn, ck = spec.cta
    ns = [2 * cn + spec.align, 3 * cn - 5 if cn > 8 else cn + 3]
    ks = [ck + 8, 3 * ck - 3, 5]
    return [(n, k) for n in ns for k in ks]


def _operands(spec, m, n, k, gen):
    dt = torch_dtype(spec.a_type)
    al = spec.align
    a = strided(m, k, round_up(k, al) + al, dt, gen=gen)
    if spec.b_order is BOrder.NK:
        w = strided(n, k, round_up(k, al), dt, gen=gen)
        b = w.t()
    else:
        b = strided(k, n, round_up(n, al), dt, gen=gen)
    return a, b


@pytest.mark.parametrize("m", M_VALUES)
@pytest.mark.parametrize("name", _kernel_names())
def test_kernel_matches_fp32_reference(gemm_all, name, m):
    gemm = gemm_all
    kernel = gemm.registry.get(name)
    spec = kernel.spec
    gen = torch.Generator(device="cuda").manual_seed(hash((name, m)) % 2**31)
    d_dtype = torch_dtype(spec.d_type)
    failures = []
    for n, k in _shapes(spec):
        a, b = _operands(spec, m, n, k, gen)
        ref = a.float() @ b.float()
        # Plain product into a NaN-poisoned output whose padding columns must survive.
        # NOTE: two row pitches: one of whole 16-byte chunks, where the mma.sync families
        # stage the plain epilogue through shared memory (epilogue_staged.cuh) when N is
        # also a multiple of 8, and an odd one, where they store directly.
        for ldd in (n + 3, round_up(n, 8) + 8):
            out = torch.full((m, ldd), float("nan"), dtype=d_dtype, device="cuda")
            gemm.matmul(a, b, out=out[:, :n], kernel=name)
            err = rel_err(out[:, :n], ref)
            if not err < TOL:
                failures.append(f"N={n} K={k} ldd={ldd}: rel err {err}")
            if not torch.isnan(out[:, n:].float()).all():
                failures.append(f"N={n} K={k} ldd={ldd}: wrote outside the output's columns")
    torch.cuda.synchronize()
    assert not failures, f"{name} M={m}: " + "; ".join(failures)


@pytest.mark.parametrize("name", _kernel_names())
def test_kernel_long_k_on_interior_ctas(gemm_all, name):
    """A CTA inside M and N over many whole K tiles: the case of a prefill GEMM, which
    the SM80 mainloop serves with its own copies and loop body (LeanCopies, the lean
    tiles' branch-free body) and the shapes above never reach (their K spans at most
    three tiles). Two tile rows and columns inside, one partial; K with 2 x stages + 5
    tiles, the last partial, so that a first split of two has K inside past its own
    share; unsplit and, where the kernel splits K, in two."""
    gemm = gemm_all
    spec = gemm.registry.get(name).spec
    cm, cn, ck = spec.cta
    m, n, k = 2 * cm + 5, 2 * cn + spec.align, (2 * spec.stages + 4) * ck + 8
    gen = torch.Generator(device="cuda").manual_seed(hash((name, "long-k")) % 2**31)
    a, b = _operands(spec, m, n, k, gen)
    ref = a.float() @ b.float()
    failures = []
    for splits in (1, 2) if spec.mainloop.max_splits(spec) != 1 else (1,):
        out = torch.full((m, n), float("nan"), dtype=torch_dtype(spec.d_type), device="cuda")
        gemm.matmul(a, b, out=out, kernel=LaunchSpec(name, splits))
        err = rel_err(out, ref)
        if not err < TOL:
            failures.append(f"splits={splits}: rel err {err}")
    torch.cuda.synchronize()
    assert not failures, f"{name} M={m} N={n} K={k}: " + "; ".join(failures)


@pytest.mark.parametrize("name", _kernel_names())
def test_kernel_alpha_beta_and_c_aliasing_d(gemm_all, name):
    gemm = gemm_all
    kernel = gemm.registry.get(name)
    spec = kernel.spec
    gen = torch.Generator(device="cuda").manual_seed(7)
    d_dtype = torch_dtype(spec.d_type)
    for m in (5, 33, 257):  # 5: the K-sliced tiles then sum only the rows that exist
        n, k = _shapes(spec)[1]
        a, b = _operands(spec, m, n, k, gen)
        c = (torch.randn(m, n, device="cuda", generator=gen) * 0.5).to(d_dtype)
        alpha, beta = 0.75, -1.25
        ref = alpha * (a.float() @ b.float()) + beta * c.float()
        # C separate from D.
        out = torch.full((m, n), float("nan"), dtype=d_dtype, device="cuda")
        gemm.matmul(a, b, out=out, alpha=alpha, beta=beta, c=c, kernel=name)
        assert rel_err(out, ref) < TOL, f"{name} M={m}: C != D"
        # C is D (in place accumulate).
        inplace = c.clone()
        gemm.matmul(a, b, out=inplace, alpha=alpha, beta=beta, c=inplace, kernel=name)
        assert rel_err(inplace, ref) < TOL, f"{name} M={m}: C aliasing D"
        # beta = 0 must not read C, even when C holds NaN.
        out2 = torch.full((m, n), float("nan"), dtype=d_dtype, device="cuda")
        gemm.matmul(a, b, out=out2, alpha=alpha, beta=0.0, c=torch.full_like(c, float("nan")), kernel=name)
        assert rel_err(out2, alpha * (a.float() @ b.float())) < TOL, f"{name} M={m}: beta=0 read C"


def test_emulated_kernels_are_absent_from_normal_dispatch(gemm, gemm_all):
    arch = gemm.registry.device.arch
    normal = {k.name for k in gemm.kernels}
    emulated = 0
    for k in gemm_all.kernels:
        lo, hi = k.spec.mma.native_archs
        if lo <= arch <= hi:
            assert k.name in normal
        else:
            emulated += 1
            assert k.name not in normal
            assert "emulated" in gemm.registry.filtered[k.name]
    assert any(k.spec.mainloop.value == "sm70" for k in gemm.kernels), "SM70-mainloop kernels must dispatch natively"
    if not emulated:  # else this test would pass without having looked at one
        pytest.skip("no emulated kernel in this build (make build WITH_EMULATED=1)")


def cases_for(names: list[str]):
    """The checks above as parameters for kernels outside the default set (an experimental
    family's, another arch's tiles): (check, kernel, the check's further arguments), each
    run by the caller on its own Gemm as ``check(gemm, name, *args)``."""
    for name in names:
        for m in M_VALUES:
            yield pytest.param(test_kernel_matches_fp32_reference, name, (m,), id=f"{name}-fp32-M{m}")
        yield pytest.param(test_kernel_long_k_on_interior_ctas, name, (), id=f"{name}-long-k")
        yield pytest.param(test_kernel_alpha_beta_and_c_aliasing_d, name, (), id=f"{name}-alpha-beta")
