"""Split-K and CTA swizzle against the unsplit result, and the workspace
contract (semaphores zero again after every call)."""

from __future__ import annotations

import pytest
import torch

from gemm_runtime import Workspace
from gemm_runtime.plan import LaunchSpec
from tests.gpu.util import rel_err

pytestmark = pytest.mark.gpu


def _pick(gemm, **want):
    """The first kernel of the build with ``want`` that takes split-K (the narrow decode
    tiles and the grouped kernels of some families take none)."""
    for k in gemm.kernels:
        s = k.spec
        if s.grouped or s.mainloop.max_splits(s) == 1:
            continue
        if all(getattr(s, f).value == v if hasattr(getattr(s, f), "value") else getattr(s, f) == v
               for f, v in want.items()):
            return k
    pytest.skip(f"no kernel with {want}")


FAMILIES = [
    dict(mainloop="sm80", d_type="f32", b_order="nk", align=8),
    dict(mainloop="sm80", d_type="f32", b_order="kn", align=8),
    dict(mainloop="sm70", mma="m16n8k8", d_type="f32", b_order="nk", align=8),
    dict(mainloop="sm80", d_type="bf16", b_order="nk", align=8),
    dict(mainloop="sm80", d_type="f16", b_order="nk", align=2),
    dict(mainloop="sm90", d_type="f32", b_order="nk", align=8),
    dict(mainloop="sm90", d_type="f32", b_order="kn", align=8),
]


@pytest.mark.parametrize("want", FAMILIES, ids=lambda w: "-".join(str(v) for v in w.values()))
@pytest.mark.parametrize("splits", [2, 3, 5])
@pytest.mark.parametrize("swizzle", [0, 2])
def test_split_k_matches_unsplit(gemm, want, splits, swizzle):
    kern = _pick(gemm, **want)
    spec = kern.spec
    dt = torch.bfloat16 if spec.a_type.value == "bf16" else torch.float16
    od = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[spec.d_type.value]
    # 8 K tiles over 5 splits leaves the last split without a tile: it must still take its turn.
    # N and K keep the rows aligned to the kernel's vector width, with residues on both.
    m, n, k = 257, 3 * spec.cta[1] + spec.align, 8 * spec.cta[2] - spec.align
    a = torch.randn(m, k, device="cuda", dtype=dt)
    w = torch.randn(n, k, device="cuda", dtype=dt)
    b = w.t() if spec.b_order.value == "nk" else w.t().contiguous()
    c = torch.randn(m, n, device="cuda", dtype=od)
    ref = 0.5 * (a.float() @ b.float()) - 2.0 * c.float()
    base = torch.full((m, n), float("nan"), device="cuda", dtype=od)
    gemm.matmul(a, b, out=base, alpha=0.5, beta=-2.0, c=c, kernel=LaunchSpec(kern.name))
    out = torch.full((m, n), float("nan"), device="cuda", dtype=od)
    ws = Workspace.allocate(torch.device("cuda"))
    gemm.matmul(a, b, out=out, alpha=0.5, beta=-2.0, c=c, kernel=LaunchSpec(kern.name, splits, swizzle), workspace=ws)
    assert rel_err(out, ref) < 1e-2
    if od == torch.float32:
        # Only the fp32 summation order differs.
        assert rel_err(out, base.float()) < 1e-5
    assert int(ws.barriers.abs().sum()) == 0, "semaphores must be zero after the call"


def test_thousand_split_k_calls_on_one_workspace_are_identical(gemm):
    kern = _pick(gemm, mainloop="sm80", d_type="f16", b_order="nk", align=8, cta=(64, 64, 32))
    a = torch.randn(100, 2048, device="cuda", dtype=torch.float16)
    w = torch.randn(640, 2048, device="cuda", dtype=torch.float16)
    ws = Workspace.allocate(torch.device("cuda"))
    plan = LaunchSpec(kern.name, 4, 1)
    first = gemm.matmul(a, w.t(), kernel=plan, workspace=ws)
    outs = torch.empty(1000, 100, 640, device="cuda", dtype=torch.float16)
    for i in range(1000):
        gemm.matmul(a, w.t(), out=outs[i], kernel=plan, workspace=ws)
    torch.cuda.synchronize()
    assert torch.equal(outs, first.expand_as(outs))
    assert int(ws.barriers.abs().sum()) == 0
    assert rel_err(first, a.float() @ w.float().t()) < 1e-2


def test_split_counts_that_do_not_fit_the_workspace_are_refused(gemm):
    from gemm_runtime import GemmArgumentError

    kern = _pick(gemm, mainloop="sm80", d_type="f16", b_order="nk", align=8, cta=(64, 64, 32))
    a = torch.randn(1024, 256, device="cuda", dtype=torch.float16)
    w = torch.randn(1024, 256, device="cuda", dtype=torch.float16)
    tiny = Workspace.allocate(torch.device("cuda"), barriers_bytes=64, partials_bytes=1 << 10)
    with pytest.raises(GemmArgumentError, match="kernel.splits"):
        gemm.matmul(a, w.t(), kernel=LaunchSpec(kern.name, 2), workspace=tiny)
    # Dispatch never offers such a split: the call still runs, unsplit.
    out = gemm.matmul(a, w.t(), workspace=tiny)
    assert rel_err(out, a.float() @ w.float().t()) < 1e-2
