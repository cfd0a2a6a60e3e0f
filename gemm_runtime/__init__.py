"""gemm_runtime: run the GEMM kernels this project generates.

    from gemm_runtime import Gemm
    gemm = Gemm()                      # loads build/sm_XX cubins for the current GPU
    y = gemm.matmul(x, weight.t())     # x @ weight.T, like torch.nn.functional.linear

Names are imported lazily, so that `python -m gemm_runtime.build` and its worker
processes do not pay for importing torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Gemm": "gemm_runtime.gemm",
    "BOrder": "gemm_runtime.types",
    "DataType": "gemm_runtime.types",
    "DispatchPolicy": "gemm_runtime.types",
    "Epilogue": "gemm_runtime.types",
    "MatrixLayout": "gemm_runtime.types",
    "Operation": "gemm_runtime.types",
    "Order": "gemm_runtime.types",
    "QuantDesc": "gemm_runtime.types",
    "Workspace": "gemm_runtime.types",
    "GemmError": "gemm_runtime.errors",
    "GemmArgumentError": "gemm_runtime.errors",
    "UnsupportedProblemError": "gemm_runtime.errors",
    "NoKernelsError": "gemm_runtime.errors",
    "CudaError": "gemm_runtime.errors",
    "CheckpointError": "gemm_runtime.errors",
    "CheckpointMismatchError": "gemm_runtime.errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'gemm_runtime' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return __all__
