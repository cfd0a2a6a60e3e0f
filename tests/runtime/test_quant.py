"""gemm_runtime.quant: quantize / dequantize, the int32 packers, AWQ and GPTQ import (CPU).

The AWQ and GPTQ tests encode and decode with reference code written here from the formats'
documented bit layouts, in plain Python loops over ints: different code from quant.py's
tensor shifts, so a wrong convention there cannot agree with them by construction.
"""

from __future__ import annotations

import dataclasses
import math
import warnings

import pytest
import torch

from gemm_runtime.errors import GemmArgumentError
from gemm_runtime.quant import (
    QuantizedWeight,
    from_awq,
    from_gptq,
    pack_int32,
    quantize,
    unpack_int32,
)

# AutoAWQ awq/modules/linear/gemm.py, WQLinear_GEMM.from_linear: the nibble at bit 4*i of
# word j holds column 8*j + order_map[i]. Written out again here on purpose.
AUTOAWQ_ORDER_MAP = [0, 2, 4, 6, 1, 3, 5, 7]


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def rand_weight(n: int, k: int, dtype=torch.float16, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, k, generator=gen(seed)).to(dtype)


def signed32(u: int) -> int:
    """An unsigned 32-bit word as the int32 a checkpoint stores."""
    assert 0 <= u < 1 << 32
    return u - (1 << 32) if u >= 1 << 31 else u


def unsigned32(v: int) -> int:
    return v & 0xFFFFFFFF


def int_matrix(t: torch.Tensor) -> list[list[int]]:
    return [[int(x) for x in row] for row in t.tolist()]


def random_quantized(
    n: int, k: int, *, bits: int, group_size: int, dtype=torch.float16, zero_range=None,
    act_order: bool = False, seed: int = 0,
) -> QuantizedWeight:
    """A random canonical weight: q, scales, integral zeros and (act-order) a g_idx that
    puts group_size random rows of K in each group."""
    g = gen(seed)
    group_size = k if group_size == -1 else group_size
    groups = math.ceil(k / group_size)
    lo, hi = zero_range or (0, (1 << bits) - 1)
    q = torch.randint(0, 1 << bits, (n, k), generator=g, dtype=torch.uint8)
    scales = (torch.rand(groups, n, generator=g) * 0.02 + 0.001).to(dtype)
    zeros = torch.randint(lo, hi + 1, (groups, n), generator=g).to(dtype)
    g_idx = None
    if act_order:
        perm = torch.randperm(k, generator=g)
        g_idx = torch.empty(k, dtype=torch.int32)
        g_idx[perm] = (torch.arange(k) // group_size).to(torch.int32)
    return QuantizedWeight(q, scales, zeros, bits, group_size, False, g_idx)


def reference_dequant(q, zeros, scales, group_of_row) -> torch.Tensor:
    """W[n][k] = (q - zero) * scale from plain lists, in float64, returned as fp32. (q - z)
    is a small integer and the scale an fp16/bf16 value, so the product is exact in fp32 and
    must match quant.py bit for bit after the same final rounding."""
    n, k = len(q), len(q[0])
    out = [[(q[i][j] - zeros[group_of_row[j]][i]) * scales[group_of_row[j]][i] for j in range(k)] for i in range(n)]
    return torch.tensor(out, dtype=torch.float64).float()


def check_same(imported: QuantizedWeight, expected: QuantizedWeight) -> None:
    assert imported.q.dtype == torch.uint8 and torch.equal(imported.q, expected.q)
    assert imported.scales.dtype == expected.scales.dtype and torch.equal(imported.scales, expected.scales)
    assert imported.zeros.dtype == expected.zeros.dtype and torch.equal(imported.zeros, expected.zeros)
    assert (imported.bits, imported.group_size) == (expected.bits, expected.group_size)
    if expected.g_idx is None:
        assert imported.g_idx is None
    else:
        assert imported.g_idx.dtype == torch.int32 and torch.equal(imported.g_idx, expected.g_idx)


# --- quantize -----------------------------------------------------------------------------------


def reconstruction_error(w: torch.Tensor, qw: QuantizedWeight) -> torch.Tensor:
    """|W - (q - zero) * scale| / scale per element, in fp32 (without dequantize's final
    rounding to fp16/bf16, which the bound does not cover)."""
    g = qw.group_index()
    s = qw.scales.float()[g].t()
    z = qw.zeros.float()[g].t()
    return ((qw.q.float() - z) * s - w.float()).abs() / s


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("group_size", [32, 64, 128, -1])
def test_quantize_error_within_half_a_step(dtype, symmetric, bits, group_size):
    w = rand_weight(24, 256, dtype, seed=bits + group_size)
    qw = quantize(w, bits=bits, group_size=group_size, symmetric=symmetric)
    k_groups = 1 if group_size == -1 else 256 // group_size
    assert qw.q.shape == (24, 256) and qw.q.dtype == torch.uint8
    assert qw.scales.shape == qw.zeros.shape == (k_groups, 24)
    assert qw.scales.dtype == qw.zeros.dtype == dtype
    assert qw.group_size == (256 if group_size == -1 else group_size) and qw.g_idx is None
    assert int(qw.q.max()) < 1 << bits
    assert bool((qw.zeros == qw.zeros.round()).all())
    if symmetric:
        assert bool((qw.zeros == 1 << (bits - 1)).all())
    assert float(reconstruction_error(w, qw).max()) <= 0.5 * (1 + 1e-6)
    # dequantize = the fp32 reconstruction rounded once to the scales' dtype
    g = qw.group_index()
    exact = (qw.q.float() - qw.zeros.float()[g].t()) * qw.scales.float()[g].t()
    assert torch.equal(qw.dequantize(), exact.to(dtype))
    assert torch.equal(qw.dequantize(torch.float32), exact)  # unrounded, for references


def test_quantize_fp32_weight_defaults_to_fp16_scales_and_takes_bf16():
    w = rand_weight(8, 64, torch.float32, seed=3)
    assert quantize(w, group_size=32).scales.dtype == torch.float16
    qw = quantize(w, group_size=32, scale_dtype=torch.bfloat16)
    assert qw.scales.dtype == qw.zeros.dtype == torch.bfloat16
    assert float(reconstruction_error(w, qw).max()) <= 0.5 * (1 + 1e-6)


@pytest.mark.parametrize("symmetric", [False, True])
def test_k_not_a_multiple_of_group_size(symmetric):
    w = rand_weight(16, 200, seed=5)  # groups of 64: 64, 64, 64, 8
    qw = quantize(w, bits=4, group_size=64, symmetric=symmetric)
    assert qw.q.shape == (16, 200) and qw.scales.shape == (4, 16)
    assert torch.equal(qw.group_index(), torch.arange(200) // 64)
    assert float(reconstruction_error(w, qw).max()) <= 0.5 * (1 + 1e-6)
    # the short last group is quantized on its own 8 rows only
    alone = quantize(w[:, 192:].contiguous(), bits=4, group_size=-1, symmetric=symmetric)
    assert torch.equal(alone.q, qw.q[:, 192:])
    assert torch.equal(alone.scales[0], qw.scales[3]) and torch.equal(alone.zeros[0], qw.zeros[3])


@pytest.mark.parametrize("symmetric", [False, True])
def test_per_channel_minus_one_and_k_agree(symmetric):
    w = rand_weight(12, 96, seed=6)
    a = quantize(w, group_size=-1, symmetric=symmetric)
    b = quantize(w, group_size=96, symmetric=symmetric)
    assert a.group_size == b.group_size == 96 and a.scales.shape == (1, 12)
    assert torch.equal(a.q, b.q) and torch.equal(a.scales, b.scales) and torch.equal(a.zeros, b.zeros)


@pytest.mark.parametrize("symmetric", [False, True])
def test_all_zero_and_constant_groups_are_guarded(symmetric):
    w = rand_weight(8, 128, seed=7)
    w[:, 32:64] = 0  # one all-zero group per row: scale would be 0
    w[:, 64:96] = 0.75  # a constant one-signed group
    qw = quantize(w, group_size=32, symmetric=symmetric)
    assert bool(torch.isfinite(qw.scales).all()) and bool((qw.scales > 0).all())
    d = qw.dequantize()
    assert bool((d[:, 32:64] == 0).all())
    assert float(reconstruction_error(w, qw).max()) <= 0.5 * (1 + 1e-6)


def test_one_signed_groups_stay_within_half_a_step():
    # min/max quantization with the range widened to include 0 (GPTQ's convention): an
    # all-positive group must not be clamped at the top.
    w = rand_weight(8, 128, torch.float32, seed=8).abs() + 3.0
    qw = quantize(w, bits=4, group_size=32)
    assert bool((qw.zeros == 0).all())
    assert float(reconstruction_error(w, qw).max()) <= 0.5 * (1 + 1e-6)
    qn = quantize(-w, bits=4, group_size=32)
    assert bool((qn.zeros == 15).all())
    assert float(reconstruction_error(-w, qn).max()) <= 0.5 * (1 + 1e-6)


def test_tiny_weights_get_nonzero_scales():
    w = rand_weight(8, 64, torch.float32, seed=9) * 1e-9  # scale underflows fp16
    qw = quantize(w, group_size=32)
    assert bool((qw.scales > 0).all())
    assert float(reconstruction_error(w, qw).max()) <= 0.5 * (1 + 1e-6)


def test_huge_weights_name_the_scale_dtype():
    w = rand_weight(4, 32, torch.float32, seed=10) * 1e7
    with pytest.raises(GemmArgumentError) as e:
        quantize(w, group_size=32)
    assert e.value.argument == "weight" and "bfloat16" in str(e.value)
    qw = quantize(w, group_size=32, scale_dtype=torch.bfloat16)
    assert float(reconstruction_error(w, qw).max()) <= 0.5 * (1 + 1e-6)


@pytest.mark.parametrize(
    "kwargs, argument",
    [
        ({"bits": 3}, "bits"),
        ({"bits": True}, "bits"),
        ({"bits": "4"}, "bits"),
        ({"group_size": 16}, "group_size"),
        ({"group_size": 0}, "group_size"),
        ({"group_size": 256}, "group_size"),  # K is 128 here
        ({"group_size": 64.0}, "group_size"),
        ({"symmetric": 1}, "symmetric"),
        ({"scale_dtype": torch.float32}, "scale_dtype"),
    ],
)
def test_quantize_rejects_bad_options(kwargs, argument):
    with pytest.raises(GemmArgumentError) as e:
        quantize(rand_weight(8, 128), **kwargs)
    assert e.value.argument == argument
    assert "got" in str(e.value) and "accepted" in str(e.value)


@pytest.mark.parametrize(
    "weight",
    [
        torch.randn(128),  # 1-D
        torch.randn(2, 8, 128),  # 3-D
        torch.randint(-8, 8, (8, 128), dtype=torch.int32),  # not float
        torch.randn(0, 128),  # empty
        [[1.0, 2.0]],  # not a tensor
    ],
)
def test_quantize_rejects_bad_weights(weight):
    with pytest.raises(GemmArgumentError) as e:
        quantize(weight)
    assert e.value.argument == "weight"


def test_quantize_rejects_non_finite_weights():
    w = rand_weight(8, 128, torch.float32, seed=11)
    w[3, 7] = float("nan")
    with pytest.raises(GemmArgumentError, match="non-finite"):
        quantize(w)


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e4m3fnuz])
def test_quantize_takes_8_bit_float_weights(dtype):
    # torch has no isfinite for float8_e4m3fn: the check of the weight must not raise from inside torch.
    w = rand_weight(8, 128, torch.float32, seed=12).to(dtype)
    qw = quantize(w, bits=8, group_size=64)
    assert qw.scales.dtype == torch.float16
    expected = quantize(w.float(), bits=8, group_size=64).dequantize(torch.float32)
    assert torch.equal(qw.dequantize(torch.float32), expected)
    w = w.float()
    w[3, 7] = float("nan")  # float8_e4m3fn has no infinity
    with pytest.raises(GemmArgumentError, match="non-finite"):
        quantize(w.to(dtype))


# --- pack_int32 / unpack_int32 ---------------------------------------------------------------------


def reference_pack(q: list[list[int]], bits: int) -> list[list[int]]:
    per = 32 // bits
    rows = []
    for row in q:
        words = [0] * math.ceil(len(row) / per)
        for k, v in enumerate(row):
            words[k // per] |= v << ((k % per) * bits)
        rows.append([signed32(w) for w in words])
    return rows


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("k", [64, 13, 1])
def test_pack_matches_reference_and_round_trips(bits, k):
    q = torch.randint(0, 1 << bits, (6, k), generator=gen(bits * k), dtype=torch.uint8)
    q[0, -1] = (1 << bits) - 1  # some word gets bit 31 set when k fills it
    packed = pack_int32(q, bits)
    assert packed.dtype == torch.int32 and packed.shape == (6, math.ceil(k * bits / 32))
    assert int_matrix(packed) == reference_pack(int_matrix(q), bits)
    assert torch.equal(unpack_int32(packed, bits, k), q)


def test_pack_known_words():
    q = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 7, 15]], dtype=torch.uint8)
    assert pack_int32(q, 4).tolist() == [[0x76543210, 15]]
    q8 = torch.tensor([[0x10, 0x32, 0x54, 0xF6, 0xAB]], dtype=torch.uint8)
    assert pack_int32(q8, 8).tolist() == [[signed32(0xF6543210), 0xAB]]


def test_pack_round_trips_quantize_output():
    w = rand_weight(32, 200, seed=12)
    for bits in (4, 8):
        qw = quantize(w, bits=bits, group_size=64)
        assert torch.equal(unpack_int32(pack_int32(qw.q, bits), bits, 200), qw.q)


def test_pack_and_unpack_reject_bad_input():
    q = torch.randint(0, 16, (4, 16), generator=gen(13), dtype=torch.uint8)
    cases = [
        (lambda: pack_int32(q, 2), "bits"),
        (lambda: pack_int32(q.to(torch.int32), 4), "q"),
        (lambda: pack_int32(q[0], 4), "q"),
        (lambda: pack_int32(q + 16, 4), "q"),  # a value needs 5 bits
        (lambda: unpack_int32(pack_int32(q, 4), 4, 17), "packed"),  # 17 rows need 3 words
        (lambda: unpack_int32(pack_int32(q, 4).to(torch.int64), 4, 16), "packed"),
        (lambda: unpack_int32(pack_int32(q, 4), 4, 0), "k"),
        (lambda: unpack_int32(pack_int32(q, 4), 6, 16), "bits"),
    ]
    for call, argument in cases:
        with pytest.raises(GemmArgumentError) as e:
            call()
        assert e.value.argument == argument


# --- QuantizedWeight validation ----------------------------------------------------------------------


def test_quantized_weight_is_frozen_and_normalises_per_channel():
    qw = random_quantized(8, 64, bits=4, group_size=64, seed=14)
    with pytest.raises(dataclasses.FrozenInstanceError):
        qw.bits = 8
    minus_one = QuantizedWeight(qw.q, qw.scales, qw.zeros, 4, -1, False)
    assert minus_one.group_size == 64 and minus_one.shape == (8, 64) and minus_one.num_groups == 1


def fields(**change):
    base = random_quantized(16, 128, bits=4, group_size=32, seed=15)
    values = {f.name: getattr(base, f.name) for f in dataclasses.fields(QuantizedWeight)}
    values.update(change)
    return values


@pytest.mark.parametrize(
    "change, argument",
    [
        ({"bits": 2}, "bits"),
        ({"q": torch.randint(0, 16, (16, 128), dtype=torch.int32)}, "q"),
        ({"q": torch.full((16, 128), 16, dtype=torch.uint8)}, "q"),  # needs 5 bits
        ({"group_size": 48}, "group_size"),
        ({"symmetric": None}, "symmetric"),
        ({"scales": torch.rand(4, 16).float()}, "scales"),  # fp32 scales
        ({"scales": (torch.rand(5, 16) + 0.1).half()}, "scales"),  # 5 groups, K=128/32 has 4
        ({"scales": (torch.rand(4, 15) + 0.1).half()}, "scales"),  # N mismatch
        ({"scales": torch.full((4, 16), float("inf")).half()}, "scales"),
        ({"zeros": torch.randint(0, 16, (4, 16)).to(torch.bfloat16)}, "zeros"),  # dtype differs
        ({"zeros": torch.randint(0, 16, (4, 8)).half()}, "zeros"),
        ({"zeros": torch.rand(4, 16).half() + 3}, "zeros"),  # fractional
        ({"zeros": torch.randint(17, 30, (4, 16)).half()}, "zeros"),  # above 2**bits
        ({"zeros": -torch.randint(1, 5, (4, 16)).half()}, "zeros"),
        ({"symmetric": True}, "zeros"),  # random zeros are not all 8
        ({"g_idx": torch.randint(0, 4, (128,), dtype=torch.int64)}, "g_idx"),  # int64
        ({"g_idx": torch.randint(0, 4, (127,), dtype=torch.int32)}, "g_idx"),
        ({"g_idx": torch.randint(1, 5, (128,), dtype=torch.int32)}, "g_idx"),  # 4 is out of range
    ],
)
def test_quantized_weight_validation(change, argument):
    with pytest.raises(GemmArgumentError) as e:
        QuantizedWeight(**fields(**change))
    assert e.value.argument == argument


def test_zero_point_may_reach_two_to_the_bits():
    # GPTQ's classic format decodes a stored 15 as zero 16; the canonical form keeps that.
    values = fields(zeros=torch.randint(1, 17, (4, 16)).half())
    values["zeros"][0, 0] = 16
    assert float(QuantizedWeight(**values).zeros.max()) == 16


# --- act-order g_idx and reordered() ---------------------------------------------------------------


@pytest.mark.parametrize("bits", [4, 8])
def test_reordered_is_the_same_linear_map(bits):
    qw = random_quantized(24, 256, bits=bits, group_size=64, act_order=True, seed=16 + bits)
    flat, perm = qw.reordered()
    assert flat.g_idx is None and flat.group_size == 64 and perm.dtype == torch.int64
    assert sorted(perm.tolist()) == list(range(256)) and perm.tolist() != list(range(256))
    # same groups, scales and zeros; rows of K permuted
    assert torch.equal(flat.scales, qw.scales) and torch.equal(flat.zeros, qw.zeros)
    assert torch.equal(flat.dequantize(), qw.dequantize()[:, perm])
    a = torch.randn(5, 256, generator=gen(17))
    w, w_flat = qw.dequantize().float(), flat.dequantize().float()
    torch.testing.assert_close(a[:, perm] @ w_flat.t(), a @ w.t(), rtol=1e-5, atol=1e-5)


def test_dequantize_with_g_idx_uses_the_group_of_each_row():
    qw = random_quantized(8, 64, bits=4, group_size=32, act_order=True, seed=18)
    g = qw.g_idx.tolist()
    expected = reference_dequant(int_matrix(qw.q), qw.zeros.float().tolist(), qw.scales.float().tolist(), g)
    assert torch.equal(qw.dequantize(), expected.half())


def test_reordered_without_g_idx_is_the_identity():
    qw = random_quantized(8, 64, bits=4, group_size=32, seed=19)
    same, perm = qw.reordered()
    assert same is qw and torch.equal(perm, torch.arange(64))


def test_reordered_rejects_groups_of_the_wrong_size():
    values = fields(g_idx=torch.randint(0, 4, (128,), generator=gen(20)).to(torch.int32))
    qw = QuantizedWeight(**values)  # valid: each row names an existing group
    with pytest.raises(GemmArgumentError) as e:
        qw.reordered()
    assert e.value.argument == "g_idx" and "rows per group" in str(e.value)


# --- AWQ ---------------------------------------------------------------------------------------------


def awq_pack_columns(values: list[list[int]]) -> list[list[int]]:
    """[R, N] 4-bit values -> [R, N/8] int32, AutoAWQ's order: nibble i of word j holds
    column 8j + AUTOAWQ_ORDER_MAP[i]."""
    out = []
    for row in values:
        words = []
        for j in range(len(row) // 8):
            word = 0
            for i in range(8):
                word |= row[8 * j + AUTOAWQ_ORDER_MAP[i]] << (4 * i)
            words.append(signed32(word))
        out.append(words)
    return out


def awq_unpack_columns(words: list[list[int]]) -> list[list[int]]:
    out = []
    for row in words:
        values = [0] * (8 * len(row))
        for j, word in enumerate(row):
            for i in range(8):
                values[8 * j + AUTOAWQ_ORDER_MAP[i]] = (unsigned32(word) >> (4 * i)) & 0xF
        out.append(values)
    return out


def awq_encode(qw: QuantizedWeight) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """QuantizedWeight -> AutoAWQ GEMM tensors (qweight [K, N/8], qzeros [G, N/8], scales [G, N])."""
    q_kn = [list(col) for col in zip(*int_matrix(qw.q))]  # [K, N]
    zeros = int_matrix(qw.zeros.int())
    qweight = torch.tensor(awq_pack_columns(q_kn), dtype=torch.int32)
    qzeros = torch.tensor(awq_pack_columns(zeros), dtype=torch.int32)
    return qweight, qzeros, qw.scales.clone()


def awq_reference_decode(qweight, qzeros, scales, group_size):
    """AWQ tensors -> (q [N, K], zeros [G, N], W [N, K] fp32): W = (q - z) * s, no offset."""
    q_kn = awq_unpack_columns(int_matrix(qweight))
    q = [list(row) for row in zip(*q_kn)]
    zeros = awq_unpack_columns(int_matrix(qzeros))
    k = len(q_kn)
    w = reference_dequant(q, zeros, scales.float().tolist(), [j // group_size for j in range(k)])
    return q, zeros, w


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("group_size, k", [(32, 128), (64, 128), (128, 256), (-1, 96)])
def test_from_awq_matches_reference_decoder(dtype, group_size, k):
    qw = random_quantized(32, k, bits=4, group_size=group_size, dtype=dtype, seed=21 + k + group_size)
    qweight, qzeros, scales = awq_encode(qw)
    q_ref, zeros_ref, w_ref = awq_reference_decode(qweight, qzeros, scales, qw.group_size)
    assert q_ref == int_matrix(qw.q) and zeros_ref == int_matrix(qw.zeros.int())  # the test's own codec

    imported = from_awq(qweight, qzeros, scales, group_size=group_size)
    check_same(imported, qw)
    assert imported.q.is_contiguous() and not imported.symmetric
    assert torch.equal(imported.dequantize(), w_ref.to(dtype))


def test_from_awq_known_words():
    # one row of K, 16 columns; nibble i of each word is i (word 0) or 8 + i (word 1)
    qweight = torch.tensor([[0x76543210, signed32(0xFEDCBA98)]], dtype=torch.int32)
    qzeros = torch.tensor([[0x11111111, 0x22222222]], dtype=torch.int32)
    scales = torch.linspace(0.5, 2.0, 16).half().unsqueeze(0)
    qw = from_awq(qweight, qzeros, scales, group_size=-1)
    # column c of a block holds nibble [0, 4, 1, 5, 2, 6, 3, 7][c]
    assert qw.q[:, 0].tolist() == [0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15]
    assert qw.zeros[0].tolist() == [1.0] * 8 + [2.0] * 8


def test_from_awq_infers_symmetric():
    qw = random_quantized(16, 64, bits=4, group_size=32, zero_range=(8, 8), seed=22)
    imported = from_awq(*awq_encode(qw), group_size=32)
    assert imported.symmetric
    assert not from_awq(*awq_encode(qw), group_size=32, symmetric=False).symmetric


def test_from_awq_rejects_malformed_checkpoints():
    qw = random_quantized(16, 64, bits=4, group_size=32, seed=23)
    qweight, qzeros, scales = awq_encode(qw)
    cases = [
        ({"qweight": qweight.float()}, "qweight"),
        ({"qweight": qweight[:, :1]}, "qweight"),  # N/8 = 2 words
        ({"qweight": qweight[0]}, "qweight"),
        ({"qzeros": qzeros.to(torch.int64)}, "qzeros"),
        ({"qzeros": qzeros[:1]}, "qzeros"),  # 2 groups
        ({"scales": scales.float()}, "scales"),
        ({"scales": scales[:, :12]}, "scales"),  # N not a multiple of 8
        ({"scales": scales[:1]}, "scales"),  # 1 group for K=64 / 32
        ({"group_size": 48}, "group_size"),
        ({"bits": 8}, "bits"),
        ({"bits": 3}, "bits"),
        ({"symmetric": True}, "zeros"),
        ({"symmetric": "yes"}, "symmetric"),
    ]
    for change, argument in cases:
        kwargs = {"qweight": qweight, "qzeros": qzeros, "scales": scales, "group_size": 32} | change
        with pytest.raises(GemmArgumentError) as e:
            from_awq(kwargs.pop("qweight"), kwargs.pop("qzeros"), kwargs.pop("scales"), **kwargs)
        assert e.value.argument == argument, change


# --- GPTQ ---------------------------------------------------------------------------------------------


def gptq_encode(qw: QuantizedWeight, zero_point_offset: int):
    """QuantizedWeight -> GPTQ tensors: qweight [K*bits/32, N] packed along K, qzeros
    [G, ceil(N*bits/32)] packed along N holding zero - offset, scales [G, N], g_idx [K]."""
    bits, (n, k) = qw.bits, qw.shape
    per = 32 // bits
    q = int_matrix(qw.q)
    qweight = [[0] * n for _ in range(k // per)]
    for kk in range(k):
        for nn in range(n):
            qweight[kk // per][nn] |= q[nn][kk] << (bits * (kk % per))
    stored = [[z - zero_point_offset for z in row] for row in int_matrix(qw.zeros.int())]
    assert all(0 <= z < 1 << bits for row in stored for z in row)
    qzeros = []
    for row in stored:
        words = [0] * math.ceil(n / per)
        for nn, z in enumerate(row):
            words[nn // per] |= z << (bits * (nn % per))
        qzeros.append(words)
    g_idx = qw.group_index().to(torch.int32)  # checkpoints always ship one
    as_int32 = lambda rows: torch.tensor([[signed32(w) for w in r] for r in rows], dtype=torch.int32)
    return as_int32(qweight), as_int32(qzeros), qw.scales.clone(), g_idx


def gptq_reference_decode(qweight, qzeros, scales, g_idx, bits, zero_point_offset):
    per, mask = 32 // bits, (1 << bits) - 1
    words, zwords = int_matrix(qweight), int_matrix(qzeros)
    k, n = len(words) * per, len(words[0])
    q = [[(unsigned32(words[kk // per][nn]) >> (bits * (kk % per))) & mask for kk in range(k)] for nn in range(n)]
    zeros = [
        [((unsigned32(row[nn // per]) >> (bits * (nn % per))) & mask) + zero_point_offset for nn in range(n)]
        for row in zwords
    ]
    w = reference_dequant(q, zeros, scales.float().tolist(), g_idx.tolist())
    return q, zeros, w


@pytest.mark.parametrize("act_order", [False, True])
@pytest.mark.parametrize("zero_point_offset", [1, 0])
@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_from_gptq_matches_reference_decoder(act_order, zero_point_offset, bits, dtype):
    top = (1 << bits) - 1
    # classic stores zero - 1, so its zeros span 1 .. 2**bits (16 decodes from a stored 15)
    zero_range = (1, top + 1) if zero_point_offset else (0, top)
    qw = random_quantized(
        20, 128, bits=bits, group_size=32, dtype=dtype, zero_range=zero_range, act_order=act_order,
        seed=24 + bits + zero_point_offset,
    )
    qweight, qzeros, scales, g_idx = gptq_encode(qw, zero_point_offset)
    assert qweight.shape == (128 * bits // 32, 20) and qzeros.shape == (4, math.ceil(20 * bits / 32))
    q_ref, zeros_ref, w_ref = gptq_reference_decode(qweight, qzeros, scales, g_idx, bits, zero_point_offset)
    assert q_ref == int_matrix(qw.q) and zeros_ref == int_matrix(qw.zeros.int())  # the test's own codec

    imported = from_gptq(qweight, qzeros, scales, g_idx, bits=bits, group_size=32, zero_point_offset=zero_point_offset)
    check_same(imported, qw)  # a trivial g_idx (no act-order) comes back as None
    assert torch.equal(imported.dequantize(), w_ref.to(dtype))
    if act_order:
        flat, perm = imported.reordered()
        a = torch.randn(3, 128, generator=gen(25))
        torch.testing.assert_close(a[:, perm] @ flat.dequantize().float().t(), a @ w_ref.to(dtype).float().t())


def test_from_gptq_known_words():
    # K = 8 rows in one word, N = 1: row k holds k; stored zero 7 means 8 (classic) or 7 (v2)
    qweight = torch.tensor([[0x76543210]], dtype=torch.int32)
    qzeros = torch.tensor([[7]], dtype=torch.int32)
    scales = torch.tensor([[0.25]], dtype=torch.float16)
    classic = from_gptq(qweight, qzeros, scales, bits=4, group_size=-1)
    assert classic.q.tolist() == [[0, 1, 2, 3, 4, 5, 6, 7]] and classic.zeros.tolist() == [[8.0]]
    assert classic.symmetric and classic.dequantize().tolist() == [[-2.0, -1.75, -1.5, -1.25, -1.0, -0.75, -0.5, -0.25]]
    v2 = from_gptq(qweight, qzeros, scales, bits=4, group_size=-1, zero_point_offset=0)
    assert v2.zeros.tolist() == [[7.0]] and not v2.symmetric
    # 8 bits: 4 rows per word; bit 31 set in the checkpoint's int32
    q8 = from_gptq(torch.tensor([[signed32(0xF0A01005)]], dtype=torch.int32), qzeros, scales, bits=8, group_size=-1)
    assert q8.q.tolist() == [[0x05, 0x10, 0xA0, 0xF0]]


def test_from_gptq_accepts_int64_g_idx():
    qw = random_quantized(16, 64, bits=4, group_size=32, zero_range=(1, 16), act_order=True, seed=26)
    qweight, qzeros, scales, g_idx = gptq_encode(qw, 1)
    imported = from_gptq(qweight, qzeros, scales, g_idx.long(), group_size=32)
    assert imported.g_idx.dtype == torch.int32 and torch.equal(imported.g_idx, qw.g_idx)


def test_from_gptq_refuses_int64_g_idx_values_that_int32_would_wrap():
    # 2**32 + 1 would become group 1 in the int32 g_idx the kernels read: a wrong weight, silently.
    qw = random_quantized(16, 64, bits=4, group_size=32, zero_range=(1, 16), act_order=True, seed=26)
    qweight, qzeros, scales, g_idx = gptq_encode(qw, 1)
    for wrapped in (2**32 + 1, -(2**32) + 1):
        bad = g_idx.long()
        bad[5] = wrapped
        with pytest.raises(GemmArgumentError, match=r"^g_idx: got values in .*accepted: values in \[0, 1\] \(G = 2\)"):
            from_gptq(qweight, qzeros, scales, bad, group_size=32)


def test_from_gptq_rejects_malformed_checkpoints():
    qw = random_quantized(16, 64, bits=4, group_size=32, zero_range=(1, 16), act_order=True, seed=27)
    qweight, qzeros, scales, g_idx = gptq_encode(qw, 1)
    cases = [
        ({"qweight": qweight.to(torch.int16)}, "qweight"),
        ({"qweight": qweight[:, :8]}, "scales"),  # N from qweight is 8, scales has 16
        ({"qzeros": qzeros.float()}, "qzeros"),
        ({"qzeros": qzeros[:, :1]}, "qzeros"),  # N=16 needs 2 words
        ({"qzeros": qzeros[:1]}, "qzeros"),
        ({"scales": scales[:1]}, "scales"),
        ({"scales": scales.float()}, "scales"),
        ({"g_idx": g_idx[:63]}, "g_idx"),
        ({"g_idx": g_idx.float()}, "g_idx"),
        ({"g_idx": g_idx + 1}, "g_idx"),  # group 2 does not exist
        ({"g_idx": -g_idx - 1}, "g_idx"),
        ({"bits": 3}, "bits"),
        ({"group_size": 100}, "group_size"),
        ({"zero_point_offset": 2}, "zero_point_offset"),
        ({"zero_point_offset": True}, "zero_point_offset"),
        ({"symmetric": True}, "zeros"),
    ]
    for change, argument in cases:
        kwargs = {"qweight": qweight, "qzeros": qzeros, "scales": scales, "g_idx": g_idx, "group_size": 32} | change
        args = [kwargs.pop(name) for name in ("qweight", "qzeros", "scales", "g_idx")]
        with pytest.raises(GemmArgumentError) as e:
            from_gptq(*args, **kwargs)
        assert e.value.argument == argument, change


# --- on the GPU (skipped without one) -----------------------------------------------------------------


@pytest.mark.gpu
def test_quantize_and_import_stay_on_the_device():
    w = rand_weight(64, 256, seed=28).cuda()
    qw = quantize(w, bits=4, group_size=128)
    assert qw.q.is_cuda and qw.scales.is_cuda and qw.zeros.is_cuda and qw.dequantize().is_cuda
    assert float(reconstruction_error(w, qw).max()) <= 0.5 * (1 + 1e-6)
    assert torch.equal(unpack_int32(pack_int32(qw.q, 4), 4, 256), qw.q)
    ref = random_quantized(32, 128, bits=4, group_size=32, zero_range=(1, 16), act_order=True, seed=29)
    tensors = [t.cuda() for t in gptq_encode(ref, 1)]
    imported = from_gptq(*tensors, group_size=32)
    assert imported.q.is_cuda and torch.equal(imported.dequantize().cpu(), ref.dequantize())


def test_dequantize_takes_a_floating_point_dtype():
    """"float32" was read by Tensor.to as a device (RuntimeError: Invalid device string);
    an integer dtype truncated the weights, silently."""
    qw = quantize(torch.randn(16, 64, dtype=torch.float16), group_size=32)
    for dtype in ("float32", torch.int8, torch.int32):
        with pytest.raises(GemmArgumentError, match=r"^dtype: got .*; accepted: None \(the scales' dtype\) or a floating"):
            qw.dequantize(dtype)
    assert qw.dequantize(torch.float32).dtype == torch.float32 and qw.dequantize().dtype == torch.float16


def test_a_g_idx_that_is_no_tensor_is_named():
    """AttributeError ('list' object has no attribute 'device') from the device check."""
    qw = quantize(torch.randn(16, 64, dtype=torch.float16), group_size=32)
    with pytest.raises(GemmArgumentError, match=r"^g_idx: got \[0, 0, .*accepted: a 1-D tensor of dtype torch.int32"):
        QuantizedWeight(qw.q, qw.scales, qw.zeros, 4, 32, False, [0] * 64)


def test_quantize_of_a_weight_that_requires_grad_is_detached():
    # An nn.Linear's weight: the quantized tensors carried its autograd graph, and every
    # check's float() warned.
    weight = torch.nn.Linear(256, 64).half().weight
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        qw = quantize(weight, bits=4, group_size=128)
    assert not (qw.q.requires_grad or qw.scales.requires_grad or qw.zeros.requires_grad)
