"""Dispatch through Gemm.matmul / Gemm.run on real LLM shapes, odd alignments,
streams, and the errors a user sees on the GPU path."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from gemm_runtime import GemmArgumentError, MatrixLayout, Operation
from tests.gpu.util import rel_err

pytestmark = pytest.mark.gpu

def _llm_shapes():
    data = yaml.safe_load((Path(__file__).resolve().parents[2] / "bench" / "shapes.yaml").read_text())
    out = []
    for model in ("llama3-8b", "qwen2-72b-tp4"):
        for layer, (n, k) in data["models"].get(model, {}).items():
            out.append((model, layer, n, k))
    return out


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("m", [1, 17, 256])
@pytest.mark.parametrize("model,layer,n,k", _llm_shapes())
def test_llm_shapes_dispatch(gemm, model, layer, n, k, m, dtype):
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    w = torch.randn(n, k, device="cuda", dtype=dtype) * 0.05
    out = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
    gemm.matmul(a, w.t(), out=out)
    assert rel_err(out, a.float() @ w.float().t()) < 1e-2


@pytest.mark.parametrize("k,n", [(4097, 257), (1001, 64), (62, 130), (3, 5)])
def test_unaligned_rows_use_lower_alignment_kernels(gemm, k, n):
    a = torch.randn(65, k, device="cuda", dtype=torch.float16)
    b = torch.randn(k, n, device="cuda", dtype=torch.float16)
    out = gemm.matmul(a, b)
    assert rel_err(out, a.float() @ b.float()) < 1e-2


def test_batched_leading_dims_and_out_dtype(gemm):
    a = torch.randn(2, 3, 40, 64, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(96, 64, device="cuda", dtype=torch.bfloat16)
    out = gemm.matmul(a, w.t(), out_dtype=torch.float32)
    assert out.shape == (2, 3, 40, 96) and out.dtype == torch.float32
    assert rel_err(out, a.float() @ w.float().t()) < 1e-2


def test_empty_problems(gemm):
    a = torch.randn(0, 64, device="cuda", dtype=torch.float16)
    w = torch.randn(32, 64, device="cuda", dtype=torch.float16)
    assert gemm.matmul(a, w.t()).shape == (0, 32)
    # K = 0: the product is zero, so D = beta * C.
    a0 = torch.randn(5, 0, device="cuda", dtype=torch.float16)
    b0 = torch.randn(0, 16, device="cuda", dtype=torch.float16)
    c = torch.randn(5, 16, device="cuda", dtype=torch.float16)
    out = gemm.matmul(a0, b0, beta=2.0, c=c)
    assert torch.equal(out, (2 * c.float()).half())


def test_launches_on_the_given_stream(gemm):
    s = torch.cuda.Stream()
    a = torch.randn(512, 1024, device="cuda", dtype=torch.float16)
    w = torch.randn(2048, 1024, device="cuda", dtype=torch.float16)
    torch.cuda.synchronize()
    with torch.cuda.stream(s):
        a.mul_(2)  # queued on s: the GEMM must see it
        out = gemm.matmul(a, w.t())
        out2 = gemm.matmul(a, w.t(), stream=s)
    s.synchronize()
    ref = a.float() @ w.float().t()
    assert rel_err(out, ref) < 1e-2 and rel_err(out2, ref) < 1e-2


def test_run_interface_with_layouts(gemm):
    m, n, k = 37, 200, 136
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(k, n, device="cuda", dtype=torch.float16)
    c = torch.randn(m, n, device="cuda", dtype=torch.float32)
    d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float32)
    gemm.run(
        Operation(), 0.5, a, MatrixLayout.of(a), None, None, b, MatrixLayout.of(b), None, None,
        2.0, c, MatrixLayout.of(c), d, MatrixLayout.of(d),
    )
    assert rel_err(d, 0.5 * (a.float() @ b.float()) + 2.0 * c) < 1e-2


def test_user_errors_name_the_argument(gemm):
    a = torch.randn(8, 64, device="cuda", dtype=torch.float16)
    w = torch.randn(32, 64, device="cuda", dtype=torch.float16)
    with pytest.raises(GemmArgumentError, match=r"A.device"):
        gemm.matmul(a.cpu(), w.t())
    with pytest.raises(GemmArgumentError, match=r"Bdesc.type"):
        gemm.matmul(a, w.t().float())
    with pytest.raises(GemmArgumentError, match=r"b.shape"):
        gemm.matmul(a, w)
    with pytest.raises(GemmArgumentError, match=r"Adesc.order: got col"):
        gemm.matmul(a.t(), w.t()[:8])
    with pytest.raises(GemmArgumentError, match=r"a.stride"):
        gemm.matmul(torch.randn(8, 128, device="cuda", dtype=torch.float16)[:, ::2], w.t())
    with pytest.raises(GemmArgumentError, match=r"D"):
        gemm.matmul(a, torch.randn(64, 64, device="cuda", dtype=torch.float16), out=a)
    with pytest.raises(GemmArgumentError, match=r"kernel"):
        gemm.matmul(a, w.t(), kernel="no_such_kernel")
    with pytest.raises(GemmArgumentError, match=r"A address"):
        raw = torch.randn(8 * 64 + 1, device="cuda", dtype=torch.float16)
        gemm.run(Operation(), 1.0, raw.data_ptr() + 1, MatrixLayout.of(a), None, None, w.t(), MatrixLayout.of(w.t()),
                 None, None, 0.0, None, None, torch.empty(8, 32, device="cuda", dtype=torch.float16),
                 MatrixLayout.of(torch.empty(8, 32, dtype=torch.float16)))


def test_no_kernel_for_combination_is_a_clear_error(gemm):
    a = torch.randn(8, 64, device="cuda", dtype=torch.float16)
    b = torch.randn(64, 32, device="cuda", dtype=torch.float16)
    out = torch.empty(8, 32, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(GemmArgumentError, match="Ddesc.type"):
        gemm.matmul(a, b, out=out)


def test_problem_no_kernel_can_serve_says_why(gemm):
    from codegen.vocabulary import BOrder, DataType
    from gemm_runtime import UnsupportedProblemError
    from gemm_runtime.context import make_key

    # More CTA columns than the grid allows for every tile width in the registry.
    key = make_key(DataType.F16, BOrder.NK, DataType.F16, 1, 65535 * 256 + 1, 64, align=8)
    with pytest.raises(UnsupportedProblemError, match="CTA columns"):
        gemm.select(key)


def test_repeated_calls_replay_a_checked_plan(gemm):
    """The second call of a signature takes the fast path: it must see new pointers,
    new alpha/beta, still refuse aliasing, and follow changes of the dispatch cache."""

    w = torch.randn(384, 512, device="cuda", dtype=torch.float16)
    for step in range(3):
        a = torch.randn(24, 512, device="cuda", dtype=torch.float16)
        c = torch.randn(24, 384, device="cuda", dtype=torch.float16)
        out = torch.full((24, 384), float("nan"), device="cuda", dtype=torch.float16)
        alpha, beta = 1.0 + step, 0.5 - step
        gemm.matmul(a, w.t(), out=out, alpha=alpha, beta=beta, c=c)
        assert rel_err(out, alpha * (a.float() @ w.float().t()) + beta * c.float()) < 1e-2
    big = torch.randn(24 * 512 + 512, device="cuda", dtype=torch.float16)
    a_view = big[:24 * 512].view(24, 512)
    gemm.matmul(a_view, w.t(), out=torch.empty(24, 384, device="cuda", dtype=torch.float16))
    with pytest.raises(GemmArgumentError, match="overlapping"):
        gemm.matmul(a_view, w.t(), out=big[512:512 + 24 * 384].view(24, 384))
    # A new cache entry for the problem is used by the very next call.
    a = torch.randn(24, 512, device="cuda", dtype=torch.float16)
    key = gemm_key(gemm, a, w)
    other = [p for _, p in gemm.ranked(key) if p != gemm.select(key)][0]
    gemm.cache.put(key, other)
    try:
        out = gemm.matmul(a, w.t())
        assert gemm.select(key) == other
        assert rel_err(out, a.float() @ w.float().t()) < 1e-2
    finally:
        gemm.cache.clear()


def gemm_key(gemm, a, w):
    from gemm_runtime.context import make_problem
    from gemm_runtime.types import MatrixLayout, Operation

    out = torch.empty(a.shape[0], w.shape[0], device="cuda", dtype=a.dtype)
    b = w.t()
    return make_problem(Operation(), a, MatrixLayout.of(a), b, MatrixLayout.of(b), 0.0, None, None, out,
                        MatrixLayout.of(out), gemm.device, gemm.registry.device.arch).key
