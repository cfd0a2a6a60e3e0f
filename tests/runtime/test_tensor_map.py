"""gemm_runtime.tensor_map on CPU: argument checks name the argument, the driver gets the
arguments in its order (dimension 0 the contiguous one, strides in bytes), and
param_bytes reads the 128 bytes of a CUtensorMap. The one test that encodes for real
needs libcuda and a GPU of compute capability 9.0+, and skips otherwise."""

from __future__ import annotations

import pytest

from codegen.vocabulary import DataType
from gemm_runtime.errors import CudaError, GemmArgumentError
from gemm_runtime.tensor_map import TENSOR_MAP_BYTES, TensorMap2D, encode, param_bytes, tensor_map_2d

ADDR = 0x7F00_0000_0000  # 16-byte aligned, never dereferenced here


def spec(**kw) -> TensorMap2D:
    args = dict(address=ADDR, rows=200, cols=1000, ld=1000, dtype=DataType.F16, box_rows=128, box_cols=64)
    args.update(kw)
    return TensorMap2D(**args)


def test_encode_args_put_the_contiguous_dimension_first() -> None:
    s = spec()
    args = s.encode_args()
    assert args["globalDim"] == [1000, 200]
    assert args["globalStrides"] == [2000]  # bytes
    assert args["boxDim"] == [64, 128]
    assert args["elementStrides"] == [1, 1]
    assert args["tensorDataType"] == "CU_TENSOR_MAP_DATA_TYPE_FLOAT16"
    assert args["swizzle"] == "CU_TENSOR_MAP_SWIZZLE_128B"
    assert args["l2Promotion"] == "CU_TENSOR_MAP_L2_PROMOTION_L2_256B"
    assert args["oobFill"] == "CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE"  # zeros
    assert s.box_bytes == 128 * 64 * 2


@pytest.mark.parametrize(
    "kw, argument",
    [
        (dict(address=ADDR + 8), "address"),
        (dict(address=0), "address"),
        (dict(address=1 << 64), "address"),  # past a 64-bit pointer
        (dict(rows=0), "rows"),
        (dict(cols=-1), "cols"),
        (dict(rows=True), "rows"),  # a bool is no size
        (dict(ld=999), "ld"),  # ld < cols
        (dict(cols=1001, ld=1001), "ld"),  # 2002 bytes: not a multiple of 16
        (dict(box_rows=257), "box_rows"),
        (dict(box_cols=0), "box_cols"),
        (dict(box_cols=65), "box_cols"),  # 130 bytes: not a multiple of 16 and above the 128B span
        (dict(box_cols=128), "box_cols"),  # 256 bytes > the 128-byte swizzle span
        (dict(box_cols=64, swizzle=64), "box_cols"),  # 128 bytes > 64
        (dict(dtype=DataType.F32, box_cols=64), "box_cols"),  # 256 bytes > 128
        (dict(swizzle=16), "swizzle"),
        (dict(swizzle=[128]), "swizzle"),
        (dict(swizzle=False, box_cols=64), "swizzle"),  # a bool is no span (False == 0)
        (dict(swizzle=128.0), "swizzle"),
        (dict(l2_promotion=512), "l2_promotion"),
        (dict(l2_promotion={}), "l2_promotion"),
        (dict(l2_promotion=False), "l2_promotion"),
        (dict(dtype=DataType.U4), "dtype"),
        (dict(dtype="f16"), "dtype"),  # the dataclass takes a DataType; tensor_map_2d takes names
    ],
)
def test_invalid_arguments_are_named(kw: dict, argument: str) -> None:
    with pytest.raises(GemmArgumentError) as e:
        spec(**kw)
    assert e.value.argument == argument


@pytest.mark.parametrize(
    "kw",
    [
        dict(),
        dict(rows=1, cols=4096, ld=4096),  # box taller than the tensor: zero-filled
        dict(dtype=DataType.BF16, box_rows=256),
        dict(dtype=DataType.F32, box_cols=32, ld=1004),
        dict(swizzle=0, box_cols=256),  # without swizzle only the 256-element limit applies
        dict(ld=1024, l2_promotion=128),
    ],
)
def test_valid_arguments_pass(kw: dict) -> None:
    spec(**kw)


def test_encode_calls_the_driver_with_its_enums() -> None:
    drv = pytest.importorskip("cuda.bindings.driver")
    seen = {}
    sentinel = object()

    def fake(*args):
        seen["args"] = args
        return (drv.CUresult.CUDA_SUCCESS, sentinel)

    assert encode(spec(dtype=DataType.BF16), encode_tiled=fake) is sentinel
    dtype, rank, address, dims, strides, box, elem, interleave, swizzle, l2, oob = seen["args"]
    assert dtype == drv.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
    assert (rank, address, dims, strides, box, elem) == (2, ADDR, [1000, 200], [2000], [64, 128], [1, 1])
    assert interleave == drv.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE
    assert swizzle == drv.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B
    assert l2 == drv.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B
    assert oob == drv.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE


def test_a_driver_failure_is_a_cuda_error() -> None:
    drv = pytest.importorskip("cuda.bindings.driver")
    with pytest.raises(CudaError):
        encode(spec(), encode_tiled=lambda *a: (drv.CUresult.CUDA_ERROR_INVALID_VALUE, None))


def test_tensor_map_2d_takes_short_dtype_names(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("cuda.bindings.driver")
    import gemm_runtime.tensor_map as tm

    monkeypatch.setattr(tm, "encode", lambda s: s)
    assert tensor_map_2d(ADDR, 200, 1000, 1000, "bf16", 128, 64).dtype is DataType.BF16
    with pytest.raises(GemmArgumentError) as e:
        tensor_map_2d(ADDR, 200, 1000, 1000, "f8", 128, 64)
    assert e.value.argument == "dtype"


def test_param_bytes_reads_the_128_bytes() -> None:
    drv = pytest.importorskip("cuda.bindings.driver")
    tmap = drv.CUtensorMap()
    tmap.opaque = list(range(16))
    raw = param_bytes(tmap)
    assert len(raw) == TENSOR_MAP_BYTES
    assert [int.from_bytes(raw[8 * i : 8 * i + 8], "little") for i in range(16)] == list(range(16))


def test_encode_for_real_on_hopper() -> None:
    """Needs libcuda and a compute capability 9.0+ device (tensor maps exist from Hopper on)."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("needs libcuda and a GPU of compute capability 9.0 or newer")
    from gemm_runtime import cuda_driver

    cuda_driver.ensure_context(torch.cuda.current_device())
    a = torch.zeros(200, 1000, dtype=torch.float16, device="cuda")
    tmap = tensor_map_2d(a.data_ptr(), 200, 1000, 1000, "f16", 128, 64)
    assert len(param_bytes(tmap)) == TENSOR_MAP_BYTES and any(param_bytes(tmap))


def test_an_encoder_remembers_recent_addresses(monkeypatch: pytest.MonkeyPatch) -> None:
    """A replay whose operand returns to an address it had (the caching allocator's way)
    reuses that descriptor; one evicted from the last 16 is encoded again, and each
    address always gets its own descriptor."""
    from gemm_runtime.tensor_map import Encoder
    from tests.runtime.fake_tensor_map import decode, fake_driver

    drv = fake_driver(monkeypatch)
    encoder = Encoder(TensorMap2D(0x1000, 64, 128, 128, DataType.F16, 64, 64))
    first = encoder(0x1000)
    assert encoder(0x1000) == first and len(drv.calls) == 1
    others = [0x100000 + 16 * i for i in range(16)]
    for address in others:
        assert decode(encoder(address))["address"] == address
    assert len(drv.calls) == 17
    assert decode(encoder(others[-1]))["address"] == others[-1] and len(drv.calls) == 17
    assert encoder(0x1000) == first and len(drv.calls) == 18  # evicted, encoded again


@pytest.mark.parametrize("address", [1 << 64, [0x1000], 4096.0, True, 0x1008])
def test_an_encoder_names_a_bad_address(monkeypatch: pytest.MonkeyPatch, address) -> None:
    """Whether or not an equal address is remembered (4096.0 == 0x1000), what is no
    16-byte aligned 64-bit address is refused before the driver sees it."""
    from gemm_runtime.tensor_map import Encoder
    from tests.runtime.fake_tensor_map import fake_driver

    drv = fake_driver(monkeypatch)
    encoder = Encoder(TensorMap2D(0x1000, 64, 128, 128, DataType.F16, 64, 64))
    encoder(0x1000)
    with pytest.raises(GemmArgumentError) as e:
        encoder(address)
    assert e.value.argument == "address" and len(drv.calls) == 1
