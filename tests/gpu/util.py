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
