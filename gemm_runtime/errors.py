"""Exception types. Each carries fields a caller can inspect, and a message a user can act on."""

from __future__ import annotations


class GemmError(Exception):
    """Base of every error this package raises on purpose."""


class GemmArgumentError(GemmError, ValueError):
    """An argument is wrong: names the argument, what was given and what is accepted."""

    def __init__(self, argument: str, given: object, accepted: str) -> None:
        self.argument = argument
        self.given = given
        self.accepted = accepted
        super().__init__(f"{argument}: got {given}; accepted: {accepted}")


class UnsupportedProblemError(GemmError, ValueError):
    """The arguments are valid, but no kernel in the registry can serve this problem."""

    def __init__(self, problem: str, reasons: dict[str, int] | None = None) -> None:
        self.problem = problem
        self.reasons = dict(reasons or {})
        detail = "; ".join(f"{n} kernel(s): {r}" for r, n in sorted(self.reasons.items(), key=lambda x: -x[1]))
        super().__init__(
            f"no kernel can serve {problem}" + (f" ({detail})" if detail else "")
            + "; docs/PROBLEMS.md lists what the default kernel set serves"
        )


class GraphCaptureError(GemmError, RuntimeError):
    """A call needs something a CUDA graph capture cannot hold (measuring candidates)."""


class NoKernelsError(GemmError, RuntimeError):
    """``build/`` holds nothing that runs on this GPU."""


class CudaError(GemmError, RuntimeError):
    """A CUDA driver call failed."""

    def __init__(self, call: str, code: object) -> None:
        self.call = call
        self.code = code
        super().__init__(f"{call} failed: {code}")


class TuneSettingsError(GemmError, ValueError):
    """A tuning setting (``GEMM_TUNE`` or its CLI twin) is malformed: names the source, the
    item, what was given and what is accepted."""

    def __init__(self, source: str, item: str, given: object, accepted: str) -> None:
        self.source = source
        self.item = item
        self.given = given
        self.accepted = accepted
        super().__init__(f"{source}: item {item!r}: got {given}; accepted: {accepted}")


class DispatchCacheError(GemmError, ValueError):
    """A dispatch cache file cannot be imported: names the file and what is wrong with it.
    Nothing of the file was applied."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"dispatch cache file {path}: {reason}")


class DispatchCacheWarning(UserWarning):
    """Part of a dispatch cache file was skipped on import (e.g. kernels this build lacks)."""
