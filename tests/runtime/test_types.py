"""gemm_runtime.types on CPU: the dtype conversions and MatrixLayout.of name what they
were given when it is no dtype or no tensor at all."""

from __future__ import annotations

import pytest
import torch

from codegen.vocabulary import DataType, Order
from gemm_runtime.errors import GemmArgumentError
from gemm_runtime.types import MatrixLayout, data_type_of, torch_dtype


@pytest.mark.parametrize("given", ["f16", None, [DataType.F16], DataType.U4])
def test_torch_dtype_of_what_has_none_is_named(given) -> None:
    with pytest.raises(GemmArgumentError) as e:
        torch_dtype(given)
    assert e.value.argument == "dtype"


def test_torch_dtype_of_the_float_types() -> None:
    assert [torch_dtype(t) for t in (DataType.F16, DataType.BF16, DataType.F32)] == [
        torch.float16,
        torch.bfloat16,
        torch.float32,
    ]


@pytest.mark.parametrize("given", [[torch.float16], {}, "float16", torch.int8])
def test_data_type_of_what_is_no_float_dtype_is_named(given) -> None:
    with pytest.raises(GemmArgumentError) as e:
        data_type_of(given, "out_dtype")
    assert e.value.argument == "out_dtype"


@pytest.mark.parametrize("given", [None, [[1.0, 2.0]], 3])
def test_layout_of_what_is_no_tensor_is_named(given) -> None:
    with pytest.raises(GemmArgumentError) as e:
        MatrixLayout.of(given, "b")
    assert e.value.argument == "b"


def test_layout_of_row_and_column_major_tensors() -> None:
    t = torch.zeros(4, 8, dtype=torch.float16)
    assert MatrixLayout.of(t) == MatrixLayout(DataType.F16, Order.ROW_MAJOR, 4, 8, 8)
    assert MatrixLayout.of(t.t()) == MatrixLayout(DataType.F16, Order.COL_MAJOR, 8, 4, 8)
