"""A seeded fuzz over everything ``Gemm.matmul`` accepts (tests/fuzz_cases.py), and a
stress test of one Gemm shared by threads on their own streams.

Each fuzz problem either matches the fp32 reference within 1e-2 (norm-wise) with the
output's padding untouched, or raises a GemmError other than a failed launch
(CudaError) or an empty build (NoKernelsError); anything else fails. Problems
that break a documented rule on purpose must raise GemmArgumentError. The refusal
count by reason is printed (``pytest -s``) and must stay under 5% of the valid ones."""

from __future__ import annotations

import collections
import threading

import pytest
import torch
import torch.nn.functional as F

from codegen.vocabulary import BOrder
from gemm_runtime import Epilogue, GemmArgumentError, GemmError, Operation
from gemm_runtime.errors import CudaError, NoKernelsError
from gemm_runtime.cost_model import split_options
from gemm_runtime.context import infeasible_reason
from gemm_runtime.packed_weight import pack_for_gemm
from gemm_runtime.plan import LaunchSpec
from gemm_runtime.quant import quantize
from gemm_runtime.types import torch_dtype
from tests.fuzz_cases import FuzzCase, make_cases, problem_key
from tests.gpu.util import rel_err

pytestmark = pytest.mark.gpu

CASES = 2000
TOL = 1e-2


def _buffer(rows: int, ld: int, offset: int, cols: int, dtype: torch.dtype, gen) -> tuple[torch.Tensor, torch.Tensor]:
    """(buffer, view): a (rows, cols) view with leading dimension ld, ``offset``
    elements into a NaN-filled buffer; the view holds random values (never zeros)."""
    flat = torch.full((offset + max(rows - 1, 0) * ld + cols + 8,), float("nan"), dtype=torch.float32, device="cuda")
    flat = flat.to(dtype)
    view = flat[offset:].as_strided((rows, cols), (ld, 1))
    view.copy_((torch.randn(rows, cols, device="cuda", generator=gen) * 0.5).to(dtype))
    return flat, view


def _reference(case: FuzzCase, a, b_ref, bias, c_ref) -> torch.Tensor:
    v = case.alpha * (a.float() @ b_ref)
    if bias is not None:
        v = v + bias.float()
    if case.epilogue.gated:
        v = F.silu(v[:, 0::2]) * v[:, 1::2]
    if c_ref is not None:
        v = v + case.beta * c_ref
    return v


def _forced_launch(gemm, case: FuzzCase) -> LaunchSpec | None:
    """A random feasible kernel of the registry with the case's splits (clipped to
    what that kernel can take) and swizzle."""
    if case.splits == 1:
        return None
    key = problem_key(case, gemm.registry.device.arch)
    kernels = [k for k in gemm.kernels if infeasible_reason(k.spec, key) is None]
    if not kernels:
        return None  # the unforced call will say why
    kern = kernels[case.index % len(kernels)]
    sizes = (gemm.kBarriersSize, gemm.kPartialsSize)
    options = split_options(kern.spec, key, case.splits, *sizes, resident=kern.resident)
    return LaunchSpec(kern.name, options[-1], case.swizzle)


def _run_case(gemm, case: FuzzCase) -> tuple[str, str]:
    """("ok" | "refused" | "wrong" | "crash", detail)."""
    gen = torch.Generator(device="cuda").manual_seed(case.index)
    dt, out_dt = torch_dtype(case.dtype), torch_dtype(case.out_dtype)
    m, n, k = case.m, case.n, case.k
    _, a = _buffer(m, case.lda, case.a_offset, k, dt, gen)
    if case.quant is None:
        if case.b_order is BOrder.NK:
            _, w = _buffer(n, case.ldb, case.b_offset, k, dt, gen)
            b = w.t()
        else:
            _, b = _buffer(k, case.ldb, case.b_offset, n, dt, gen)
        b_ref = b.float()
    else:
        bits, group, symmetric = case.quant
        weight = torch.randn(n, k, device="cuda", generator=gen).to(dt) * 0.05
        qw = quantize(weight, bits=bits, group_size=group, symmetric=symmetric)
        b = pack_for_gemm(qw)
        b_ref = qw.dequantize(torch.float32).t()
    n_out = case.n_out
    if case.invalid == "out_aliases_a":
        # A and D in one buffer, rows of both inside each row of it.
        out_dt, ld = dt, max(case.lda, case.ldd)
        flat, rows = _buffer(m, ld, 0, max(k, n_out), dt, gen)
        a, out = rows[:, :k], rows[:, :n_out]
    else:
        _, out = _buffer(m, case.ldd, case.d_offset, n_out, out_dt, gen)
        out.fill_(float("nan"))
    bias = torch.randn(n, device="cuda", generator=gen).to(out_dt) if case.epilogue.has_bias else None
    c = c_ref = None
    if case.c_mode == "separate":
        c = (torch.randn(m, n_out, device="cuda", generator=gen) * 0.5).to(out_dt)
    elif case.c_mode == "alias" and case.invalid is None:
        out.copy_((torch.randn(m, n_out, device="cuda", generator=gen) * 0.5).to(out_dt))
        c = out
    if c is not None:
        c_ref = c.float().clone()
    ref = _reference(case, a, b_ref, bias, c_ref) if case.invalid is None else None
    try:
        gemm.matmul(a, b, out=out, alpha=case.alpha, beta=case.beta, c=c, bias=bias,
                    operation=Operation(epilogue=case.epilogue), kernel=_forced_launch(gemm, case))  # fmt: skip
        torch.cuda.synchronize()
    except (CudaError, NoKernelsError) as e:  # GemmErrors too, but a failed launch is no refusal
        return "crash", f"{type(e).__name__}: {e}"
    except GemmError as e:
        if case.invalid is not None and not isinstance(e, GemmArgumentError):
            return "wrong", f"{case.invalid} raised {type(e).__name__}, not GemmArgumentError: {e}"
        reason = case.invalid or f"{type(e).__name__}: {getattr(e, 'argument', '')} {str(e)[:80]}"
        return "refused", reason
    except Exception as e:  # noqa: BLE001 - anything but a GemmError is the defect sought
        return "crash", f"{type(e).__name__}: {e}"
    if case.invalid is not None:
        return "wrong", f"{case.invalid} was accepted"
    err = rel_err(out, ref)
    if not err < TOL:
        return "wrong", f"rel err {err:.3g}"
    padding = out.as_strided((m, case.ldd), out.stride())[:, n_out:] if case.d_pad and m > 1 else None
    if padding is not None and not torch.isnan(padding[:-1].float()).all():
        return "wrong", "wrote into the output's padding"
    return "ok", ""


def test_fuzz_matches_reference_or_refuses_clearly(gemm):
    cases = make_cases(CASES)
    outcomes: dict[str, list[str]] = collections.defaultdict(list)
    refusals: collections.Counter[str] = collections.Counter()
    for case in cases:
        status, detail = _run_case(gemm, case)
        if status == "refused":
            refusals[detail] += 1
        elif status != "ok":
            outcomes[status].append(f"{case.describe()}: {detail}")
        outcomes["ran"].append("")
    valid = sum(c.invalid is None for c in cases)
    undocumented = sum(n for reason, n in refusals.items() if reason not in ("gated_odd_n", "out_aliases_a"))
    lines = [f"FUZZ {len(cases)} problems ({valid} valid): {len(outcomes['wrong'])} wrong, "
             f"{len(outcomes['crash'])} non-GemmError exceptions, {sum(refusals.values())} refused "
             f"({undocumented} of the valid ones, {100 * undocumented / max(valid, 1):.2f}%)"]  # fmt: skip
    lines += [f"  refused {n:5d} x {reason}" for reason, n in refusals.most_common()]
    print("\n".join(lines))
    bad = outcomes["wrong"] + outcomes["crash"]
    assert not bad, "\n".join(lines + bad[:20])
    assert undocumented < 0.05 * valid, "\n".join(lines)


# ---- threads ------------------------------------------------------------------------
def _stress_problems(gen):
    """(a, b, kwargs) over dense (both orders, split-K-sized) and packed weights."""
    problems = []
    for dt in (torch.float16, torch.bfloat16):
        w = torch.randn(1536, 2048, device="cuda", generator=gen).to(dt) * 0.05
        problems.append((torch.randn(3, 2048, device="cuda", generator=gen).to(dt), w.t(), {}))
        problems.append((torch.randn(200, 2048, device="cuda", generator=gen).to(dt), w.t().contiguous(),
                         {"bias": torch.randn(1536, device="cuda", generator=gen).to(dt)}))  # fmt: skip
        packed = pack_for_gemm(quantize(w, bits=4, group_size=128))
        problems.append((torch.randn(5, 2048, device="cuda", generator=gen).to(dt), packed, {}))
        packed8 = pack_for_gemm(quantize(w, bits=8, group_size=64))
        problems.append((torch.randn(70, 2048, device="cuda", generator=gen).to(dt), packed8,
                         {"operation": Operation(epilogue=Epilogue.GATED_SILU)}))  # fmt: skip
    return problems


def test_threads_on_their_own_streams_match_a_single_thread(gemm):
    from gemm_runtime import Gemm

    gen = torch.Generator(device="cuda").manual_seed(11)
    problems = _stress_problems(gen)
    # Fresh instances: the session's Gemm holds tuned entries of other tests, and the
    # threads' first dispatches must race on an empty memo.
    single = Gemm()
    expected = [single.matmul(a, b, **kw) for a, b, kw in problems]
    torch.cuda.synchronize()
    shared = Gemm()
    threads, calls = 8, 500
    errors: list[str] = []

    def worker(t: int) -> None:
        stream = torch.cuda.Stream()
        try:
            with torch.cuda.stream(stream):
                for i in range(calls):
                    j = (t + i) % len(problems)
                    a, b, kw = problems[j]
                    out = shared.matmul(a, b, **kw)
                    if not torch.equal(out, expected[j]):
                        errors.append(f"thread {t} call {i} problem {j}: differs from the single-threaded result")
                        return
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(f"thread {t}: {type(e).__name__}: {e}")

    pool = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    for th in pool:
        th.start()
    for th in pool:
        th.join()
    torch.cuda.synchronize()
    assert not errors, "\n".join(errors[:10])
