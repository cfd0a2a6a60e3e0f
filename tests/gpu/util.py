"""Shared helpers of the GPU tests: strided operands, NaN-poisoned outputs, fp32 references."""

from __future__ import annotations

import functools

import torch


@functools.lru_cache(maxsize=None)
def shared_gemm(allow_emulated: bool = False):
    """One Gemm per setting for the whole session (loading every cubin once).
    ``allow_emulated`` also registers kernels whose MMA this GPU only emulates."""
    from gemm_runtime import Gemm

    # fp32 references must not silently use TF32.
    torch.backends.cuda.matmul.allow_tf32 = False
    return Gemm(allow_emulated=allow_emulated)


def experimental_gemm(tmp_path_factory, family: str, build, min_arch: int = 80):
    """A Gemm over an experimental family's kernels (no default ones), built for this GPU
    by ``build(work_dir, arch)`` into a temporary directory; skips without a GPU of
    ``min_arch`` or later."""
    import pytest

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    major, minor = torch.cuda.get_device_capability()
    if 10 * major + minor < min_arch:
        pytest.skip(f"the {family} kernels need sm_{min_arch} or later")
    from gemm_runtime import Gemm

    torch.backends.cuda.matmul.allow_tf32 = False
    return Gemm(build_dir=build(tmp_path_factory.mktemp(family), 10 * major + minor))


def registered_spec(gemm, name: str):
    """The spec of kernel ``name`` of ``gemm``; skips when the GPU did not load it."""
    import pytest

    if name not in {k.name for k in gemm.kernels}:
        pytest.skip(f"{name} does not fit this GPU's shared memory")
    return gemm.registry.get(name).spec


def strided(rows: int, cols: int, ld: int, dtype: torch.dtype, *, fill: str = "randn", gen=None) -> torch.Tensor:
    """A (rows, cols) row-major view with leading dimension ``ld`` over a larger buffer.
    Random values (never zeros); padding columns are NaN so a stray read shows up."""
    base = torch.full((max(rows, 1), ld), float("nan"), dtype=torch.float32, device="cuda")
    view = base[:rows, :cols]
    if fill == "randn":
        view.copy_(torch.randn(rows, cols, device="cuda", generator=gen) * 0.5)
    return base.to(dtype)[:rows, :cols]


def round_up(x: int, m: int) -> int:
    return (x + m - 1) // m * m


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    out = out.float()
    if torch.isnan(out).any():
        return float("nan")
    denom = ref.norm().item()
    return (out - ref).norm().item() / max(denom, 1e-30)


def check_quant_epilogues_and_split_k(gemm, name: str, rows: int) -> None:
    """A quantized kernel of ``gemm`` against the fp32 product with the dequantized
    weight (groups of 64, N past two CTA tiles, K four CTA tiles, ``rows`` rows of A):
    with a bias, split 3 ways, and with the gated SiLU epilogue."""
    import torch.nn.functional as F

    from gemm_runtime import Epilogue, Operation
    from gemm_runtime.packed_weight import pack_for_gemm
    from gemm_runtime.plan import LaunchSpec
    from gemm_runtime.quant import quantize
    from gemm_runtime.types import torch_dtype

    spec = gemm.registry.get(name).spec
    dt, out_dt = torch_dtype(spec.a_type), torch_dtype(spec.d_type)
    gen = torch.Generator(device="cuda").manual_seed(5)
    n, k = 2 * spec.cta[1] + 16, 4 * spec.cta[2]
    qw = quantize(torch.randn(n, k, device="cuda", generator=gen).to(dt) * 0.05, bits=spec.b_type.bits,
                  group_size=64)  # fmt: skip
    packed = pack_for_gemm(qw)
    a = torch.randn(rows, k, device="cuda", dtype=dt, generator=gen)
    bias = torch.randn(n, device="cuda", dtype=out_dt, generator=gen)
    v = a.float() @ qw.dequantize().float().t() + bias.float()
    # Poisoned: an element a split or the gated epilogue leaves unwritten reads NaN, not
    # whatever the caching allocator held (often an earlier, correct result).
    out = gemm.matmul(a, packed, bias=bias, kernel=LaunchSpec(name, 3, 1), out=_poisoned(rows, n, out_dt))
    assert rel_err(out, v) < 1e-2
    gated = gemm.matmul(a, packed, bias=bias, kernel=name, operation=Operation(epilogue=Epilogue.GATED_SILU),
                        out=_poisoned(rows, n // 2, out_dt))  # fmt: skip
    assert rel_err(gated, F.silu(v[:, 0::2]) * v[:, 1::2]) < 1e-2


def _poisoned(rows: int, cols: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.full((rows, cols), float("nan"), device="cuda", dtype=dtype)


_DECODE_TOLERANCE = {torch.float16: (1e-3, 2e-3), torch.bfloat16: (6e-3, 1e-2)}  # as test_quant_kernels.py


def check_plan(gemm, name, a, packed, ref, splits, failures, label) -> None:
    """The plan (name, splits) on ``a @ packed`` against ``ref``, its output NaN-poisoned
    first; a NaN or an error past test_quant_kernels.py's tolerance appends to
    ``failures``."""
    from gemm_runtime.plan import LaunchSpec
    from gemm_runtime.types import torch_dtype

    spec = gemm.registry.get(name).spec
    rel_tol, max_tol = _DECODE_TOLERANCE[torch_dtype(spec.a_type)]
    out = torch.full((a.shape[0], ref.shape[1]), float("nan"), device="cuda", dtype=torch_dtype(spec.d_type))
    gemm.matmul(a, packed, out=out, kernel=LaunchSpec(name, splits))
    if torch.isnan(out).any():
        failures.append(f"{label} splits={splits}: {int(torch.isnan(out).sum())} NaN")
        return
    diff = (out.float() - ref).abs()
    rel, worst = (diff.norm() / ref.norm()).item(), (diff.max() / ref.abs().max()).item()
    if not (rel < rel_tol and worst < max_tol):
        failures.append(f"{label} splits={splits}: rel {rel:.2e} max {worst:.2e}")


def check_decode_tile(gemm, name: str, group_size: int, rows: tuple[int, ...]) -> None:
    """A quantized decode kernel of an experimental family against the fp32 product with
    the dequantized weight: N and K with residues against its tile, symmetric and
    asymmetric weights, each of ``rows`` rows of A, every split count a slice of K
    allows up to 8."""
    from gemm_runtime.packed_weight import pack_for_gemm
    from gemm_runtime.quant import quantize
    from gemm_runtime.types import torch_dtype

    spec = registered_spec(gemm, name)
    dt = torch_dtype(spec.a_type)
    gen = torch.Generator(device="cuda").manual_seed(hash((name, group_size)) % 2**31)
    _, cn, ck = spec.cta
    failures: list[str] = []
    for n, k, symmetric in [(2 * cn + 8, 3 * ck + 32, False), (cn + 27, 3 * 128 + 72, True), (cn // 2 + 8, ck, False)]:
        w = torch.randn(n, k, device="cuda", generator=gen).to(dt) * 0.05
        qw = quantize(w, bits=spec.b_type.bits, group_size=group_size, symmetric=symmetric)
        packed, ref_w = pack_for_gemm(qw), qw.dequantize().float()
        k_tiles = -(-k // ck)
        for m in rows:
            a = torch.randn(m, k, device="cuda", dtype=dt, generator=gen)
            ref = a.float() @ ref_w.t()
            for splits in sorted({1, 2, min(3, k_tiles), min(8, k_tiles)}):
                check_plan(gemm, name, a, packed, ref, splits, failures, f"M={m} N={n} K={k} sym={symmetric}")
    assert not failures, f"{name} group {group_size}: " + "; ".join(failures)


def check_long_k_with_small_groups(gemm, name: str, rows: tuple[int, ...]) -> None:
    """K = 7392 (not a multiple of any K tile) with groups of 32, a group change every
    k32 step, for each of ``rows`` rows of A, unsplit and split 5 ways."""
    from gemm_runtime.packed_weight import pack_for_gemm
    from gemm_runtime.quant import quantize
    from gemm_runtime.types import torch_dtype

    spec = registered_spec(gemm, name)
    dt = torch_dtype(spec.a_type)
    gen = torch.Generator(device="cuda").manual_seed(11)
    n, k = spec.cta[1] + 40, 7392
    qw = quantize(torch.randn(n, k, device="cuda", generator=gen).to(dt) * 0.05, bits=spec.b_type.bits,
                  group_size=32)  # fmt: skip
    packed, ref_w = pack_for_gemm(qw), qw.dequantize().float()
    failures: list[str] = []
    for m in rows:
        a = torch.randn(m, k, device="cuda", dtype=dt, generator=gen)
        for splits in (1, 5):
            check_plan(gemm, name, a, packed, a.float() @ ref_w.t(), splits, failures, f"M={m} K={k}")
    assert not failures, f"{name}: " + "; ".join(failures)
