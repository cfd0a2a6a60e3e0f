"""Which device a Gemm serves (gemm._device_of), CPU only: CUDA devices by index or name,
a clear error for another type, an index past the visible GPUs, or no GPU at all."""

from __future__ import annotations

import pytest
import torch

from gemm_runtime.errors import GemmArgumentError
from gemm_runtime.gemm import _device_of


@pytest.fixture
def two_gpus(monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)


def test_devices_by_index_name_or_the_current_one(two_gpus) -> None:
    assert _device_of(0) == torch.device("cuda", 0)
    assert _device_of("cuda:1") == torch.device("cuda", 1)
    assert _device_of(torch.device("cuda")) == torch.device("cuda", 1)
    assert _device_of(None) == torch.device("cuda", 1)


def test_other_devices_are_refused_by_name(two_gpus) -> None:
    with pytest.raises(GemmArgumentError, match=r"device: got cuda:2; accepted: one of cuda:0..cuda:1"):
        _device_of("cuda:2")
    with pytest.raises(GemmArgumentError, match="a CUDA device"):
        _device_of("cpu")
    with pytest.raises(GemmArgumentError, match="device: got 'gpu0'"):
        _device_of("gpu0")


def test_no_visible_gpu_is_said_so(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    with pytest.raises(GemmArgumentError, match="none is visible"):
        _device_of(None)
