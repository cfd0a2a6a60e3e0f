"""A stand-in for cuTensorMapEncodeTiled on CPU: the descriptor it returns holds what it
was given (address, sizes, strides, box, element type) in its first bytes, so a test
can read back which operand, at which address, a parameter block's descriptor is for.
And a stand-in for a loaded kernel whose launches record the parameter block."""

from __future__ import annotations

import ctypes
import struct

import pytest

# Device addresses (16-byte aligned), never dereferenced.
A0, B0, C0, D0 = 0x7F00_0000_0000, 0x7F10_0000_0000, 0x7F20_0000_0000, 0x7F30_0000_0000

_LAYOUT = struct.Struct("=QQQQQQQ")  # address, dim0, dim1, stride, box0, box1, data type


class FakeDriver:
    """cuda.bindings.driver with cuTensorMapEncodeTiled replaced; ``calls``: its
    arguments, one dict per call."""

    def __init__(self, real) -> None:
        self._real = real
        self.calls: list[dict] = []

    def __getattr__(self, name: str):
        return getattr(self._real, name)

    def cuTensorMapEncodeTiled(self, dtype, rank, address, dims, strides, box, elem, *modes):  # noqa: N802
        assert int(rank) == 2 and [int(e) for e in elem] == [1, 1] and len(modes) == 4
        call = dict(
            address=address,
            dims=[int(d) for d in dims],
            strides=[int(s) for s in strides],
            box=[int(b) for b in box],
            dtype=dtype.name.removeprefix("CU_TENSOR_MAP_DATA_TYPE_"),
        )
        self.calls.append(call)
        tmap = self._real.CUtensorMap()
        words = (address, *call["dims"], *call["strides"], *call["box"], int(dtype))
        tmap.opaque = [*words, *([0] * (16 - len(words)))]
        return (self._real.CUresult.CUDA_SUCCESS, tmap)


def fake_driver(monkeypatch: pytest.MonkeyPatch) -> FakeDriver:
    """Route gemm_runtime.tensor_map's driver calls to a FakeDriver for one test."""
    from cuda.bindings import driver

    import gemm_runtime.tensor_map as tm

    drv = FakeDriver(driver)
    monkeypatch.setattr(tm, "_driver", lambda: drv)
    return drv


def decode(raw: bytes) -> dict:
    """What the fake wrote into a 128-byte descriptor."""
    assert len(raw) == 128
    address, dim0, dim1, stride, box0, box1, dtype = _LAYOUT.unpack_from(raw)
    from cuda.bindings import driver

    name = driver.CUtensorMapDataType(dtype).name.removeprefix("CU_TENSOR_MAP_DATA_TYPE_")
    return dict(address=address, dims=[dim0, dim1], strides=[stride], box=[box0, box1], dtype=name)


class FakeFunction:
    """A LoadedFunction whose launcher's cuLaunchKernel records the parameter block the
    kernel would get (the driver copies it at the call)."""

    def __init__(self, size: int, err: int = 0) -> None:
        self.size, self.err = size, err
        self.blocks: list[bytes] = []
        self.launches: list[tuple] = []

    def launcher(self, stream: int):
        return self._launch, "handle", ("stream", stream)

    def _launch(self, function, gx, gy, gz, tx, ty, tz, smem, stream, args, extra):
        block = ctypes.c_void_p.from_address(args).value
        self.blocks.append(ctypes.string_at(block, self.size))
        self.launches.append((function, (gx, gy, gz), (tx, ty, tz), smem, stream, extra))
        return (self.err,)
