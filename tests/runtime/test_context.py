"""Argument validation that needs no GPU: make_problem on CPU tensors."""

from __future__ import annotations

import re

import pytest
import torch

from codegen.vocabulary import BOrder, DataType, Order
from gemm_runtime import GemmArgumentError, MatrixLayout, Operation, QuantDesc
from gemm_runtime.context import infeasible_reason, make_key, make_problem, vector_align
from tests.helpers import spec_for

CPU = torch.device("cpu")


def _call(a, b, d, *, beta=0.0, c=None, op=None, adesc=None, bdesc=None, ddesc=None, cdesc=None):
    return make_problem(
        op or Operation(),
        a,
        adesc or MatrixLayout.of(a, "a"),
        b,
        bdesc or MatrixLayout.of(b, "b"),
        beta,
        c,
        cdesc or (MatrixLayout.of(c, "c") if c is not None else None),
        d,
        ddesc or MatrixLayout.of(d, "d"),
        CPU,
    )


def _mats(m=8, n=16, k=32, dtype=torch.float16):
    return torch.randn(m, k, dtype=dtype), torch.randn(n, k, dtype=dtype).t(), torch.empty(m, n, dtype=dtype)


def test_valid_problem_key():
    a, b, d = _mats()
    p = _call(a, b, d)
    assert p.key == make_key(DataType.F16, BOrder.NK, DataType.F16, 8, 16, 32, align=p.key.align)
    assert p.key.align in (8, 4, 2, 1) and p.lda == 32 and p.ldb == 32 and p.ldd == 16


def test_layout_of_rejects_non_unit_inner_stride():
    with pytest.raises(GemmArgumentError, match=r"a.stride\(\).*row-major"):
        MatrixLayout.of(torch.randn(8, 8)[:, ::2], "a")


@pytest.mark.parametrize(
    "mutate, pattern",
    [
        (lambda a, b, d: dict(a=a.float()), r"Bdesc.type|A.dtype|Adesc.type"),
        (lambda a, b, d: dict(b=b.to(torch.bfloat16)), r"Bdesc.type: got bf16; accepted: f16"),
        (lambda a, b, d: dict(b=torch.randn(16, 31, dtype=torch.float16).t()), r"Bdesc.rows: got 31"),
        (lambda a, b, d: dict(d=torch.empty(8, 15, dtype=torch.float16)), r"Ddesc shape"),
        (lambda a, b, d: dict(d=torch.empty(8, 16, dtype=torch.bfloat16)), r"Ddesc.type: got bf16; accepted: f16 or f32"),
        (lambda a, b, d: dict(a=a.t().contiguous().t()), r"Adesc.order: got col"),
        (lambda a, b, d: dict(d=torch.empty(16, 8, dtype=torch.float16).t()), r"Ddesc.order"),
        (lambda a, b, d: dict(beta=1.0), r"C: got None; accepted: a matrix"),
        (lambda a, b, d: dict(beta=1.0, c=torch.empty(8, 16, dtype=torch.float32)), r"Cdesc"),
        (lambda a, b, d: dict(op=Operation(quant_b=QuantDesc(DataType.U4, 128))), r"operation.quant"),
        (lambda a, b, d: dict(op="gemm"), r"operation: got str"),
        (lambda a, b, d: dict(d=a[:, :16]), r"D: got memory overlapping A"),
        # Layout fields that are not the enums: an AttributeError from the error message
        # itself, or (an order spelled "row") B read as column-major without a word.
        (lambda a, b, d: dict(adesc=MatrixLayout("f16", Order.ROW_MAJOR, 8, 32, 32)), r"^Adesc.type: got 'f16'"),
        (lambda a, b, d: dict(ddesc=MatrixLayout(DataType.F16, "row", 8, 16, 16)), r"^Ddesc.order: got 'row'"),
        (lambda a, b, d: dict(b=b.t().contiguous().t().contiguous(),
                              bdesc=MatrixLayout(DataType.F16, "row", 32, 16, 16)), r"^Bdesc.order: got 'row'"),
        # Operation fields: "measure" ran the DEFAULT policy silently; a str quant_b raised AttributeError.
        (lambda a, b, d: dict(op=Operation(dispatch="measure")), r"^operation.dispatch: got 'measure'; accepted: Disp"),
        (lambda a, b, d: dict(op=Operation(quant_b="u4g128")), r"^operation.quant_b: got 'u4g128'"),
        # Raw device pointers: null would fault on the GPU, the others fail to pack at launch.
        (lambda a, b, d: dict(a=0, adesc=MatrixLayout.of(a)), r"^A: got 0x0; accepted: a device address"),
        (lambda a, b, d: dict(a=-64, adesc=MatrixLayout.of(a)), r"^A: got -0x40"),
        (lambda a, b, d: dict(d=2**64, ddesc=MatrixLayout.of(d)), r"^D: got 0x10000000000000000"),
        (lambda a, b, d: dict(b=0, bdesc=MatrixLayout.of(b)), r"^B: got 0x0"),
    ],
)
def test_bad_arguments_name_the_argument(mutate, pattern):
    a, b, d = _mats()
    kwargs = dict(a=a, b=b, d=d)
    kwargs.update(mutate(a, b, d))
    with pytest.raises(GemmArgumentError, match=pattern):
        _call(**kwargs)


def test_layout_larger_than_storage_is_rejected():
    a, b, d = _mats()
    bigger = MatrixLayout(DataType.F16, Order.ROW_MAJOR, 8, 32, 64)
    with pytest.raises(GemmArgumentError, match=r"^A: got \d+ bytes of storage"):
        _call(a, b, d, adesc=bigger)


def test_ld_below_row_length_is_rejected():
    a, b, d = _mats()
    with pytest.raises(GemmArgumentError, match=r"Adesc.ld: got 16; accepted: >= 32"):
        _call(a, b, d, adesc=MatrixLayout(DataType.F16, Order.ROW_MAJOR, 8, 32, 16))


def test_wrong_device_is_rejected():
    a, b, d = _mats()
    with pytest.raises(GemmArgumentError, match=r"A.device: got meta"):
        _call(torch.empty(8, 32, dtype=torch.float16, device="meta"), b, d)


def test_vector_alignment():
    assert vector_align(0x1000, 64, 2, 10) == 8
    assert vector_align(0x1000, 68, 2, 10) == 4
    assert vector_align(0x1000, 66, 2, 10) == 2
    assert vector_align(0x1000, 65, 2, 10) == 1
    assert vector_align(0x1002, 64, 2, 10) == 1
    assert vector_align(0x1000, 65, 2, 1) == 8  # one row: ld never matters


def test_feasibility_rules():
    key = make_key(DataType.F16, BOrder.NK, DataType.F16, 10, 100, 100, align=2)
    assert infeasible_reason(spec_for(align=2), key) is None
    assert "aligned to 8" in infeasible_reason(spec_for(align=8), key)
    assert "B order" in infeasible_reason(spec_for(b_order=BOrder.KN, align=2), key)
    assert "output type" in infeasible_reason(spec_for(d_type=DataType.F32, align=2), key)
    assert "operand type" in infeasible_reason(spec_for(a_type=DataType.BF16, b_type=DataType.BF16, align=2), key)


# --- quantized B -------------------------------------------------------------------------


def _quant_call(qb=None, vdesc=None, v=None, bdesc=None, b=None, k=256, n=24, group=64):
    from gemm_runtime.packed_weight import pack_for_gemm
    from gemm_runtime.quant import quantize

    a = torch.randn(4, k, dtype=torch.float16)
    p = pack_for_gemm(quantize(torch.randn(n, k), bits=4, group_size=group, scale_dtype=torch.float16))
    d = torch.empty(4, n, dtype=torch.float16)
    qb = qb or QuantDesc(DataType.U4, 64)
    bdesc = bdesc or MatrixLayout(DataType.U4, Order.COL_MAJOR, k, n, p.padded_k)
    vdesc = vdesc or MatrixLayout(DataType.F16, Order.ROW_MAJOR, p.v.shape[0], n, p.v.shape[1])
    return make_problem(
        Operation(quant_b=qb), a, MatrixLayout.of(a), p.b if b is None else b, bdesc, 0.0, None, None, d,
        MatrixLayout.of(d), CPU, 90, None, p.v if v is None else v, vdesc,
    )


def test_quantized_problem_key_and_pointers():
    p = _quant_call()
    assert p.key.quant == "u4g64" and p.key.b_type is DataType.U4
    # ldb in 16-bit units per row of 8 columns: 8 * 256 four-bit codes.
    assert p.groups == 4 and p.group_shift == 6 and p.ldb == 8 * 256 * 4 // 16 and p.ldv == 24


@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        (dict(qb=QuantDesc(DataType.U8, 64)), r"Bdesc.type: got u4; accepted: u4 or u8, as operation.quant_b says"),
        (dict(vdesc=MatrixLayout(DataType.F16, Order.ROW_MAJOR, 4, 24, 24)), r"Vdesc.*scales, then zeros"),
        (dict(vdesc=MatrixLayout(DataType.BF16, Order.ROW_MAJOR, 8, 24, 24)),
         r"^Vdesc.type: got bf16; accepted: scales of f16, the type of A \(quantize and pack the weight for f16"),
        (dict(vdesc=MatrixLayout(DataType.F16, Order.ROW_MAJOR, 8, 20, 20), n=20), r"Vdesc.ld: got 20"),
        (dict(qb=QuantDesc(DataType.U4, 48)), r"Vdesc|group_size"),
        (dict(b=torch.zeros(24, 100, dtype=torch.uint8)), r"^B: got torch.uint8 \(24, 100\).*\(3, 1024\)"),
        (dict(b=torch.zeros(24, 128, dtype=torch.uint8)), r"^B: got torch.uint8 \(24, 128\)"),  # the old N x K/2 form
        (dict(bdesc=MatrixLayout(DataType.U4, Order.COL_MAJOR, 256, 24, 264)), r"ld a multiple of 32"),
        (dict(qb=QuantDesc(DataType.U4, "64")), r"^operation.quant_b: got QuantDesc\(.*group_size='64'"),  # a TypeError
    ],
)
def test_quantized_problem_errors(kwargs, pattern):
    with pytest.raises(GemmArgumentError, match=pattern):
        _quant_call(**kwargs)


def test_quantized_keys_spell_one_group_with_k():
    # Per-channel given as -1, as K or as more than K: one problem, one key.
    for qb_group in (-1, 256, 4096):
        p = _quant_call(qb=QuantDesc(DataType.U4, qb_group), group=-1)
        assert p.key.quant == "u4g256" and p.groups == 1
        p.key.validate()


def test_quant_groups_rule():
    from gemm_runtime.context import quant_groups, quant_name

    assert [quant_groups(g, 4096) for g in (32, 64, 128, 256)] == [128, 64, 32, 16]
    assert quant_groups(48, 4096) is None and quant_groups(16, 4096) is None
    assert quant_groups(-1, 100) == quant_groups(100, 100) == quant_groups(128, 100) == 1
    assert quant_name(DataType.U8, 128, 100) == "u8g100" and quant_name(DataType.U4, 64, 4096) == "u4g64"


def test_keys_of_valid_problems_validate():
    a, b, d = _mats()
    _call(a, b, d).key.validate()
    _quant_call().key.validate()


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(align=3), "align 3 is not one of 1, 2, 4, 8"),
        (dict(m=0), "m 0 is not in 1..2147483647"),
        (dict(k=2**31), "k 2147483648 is not in"),
        (dict(arch=-1), "arch -1 is negative"),
        (dict(epilogue="banana"), "epilogue 'banana' is not one of"),
        (dict(quant="u4g64"), "b_type f16 is not u4"),
        (dict(a_type=DataType.U8, b_type=DataType.U8), "a_type u8 is not one of f16, bf16"),
    ],
)
def test_invalid_keys_say_which_field(change, message):
    key = make_key(DataType.F16, BOrder.NK, DataType.F16, 8, 64, 64)._replace(**change)
    with pytest.raises(ValueError, match=re.escape(message)):
        key.validate()
