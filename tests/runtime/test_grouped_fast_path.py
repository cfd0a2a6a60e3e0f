"""gemm_runtime.grouped_fast_path on CPU: a grouped call's replay signature, and the
parameter block a replay launches, which must be the one the validating path builds
for the same operands (grouped.prepare): every pointer and scalar of the call, the
tensor maps of the operands that moved re-encoded, and nothing else touched. The
launch is a fake that copies the block as cuLaunchKernel would."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("cuda.bindings.driver")
import torch  # noqa: E402

from codegen.families import Mainloop  # noqa: E402
from codegen.params import PARAM_NAMES, PARAM_STRUCT  # noqa: E402
from codegen.vocabulary import DataType, MmaAtom  # noqa: E402
from gemm_runtime import grouped, grouped_fast_path  # noqa: E402
from gemm_runtime.experts import PackedExperts, pack_experts  # noqa: E402
from gemm_runtime.fast_path import tensor_part  # noqa: E402
from gemm_runtime.grouped import grouped_key, grouped_operands, launch_block, prepare  # noqa: E402
from gemm_runtime.grouped_fast_path import GroupedFastPlan, grouped_signature  # noqa: E402
from gemm_runtime.quant import quantize  # noqa: E402
from tests.helpers import spec_for  # noqa: E402
from tests.runtime.fake_tensor_map import FakeFunction, decode, fake_driver  # noqa: E402

E, N, K, TOKENS = 4, 48, 64, 10
SM80 = spec_for(cta=(16, 64, 64), warps=(1, 2, 2), grouped=True)
SM90 = spec_for(mainloop=Mainloop.SM90, mma=MmaAtom.M64NK16, cta=(128, 256, 64), warps=(8, 1, 1), stages=4,
                arch_min=90, arch_max=90, grouped=True)  # fmt: skip
SM90_QUANT = spec_for(mainloop=Mainloop.SM90_QUANT, mma=MmaAtom.M64NK16, cta=(64, 128, 64), warps=(1, 8, 1), stages=8,
                      arch_min=90, arch_max=90, b_type=DataType.U4, grouped=True)  # fmt: skip


def _operands(seed: int, packed=None, **kinds) -> dict:
    """A grouped call's arguments, fresh tensors of one geometry (``kinds`` says which of
    index, row_scale, bias, c and out the call has)."""
    gen = torch.Generator().manual_seed(seed)
    rows = TOKENS
    args = dict(
        x=torch.randn(TOKENS, K, generator=gen).half(),
        w=packed if packed is not None else torch.randn(E, N, K, generator=gen).half(),
        offsets=torch.tensor([0, 3, 3, 7, 9], dtype=torch.int32),
    )
    if kinds.get("index"):
        args["index"] = torch.randperm(TOKENS, generator=gen).int()
    if kinds.get("row_scale"):
        args["row_scale"] = torch.rand(rows, generator=gen)
    if kinds.get("bias"):
        args["bias"] = torch.randn(E, N, generator=gen).half()
    if kinds.get("c"):
        args["c"] = torch.randn(rows, N, generator=gen).half()
    if kinds.get("out"):
        args["out"] = torch.empty(rows, N, dtype=torch.float16)
    return args


def _packed(seed: int = 1):
    gen = torch.Generator().manual_seed(seed)
    return pack_experts([quantize(torch.randn(N, K, generator=gen).half(), bits=4, group_size=32) for _ in range(E)])


def _sorted(args: dict) -> torch.Tensor | None:
    return args["x"].index_select(0, args["index"]) if "index" in args else None


def _plan(spec, args: dict, monkeypatch):
    """A plan built as Gemm.grouped_matmul builds one from a validated launch, its fake
    kernel, and the sorted rows each replay made (grouped.sorted_rows replaced: no CUDA
    stream on CPU)."""
    made: list[torch.Tensor] = []

    def sorted_rows(x, index, stream):
        made.append(x.index_select(0, index))
        return made[-1]

    monkeypatch.setattr(grouped_fast_path, "sorted_rows", sorted_rows)
    ops = grouped_operands(**args)
    gathered = spec.mainloop.reads_a_by_tma(spec) and ops.routing.index is not None
    kernel = SimpleNamespace(spec=spec, resident=132)
    grid, block, maps = prepare(kernel, ops, _sorted(args) if gathered else None, key=grouped_key(ops, 90))
    fn = FakeFunction(len(block))
    offset = spec.mainloop.params_offset(spec) if maps is not None else 0
    plan = GroupedFastPlan.build(fn, grid, spec.threads, spec.smem_bytes, 7, block, offset, maps, gathered,
                                 tuple(ops.out.shape), 1, ())  # fmt: skip
    return plan, fn, kernel, made


def _replay(plan, args: dict, alpha: float = 1.0, beta: float = 0.0) -> torch.Tensor:
    w = args["w"]
    b, v = (w.b.data_ptr(), w.v.data_ptr()) if isinstance(w, PackedExperts) else (w.data_ptr(), 0)
    return plan.replay(args["x"], b, v, args["offsets"], args.get("index"), args.get("row_scale"), args.get("bias"),
                       args.get("c"), args.get("out"), alpha, beta)  # fmt: skip


def _expected(kernel, args: dict, out: torch.Tensor, a: torch.Tensor | None, alpha: float, beta: float) -> bytes:
    ops = grouped_operands(**{**args, "out": out}, alpha=alpha, beta=beta)
    return launch_block(kernel, ops, a)[1]


KINDS = [{}, {"index": True}, {"row_scale": True, "bias": True}, {"index": True, "row_scale": True, "c": True, "out": True}]


@pytest.mark.parametrize("kinds", KINDS, ids=lambda k: "+".join(k) or "plain")
def test_a_replay_launches_the_block_the_validating_path_builds(kinds, monkeypatch) -> None:
    """sm80 grouped kernels (no tensor maps; they follow the index themselves): each
    replay's block, for new tensors of the same geometry, is prepare's for them."""
    plan, fn, kernel, _ = _plan(SM80, _operands(0, **kinds), monkeypatch)
    for seed, (alpha, beta) in zip((1, 2, 2), ((1.0, 0.0), (0.5, 2.0), (0.5, 2.0))):
        args = _operands(seed, **kinds)
        out = _replay(plan, args, alpha, beta)
        assert tuple(out.shape) == (TOKENS, N) and out.dtype == torch.float16
        assert "out" not in args or out is args["out"]
        assert fn.blocks[-1] == _expected(kernel, args, out, None, alpha, beta)
    assert len(fn.launches) == 3 and fn.launches[-1][1] == plan.kernel.grid


@pytest.mark.parametrize("kinds", KINDS, ids=lambda k: "+".join(k) or "plain")
def test_an_sm90_replay_sorts_gathered_rows_and_re_encodes_moved_maps(kinds, monkeypatch) -> None:
    """The TMA kernels: a gathered call's rows are sorted at each replay, and the maps in
    the block are those of this call's A (the sorted rows), B and D."""
    fake_driver(monkeypatch)
    monkeypatch.setattr(grouped, "_encoders", type(grouped._encoders)())
    first = _operands(0, **kinds)
    plan, fn, kernel, made = _plan(SM90, first, monkeypatch)
    assert plan.gathered == ("index" in first) and plan.maps is not None
    moved_out = {**first, "out": torch.empty(TOKENS, N, dtype=torch.float16)}  # only D moves
    for args in (first, _operands(2, **kinds), first, moved_out):
        out = _replay(plan, args)
        a = made[-1] if plan.gathered else args["x"]
        if plan.gathered:
            assert torch.equal(a, args["x"][args["index"].long()])
        block = fn.blocks[-1]
        assert block == _expected(kernel, args, out, a if plan.gathered else None, 1.0, 0.0)
        maps = [decode(block[i: i + 128])["address"] for i in (0, 128, 256)]
        assert maps == [a.data_ptr(), args["w"].data_ptr(), out.data_ptr()]


def test_an_sm90_quant_replay_maps_the_packed_blocks_and_scales(monkeypatch) -> None:
    fake_driver(monkeypatch)
    monkeypatch.setattr(grouped, "_encoders", type(grouped._encoders)())
    plan, fn, kernel, made = _plan(SM90_QUANT, _operands(0, packed=_packed(1), index=True), monkeypatch)
    args = _operands(3, packed=_packed(2), index=True)
    out = _replay(plan, args)
    block = fn.blocks[-1]
    assert block == _expected(kernel, args, out, made[-1], 1.0, 0.0)
    x_map, w_map, v_map = (decode(block[i: i + 128])["address"] for i in (0, 128, 256))
    assert (x_map, w_map, v_map) == (made[-1].data_ptr(), args["w"].b.data_ptr(), args["w"].v.data_ptr())
    offset = SM90_QUANT.mainloop.params_offset(SM90_QUANT)
    p = dict(zip(PARAM_NAMES, PARAM_STRUCT.unpack(block[offset:offset + PARAM_STRUCT.size])))
    assert (p["B"], p["V"], p["gather"], p["D"]) == (args["w"].b.data_ptr(), args["w"].v.data_ptr(), 0, out.data_ptr())


def test_the_same_call_again_rewrites_nothing_and_still_launches(monkeypatch) -> None:
    args = _operands(0, out=True, row_scale=True)
    plan, fn, _, _ = _plan(SM80, args, monkeypatch)
    _replay(plan, args)
    _replay(plan, args)
    assert len(fn.blocks) == 2 and fn.blocks[0] == fn.blocks[1]


def test_the_routing_is_converted_as_the_validating_path_converts_it(monkeypatch) -> None:
    """int64 offsets and index, fp16 row scales: the kernels read int32 and fp32; the
    replay's block points at converted copies, never at the caller's tensors."""
    kinds = {"index": True, "row_scale": True}
    plan, fn, _, _ = _plan(SM80, _operands(0, **kinds), monkeypatch)
    args = _operands(1, **kinds)
    args.update(offsets=args["offsets"].long(), index=args["index"].long(), row_scale=args["row_scale"].half())
    _replay(plan, args)
    p = dict(zip(PARAM_NAMES, PARAM_STRUCT.unpack(fn.blocks[-1][:PARAM_STRUCT.size])))
    assert p["offsets"] not in (0, args["offsets"].data_ptr()) and p["gather"] not in (0, args["index"].data_ptr())
    assert p["U"] not in (0, args["row_scale"].data_ptr())


def _signature(args: dict, **extra) -> tuple:
    w = args["w"]
    return grouped_signature(args["x"], w.signature if isinstance(w, PackedExperts) else tensor_part(w), args["offsets"],
                             args.get("index"), args.get("row_scale"), args.get("bias"), args.get("c"),
                             args.get("out"), (extra.get("gated", False),))  # fmt: skip


def test_the_signature_holds_what_validation_reads_and_no_pointer() -> None:
    base = _operands(0, index=True, row_scale=True, bias=True, c=True, out=True)
    sig = _signature(base)
    hash(sig)
    assert _signature(_operands(5, index=True, row_scale=True, bias=True, c=True, out=True)) == sig  # new pointers
    changed = {
        "x shape": {"x": torch.randn(TOKENS + 1, K).half()},
        "x dtype": {"x": torch.randn(TOKENS, K).bfloat16()},
        "x strides": {"x": torch.randn(TOKENS, 2 * K).half()[:, :K]},
        "x alignment": {"x": torch.randn(TOKENS * K + 1).half()[1:].view(TOKENS, K)},
        "w shape": {"w": torch.randn(E, N + 8, K).half()},
        "offsets dtype": {"offsets": base["offsets"].long()},
        "no index": {"index": None},
        "index dtype": {"index": base["index"].long()},
        "row_scale dtype": {"row_scale": base["row_scale"].half()},
        "no bias": {"bias": None},
        "no c": {"c": None},
        "no out": {"out": None},
        "out strides": {"out": torch.empty(TOKENS, 2 * N).half()[:, :N]},
    }
    for what, change in changed.items():
        assert _signature({**base, **change}) != sig, what
    assert _signature(base, gated=True) != sig
    packed = _signature({**base, "w": _packed(1)})
    assert packed != sig and _signature({**base, "w": _packed(2)}) == packed
    sym = pack_experts([quantize(torch.randn(N, K).half(), bits=4, group_size=32, symmetric=True) for _ in range(E)])
    g64 = pack_experts([quantize(torch.randn(N, K).half(), bits=4, group_size=64) for _ in range(E)])
    assert len({packed, _signature({**base, "w": sym}), _signature({**base, "w": g64})}) == 3
    with pytest.raises(AttributeError):
        _signature({**base, "x": [[1.0]]})
