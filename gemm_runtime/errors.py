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

    def __init__(self, problem: str, reasons: dict[str, int] | None = None, limit: str | None = None) -> None:
        self.problem = problem
        self.reasons = dict(reasons or {})
        self.limit = limit  # what no build can change on this GPU (context.arch_limit), if that is why
        detail = "; ".join(f"{n} kernel(s): {r}" for r, n in sorted(self.reasons.items(), key=lambda x: -x[1]))
        super().__init__(
            f"no kernel can serve {problem}" + (f": {limit}" if limit else "") + (f" ({detail})" if detail else "")
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


class CheckpointError(GemmError, ValueError):
    """A checkpoint on disk cannot be loaded: names the file, the tensor (when one is to
    blame) and what is wrong, with what was found and what is accepted."""

    def __init__(self, path: str, reason: str, tensor: str | None = None) -> None:
        self.path = str(path)
        self.reason = reason
        self.tensor = tensor
        where = f"checkpoint {self.path}" + (f", tensor {tensor}" if tensor else "")
        super().__init__(f"{where}: {reason}")


class CheckpointMismatchError(CheckpointError):
    """The checkpoint's tensors and the model's do not match one to one (``strict=True``):
    ``missing`` are model tensors the checkpoint lacks, ``unexpected`` checkpoint tensors
    the model has no place for. Nothing of the model was changed."""

    def __init__(self, path: str, missing: list[str], unexpected: list[str]) -> None:
        self.missing = list(missing)
        self.unexpected = list(unexpected)
        parts = []
        for what, names in (("missing from the checkpoint", self.missing),
                            ("in the checkpoint but not in the model", self.unexpected)):
            if names:
                shown = ", ".join(names[:8]) + (f", ... ({len(names) - 8} more)" if len(names) > 8 else "")
                parts.append(f"{len(names)} tensor(s) {what}: {shown}")
        super().__init__(path, "; ".join(parts) + " (strict=False loads the rest and warns)")


class CheckpointWarning(UserWarning):
    """``strict=False``: some model tensors were left as they were, or some checkpoint
    tensors were not used."""
