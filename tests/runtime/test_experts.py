"""gemm_runtime.experts on the CPU: the routing checks (types, shapes and devices always;
values on request, or with GEMM_CHECK_ROUTING=1) with errors that name the argument, and
the stacked expert weights against the independent per-expert packing, bit-exact both
ways."""

from __future__ import annotations

import pytest
import torch

from gemm_runtime.errors import GemmArgumentError
from gemm_runtime.experts import check_routing, grouped_reference, pack_experts
from gemm_runtime.packed_weight import pack_for_gemm
from gemm_runtime.quant import QuantizedWeight, quantize
from gemm_runtime.settings import override

CPU = torch.device("cpu")


def _offsets(*values: int, dtype: torch.dtype = torch.int32) -> torch.Tensor:
    return torch.tensor(values, dtype=dtype)


def _error(argument: str, needle: str, **kwargs) -> None:
    with pytest.raises(GemmArgumentError) as info:
        check_routing(**kwargs)
    assert info.value.argument == argument, str(info.value)
    assert needle in str(info.value), str(info.value)


def test_a_sorted_and_a_gathered_routing() -> None:
    r = check_routing(_offsets(0, 3, 3, 7), experts=3, rows=8, device=CPU, check_values=True)
    assert r.experts == 3 and r.index is None and r.row_scale is None
    index, scale = torch.tensor([4, 0, 2, 2, 1, 3, 0], dtype=torch.int64), torch.rand(7)
    r = check_routing(_offsets(0, 0, 7, 7, dtype=torch.int64), experts=3, rows=7, device=CPU, tokens=5,
                      index=index, row_scale=scale, check_values=True)  # fmt: skip
    assert r.index is index and r.row_scale is scale


@pytest.mark.parametrize(
    "kwargs, argument, needle",
    [
        ({"offsets": [0, 1]}, "offsets", "a torch.Tensor of int32 or int64"),
        ({"offsets": torch.tensor([0.0, 1.0])}, "offsets.dtype", "int32 or int64"),
        ({"offsets": _offsets(0, 1, 2)}, "offsets.shape", "(2,)"),
        ({"offsets": torch.tensor([[0, 5], [1, 6]], dtype=torch.int32)[:, 0]}, "offsets", "a contiguous tensor"),
        ({"offsets": _offsets(0, 1), "experts": 0}, "experts", "an integer >= 1"),
        ({"offsets": _offsets(0, 1), "index": _offsets(0, 1, 2, 3)}, "tokens", "when index is given"),
        ({"offsets": _offsets(0, 1), "index": _offsets(0, 1), "tokens": 4}, "index.shape", "(4,)"),
        ({"offsets": _offsets(0, 1), "row_scale": torch.ones(4, dtype=torch.int32)}, "row_scale.dtype",
         "float32 or float16 or bfloat16"),
        ({"offsets": _offsets(0, 1), "row_scale": torch.ones(3)}, "row_scale.shape", "(4,)"),
    ],
)
def test_types_and_shapes_are_always_checked(kwargs: dict, argument: str, needle: str) -> None:
    _error(argument, needle, **{"experts": 1, "rows": 4, "device": CPU, **kwargs})


def test_the_device_is_checked() -> None:
    _error("offsets.device", "A's device", offsets=_offsets(0, 1), experts=1, rows=4, device=torch.device("cuda", 0))


@pytest.mark.parametrize(
    "offsets, index, argument, needle",
    [
        ((1, 2, 3), None, "offsets[0]", "0: the first expert's rows start at row 0"),
        ((0, 3, 2), None, "offsets[2]", ">= offsets[1] = 3"),
        ((0, 2, 9), None, "offsets[2]", "<= 8, the rows given"),
        ((0, 4, 8), (0, 1, 2, 3, 4, 5, 6, 7), "index", "a row 7"),
        ((0, 4, 8), (0, 1, -1, 3, 4, 5, 6, 0), "index", "a row -1"),
    ],
)
def test_values_on_request(offsets, index, argument, needle) -> None:
    kwargs = {"offsets": _offsets(*offsets), "experts": 2, "rows": 8, "device": CPU}
    if index is not None:
        kwargs.update(index=_offsets(*index), tokens=7)
    check_routing(**kwargs)  # unchecked: the values are the caller's contract
    _error(argument, needle, check_values=True, **kwargs)
    with override(check_routing=True):
        _error(argument, needle, **kwargs)


def test_index_entries_past_the_offsets_are_not_read() -> None:
    """Rows beyond offsets[E] are capacity the routing did not fill: their index entries
    are never read, so garbage there is not an error."""
    check_routing(_offsets(0, 2, 3), experts=2, rows=5, device=CPU, tokens=4,
                  index=_offsets(3, 0, 1, 99, -5), check_values=True)  # fmt: skip


def _experts(bits: int, group: int, symmetric: bool, n: int = 40, k: int = 200, e: int = 3) -> list[QuantizedWeight]:
    gen = torch.Generator().manual_seed(bits * 100 + group + e)
    return [quantize(torch.randn(n, k, generator=gen).to(torch.float16), bits=bits, group_size=group,
                     symmetric=symmetric) for _ in range(e)]  # fmt: skip


@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize("group", [32, 128, -1])
@pytest.mark.parametrize("bits", [4, 8])
def test_stacked_experts_round_trip(bits: int, group: int, symmetric: bool) -> None:
    weights = _experts(bits, group, symmetric)
    stacked = pack_experts(weights)
    assert stacked.experts == 3 and stacked.dtype == torch.float16
    for e, w in enumerate(weights):
        alone = pack_for_gemm(w)
        assert torch.equal(stacked.expert(e).b, alone.b) and torch.equal(stacked.expert(e).v, alone.v)
        mine = stacked.expert(e)
        assert (mine.n, mine.k, mine.groups, mine.group_shift, mine.bits, mine.symmetric) == (
            alone.n, alone.k, alone.groups, alone.group_shift, alone.bits, alone.symmetric)  # fmt: skip
    for w, back in zip(weights, stacked.unpack()):
        assert torch.equal(back.q, w.q) and torch.equal(back.scales, w.scales) and torch.equal(back.zeros, w.zeros)
    assert stacked.b.stride(0) == stacked.b[0].numel()  # one fixed stride from expert to expert


def test_stacking_refuses_mismatched_experts() -> None:
    base = _experts(4, 128, False, e=2)
    cases = [
        ([base[0], _experts(4, 128, False, n=48, e=1)[0]], "weights[1].shape", "(40, 200), as weights[0]"),
        ([base[0], _experts(8, 128, False, e=1)[0]], "weights[1].bits", "4, as weights[0]"),
        ([base[0], _experts(4, 32, False, e=1)[0]], "weights[1].group_size", "128, as weights[0]"),
        ([base[0], _experts(4, 128, True, e=1)[0]], "weights[1].symmetric", "False, as weights[0]"),
        ([base[0], "w"], "weights[1]", "a gemm_runtime.quant.QuantizedWeight"),
        ([], "weights", "a non-empty sequence"),
    ]
    for weights, argument, needle in cases:
        with pytest.raises(GemmArgumentError) as info:
            pack_experts(weights)
        assert info.value.argument == argument and needle in str(info.value), str(info.value)
    bf16 = base[1]
    bf16 = QuantizedWeight(bf16.q, bf16.scales.bfloat16(), bf16.zeros.bfloat16(), 4, 128, False)
    with pytest.raises(GemmArgumentError, match=r"weights\[1\].scales.dtype"):
        pack_experts([base[0], bf16])
    act_order = QuantizedWeight(base[1].q, base[1].scales, base[1].zeros, 4, 128, False,
                                g_idx=(torch.arange(200, dtype=torch.int32) % 2))  # fmt: skip
    with pytest.raises(GemmArgumentError, match=r"weights\[1\].g_idx"):
        pack_experts([base[0], act_order])
    with pytest.raises(GemmArgumentError, match="an expert, 0 .. 1"):
        pack_experts(base).expert(2)


# ---- grouped_reference: the grouped GEMM's semantics, row by row -----------------------


def _row_by_row(a, w, starts, index, scale, bias, alpha, beta, c, gated):
    """Each row on its own: its expert found by scanning the offsets, its product a
    vector-matrix product in float64."""
    rows = len(index) if index is not None else a.shape[0]
    n = w.shape[1]
    out = torch.zeros(rows, n // 2 if gated else n, dtype=torch.float64)
    for r in range(rows):
        experts = [e for e in range(len(starts) - 1) if starts[e] <= r < starts[e + 1]]
        if not experts:
            continue
        (e,) = experts
        x = a[index[r] if index is not None else r].double()
        v = alpha * (w[e].double() @ x)
        if bias is not None:
            v = v + bias[e].double()
        if gated:
            g, u = v[0::2], v[1::2]
            v = g / (1 + torch.exp(-g)) * u
        if scale is not None:
            v = v * float(scale[r])
        if c is not None:
            v = v + beta * c[r].double()
        out[r] = v
    return out


@pytest.mark.parametrize(
    "starts",
    [(0, 3, 3, 7), (0, 0, 1, 1), (0, 9, 9, 9), (0, 2, 5, 6)],
    ids=["uneven-with-an-empty-expert", "one-row", "one-expert-holds-all", "rows-past-the-end"],
)
@pytest.mark.parametrize("gathered", [False, True], ids=["sorted", "gathered"])
@pytest.mark.parametrize("gated", [False, True], ids=["plain", "gated"])
def test_grouped_reference_is_each_rows_own_product(starts, gathered, gated) -> None:
    gen = torch.Generator().manual_seed(hash((starts, gathered, gated)) % 2**31)
    experts, n, k, tokens = len(starts) - 1, 6, 5, 4
    rows = 9
    a = torch.randn(tokens if gathered else rows, k, generator=gen).half()
    w = torch.randn(experts, n, k, generator=gen).half()
    index = torch.randint(0, tokens, (rows,), generator=gen) if gathered else None
    scale = torch.rand(rows, generator=gen) + 0.5
    bias = torch.randn(experts, n, generator=gen).half()
    c = torch.randn(rows, n // 2 if gated else n, generator=gen).half()
    routing = check_routing(torch.tensor(starts, dtype=torch.int32), experts=experts, rows=rows, device=CPU,
                            tokens=tokens if gathered else None, index=index, row_scale=scale,
                            check_values=True)  # fmt: skip
    got = grouped_reference(a, w, routing, bias=bias, alpha=0.5, beta=0.25, c=c, gated=gated)
    want = _row_by_row(a, w, starts, index, scale, bias, 0.5, 0.25, c, gated)
    assert got.dtype == torch.float32 and got.shape == want.shape
    assert torch.allclose(got.double(), want, rtol=1e-4, atol=1e-4), (got - want).abs().max()
    # Rows past offsets[E] belong to no expert: zero, whatever C holds.
    assert not got[starts[-1]:].any()


def test_grouped_reference_refuses_a_routing_for_other_experts() -> None:
    routing = check_routing(_offsets(0, 1, 2), experts=2, rows=2, device=CPU)
    with pytest.raises(GemmArgumentError) as info:
        grouped_reference(torch.randn(2, 4), torch.randn(3, 5, 4), routing)
    assert info.value.argument == "routing.offsets" and "4:" in str(info.value)



def test_grouped_reference_checks_the_shapes_torch_would_broadcast() -> None:
    # A bias of [N] (not [E, N]) used to be read as one value per expert, added to every
    # column: a wrong answer, not an error.
    x, w = torch.randn(5, 32), torch.randn(2, 24, 32)
    routing = check_routing(_offsets(0, 2, 5), experts=2, rows=5, device=CPU)
    with pytest.raises(GemmArgumentError, match=r"bias: got shape \(24,\); accepted: \(2, 24\): one row per expert"):
        grouped_reference(x, w, routing, bias=torch.randn(24))
    with pytest.raises(GemmArgumentError, match=r"x.shape: got \(5, 31\); accepted: \(rows, 32\)"):
        grouped_reference(torch.randn(5, 31), w, routing)
    with pytest.raises(GemmArgumentError, match="w: got N = 23; accepted: an even N"):
        grouped_reference(x, torch.randn(2, 23, 32), routing, gated=True)


def test_grouped_reference_names_its_other_arguments() -> None:
    """Quantized experts (its docstring: dequantize first) and a Routing passed as a tuple
    failed inside with AttributeError; a C of the wrong rows in torch's broadcast."""
    x, w = torch.randn(5, 32), torch.randn(2, 24, 32)
    routing = check_routing(_offsets(0, 2, 5), experts=2, rows=5, device=CPU)
    packed = pack_experts([quantize(e, bits=4, group_size=32) for e in w])
    with pytest.raises(GemmArgumentError, match=r"^weights: got PackedExperts; accepted: .*PackedExperts.dequantize\(\)"):
        grouped_reference(x, packed, routing)
    with pytest.raises(GemmArgumentError, match=r"^routing: got tuple; accepted: an experts.Routing"):
        grouped_reference(x, w, (routing.offsets, None, None))
    with pytest.raises(GemmArgumentError, match=r"^c.shape: got \(3, 24\); accepted: \(5, 24\)"):
        grouped_reference(x, w, routing, c=torch.randn(3, 24), beta=1.0)
    assert grouped_reference(x, packed.dequantize(torch.float32), routing).shape == (5, 24)
