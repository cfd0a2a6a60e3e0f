"""Tensor-parallel sharding rules (gemm_runtime.sharding), CPU only: even splits, whole
groups along K, act-order, and that the shards recompose the whole layer."""

from __future__ import annotations

import pytest
import torch

from gemm_runtime.errors import GemmArgumentError
from gemm_runtime.quant import QuantizedWeight, quantize
from gemm_runtime.sharding import shard_bias, shard_gate_up, shard_quantized, shard_range, shard_weight


def test_shares_are_even_and_cover_the_dimension() -> None:
    assert [shard_range(12, r, 3, argument="w N") for r in range(3)] == [range(0, 4), range(4, 8), range(8, 12)]
    with pytest.raises(GemmArgumentError, match=r"w N: got 10 split 4 ways"):
        shard_range(10, 0, 4, argument="w N")
    with pytest.raises(GemmArgumentError, match="rank"):
        shard_range(12, 3, 3, argument="w N")
    with pytest.raises(GemmArgumentError, match="world_size"):
        shard_range(12, 0, 0, argument="w N")


def test_a_k_shard_that_would_cut_a_group_is_refused_with_the_world_sizes_that_fit() -> None:
    # qwen2-72b's down projection: K = 29568 under TP 8 with groups of 128.
    qw = quantize(torch.randn(16, 29568, dtype=torch.float16), bits=4, group_size=128)
    with pytest.raises(GemmArgumentError) as info:
        shard_quantized(qw, "k", 0, 8, argument="mlp.down_proj.weight")
    text = str(info.value)
    assert "mlp.down_proj.weight K: got 29568 split 8 ways: shares of 3696, 28.875 groups of 128" in text
    assert "1, 3, 7, 11" in text
    assert shard_quantized(qw, "k", 2, 3).shape == (16, 9856)


def test_dense_shards_recompose_the_layer() -> None:
    torch.manual_seed(0)
    w, b, x = torch.randn(24, 40), torch.randn(24), torch.randn(5, 40)
    cols = [shard_weight(w, "n", r, 2) for r in range(2)]
    assert torch.equal(torch.cat(cols), w)
    assert torch.equal(torch.cat([shard_bias(b, "n", r, 2) for r in range(2)]), b)
    assert shard_bias(b, "k", 1, 2) is b  # a row-parallel layer adds its bias once, whole
    rows = [shard_weight(w, "k", r, 4) for r in range(4)]
    partial = sum(x[:, 10 * r : 10 * (r + 1)] @ rows[r].t() for r in range(4))
    torch.testing.assert_close(partial, x @ w.t())
    with pytest.raises(GemmArgumentError, match="dim"):
        shard_weight(w, "m", 0, 2)
    gate, up = torch.randn(8, 4), torch.randn(8, 4)
    g1, u1 = shard_gate_up(gate, up, 1, 2)
    assert torch.equal(g1, gate[4:]) and torch.equal(u1, up[4:])


@pytest.mark.parametrize("dim", ["n", "k"])
@pytest.mark.parametrize("group_size", [32, -1])
def test_a_quantized_shard_is_the_shard_of_the_quantized_weight(dim, group_size) -> None:
    torch.manual_seed(1)
    w = torch.randn(32, 256, dtype=torch.float16)
    qw = quantize(w, bits=4, group_size=group_size)
    whole = qw.dequantize(torch.float32)
    for rank in range(2):
        shard = shard_quantized(qw, dim, rank, 2)
        expect = whole[16 * rank : 16 * (rank + 1)] if dim == "n" else whole[:, 128 * rank : 128 * (rank + 1)]
        assert torch.equal(shard.dequantize(torch.float32), expect)
        if group_size != -1:
            # Rows quantize one by one along K, in whole groups: quantizing the float
            # shard gives the same codes, scales and zeros.
            float_shard = shard_weight(w, dim, rank, 2)
            again = quantize(float_shard, bits=4, group_size=group_size)
            assert torch.equal(again.q, shard.q) and torch.equal(again.scales, shard.scales)


def _act_order(k: int, group_size: int, order: torch.Tensor) -> QuantizedWeight:
    """A weight whose rows' groups follow ``order`` (a permutation of K): g_idx[order[i]] = i // group_size."""
    torch.manual_seed(2)
    g_idx = torch.empty(k, dtype=torch.int32)
    g_idx[order] = (torch.arange(k) // group_size).to(torch.int32)
    groups = k // group_size
    q = torch.randint(0, 16, (8, k), dtype=torch.uint8)
    scales = torch.rand(groups, 8, dtype=torch.float16) + 0.5
    zeros = torch.full((groups, 8), 8.0, dtype=torch.float16)
    return QuantizedWeight(q, scales, zeros, 4, group_size, False, g_idx)


def test_act_order_shards_along_k_only_where_each_group_lies_inside_one_shard() -> None:
    k, size = 256, 32
    # Groups permuted within each half: every group's rows lie in one shard of two.
    order = torch.cat([torch.randperm(128), 128 + torch.randperm(128)])
    qw = _act_order(k, size, order)
    whole = qw.dequantize(torch.float32)
    for rank in range(2):
        shard = shard_quantized(qw, "k", rank, 2)
        assert shard.num_groups == 4
        assert torch.equal(shard.dequantize(torch.float32), whole[:, 128 * rank : 128 * (rank + 1)])
        reordered, perm = shard.reordered()  # what QuantLinear.from_quantized does
        assert reordered.g_idx is None and perm.shape == (128,)
    # GPTQ's activation order scatters the groups: refused, naming a group that straddles.
    scattered = _act_order(k, size, torch.randperm(k, generator=torch.Generator().manual_seed(5)))
    with pytest.raises(GemmArgumentError, match=r"w g_idx: got act-order groups across K shards \(group \d+"):
        shard_quantized(scattered, "k", 0, 2, argument="w")
    # Along N an act-order weight shards as it is.
    n_shard = shard_quantized(scattered, "n", 1, 2)
    assert torch.equal(n_shard.dequantize(torch.float32), scattered.dequantize(torch.float32)[4:])


def test_awq_and_gptq_checkpoints_shard_after_import() -> None:
    from gemm_runtime.quant import from_awq, from_gptq
    from tests.runtime.test_quant import awq_encode, gptq_encode

    torch.manual_seed(3)
    qw = quantize(torch.randn(16, 256, dtype=torch.float16), bits=4, group_size=64)
    whole = qw.dequantize(torch.float32)
    awq = from_awq(*awq_encode(qw), group_size=64)
    gptq = from_gptq(*gptq_encode(qw, 1), bits=4, group_size=64)
    for imported in (awq, gptq):
        for rank in range(2):
            k_shard = shard_quantized(imported, "k", rank, 2).dequantize(torch.float32)
            assert torch.equal(k_shard, whole[:, 128 * rank : 128 * (rank + 1)])
            n_shard = shard_quantized(imported, "n", rank, 2).dequantize(torch.float32)
            assert torch.equal(n_shard, whole[8 * rank : 8 * (rank + 1)])
    with pytest.raises(GemmArgumentError, match="groups of 64"):
        shard_quantized(awq, "k", 0, 8)  # shares of 32 columns, half a group


def test_packed_weights_shard_by_their_original_features() -> None:
    from gemm_runtime.packed_weight import pack_for_gemm
    from gemm_runtime.sharding import shard_packed, with_original_order

    k, size = 256, 32
    act = _act_order(k, size, torch.cat([torch.randperm(128), 128 + torch.randperm(128)]))
    whole = act.dequantize(torch.float32)
    reordered, perm = act.reordered()  # what a loaded QuantLinear keeps
    assert torch.equal(with_original_order(reordered, perm).dequantize(torch.float32), whole)
    for rank in range(2):
        packed, shard_perm = shard_packed(pack_for_gemm(reordered), "k", rank, 2, perm=perm)
        w = packed.unpack().dequantize(torch.float32)
        x = torch.randn(3, 128)
        # The shard's layer permutes its input by shard_perm, as QuantLinear does.
        got = x[:, shard_perm] @ w.t()
        torch.testing.assert_close(got, x @ whole[:, 128 * rank : 128 * (rank + 1)].t())
        # Along N the rank keeps 4 of the 8 outputs, with the whole input permuted.
        packed_n, perm_n = shard_packed(pack_for_gemm(reordered), "n", rank, 2, perm=perm)
        x_full = torch.randn(3, k)
        got_n = x_full[:, perm_n] @ packed_n.unpack().dequantize(torch.float32).t()
        torch.testing.assert_close(got_n, x_full @ whole[4 * rank : 4 * (rank + 1)].t())


def test_bad_arguments_are_named_before_anything_is_sliced() -> None:
    from gemm_runtime.packed_weight import pack_for_gemm
    from gemm_runtime.sharding import shard_packed, with_original_order

    b = torch.randn(48)
    # shard_bias checks dim and rank as shard_weight does: "N" or "x" used to split the
    # bias as column-parallel, and a row-parallel rank was never looked at.
    for dim in ("N", "x"):
        with pytest.raises(GemmArgumentError, match="dim: got N|dim: got x"):
            shard_bias(b, dim, 0, 2)
    with pytest.raises(GemmArgumentError, match=r"rank: got 5; accepted: an integer in 0\.\.1"):
        shard_bias(b, "k", 5, 2)
    with pytest.raises(GemmArgumentError, match=r"bias: got torch.Size\(\[48, 2\]\)"):
        shard_bias(torch.randn(48, 2), "n", 0, 2)
    qw = quantize(torch.randn(48, 64), bits=4, group_size=32)
    # A QuantizedWeight where a PackedWeight goes, and the other way round.
    with pytest.raises(GemmArgumentError, match="weight: got QuantizedWeight; accepted: a gemm_runtime.packed_weight"):
        shard_packed(qw, "n", 0, 2)
    with pytest.raises(GemmArgumentError, match="weight: got Tensor; accepted: a gemm_runtime.quant.QuantizedWeight"):
        shard_quantized(torch.randn(48, 64), "n", 0, 2)
    with pytest.raises(GemmArgumentError, match=r"perm: got torch.Size\(\[63\]\); accepted: None or a \(64,\)"):
        with_original_order(qw, torch.arange(63))
    with pytest.raises(GemmArgumentError, match="perm: got torch.Size"):
        shard_packed(pack_for_gemm(qw), "k", 0, 2, perm=torch.arange(10))
