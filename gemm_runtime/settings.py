"""The package's settings, read from the environment once. Nothing else reads os.environ,
so every knob is listed here with its variable and default."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

# The repository root: the parent of the gemm_runtime package.
REPO_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Settings:
    build_dir: Path  # GEMM_BUILD_DIR: cubins + manifests (`python -m gemm_runtime.build --out`)
    generated_dir: Path  # GEMM_GENERATED_DIR: generated sources (`python -m codegen --out`)
    jobs: int | None  # GEMM_BUILD_JOBS: parallel NVRTC compiles; None = os.cpu_count()


def _path(var: str, default: Path) -> Path:
    value = os.environ.get(var, "").strip()
    return Path(value).expanduser() if value else default


def _jobs(var: str) -> int | None:
    value = os.environ.get(var, "").strip()
    if not value:
        return None
    try:
        jobs = int(value)
    except ValueError:
        raise ValueError(f"{var}={value!r}: expected a positive integer") from None
    if jobs < 1:
        raise ValueError(f"{var}={value!r}: expected a positive integer")
    return jobs


def from_env() -> Settings:
    return Settings(
        build_dir=_path("GEMM_BUILD_DIR", REPO_ROOT / "build"),
        generated_dir=_path("GEMM_GENERATED_DIR", REPO_ROOT / "generated"),
        jobs=_jobs("GEMM_BUILD_JOBS"),
    )


_current: Settings | None = None


def settings() -> Settings:
    """The settings of this process (read from the environment on first use)."""
    global _current
    if _current is None:
        _current = from_env()
    return _current


@contextmanager
def override(**changes: object) -> Iterator[Settings]:
    """Replace some settings for the duration of a ``with`` block (for tests)."""
    global _current
    previous = settings()
    _current = dataclasses.replace(previous, **changes)  # type: ignore[arg-type]
    try:
        yield _current
    finally:
        _current = previous
