"""gemm_runtime.fast_path.FastPlan on CPU: what the kernel's parameter block holds at
each replayed launch. The CPU half of "a replay never uses a stale descriptor": an
SM90 plan re-encodes the tensor maps of A, B and D whenever one of them moved, and
only then;
the struct behind them gets every call's pointers and scalars. The launch is a fake
that copies the block as cuLaunchKernel would."""

from __future__ import annotations

import dataclasses
import struct
from types import SimpleNamespace

import pytest

pytest.importorskip("cuda.bindings.driver")
import torch  # noqa: E402

from codegen.families import Mainloop  # noqa: E402
from codegen.params import PARAM_NAMES, PARAM_OFFSETS, PARAM_STRUCT  # noqa: E402
from codegen.vocabulary import BOrder, DataType, MmaAtom  # noqa: E402
from gemm_runtime import launch  # noqa: E402
from gemm_runtime.context import Problem, make_key  # noqa: E402
from gemm_runtime.errors import CudaError, GemmArgumentError  # noqa: E402
from gemm_runtime.fast_path import FastPlan  # noqa: E402
from gemm_runtime.plan import LaunchSpec  # noqa: E402
from gemm_runtime.registry import Kernel  # noqa: E402
from tests.helpers import spec_for  # noqa: E402
from tests.runtime.fake_tensor_map import A0, B0, C0, D0, FakeFunction, decode, fake_driver  # noqa: E402

SPAN = 1 << 24  # bytes of A, B and D for the aliasing check; the addresses are far apart
SM90_SPEC = spec_for(mainloop=Mainloop.SM90, mma=MmaAtom.M64NK16, cta=(128, 128, 64), warps=(8, 1, 1), stages=6,
                     arch_min=90, arch_max=90)  # fmt: skip


def _plan(monkeypatch, spec, b_order=BOrder.NK):
    """(plan, its FakeFunction, the fake driver) for a 1000 x 500 x 1000 problem, built
    as Gemm builds one (gemm.Gemm._remember)."""
    drv = fake_driver(monkeypatch)
    # NOTE: N = 504 fp16 (1008 bytes) is whole 16-byte chunks: D gets a tensor map too.
    key = make_key(DataType.F16, b_order, DataType.F16, 1000, 504, 1000, arch=90)
    prob = Problem(key, A0, B0, C0, D0, 1000, 1000 if b_order is BOrder.NK else 504, 504, 504, True)
    kern = Kernel(spec, 90, 168, 0, SimpleNamespace(ctas_per_sm=1), sms=132)
    grid, template, maps = launch.prepare(kern, prob, LaunchSpec(spec.name), 1.0, 0.0)
    function = FakeFunction(len(template))
    shape = (1000, 1000, (1000, 504), torch.float16, True)  # rows, K, output shape and dtype, read_c
    plan = FastPlan.build(function, grid, spec.threads, spec.smem_bytes, 7, template, (SPAN, SPAN, SPAN), 1, (),
                          shape, spec.mainloop.params_offset(spec), maps)  # fmt: skip
    drv.calls.clear()
    return plan, function, drv


def _struct(block: bytes, offset: int) -> dict:
    return dict(zip(PARAM_NAMES, PARAM_STRUCT.unpack_from(block, offset)))


OFFSET = 384  # GemmParams after the descriptors of A, B and D


def _addresses(block: bytes) -> tuple[int, int, int]:
    return tuple(decode(block[i : i + 128])["address"] for i in (0, 128, 256))


def test_a_new_a_b_or_d_gets_new_descriptors(monkeypatch: pytest.MonkeyPatch) -> None:
    plan, fn, drv = _plan(monkeypatch, SM90_SPEC)
    assert plan.offset == OFFSET and plan.maps is not None and plan.maps.stores_d
    a1, b1, d1 = A0 + 0x100000, B0 + 0x100000, D0 + 0x100000

    plan.run(A0, B0, C0, D0, 1.0, 1.0, 0)
    assert _addresses(fn.blocks[-1]) == (A0, B0, D0)
    plan.run(a1, B0, C0, D0, 1.0, 1.0, 0)
    assert _addresses(fn.blocks[-1]) == (a1, B0, D0)
    plan.run(a1, b1, C0, D0, 1.0, 1.0, 0)
    assert _addresses(fn.blocks[-1]) == (a1, b1, D0)
    plan.run(a1, b1, C0, d1, 1.0, 1.0, 0)
    assert _addresses(fn.blocks[-1]) == (a1, b1, d1)
    plan.run(A0, B0, C0, D0, 1.0, 1.0, 0)  # back to the first operands: their descriptors again
    assert _addresses(fn.blocks[-1]) == (A0, B0, D0)
    # The rest of each descriptor is the plan's geometry, whatever the address.
    for block in fn.blocks:
        assert decode(block[:128])["dims"] == [1000, 1000] and decode(block[128:256])["box"] == [64, 128]
        assert decode(block[256:384])["dims"] == [504, 1000]
        fields = _struct(block, OFFSET)
        assert _addresses(block) == (fields["A"], fields["B"], fields["D"])  # the struct agrees with them
    # Only addresses the plan had not seen reach the driver (A0, B0 and D0 were encoded
    # when the plan was built; tensor_map.Encoder remembers recent addresses).
    assert [c["address"] for c in drv.calls] == [a1, b1, d1]


def test_only_c_alpha_beta_or_bias_keep_the_descriptors(monkeypatch: pytest.MonkeyPatch) -> None:
    plan, fn, drv = _plan(monkeypatch, SM90_SPEC)
    plan.run(A0, B0, C0, D0, 1.0, 1.0, 0)
    first, calls = fn.blocks[-1], len(drv.calls)
    c1, bias = C0 + 0x1000, 0x7F40_0000_0000
    for args in ((c1, D0, 1.0, 1.0, 0), (C0, D0, 2.0, 0.5, 0), (c1, D0, 2.0, 0.5, bias)):
        plan.run(A0, B0, *args)
        block = fn.blocks[-1]
        assert block[:OFFSET] == first[:OFFSET]
        fields = _struct(block, OFFSET)
        assert (fields["C"], fields["D"], fields["alpha"], fields["beta"], fields["bias"]) == args
        assert (fields["A"], fields["B"]) == (A0, B0)
    assert len(drv.calls) == calls  # no encode at all
    # The same call again rewrites nothing and still launches.
    plan.run(A0, B0, *args)
    assert fn.blocks[-1] == fn.blocks[-2] and len(fn.blocks) == 5


def test_kn_b_descriptors_follow_b_too(monkeypatch: pytest.MonkeyPatch) -> None:
    plan, fn, _ = _plan(monkeypatch, dataclasses.replace(SM90_SPEC, b_order=BOrder.KN), BOrder.KN)
    plan.run(A0, B0 + 0x400, C0, D0, 1.0, 1.0, 0)
    b = decode(fn.blocks[-1][128:256])
    assert b["address"] == B0 + 0x400 and b["box"] == [64, 64] and b["dims"] == [504, 1000]


def test_the_launch_gets_the_plans_geometry(monkeypatch: pytest.MonkeyPatch) -> None:
    plan, fn, _ = _plan(monkeypatch, SM90_SPEC)
    plan.run(A0, B0, C0, D0, 1.0, 1.0, 0)
    # 8 x 4 tiles of 128 x 128 on 132 SMs: one persistent CTA per tile.
    assert fn.launches[-1] == ("handle", (32, 1, 1), (384, 1, 1), SM90_SPEC.smem_bytes, ("stream", 7), 0)
    assert len(fn.blocks[-1]) == 576


def test_an_sm80_plan_has_no_descriptors(monkeypatch: pytest.MonkeyPatch) -> None:
    plan, fn, drv = _plan(monkeypatch, spec_for())
    assert plan.offset == 0 and plan.maps is None  # TensorMaps of no box is falsy
    plan.run(A0 + 0x100, B0 + 0x200, C0, D0, 3.0, 0.0, 0)
    block = fn.blocks[-1]
    assert len(block) == PARAM_STRUCT.size and drv.calls == []
    fields = _struct(block, 0)
    assert (fields["A"], fields["B"], fields["alpha"]) == (A0 + 0x100, B0 + 0x200, 3.0)
    assert struct.unpack_from("=f", block, PARAM_OFFSETS["beta"])[0] == 0.0


def test_a_failed_launch_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    plan, fn, _ = _plan(monkeypatch, SM90_SPEC)
    fn.err = 1
    with pytest.raises(CudaError):
        plan.run(A0, B0, C0, D0, 1.0, 1.0, 0)


def test_a_d_without_a_tensor_map_keeps_zeros_where_its_descriptor_would_be(monkeypatch: pytest.MonkeyPatch) -> None:
    # D rows of 500 fp16 (1000 bytes) are no 16-byte multiple: the kernel stores directly.
    plan, fn, drv = _plan(monkeypatch, SM90_SPEC)
    prob_maps = launch.TensorMaps(SM90_SPEC, Problem(make_key(DataType.F16, BOrder.NK, DataType.F16, 1000, 500, 1000,
                                  arch=90), A0, B0, C0, D0, 1000, 1000, 500, 500, True))  # fmt: skip
    plan = plan._replace(maps=prob_maps, kernel=plan.kernel._replace(last=[None]))
    drv.calls.clear()
    for d in (D0, D0 + 0x2000):
        plan.run(A0, B0, C0, d, 1.0, 1.0, 0)
        assert fn.blocks[-1][256:384] == bytes(128) and _struct(fn.blocks[-1], OFFSET)["D"] == d
    assert [c["address"] for c in drv.calls] == [A0, B0]  # A and B once (a fresh plan), D never


PACKED_BYTES = 1000 * 504 // 2  # a 4-bit 504 x 1000 weight


class FakeUnpack:
    """An unpack.UnpackStep that records its calls and hands out a buffer (on the CPU)."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []
        # NOTE: at least the packed weight's span (PACKED_BYTES), as a real buffer (N x K
        # values) is: run() checks the buffer against D over that span.
        self.buffer = torch.empty(PACKED_BYTES // 2, dtype=torch.float16)

    def __call__(self, b: int, v: int) -> torch.Tensor:
        self.calls.append((b, v))
        return self.buffer


def _whole_weight_plan(monkeypatch):
    """(plan with a FakeUnpack step, its FakeFunction, the step, A, D) on host tensors."""
    plan, fn, _ = _plan(monkeypatch, spec_for())
    unpack = FakeUnpack()
    a = torch.empty(1000, 1000, dtype=torch.float16)
    out = torch.empty(1000, 504, dtype=torch.float16)
    # The spans of these host tensors (they may sit next to each other) and of a packed weight.
    plan = plan._replace(unpack=unpack, a_bytes=a.numel() * 2, d_bytes=out.numel() * 2, b_bytes=PACKED_BYTES)
    return plan, fn, unpack, a, out


def test_a_whole_weight_replay_unpacks_first_and_the_kernel_reads_the_buffer(monkeypatch: pytest.MonkeyPatch) -> None:
    plan, fn, unpack, a, out = _whole_weight_plan(monkeypatch)
    packed, scales = B0 + 0x400, B0 + (SPAN << 2)
    plan.replay(a, packed, scales, out, torch.empty_like(out), None, 1.0, 0.0)  # the plan reads C
    assert unpack.calls == [(packed, scales)]
    fields = _struct(fn.blocks[-1], 0)
    assert (fields["B"], fields["V"], fields["D"]) == (unpack.buffer.data_ptr(), 0, out.data_ptr())


def test_a_whole_weight_replay_still_refuses_an_output_over_the_packed_weight(monkeypatch: pytest.MonkeyPatch) -> None:
    plan, fn, unpack, a, out = _whole_weight_plan(monkeypatch)
    with pytest.raises(GemmArgumentError, match="^D: got memory overlapping"):
        plan.replay(a, out.data_ptr() + 64, 0, out, torch.empty_like(out), None, 1.0, 0.0)
    assert unpack.calls == [] and fn.blocks == []
