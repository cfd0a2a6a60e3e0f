"""gemm_runtime.grouped on the CPU: a grouped launch's arguments checked with errors that
name them, A gathered and the routing normalized for the kernels, the cost model's stand-in
problem, the choice among grouped kernels and the packed parameter block."""

from __future__ import annotations

import dataclasses
import math
from types import SimpleNamespace

import pytest
import torch

from codegen.params import PARAM_NAMES, PARAM_STRUCT, block_bytes
from codegen.families import Mainloop
from codegen.vocabulary import BOrder, DataType, MmaAtom
from gemm_runtime.cost_model import DeviceModel
from gemm_runtime.errors import GemmArgumentError
from gemm_runtime.launch import EPILOGUE_TMA_STORE
from gemm_runtime import grouped
from gemm_runtime.context import infeasible_reason
from gemm_runtime.cost_model import (expected_experts_touched, expected_tile_rows, grouped_pricing_key,
                                     grouped_scan_seconds, predict, tiles_of)
from gemm_runtime.errors import UnsupportedProblemError
from gemm_runtime.grouped import grouped_key, grouped_operands, launch_block
from gemm_runtime.plan import LaunchSpec
from tests.helpers import spec_for

E, N, K, TOKENS = 4, 48, 32, 10


def _tile_rows(cta_m: int, rows: int = TOKENS, experts: int = E) -> int:
    """The launch's bound on the experts' tile rows (cost_model.tiles_of)."""
    return (rows + min(experts, rows) * (cta_m - 1)) // cta_m


def _args(**overrides):
    gen = torch.Generator().manual_seed(0)
    args = dict(
        x=torch.randn(TOKENS, K, generator=gen).half(),
        w=torch.randn(E, N, K, generator=gen).half(),
        offsets=torch.tensor([0, 3, 3, 7, 9], dtype=torch.int32),
    )
    args.update(overrides)
    return args


def _error(argument: str, needle: str, **overrides) -> None:
    args = _args(**overrides)
    x, w, offsets = args.pop("x"), args.pop("w"), args.pop("offsets")
    with pytest.raises(GemmArgumentError) as info:
        grouped_operands(x, w, offsets, **args)
    assert info.value.argument == argument, str(info.value)
    assert needle in str(info.value), str(info.value)


def test_sorted_rows_pass_through_and_d_is_allocated() -> None:
    args = _args()
    ops = grouped_operands(args["x"], args["w"], args["offsets"])
    assert ops.a is args["x"] and ops.routing.index is None and ops.routing.row_scale is None
    assert tuple(ops.out.shape) == (TOKENS, N) and ops.out.dtype == torch.float16
    assert (ops.experts, ops.rows, ops.n, ops.k, ops.dtype) == (E, TOKENS, N, K, DataType.F16)
    gated = grouped_operands(args["x"], args["w"], args["offsets"], gated=True)
    assert tuple(gated.out.shape) == (TOKENS, N // 2)


def test_an_index_is_passed_to_the_kernels_and_the_routing_made_what_they_read() -> None:
    args = _args()
    index = torch.tensor([9, 0, 0, 4, 2, 7, 1, 3, 5], dtype=torch.int64)
    scale = torch.rand(9).bfloat16()
    ops = grouped_operands(args["x"], args["w"], args["offsets"].long(), index=index, row_scale=scale, check_values=True)
    assert ops.a is args["x"] and ops.rows == 9  # the kernels gather: A stays the token matrix
    assert ops.routing.index.dtype == torch.int32 and ops.routing.index.tolist() == index.tolist()
    assert ops.routing.offsets.dtype == torch.int32 and ops.routing.offsets.tolist() == [0, 3, 3, 7, 9]
    assert ops.routing.row_scale.dtype == torch.float32 and torch.equal(ops.routing.row_scale, scale.float())
    assert tuple(ops.out.shape) == (9, N)


def test_beta_counts_only_with_c() -> None:
    args = _args()
    assert grouped_operands(args["x"], args["w"], args["offsets"], beta=0.5).beta == 0.0
    c = torch.randn(TOKENS, N).half()
    assert grouped_operands(args["x"], args["w"], args["offsets"], beta=0.5, c=c).beta == 0.5


def test_bad_arguments_are_named() -> None:
    _error("x", "torch.float16 or torch.bfloat16", x=torch.randn(TOKENS, K))
    _error("w.shape", "3 dimensions", w=torch.randn(N, K).half())
    _error("w.dtype", "x's dtype", w=torch.randn(E, N, K).bfloat16())
    _error("x.shape", f"(rows, {K})", x=torch.randn(TOKENS, K + 8).half())
    _error("w", "an even N", w=torch.randn(E, N + 1, K).half(), gated=True)
    _error("x", "16-byte vectors", x=torch.randn(TOKENS, 2 * K).half()[:, ::2])
    _error("w", "one after another", w=torch.randn(E, 2 * N, K).half()[:, :N])
    _error("offsets.shape", f"({E + 1},)", offsets=torch.tensor([0, 9], dtype=torch.int32))
    _error("bias", f"({E}, {N})", bias=torch.randn(N, N).half())
    _error("c.shape", f"({TOKENS}, {N})", c=torch.randn(TOKENS, N + 8).half())
    _error("out.shape", f"({TOKENS}, {N // 2})", out=torch.empty(TOKENS, N).half(), gated=True)
    _error("offsets[4]", f"<= {TOKENS}", offsets=torch.tensor([0, 3, 3, 7, 11], dtype=torch.int32), check_values=True)


@pytest.mark.parametrize("gated", ["False", 1, None])
def test_gated_must_be_a_bool(gated) -> None:
    # "False" is truthy: taken as is, it would switch the gated epilogue on and halve the output.
    _error("gated", "accepted: True or False", gated=gated)


def test_the_touched_experts_expected_from_the_row_count() -> None:
    assert expected_experts_touched(0, 64) == 0.0
    assert expected_experts_touched(1, 64) == pytest.approx(1.0)
    assert expected_experts_touched(6, 64) == pytest.approx(64 * (1 - (63 / 64) ** 6))
    assert expected_experts_touched(100_000, 8) == pytest.approx(8.0)


def test_the_dispatch_key_holds_experts_shape_epilogue_and_rows() -> None:
    args = _args()
    bias = torch.randn(E, N).half()
    for kwargs, epilogue in (({}, "none"), ({"bias": bias}, "bias"), ({"gated": True}, "gated_silu"),
                             ({"bias": bias, "gated": True}, "bias_gated_silu")):  # fmt: skip
        key = grouped_key(grouped_operands(args["x"], args["w"], args["offsets"], **kwargs), 90)
        assert (key.arch, key.experts, key.n, key.k, key.m, key.epilogue) == (90, E, N, K, TOKENS, epilogue)
        assert key.b_order is BOrder.NK and key.quant == "none" and key.align == 8
        key.validate()
    # The gathered rows are the index's, not x's.
    index = torch.arange(3, dtype=torch.int32).repeat(4)
    gathered = grouped_operands(args["x"], args["w"], torch.tensor([0, 3, 3, 7, 12], dtype=torch.int32), index=index)
    assert grouped_key(gathered, 90).m == 12


def test_the_cost_model_prices_a_grouped_key_as_the_touched_weights_side_by_side() -> None:
    key = grouped_key(grouped_operands(**_args()), 90)
    priced = grouped_pricing_key(key)
    touched = expected_experts_touched(TOKENS, E)
    assert (priced.n, priced.k, priced.m, priced.experts) == (N * math.ceil(touched), K, round(TOKENS / touched), 0)
    device = DeviceModel(132, 1e12, 4e12)
    sm80 = spec_for(cta=(16, 64, 128), warps=(1, 2, 2), grouped=True)
    assert predict(sm80, 4, device, key) == predict(sm80, 4, device, priced)
    # A split's added waves of CTAs pay the experts' scan. Qwen-MoE-like decode: 6 rows
    # over 64 experts (two rounds of the scan), N = 2816 in 64-column tiles: 7 x 44 = 308
    # CTAs, two waves of 264 slots unsplit, three split 2, five split 4.
    # Priced for quantized experts (fitted there); dense kernels' latency term prices them.
    w4 = spec_for(cta=(16, 64, 128), warps=(1, 2, 2), grouped=True, b_type=DataType.U4)
    decode = key._replace(m=6, n=2816, k=2048, experts=64, b_type=DataType.U4, quant="u4g128")
    assert grouped_scan_seconds(w4, decode, 1, 264) == 0
    assert grouped_scan_seconds(w4, decode, 2, 264) == pytest.approx(1 * 2 * 1.5e-6)
    assert grouped_scan_seconds(w4, decode, 4, 264) == pytest.approx(3 * 2 * 1.5e-6)
    assert grouped_scan_seconds(sm80, decode, 4, 264) == 0
    assert predict(w4, 4, device, decode, 2) == pytest.approx(
        predict(w4, 4, device, grouped_pricing_key(decode), 2) + grouped_scan_seconds(w4, decode, 2, 132 * 4))


def test_partial_last_tiles_are_priced_by_the_spread_of_the_experts_rows() -> None:
    """An expert's partial last tile costs a whole one: 256 +- 16 rows take 2.5 tiles of
    128 rows on average, 200 +- 14 two, decode's few rows one; the grouped price widens N
    by the excess over the mean's whole tiles, so the 64-row tile wastes less."""
    assert expected_tile_rows(256, 8, 128) == pytest.approx(2.5)
    assert expected_tile_rows(256, 8, 64) == pytest.approx(4.5)
    assert expected_tile_rows(200, 8, 128) == 2
    assert expected_tile_rows(2, 8, 16) == 1
    assert expected_tile_rows(0, 8, 16) == 0
    device = DeviceModel(132, 1e12, 4e12)
    # Mixtral-like down at 1024 tokens: 2048 rows over 8 experts.
    key = grouped_key(grouped_operands(**_args()), 90)._replace(m=2048, n=4096, k=14336, experts=8)
    wide, narrow = _sm90_spec(), _sm90_spec(cta=(64, 256, 64))
    priced = grouped_pricing_key(key)
    # 128-row tiles: 2.5 expected tile rows against the mean's 2, the 64-row ones 4.5 against 4.
    assert predict(wide, 1, device, key) > predict(wide, 1, device, priced)
    assert predict(wide, 1, device, key) == pytest.approx(
        predict(wide, 1, device, priced._replace(n=round(priced.n * 2.5 / 2))))
    assert predict(narrow, 1, device, key) == pytest.approx(
        predict(narrow, 1, device, priced._replace(n=round(priced.n * 4.5 / 4))))


H200 = DeviceModel.of(90, 132, 1980000, 3201000, 6144)


def _kernel(spec, ctas_per_sm=1):
    return SimpleNamespace(name=spec.name, spec=spec, ctas_per_sm=ctas_per_sm)


def _dispatcher(kernels):
    from gemm_runtime.dispatch_cache import DispatchCache
    from gemm_runtime.dispatcher import Dispatcher

    return Dispatcher(kernels, H200, DispatchCache(90), (1 << 20, 1 << 24))


def test_dispatch_ranks_grouped_kernels_of_the_dtype() -> None:
    """Grouped keys rank grouped kernels only, split where the family splits them (sm80,
    sm90), rasterized only where the family is persistent (sm90); dense keys never see
    grouped kernels."""
    plain = _kernel(spec_for())
    bf16 = _kernel(spec_for(a_type=DataType.BF16, b_type=DataType.BF16, d_type=DataType.BF16, grouped=True))
    small = _kernel(spec_for(cta=(16, 64, 128), warps=(1, 2, 2), grouped=True), 4)
    tma = _kernel(_sm90_spec())
    d = _dispatcher([plain, bf16, small, tma])
    key = grouped_key(grouped_operands(**_args()), 90)._replace(m=4096, n=4096, k=4096)
    ranked = [plan for _, plan in d.ranked(key)]
    assert {p.kernel for p in ranked} == {small.spec.name, tma.spec.name}
    # Decode: two experts' rows against a long K, both families split.
    decode = key._replace(m=2, n=4096, k=14336, experts=8)
    assert {p.splits for _, p in d.ranked(decode) if p.kernel == small.spec.name} > {1}
    assert {p.splits for _, p in d.ranked(decode) if p.kernel == tma.spec.name} > {1}
    assert {p.swizzle for p in ranked if p.kernel == small.spec.name} == {0}
    assert len({p.swizzle for p in ranked if p.kernel == tma.spec.name}) > 1
    dense = key._replace(experts=0)
    assert {p.kernel for _, p in d.ranked(dense)} == {plain.spec.name}
    # A forced launch is checked like any other: a dense kernel, a split, a swizzle the family ignores.
    with pytest.raises(GemmArgumentError, match="not a grouped kernel"):
        d.forced(LaunchSpec(plain.spec.name), key, d.default_workspace)
    # A split's workspace covers the tiles of the launch's bound on the tile rows.
    with pytest.raises(GemmArgumentError, match=f"for the {_tile_rows(16, 4096) * 4096 // 64} tiles that split"):
        d.forced(LaunchSpec(small.spec.name, 2), key, d.default_workspace)
    assert d.forced(LaunchSpec(small.spec.name, 2), decode, d.default_workspace).splits == 2
    with pytest.raises(GemmArgumentError, match="kernel.swizzle"):
        d.forced(LaunchSpec(small.spec.name, 1, 2), key, d.default_workspace)
    with pytest.raises(UnsupportedProblemError):
        _dispatcher([plain, bf16]).ranked(key)


def test_few_rows_per_expert_rank_the_sm80_grouped_kernels_first() -> None:
    """Below 64 rows per touched expert the TMA kernels are priced up (bench.moe: the
    sm80 grouped kernels were faster there); at prefill sizes they lead."""
    small = _kernel(spec_for(cta=(16, 64, 128), warps=(1, 2, 2), grouped=True), 4)
    tma = _kernel(_sm90_spec())
    d = _dispatcher([small, tma, _kernel(_sm90_spec(cta=(64, 128, 64)))])
    # Qwen-MoE-like gate_up at 16 and 8192 tokens (top-6 of 64 experts).
    base = grouped_key(grouped_operands(**_args()), 90)._replace(n=2816, k=2048, experts=64)
    assert d.select(base._replace(m=96)).kernel == small.spec.name
    assert d.select(base._replace(m=49152)).kernel == tma.spec.name


def test_a_grouped_decision_survives_export_and_import(tmp_path) -> None:
    from gemm_runtime.dispatch_cache import DispatchCache

    small = spec_for(cta=(16, 64, 128), warps=(1, 2, 2), grouped=True)
    key = grouped_key(grouped_operands(**_args()), 90)
    cache = DispatchCache(90)
    cache.put(key, LaunchSpec(small.name))
    cache.export(tmp_path / "c.json")
    back = DispatchCache(90)
    report = back.import_(tmp_path / "c.json", {small.name: small})
    assert report.added == 1 and back.get(key) == LaunchSpec(small.name)
    # A dense kernel recorded for a grouped key (a hand-edited file) is skipped, with a warning.
    plain = spec_for()
    bad = DispatchCache(90)
    with pytest.warns(Warning):
        report = bad.import_(_swap_kernel(tmp_path / "c.json", small.name, plain.name), {plain.name: plain})
    assert report.added == 0 and len(bad) == 0


def _swap_kernel(path, old, new):
    text = path.read_text().replace(old, new)
    out = path.with_name("swapped.json")
    out.write_text(text)
    return out


def test_keys_of_older_exports_are_dense() -> None:
    from gemm_runtime.context import ProblemKey

    key = grouped_key(grouped_operands(**_args()), 90)
    data = key._replace(experts=0).to_json()
    del data["experts"]
    assert ProblemKey.from_json(data) == key._replace(experts=0)
    with pytest.raises(ValueError, match="experts"):
        key._replace(experts=-1).validate()
    with pytest.raises(ValueError, match="grouped key"):
        key._replace(d_type=DataType.F32).validate()


def test_the_parameter_block_and_the_grid() -> None:
    args = _args()
    scale = torch.rand(TOKENS)
    bias = torch.randn(E, N).half()
    ops = grouped_operands(args["x"], args["w"], args["offsets"], row_scale=scale, bias=bias, gated=True, alpha=2.0)
    spec = spec_for(cta=(16, 64, 128), warps=(1, 2, 2), grouped=True)
    kernel = SimpleNamespace(spec=spec, resident=132)
    grid, block = launch_block(kernel, ops)
    assert grid == (_tile_rows(16), math.ceil(N / 64), 1)
    p = dict(zip(PARAM_NAMES, PARAM_STRUCT.unpack(block)))
    assert (p["A"], p["B"], p["D"]) == (ops.a.data_ptr(), ops.w.data_ptr(), ops.out.data_ptr())
    assert (p["U"], p["bias"], p["offsets"]) == (scale.data_ptr(), bias.data_ptr(), ops.routing.offsets.data_ptr())
    assert p["gather"] == 0
    index = torch.arange(TOKENS - 1, -1, -1, dtype=torch.int32)
    gathered = grouped_operands(args["x"], args["w"], args["offsets"], index=index)
    _, block = launch_block(kernel, gathered)
    q = dict(zip(PARAM_NAMES, PARAM_STRUCT.unpack(block)))
    assert (q["gather"], q["A"], q["lda"]) == (index.data_ptr(), args["x"].data_ptr(), K)
    assert (p["lda"], p["ldb"], p["ldd"]) == (K, K, N // 2)
    assert (p["M"], p["N"], p["K"], p["experts"], p["splits"], p["swizzle"]) == (TOKENS, N, K, E, 1, 0)
    assert (p["tiles_m"], p["tiles_n"], p["k_tiles_per_split"]) == (grid[0], grid[1], 1)
    assert p["epilogue"] == 3 and p["alpha"] == 2.0 and p["beta"] == 0.0 and p["C"] == 0


def _sm90_spec(cta=(128, 256, 64), **overrides):
    return spec_for(mainloop=Mainloop.SM90, mma=MmaAtom.M64NK16, cta=cta, warps=(cta[0] // 16, 1, 1), stages=4,
                    arch_min=90, arch_max=90, grouped=True, **overrides)  # fmt: skip


def test_the_sm90_grouped_workspace_covers_any_real_tile_count_up_to_the_bound() -> None:
    """The persistent grouped kernel schedules the experts' real tile rows, which only the
    device knows: the tiles past whole rounds of its grid are at most grid - 1 of them,
    or all of the bound's where it has fewer."""
    spec = _sm90_spec()
    family = spec.mainloop
    assert family.max_splits(spec) is None
    assert family.split_tiles(spec, (24, 16), 2, 132) == 131  # 384 bound tiles; e.g. 263 real leave 131
    assert family.split_tiles(spec, (3, 16), 2, 132) == 48  # fewer than a round: all of them
    assert family.partial_tiles(spec, (24, 16), 5, 132) == 4 * 129  # a grid of 130 CTAs (a multiple of 5)
    assert family.split_tiles(spec, (24, 16), 1, 132) == 0


def test_a_quantized_grouped_sm90_kernel_takes_no_split() -> None:
    spec = spec_for(mainloop=Mainloop.SM90_QUANT, mma=MmaAtom.M64NK16, cta=(64, 128, 64), warps=(1, 8, 1), stages=8,
                    arch_min=90, arch_max=90, b_type=DataType.U4, grouped=True)  # fmt: skip
    d = _dispatcher([_kernel(spec)])
    key = grouped_key(grouped_operands(torch.randn(TOKENS, QK).half(), _packed(), torch.tensor([0, 3, 3, 7, 9],
                                                                                               dtype=torch.int32)), 90)  # fmt: skip
    assert {p.splits for _, p in d.ranked(key)} == {1}
    with pytest.raises(GemmArgumentError, match=r"kernel.splits: got 2; accepted: 1 \(this kernel takes no split-K\)"):
        d.forced(LaunchSpec(spec.name, 2), key, d.default_workspace)


def test_a_split_launch_covers_the_bound_in_z_with_the_workspace() -> None:
    ops = grouped_operands(**_args(w=torch.randn(E, N, 3 * 128).half(), x=torch.randn(TOKENS, 3 * 128).half()))
    spec = spec_for(cta=(16, 64, 128), warps=(1, 2, 2), grouped=True)
    bound = _tile_rows(16)
    assert tiles_of(spec, grouped_key(ops, 90)) == (bound, math.ceil(N / 64))
    # No more experts than rows have any: one token's 6 rows over 64 experts, 6 tile rows.
    assert tiles_of(spec, grouped_key(ops, 90)._replace(m=6, experts=64))[0] == 6
    grid, block = launch_block(SimpleNamespace(spec=spec, resident=132), ops, splits=2, semaphores=1024, partials=4096)
    assert grid == (bound, math.ceil(N / 64), 2)
    p = dict(zip(PARAM_NAMES, PARAM_STRUCT.unpack(block)))
    assert (p["splits"], p["k_tiles_per_split"], p["semaphores"], p["partials"]) == (2, 2, 1024, 4096)


@pytest.fixture
def encoded(monkeypatch) -> list:
    """The tensor maps grouped launches encode, in order (the encoder replaced by one
    that records them and writes each address 16 times; grouped launches keep one per
    geometry, so it records each call at its address)."""
    maps = []

    class FakeEncoder:
        def __init__(self, tmap):
            self.tmap = tmap

        def __call__(self, address):
            maps.append(dataclasses.replace(self.tmap, address=address))
            return address.to_bytes(8, "little") * 16

    monkeypatch.setattr(grouped, "Encoder", FakeEncoder)
    monkeypatch.setattr(grouped, "_encoders", type(grouped._encoders)())  # none of the real ones
    return maps


def test_the_sm90_block_sorts_gathered_rows_and_maps_the_stacked_weights(encoded) -> None:
    """The TMA kernels: a persistent grid, the tile rows' bound in groups of 2^swizzle, A
    the sorted rows (no gather pointer), B one [E * N, K] matrix, no map for D."""
    args = _args()
    index = torch.arange(TOKENS - 1, -1, -1, dtype=torch.int32)
    ops = grouped_operands(args["x"], args["w"], args["offsets"], index=index)
    spec = _sm90_spec()
    kernel = SimpleNamespace(spec=spec, resident=132)
    assert spec.mainloop.reads_a_by_tma(spec)
    with pytest.raises(ValueError, match="sorted rows"):
        launch_block(kernel, ops)
    sorted_a = args["x"][index.long()]
    grid, block = launch_block(kernel, ops, sorted_a)
    offset = spec.mainloop.params_offset(spec)
    assert len(block) == block_bytes(offset)
    p = dict(zip(PARAM_NAMES, PARAM_STRUCT.unpack(block[offset:offset + PARAM_STRUCT.size])))
    tiles_m = _tile_rows(128)
    assert grid == (min(tiles_m * math.ceil(N / 256), 132), 1, 1)
    assert (p["A"], p["gather"], p["tiles_m"], p["swizzle"]) == (sorted_a.data_ptr(), 0, tiles_m, 3)
    a_map, b_map, d_map = encoded
    assert (a_map.address, a_map.rows, a_map.cols, a_map.box_rows, a_map.box_cols) == (
        sorted_a.data_ptr(), TOKENS, K, 16, 64)  # fmt: skip
    assert (b_map.address, b_map.rows, b_map.cols, b_map.box_rows) == (args["w"].data_ptr(), E * N, K, 256)
    # D over all rows; the kernel stores through it the boxes of one expert's rows.
    assert (d_map.address, d_map.rows, d_map.cols, d_map.box_rows) == (ops.out.data_ptr(), TOKENS, N, 64)
    assert p["epilogue"] & EPILOGUE_TMA_STORE
    # D rows that are not whole 16-byte chunks: no map, and the kernel stores directly.
    encoded.clear()
    narrow = grouped_operands(args["x"], args["w"][:, :44].contiguous(), args["offsets"], index=index)
    _, block = launch_block(kernel, narrow, sorted_a)
    p = dict(zip(PARAM_NAMES, PARAM_STRUCT.unpack(block[offset:offset + PARAM_STRUCT.size])))
    assert len(encoded) == 2 and block[256:384] == bytes(128) and not p["epilogue"] & EPILOGUE_TMA_STORE
    # A grid of few tiles holds no idle CTAs.
    small = SimpleNamespace(spec=spec, resident=2)
    assert launch_block(small, ops, sorted_a)[0] == (2, 1, 1)


def test_grouped_launches_share_an_encoder_per_geometry(monkeypatch) -> None:
    """A second launch of the same operands asks the driver for no descriptor; one whose
    output moved asks for that one only; each block carries its own addresses."""
    fake = pytest.importorskip("tests.runtime.fake_tensor_map")
    drv = fake.fake_driver(monkeypatch)
    monkeypatch.setattr(grouped, "_encoders", type(grouped._encoders)())
    args = _args()
    ops = grouped_operands(args["x"], args["w"], args["offsets"])
    kernel = SimpleNamespace(spec=_sm90_spec(), resident=132)
    _, first = launch_block(kernel, ops, args["x"])
    assert [c["address"] for c in drv.calls] == [args["x"].data_ptr(), args["w"].data_ptr(), ops.out.data_ptr()]
    _, again = launch_block(kernel, ops, args["x"])
    assert len(drv.calls) == 3 and again == first
    moved = dataclasses.replace(ops, out=torch.empty_like(ops.out))
    _, block = launch_block(kernel, moved, args["x"])
    assert [c["address"] for c in drv.calls[3:]] == [moved.out.data_ptr()]
    assert fake.decode(block[256:384])["address"] == moved.out.data_ptr() and block[:256] == first[:256]


def test_the_sm90_form_refuses_what_tma_cannot_describe() -> None:
    key = grouped_key(grouped_operands(**_args()), 90)._replace(k=0)
    assert "K = 0" in infeasible_reason(_sm90_spec(), key)
    assert infeasible_reason(spec_for(grouped=True), key) is None


# ---- quantized experts ------------------------------------------------------------------

QK = 64  # K of the quantized experts: two groups of 32


def _packed(bits=4, group_size=32, dtype=torch.float16, n=N):
    from gemm_runtime.experts import pack_experts
    from gemm_runtime.quant import quantize

    gen = torch.Generator().manual_seed(1)
    return pack_experts([quantize(torch.randn(n, QK, generator=gen).to(dtype), bits=bits, group_size=group_size)
                         for _ in range(E)])  # fmt: skip


def _packed_ops(w, dtype=torch.float16, **kwargs):
    x = torch.randn(TOKENS, QK, generator=torch.Generator().manual_seed(2)).to(dtype)
    return grouped_operands(x, w, torch.tensor([0, 3, 3, 7, 9], dtype=torch.int32), **kwargs)


def test_quantized_experts_key_their_bits_and_group_size() -> None:
    ops = _packed_ops(_packed())
    assert (ops.experts, ops.n, ops.k, ops.packed is not None) == (E, N, QK, True)
    key = grouped_key(ops, 90)
    assert (key.b_type, key.quant, key.n, key.k, key.experts) == (DataType.U4, "u4g32", N, QK, E)
    key.validate()
    # One group over K is spelled with K as its size, as dense quantized keys spell it.
    whole = grouped_key(_packed_ops(_packed(bits=8, group_size=-1, dtype=torch.bfloat16), torch.bfloat16), 90)
    assert (whole.a_type, whole.b_type, whole.quant) == (DataType.BF16, DataType.U8, f"u8g{QK}")
    whole.validate()
    # Only quantized grouped kernels serve it, of its bits.
    w4 = spec_for(cta=(16, 128, 128), warps=(1, 4, 1), b_type=DataType.U4, grouped=True)
    w8 = spec_for(cta=(16, 128, 128), warps=(1, 4, 1), b_type=DataType.U8, grouped=True)
    dense = spec_for(cta=(16, 64, 128), warps=(1, 2, 2), grouped=True)
    assert infeasible_reason(w4, key) is None
    assert "operand type" in infeasible_reason(w8, key) and "operand type" in infeasible_reason(dense, key)
    assert "not a grouped kernel" in infeasible_reason(spec_for(cta=(16, 128, 128), warps=(1, 4, 1),
                                                                b_type=DataType.U4), key)  # fmt: skip


def test_the_quantized_parameter_block_points_at_the_stacked_blocks_and_scales() -> None:
    w = _packed()
    scale = torch.rand(TOKENS)
    ops = _packed_ops(w, row_scale=scale, gated=True)
    spec = spec_for(cta=(16, 128, 128), warps=(1, 4, 1), b_type=DataType.U4, grouped=True)
    grid, block = launch_block(SimpleNamespace(spec=spec, resident=132), ops)
    assert grid == (_tile_rows(16), math.ceil(N / 128), 1)
    p = dict(zip(PARAM_NAMES, PARAM_STRUCT.unpack(block)))
    assert (p["B"], p["V"], p["U"]) == (w.b.data_ptr(), w.v.data_ptr(), scale.data_ptr())
    # One row of 8 columns' blocks: QK * 4 bits bytes, counted in 16-bit units; V's rows
    # are the padded N; two groups of 32 along K.
    assert (p["ldb"], p["ldv"], p["groups"], p["group_shift"]) == (QK * 4 // 2, w.v.shape[2], 2, 5)
    assert w.b.stride(0) == math.ceil(N / 8) * p["ldb"] * 2 and w.v.stride(0) == 2 * p["groups"] * p["ldv"]
    assert (p["N"], p["K"], p["lda"], p["ldd"], p["epilogue"]) == (N, QK, QK, N // 2, 2)
    dense = dict(zip(PARAM_NAMES, PARAM_STRUCT.unpack(launch_block(SimpleNamespace(spec=spec_for(
        cta=(16, 64, 128), warps=(1, 2, 2), grouped=True), resident=132), grouped_operands(**_args()))[1])))
    assert (dense["V"], dense["groups"], dense["ldv"]) == (0, 0, 0)


def test_bad_quantized_experts_are_named() -> None:
    w = _packed()
    for bad, argument, needle in (
        (w, "w.dtype", "x's dtype"),  # fp16 scales under bf16 activations
        (dataclasses.replace(w, b=w.b.transpose(1, 2).contiguous().transpose(1, 2)), "w.b", "contiguous"),
        (dataclasses.replace(w, v=w.v[:, :2].contiguous()), "w", "as its layout says"),
    ):  # fmt: skip
        dtype = torch.bfloat16 if argument == "w.dtype" else torch.float16
        with pytest.raises(GemmArgumentError) as info:
            _packed_ops(bad, dtype)
        assert info.value.argument == argument and needle in str(info.value), str(info.value)
    with pytest.raises(GemmArgumentError, match="an even N"):
        _packed_ops(_packed(n=N + 8 + 1), gated=True)
    x = torch.randn(TOKENS, QK + 8).half()
    with pytest.raises(GemmArgumentError, match=r"x.shape.*\(rows, 64\)"):
        grouped_operands(x, w, torch.tensor([0, 3, 3, 7, 9], dtype=torch.int32))


def test_the_sm90_quant_block_maps_the_stacked_packed_weights_and_scales(encoded) -> None:
    """The quantized TMA kernels: one CTA per tile (weight tiles in x, the tile rows'
    bound in y), X the sorted rows, W the experts' packed rows as one matrix of 32-bit
    words, V their scales and zeros as one matrix of E * 2 * groups rows."""
    w = _packed()
    index = torch.arange(TOKENS - 1, -1, -1, dtype=torch.int32)
    x = torch.randn(TOKENS, QK).half()
    ops = grouped_operands(x, w, torch.tensor([0, 3, 3, 7, 9], dtype=torch.int32), index=index)
    spec = spec_for(mainloop=Mainloop.SM90_QUANT, mma=MmaAtom.M64NK16, cta=(64, 128, 64), warps=(1, 8, 1), stages=8,
                    arch_min=90, arch_max=90, b_type=DataType.U4, grouped=True)  # fmt: skip
    assert spec.mainloop.reads_a_by_tma(spec)
    sorted_a = x[index.long()]
    grid, block = launch_block(SimpleNamespace(spec=spec, resident=264), ops, sorted_a)
    # Persistent: a CTA per tile of the bound on them (fewer than the resident 264).
    assert grid == (math.ceil(N / 128) * _tile_rows(64), 1, 1)
    x_map, w_map, v_map = encoded
    assert (x_map.address, x_map.rows, x_map.cols, x_map.box_cols) == (sorted_a.data_ptr(), TOKENS, QK, 64)
    n8 = math.ceil(N / 8)
    # A row: 8 weight rows x QK codes of 4 bits, as 32-bit words.
    assert (w_map.address, w_map.rows, w_map.cols, w_map.ld) == (w.b.data_ptr(), E * n8, 8 * QK * 4 // 32, 8 * QK * 4 // 32)
    assert (w_map.box_rows, w_map.box_cols, w_map.swizzle) == (128 // 8, 64, 0)
    # Two groups of 32 per expert: the scales then the zeros, 2 * 2 rows an expert.
    assert (v_map.address, v_map.rows, v_map.cols, v_map.ld, v_map.box_rows) == (w.v.data_ptr(), E * 4, N,
                                                                                 w.v.shape[2], 2)  # fmt: skip
    offset = spec.mainloop.params_offset(spec)
    p = dict(zip(PARAM_NAMES, PARAM_STRUCT.unpack(block[offset:offset + PARAM_STRUCT.size])))
    assert (p["A"], p["gather"], p["groups"], p["group_shift"], p["experts"]) == (sorted_a.data_ptr(), 0, 2, 5, E)


def test_a_quantized_grouped_decision_survives_export_and_import_and_is_checked(tmp_path) -> None:
    from gemm_runtime.dispatch_cache import DispatchCache

    key = grouped_key(_packed_ops(_packed()), 90)
    w4 = spec_for(cta=(16, 128, 128), warps=(1, 4, 1), b_type=DataType.U4, grouped=True)
    cache = DispatchCache(90)
    cache.put(key, LaunchSpec(w4.name, 2))
    cache.export(tmp_path / "c.json")
    back = DispatchCache(90)
    assert back.import_(tmp_path / "c.json", {w4.name: w4}).added == 1 and back.get(key) == LaunchSpec(w4.name, 2)
    # A dense grouped kernel recorded for the quantized key (a hand-edited file) is skipped.
    dense = spec_for(cta=(16, 64, 128), warps=(1, 2, 2), grouped=True)
    bad = DispatchCache(90)
    with pytest.warns(Warning):
        report = bad.import_(_swap_kernel(tmp_path / "c.json", w4.name, dense.name), {dense.name: dense})
    assert report.added == 0 and len(bad) == 0
