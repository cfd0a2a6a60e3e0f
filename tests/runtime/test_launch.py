"""gemm_runtime.launch on CPU: the matrices the SM90 tensor maps describe, the
descriptors ahead of GemmParams in the parameter block (A, B, then D, 128 bytes each;
D's left zero, and the kernel told to store directly, where D has no tensor map),
and the block ``prepare`` and ``launch`` hand the kernel. cuTensorMapEncodeTiled is a
fake (tests/runtime/fake_tensor_map.py) that writes what it was given into the
descriptor's bytes."""

from __future__ import annotations

import ctypes
import struct
from types import SimpleNamespace

import pytest

pytest.importorskip("cuda.bindings.driver")

from codegen.families import Mainloop, TensorMapBox  # noqa: E402
from codegen.params import PARAM_NAMES, PARAM_STRUCT, block_bytes  # noqa: E402
from codegen.vocabulary import BOrder, DataType, MmaAtom  # noqa: E402
from gemm_runtime import launch  # noqa: E402
from gemm_runtime.context import Problem, make_key  # noqa: E402
from gemm_runtime.errors import GemmArgumentError  # noqa: E402
from gemm_runtime.plan import LaunchSpec  # noqa: E402
from gemm_runtime.registry import Kernel  # noqa: E402
from gemm_runtime.tensor_map import TensorMap2D  # noqa: E402
from tests.helpers import spec_for  # noqa: E402
from tests.runtime.fake_tensor_map import A0, B0, C0, D0, decode, fake_driver  # noqa: E402


def sm90_spec(**overrides):
    fields = dict(mainloop=Mainloop.SM90, mma=MmaAtom.M64NK16, cta=(128, 256, 64), warps=(8, 1, 1), stages=4,
                  arch_min=90, arch_max=90)  # fmt: skip
    fields.update(overrides)
    return spec_for(**fields)


def problem(m=300, n=500, k=1000, lda=1024, ldb=1008, b_order=BOrder.NK, dtype=DataType.F16, ldd=None,
            epilogue="none", d_type=None, **kw) -> Problem:  # fmt: skip
    key = make_key(dtype, b_order, d_type or dtype, m, n, k, arch=90)._replace(epilogue=epilogue)
    cols = n // 2 if epilogue == "gated_silu" else n
    return Problem(key, A0, B0, C0, D0, lda, ldb, cols, ldd or cols, False, **kw)


def kernel(spec, ctas_per_sm=1, sms=132, function=None) -> Kernel:
    return Kernel(spec, 90, 168, 0, function or SimpleNamespace(ctas_per_sm=ctas_per_sm), sms=sms)


# ---- the matrices a tensor map describes ------------------------------------------------


def test_operand_matrix_of_a_b_and_d() -> None:
    nk = problem()
    assert launch._operand_matrix(TensorMapBox("a", 128, 64), nk) == (A0, 300, 1000, 1024)
    # nk B is stored N x K (K contiguous), kn B K x N (N contiguous).
    assert launch._operand_matrix(TensorMapBox("b", 256, 64), nk) == (B0, 500, 1000, 1008)
    kn = problem(b_order=BOrder.KN, ldb=504)
    assert launch._operand_matrix(TensorMapBox("b", 64, 64), kn) == (B0, 1000, 500, 504)
    # D is M x N, or M x N/2 under a gated epilogue, at its own stride.
    assert launch._operand_matrix(TensorMapBox("d", 64, 64), problem(ldd=504)) == (D0, 300, 500, 504)
    assert launch._operand_matrix(TensorMapBox("d", 64, 64), problem(epilogue="gated_silu")) == (D0, 300, 250, 250)
    with pytest.raises(ValueError, match="'c' is not 'a', 'b', 'v' or 'd'"):
        launch._operand_matrix(TensorMapBox("c", 64, 64), nk)


V0 = 0x7F0000000000


def quant_problem(m=65, n=261, k=1000, bits=4, group=128, dtype=DataType.F16) -> Problem:
    """A quantized problem as make_problem builds it: packed B with ldb in 16-bit units
    (a row per n8 tile, K padded to 32), V = scales then zeros, [2 * groups] x N."""
    from gemm_runtime.context import ProblemKey, quant_groups, quant_name

    q_type = DataType.U4 if bits == 4 else DataType.U8
    key = ProblemKey(90, dtype, q_type, BOrder.NK, dtype, 8, quant_name(q_type, group, k), "none", n, k, m)
    kp, groups = -(-k // 32) * 32, quant_groups(group, k)
    shift = 30 if groups == 1 else group.bit_length() - 1
    return Problem(key, A0, B0, C0, D0, k, kp * bits // 2, n, n, False, v=V0, ldv=-(-n // 8) * 8, groups=groups,
                   group_shift=shift)  # fmt: skip


@pytest.mark.parametrize("bits, group, v_rows", [(4, 128, 1), (8, 32, 2), (4, -1, 1)])
def test_tensor_maps_of_the_sm90_quantized_kernel(monkeypatch: pytest.MonkeyPatch, bits, group, v_rows) -> None:
    """X as A (K-major, swizzled), the packed weight as 32-bit words (a row per n8 tile,
    no swizzle) and V's group rows (two for groups of 32) with the weight rows of a CTA,
    each re-encoded at the addresses of the call."""
    fake_driver(monkeypatch)
    spec = spec_for(mainloop=Mainloop.SM90_QUANT, mma=MmaAtom.M64NK16, cta=(64, 128, 64), warps=(1, 8, 1), stages=4,
                    b_type=DataType.U4 if bits == 4 else DataType.U8, arch_min=90, arch_max=90)  # fmt: skip
    prob = quant_problem(bits=bits, group=group)
    maps = launch.TensorMaps(spec, prob)
    raw = maps(A0, B0, D0, V0)
    assert len(raw) == 384
    x, w, v = decode(raw[:128]), decode(raw[128:256]), decode(raw[256:])
    assert x == dict(address=A0, dims=[1000, 65], strides=[2000], box=[64, 64], dtype="FLOAT16")
    words = 1024 * bits // 4  # K padded to 32, 8 weights of `bits` per K per n8 row
    assert w == dict(address=B0, dims=[words, 33], strides=[words * 4], box=[64 * bits // 4, 16], dtype="FLOAT32")
    groups = 1 if group == -1 else -(-1000 // group)
    assert v == dict(address=V0, dims=[261, 2 * groups], strides=[264 * 2], box=[128, v_rows], dtype="FLOAT16")
    # Another weight (B and V elsewhere): both descriptors follow.
    raw = maps(A0, B0 + 0x1000, D0, V0 + 0x2000)
    assert decode(raw[128:256])["address"] == B0 + 0x1000 and decode(raw[256:])["address"] == V0 + 0x2000


@pytest.mark.parametrize(
    "box, kw, expected",
    [
        # M = 1: A's stride is never used and may be anything (here less than K).
        ("a", dict(m=1, k=1001, lda=3), (A0, 1, 1001, 1008)),
        ("a", dict(m=1, k=1000, lda=1001), (A0, 1, 1000, 1000)),
        # N = 1 with nk B, K = 1 with kn B: one stored row of B.
        ("b", dict(n=1, k=1001, ldb=1001), (B0, 1, 1001, 1008)),
        ("b", dict(k=1, n=500, ldb=7, b_order=BOrder.KN), (B0, 1, 500, 504)),
    ],
)
def test_a_one_row_operand_gets_a_legal_stride(box: str, kw: dict, expected: tuple) -> None:
    address, rows, cols, ld = launch._operand_matrix(TensorMapBox(box, 64, 64), problem(**kw))
    assert (address, rows, cols, ld) == expected
    # What the stride is replaced by is one TMA takes (16-byte rows, at least cols) ...
    TensorMap2D(address, rows, cols, ld, DataType.F16, 64, 64)
    # ... where the caller's would be refused.
    given = kw.get("lda" if box == "a" else "ldb")
    with pytest.raises(GemmArgumentError) as e:
        TensorMap2D(address, rows, cols, given, DataType.F16, 64, 64)
    assert e.value.argument == "ld"


def test_operands_of_several_rows_keep_their_stride() -> None:
    # K = 1001 is no multiple of 8, but lda = 1008 is (the key's alignment says so).
    assert launch._operand_matrix(TensorMapBox("a", 128, 64), problem(m=2, k=1001, lda=1008)) == (A0, 2, 1001, 1008)


# ---- the descriptors --------------------------------------------------------------------


def test_tensor_maps_of_an_sm90_kernel_are_a_b_then_d(monkeypatch: pytest.MonkeyPatch) -> None:
    drv = fake_driver(monkeypatch)
    maps = launch.TensorMaps(sm90_spec(), problem(n=504, dtype=DataType.BF16, ldd=512))
    assert maps and maps.stores_d and drv.calls == []  # encoded per call, not when made
    raw = maps(A0, B0, D0)
    assert len(raw) == 384
    a, b, d = decode(raw[:128]), decode(raw[128:256]), decode(raw[256:])
    # Dimension 0 is the contiguous one: (K, M) for A, (K, N) for nk B, (N, M) for D;
    # strides in bytes. D's box is a 64-row staging box, 128 bytes wide.
    assert a == dict(address=A0, dims=[1000, 300], strides=[2048], box=[64, 128], dtype="BFLOAT16")
    assert b == dict(address=B0, dims=[1000, 504], strides=[2016], box=[64, 256], dtype="BFLOAT16")
    assert d == dict(address=D0, dims=[504, 300], strides=[1024], box=[64, 64], dtype="BFLOAT16")
    assert [c["address"] for c in drv.calls] == [A0, B0, D0]
    # Other addresses: the same geometry at the new ones, each operand its own.
    a2, b2, d2 = A0 + 0x10000, B0 + 0x20000, D0 + 0x30000
    raw = maps(a2, b2, d2)
    assert decode(raw[:128]) == {**a, "address": a2} and decode(raw[128:256]) == {**b, "address": b2}
    assert decode(raw[256:]) == {**d, "address": d2}


@pytest.mark.parametrize("m, rows", [(1, 8), (8, 8), (9, 16), (16, 16), (57, 64), (64, 64), (100, 104), (128, 128), (129, 128)])
def test_a_decode_sized_a_gets_a_box_of_its_rows(monkeypatch: pytest.MonkeyPatch, m: int, rows: int) -> None:
    """A's box shrinks to M's rows (whole 8-row groups) below the 128-row tile, so TMA
    moves no zero fill for the rows D does not have; from the tile's M up it is the tile."""
    fake_driver(monkeypatch)
    maps = launch.TensorMaps(sm90_spec(), problem(m=m))
    assert decode(maps(A0, B0, D0)[:128])["box"] == [64, rows]
    # B's and D's boxes do not depend on M.
    assert decode(maps(A0, B0, D0)[128:256])["box"] == [64, 256]


def test_an_f32_or_gated_d_gets_its_own_box_and_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_driver(monkeypatch)
    f32 = launch.TensorMaps(sm90_spec(d_type=DataType.F32), problem(d_type=DataType.F32, ldd=500))
    assert decode(f32(A0, B0, D0)[256:]) == dict(address=D0, dims=[500, 300], strides=[2000], box=[32, 64],
                                                 dtype="FLOAT32")  # fmt: skip
    gated = launch.TensorMaps(sm90_spec(), problem(n=496, epilogue="gated_silu", ldd=256))
    assert decode(gated(A0, B0, D0)[256:])["dims"] == [248, 300]


@pytest.mark.parametrize(
    "m, n, ldd, stores",
    [
        (300, 496, 504, True),  # fp16 rows of 1008 bytes, 992 bytes wide: whole 16-byte chunks
        (300, 496, 501, False),  # rows of 1002 bytes
        (300, 500, 504, False),  # 1000 bytes wide
        (1, 379, 382, False),  # one row (its stride is never used), but 758 bytes wide: TMA
        (1, 376, 382, True),  # would write the rest of the last 16-byte chunk too
    ],
)
def test_a_d_without_a_tensor_map_is_stored_directly(monkeypatch: pytest.MonkeyPatch, m, n, ldd, stores) -> None:
    drv = fake_driver(monkeypatch)
    spec, prob = sm90_spec(), problem(m=m, n=n, ldd=ldd)
    maps = launch.TensorMaps(spec, prob)
    assert maps.stores_d is stores
    raw = maps(A0, B0, D0)
    assert len(raw) == 384 and [c["address"] for c in drv.calls] == [A0, B0] + [D0] * maps.stores_d
    if not stores:
        assert raw[256:] == bytes(128)
    _, packed, _ = launch.prepare(kernel(spec), prob, LaunchSpec(spec.name), 1.0, 0.0)
    code = _fields(packed[384 : 384 + PARAM_STRUCT.size])["epilogue"]
    assert code == (launch.EPILOGUE_TMA_STORE if maps.stores_d else 0)


def test_tensor_maps_of_kn_b_use_64_column_boxes(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_driver(monkeypatch)
    maps = launch.TensorMaps(sm90_spec(b_order=BOrder.KN), problem(b_order=BOrder.KN, ldb=504))
    b = decode(maps(A0, B0, D0)[128:256])
    assert b == dict(address=B0, dims=[500, 1000], strides=[1008], box=[64, 64], dtype="FLOAT16")


def test_tensor_maps_of_an_sm80_kernel_are_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    drv = fake_driver(monkeypatch)
    maps = launch.TensorMaps(spec_for(), problem())
    assert not maps and not maps.stores_d and maps(A0, B0, D0) == b"" and drv.calls == []


def test_a_descriptor_address_must_be_16_byte_aligned(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_driver(monkeypatch)
    maps = launch.TensorMaps(sm90_spec(), problem())
    with pytest.raises(GemmArgumentError) as e:
        maps(A0 + 8, B0, D0)
    assert e.value.argument == "address"


# ---- the parameter block ----------------------------------------------------------------


def _fields(raw: bytes) -> dict:
    return dict(zip(PARAM_NAMES, PARAM_STRUCT.unpack(raw)))


def test_prepare_puts_the_descriptors_ahead_of_the_struct(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_driver(monkeypatch)
    spec, prob = sm90_spec(), problem(m=8192, n=8192, k=4096, lda=4096, ldb=4096)
    grid, packed, maps = launch.prepare(kernel(spec), prob, LaunchSpec(spec.name, 2, 1), 1.5, 0.0, 0x1000, 0x2000)
    offset = spec.mainloop.params_offset(spec)
    assert offset == 384 and len(packed) == block_bytes(offset) == 576
    assert packed[:offset] == maps(prob.a, prob.b, prob.d)
    assert [decode(packed[i : i + 128])["address"] for i in (0, 128, 256)] == [prob.a, prob.b, prob.d]
    fields = _fields(packed[offset : offset + PARAM_STRUCT.size])
    assert (fields["A"], fields["B"], fields["C"], fields["D"]) == (A0, B0, C0, D0)
    assert (fields["semaphores"], fields["partials"], fields["alpha"]) == (0x1000, 0x2000, 1.5)
    assert (fields["tiles_m"], fields["tiles_n"], fields["splits"], fields["swizzle"]) == (64, 32, 2, 1)
    assert fields["k_tiles_per_split"] == 32  # 4096 / 64 K tiles, halved
    assert fields["epilogue"] == launch.EPILOGUE_TMA_STORE  # D has a tensor map
    assert packed[offset + PARAM_STRUCT.size :] == bytes(576 - 384 - PARAM_STRUCT.size)  # the C++ tail padding
    # Persistent: one CTA per SM at most (132 SMs x 1), else one per work unit.
    assert grid == (132, 1, 1)
    small = problem(m=200, n=500, k=1000)
    assert launch.prepare(kernel(spec), small, LaunchSpec(spec.name), 1.0, 0.0)[0] == (2 * 2, 1, 1)
    assert launch.prepare(kernel(spec, ctas_per_sm=0), prob, LaunchSpec(spec.name), 1.0, 0.0)[0] == (1, 1, 1)


def test_prepare_of_an_sm80_kernel_is_the_bare_struct(monkeypatch: pytest.MonkeyPatch) -> None:
    drv = fake_driver(monkeypatch)
    spec, prob = spec_for(), problem(m=8192, n=8192, k=4096, lda=4096, ldb=4096)
    grid, packed, maps = launch.prepare(kernel(spec), prob, LaunchSpec(spec.name, 1, 1), 1.0, 0.0)
    assert len(packed) == PARAM_STRUCT.size == block_bytes(0) and not maps and drv.calls == []
    assert _fields(packed)["A"] == A0
    assert grid == (64 * 2, 32, 1)  # the tile grid, 2 CTAs per M tile row group


def test_launch_hands_the_kernel_the_whole_block(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_driver(monkeypatch)
    seen = {}

    def fake_launch(grid, threads, smem, stream, params_addr):
        block = ctypes.c_void_p.from_address(params_addr).value
        seen.update(grid=grid, threads=threads, smem=smem, block=ctypes.string_at(block, 576))

    spec, prob = sm90_spec(), problem()
    function = SimpleNamespace(ctas_per_sm=1, launch=fake_launch)
    launch.launch(kernel(spec, function=function), prob, LaunchSpec(spec.name), 1.0, 0.0, 0)
    expected = launch.prepare(kernel(spec), prob, LaunchSpec(spec.name), 1.0, 0.0)[1]
    assert seen["block"] == expected and (seen["threads"], seen["smem"]) == (384, spec.smem_bytes)
    assert struct.unpack_from("=Q", seen["block"], 384)[0] == A0  # GemmParams.A after the descriptors


def test_a_launch_of_the_sm90_quantized_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """prepare() for the quantized family: a persistent CTA per tile where the tiles are
    fewer than the resident CTAs, the three descriptors, then GemmParams with the packed
    weight's pointers and groups."""
    fake_driver(monkeypatch)
    spec = spec_for(mainloop=Mainloop.SM90_QUANT, mma=MmaAtom.M64NK16, cta=(64, 128, 64), warps=(1, 8, 1), stages=4,
                    b_type=DataType.U4, arch_min=90, arch_max=90)  # fmt: skip
    prob = quant_problem(m=65, n=261, k=1000, group=32)
    grid, packed, maps = launch.prepare(kernel(spec), prob, LaunchSpec(spec.name), 1.0, 0.0)
    assert grid == (6, 1, 1)  # 261 weight rows / 128 x 65 tokens / 64
    assert len(packed) == block_bytes(384) and decode(packed[256:384])["box"] == [128, 2]
    fields = _fields(packed[384 : 384 + PARAM_STRUCT.size])
    assert (fields["B"], fields["V"], fields["groups"], fields["group_shift"]) == (B0, V0, 32, 5)
    assert (fields["tiles_m"], fields["tiles_n"], fields["splits"]) == (2, 3, 1)
