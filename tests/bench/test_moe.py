"""bench.moe without a GPU: the top-k routings it benchmarks are what a MoE layer makes
(rows sorted by expert, each token k times, weights normalized per token), and the
weight bytes it divides by count the touched experts only (dense, and packed W4A16)."""

from __future__ import annotations

import pytest
import torch

from bench.moe import CONFIGS, MoeConfig, experts_touched, route, touched_weight_bytes


@pytest.mark.parametrize("tokens", [1, 16, 129])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_a_routing_sorts_each_tokens_k_rows_by_expert(name: str, tokens: int) -> None:
    cfg = CONFIGS[name]
    r = route(tokens, cfg, torch.Generator().manual_seed(tokens))
    starts = r.offsets.tolist()
    assert starts[0] == 0 and starts[-1] == tokens * cfg.top_k
    assert all(lo <= hi for lo, hi in zip(starts, starts[1:]))
    # Each token appears k times, at most once per expert, and its weights sum to 1.
    assert torch.bincount(r.index.long(), minlength=tokens).tolist() == [cfg.top_k] * tokens
    sums = torch.zeros(tokens).index_add_(0, r.index.long(), r.row_scale)
    assert torch.allclose(sums, torch.ones(tokens), atol=1e-6)
    for lo, hi in zip(starts, starts[1:]):
        tokens_of_expert = r.index[lo:hi].tolist()
        assert len(set(tokens_of_expert)) == len(tokens_of_expert)
    assert r.row_scale.dtype == torch.float32 and r.index.dtype == torch.int32


def test_weight_bytes_count_the_touched_experts_only() -> None:
    cfg = MoeConfig(experts=8, top_k=2, hidden=64, intermediate=32)
    r = route(1, cfg, torch.Generator().manual_seed(0))
    assert experts_touched(r) == 2
    assert touched_weight_bytes(r, 64, 32) == 2 * 64 * 32 * 2
    r = route(4096, cfg, torch.Generator().manual_seed(0))
    assert experts_touched(r) == 8


def test_packed_bytes_count_the_touched_experts_packed_weights_scales_and_zeros() -> None:
    from bench.moe import touched_packed_bytes
    from gemm_runtime.experts import pack_experts
    from gemm_runtime.quant import quantize

    cfg = MoeConfig(experts=4, top_k=2, hidden=256, intermediate=64)
    r = route(1, cfg, torch.Generator().manual_seed(0))
    w = pack_experts([quantize(torch.randn(64, 256).half(), bits=4, group_size=128) for _ in range(4)])
    # Per expert: 64 x 256 4-bit codes, and 2 groups of scales and zeros for 64 columns.
    assert touched_packed_bytes(r, w) == 2 * (64 * 256 // 2 + 2 * 2 * 64 * 2)
