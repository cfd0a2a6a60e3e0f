"""gemm_runtime.packed_weight: the quantized kernels' fragment-ordered weight layout (CPU).

The layout check decodes every element with a reference written here from the layout's
description (which lane, word, byte and nibble a (column, k) lands in), not from the
packer's index table.
"""

from __future__ import annotations

import pytest
import torch

from gemm_runtime.errors import GemmArgumentError
from gemm_runtime.packed_weight import lane_k_offsets, pack_for_gemm
from gemm_runtime.quant import QuantizedWeight, quantize


def reference_position(n: int, k: int, bits: int, row_bytes: int) -> tuple[int, int]:
    """(byte offset in b, bit shift) of element (n, k): 8-column tile n // 8 is a row;
    within it 32-K blocks of 32 lanes; lane 4g + t holds column g's K pairs (2t, 2t+1) and
    (2t+8, 2t+9) of both k16 steps h; register r of step h is the pair at +8r."""
    tile, g, block, kk = n // 8, n % 8, k // 32, k % 32
    h, r, t, j = kk // 16, (kk % 16) // 8, (kk % 8) // 2, kk % 2
    lane = 4 * g + t
    if bits == 4:
        nibble = (2 * h + r) + 4 * j  # registers (h, r) in nibble pairs (0, 4), (1, 5), (2, 6), (3, 7)
        return tile * row_bytes + block * 128 + lane * 4 + nibble // 2, 4 * (nibble % 2)
    return tile * row_bytes + block * 256 + lane * 8 + 4 * h + 2 * r + j, 0


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("n,k,group_size", [(13, 256, 32), (16, 200, 64), (9, 7392, 32), (24, 100, -1)])
def test_pack_for_gemm_layout(bits, n, k, group_size):
    torch.manual_seed(k + bits + n)
    qw = quantize(torch.randn(n, k), bits=bits, group_size=group_size)
    p = pack_for_gemm(qw)
    kp, tiles = -(-k // 32) * 32, -(-n // 8)
    assert p.b.dtype == torch.uint8 and p.b.shape == (tiles, kp * bits) and p.b.is_contiguous()
    assert p.padded_k == kp
    flat = p.b.flatten().tolist()
    q = qw.q.tolist()
    for col in range(tiles * 8):
        for kk in range(kp):
            offset, shift = reference_position(col, kk, bits, kp * bits)
            value = (flat[offset] >> shift) & ((1 << bits) - 1)
            assert value == (q[col][kk] if col < n and kk < k else 0), (col, kk)
    groups = qw.num_groups
    assert p.groups == groups and p.v.shape == (2 * groups, tiles * 8)
    assert torch.equal(p.v[:groups, :n], qw.scales) and torch.equal(p.v[groups:, :n], qw.zeros.to(qw.scales.dtype))
    assert torch.all(p.v[:, n:] == 0)
    if groups == 1:
        assert p.group_shift == 30
    else:
        assert 1 << p.group_shift == qw.group_size
    assert all((kk >> p.group_shift) == (kk // qw.group_size if groups > 1 else 0) for kk in range(k))


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("symmetric", [False, True])
def test_pack_unpack_round_trip_is_bit_exact(bits, symmetric):
    torch.manual_seed(bits)
    qw = quantize(torch.randn(21, 328, dtype=torch.bfloat16), bits=bits, group_size=64, symmetric=symmetric)
    back = pack_for_gemm(qw).unpack()
    assert torch.equal(back.q, qw.q) and torch.equal(back.scales, qw.scales) and torch.equal(back.zeros, qw.zeros)
    assert (back.bits, back.group_size, back.symmetric) == (qw.bits, qw.group_size, qw.symmetric)
    assert torch.equal(back.dequantize(), qw.dequantize())


@pytest.mark.parametrize("bits", [4, 8])
def test_every_lane_covers_each_k_of_a_block_once(bits):
    offsets = lane_k_offsets(bits)
    for t in range(4):
        # A lane's elements: its fragment K values of both k16 steps, each once.
        assert sorted(offsets[t]) == sorted(16 * h + 2 * t + d for h in (0, 1) for d in (0, 1, 8, 9))


def test_pack_for_gemm_refuses_act_order_and_other_input():
    qw = quantize(torch.randn(8, 64), bits=4, group_size=32)
    g_idx = torch.tensor([1, 0] * 32, dtype=torch.int32)
    act = QuantizedWeight(qw.q, qw.scales, qw.zeros, 4, 32, qw.symmetric, g_idx)
    with pytest.raises(GemmArgumentError, match="qw.g_idx"):
        pack_for_gemm(act)
    flat, perm = act.reordered()
    assert pack_for_gemm(flat).k == 64 and perm.shape == (64,)
    with pytest.raises(GemmArgumentError, match="^qw: got Tensor"):
        pack_for_gemm(qw.q)
    with pytest.raises(GemmArgumentError, match="bits"):
        lane_k_offsets(3)
