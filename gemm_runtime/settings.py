"""The package's settings, read from the environment once. Nothing else reads os.environ,
so every knob is listed here with its variable and default.

Tuning (``GEMM_TUNE``) is one variable of ``;``-separated ``name=value`` items, e.g.
``GEMM_TUNE="seq=1-16-1,16-128-16,8192;max_splits=8;top_k=8;max_time=1.0"``:

=============  ==========================================================  ========================
name           value                                                       default
=============  ==========================================================  ========================
``seq``        the M values to tune: comma-separated items, each an        ``1-16-1,16-128-16,``
               integer M or ``start-end-step`` = ``range(start, end,       ``128-1024-128,``
               step)`` (end exclusive; start < end; all >= 1). Sorted      ``1024-8193-1024``
               and de-duplicated; at most 4096 values, each < 2**31.
``max_splits`` the most split-K slices tried, an integer 1..64             ``8``
``top_k``      candidates (by the cost model) measured per problem, >= 1   ``8``
``max_time``   time budget per candidate in seconds, a float > 0           ``0.5``
``reps``       timed repetitions per candidate, an integer >= 1            ``10``
``confirm``    finalists timed again side by side, in two passes, before   ``3``
               the winner is chosen (tuner.tune); 0 or 1: none
=============  ==========================================================  ========================

Whitespace around items, names and values is ignored, and so are empty items (``a=1;;``).
Names not given keep their default. An unknown name, a name given twice, a malformed
number or an empty ``seq`` raise TuneSettingsError (a ValueError) naming the item.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from contextlib import contextmanager
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from gemm_runtime.errors import TuneSettingsError
from gemm_runtime.plan import MAX_SPLITS

# The repository root: the parent of the gemm_runtime package.
REPO_ROOT = Path(__file__).resolve().parent.parent

TUNE_VAR = "GEMM_TUNE"
DEFAULT_SEQ_TEXT = "1-16-1,16-128-16,128-1024-128,1024-8193-1024"
MAX_SEQ_VALUES = 4096  # a longer sequence is almost surely a typo (and would tune for days)
_MAX_M = 2**31 - 1
_UINT = re.compile(r"[0-9]+")
_RANGE = re.compile(r"([0-9]+)\s*-\s*([0-9]+)\s*-\s*([0-9]+)")
_TOO_LONG = -1  # _int's answer for more digits than int() converts


def _int(digits: str) -> int:
    """int(digits) of a string of decimal digits; _TOO_LONG (below every accepted value)
    for one longer than int() converts (sys.get_int_max_str_digits), whose bare
    ValueError would name neither the setting nor the item."""
    try:
        return int(digits)
    except ValueError:
        return _TOO_LONG


def _seq(text: str, source: str = TUNE_VAR) -> tuple[int, ...]:
    """``seq`` of GEMM_TUNE: "1-16-1,16-128-16,8192" -> sorted, de-duplicated M values."""
    whole = f"seq={text.strip()}"
    accepted = (
        "comma-separated items, each an integer M >= 1 or start-end-step"
        " (range(start, end, step): end exclusive, start < end, step >= 1)"
    )
    too_many = f"at most {MAX_SEQ_VALUES} M values"
    values: set[int] = set()
    for part in text.split(","):
        item = part.strip()
        if not item:
            raise TuneSettingsError(source, whole, "an empty item in the list" if text.strip() else "nothing", accepted)
        if _UINT.fullmatch(item):
            m = _int(item)
            if not 1 <= m <= _MAX_M:
                raise TuneSettingsError(source, whole, item, f"M in 1..{_MAX_M}")
            values.add(m)
        elif r := _RANGE.fullmatch(item):
            start, end, step = (_int(g) for g in r.groups())
            if start < 1 or step < 1 or start >= end or end - 1 > _MAX_M:
                limits = f"start-end-step with 1 <= start < end <= {_MAX_M + 1} and step >= 1"
                raise TuneSettingsError(source, whole, item, limits)
            count = len(range(start, end, step))
            if count > MAX_SEQ_VALUES:
                raise TuneSettingsError(source, whole, f"{item} ({count} values)", too_many)
            values.update(range(start, end, step))
        else:
            raise TuneSettingsError(source, whole, item, accepted)
        if len(values) > MAX_SEQ_VALUES:
            raise TuneSettingsError(source, whole, f"more than {MAX_SEQ_VALUES} values", too_many)
    return tuple(sorted(values))


DEFAULT_SEQ: tuple[int, ...] = _seq(DEFAULT_SEQ_TEXT)


@dataclass(frozen=True)
class TuneSettings:
    """What ``python -m gemm_runtime tune`` and the ``measure`` dispatch policy try. From
    GEMM_TUNE (see the module doc); build one with parse_tune() or directly (for tests)."""

    seq: tuple[int, ...] = DEFAULT_SEQ  # M values to tune, ascending, unique
    max_splits: int = 8  # the most split-K slices tried (1..plan.MAX_SPLITS)
    top_k: int = 8  # candidates measured per problem, best first by the cost model
    max_time: float = 0.5  # seconds of timing budget per candidate
    reps: int = 10  # timed repetitions per candidate
    confirm: int = 3  # finalists timed again side by side (tuner.tune); 0 or 1: none

    def __post_init__(self) -> None:
        src = "TuneSettings"
        seq = tuple(self.seq)
        if not seq or any(not isinstance(m, int) or isinstance(m, bool) or not 1 <= m <= _MAX_M for m in seq):
            raise TuneSettingsError(src, "seq", self.seq, f"a non-empty sequence of integers in 1..{_MAX_M}")
        object.__setattr__(self, "seq", tuple(sorted(set(seq))))
        for name, lo, hi in (("max_splits", 1, MAX_SPLITS), ("top_k", 1, None), ("reps", 1, None), ("confirm", 0, None)):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < lo or (hi is not None and v > hi):
                raise TuneSettingsError(src, name, v, f"an integer >= {lo}" + (f" and <= {hi}" if hi else ""))
        t = self.max_time
        if not isinstance(t, (int, float)) or isinstance(t, bool) or not math.isfinite(t) or t <= 0:
            raise TuneSettingsError(src, "max_time", t, "a finite number of seconds > 0")
        object.__setattr__(self, "max_time", float(t))


def _int_item(source: str, name: str, value: str, lo: int, hi: int | None) -> int:
    accepted = f"an integer in {lo}..{hi}" if hi is not None else f"an integer >= {lo}"
    if not _UINT.fullmatch(value) or not (lo <= _int(value) and (hi is None or _int(value) <= hi)):
        raise TuneSettingsError(source, f"{name}={value}", repr(value), accepted)
    return int(value)


def _float_item(source: str, name: str, value: str) -> float:
    accepted = "a number of seconds > 0 (e.g. 0.5, 2, 1e-1)"
    try:
        t = float(value)
    except ValueError:
        raise TuneSettingsError(source, f"{name}={value}", repr(value), accepted) from None
    if not math.isfinite(t) or t <= 0:
        raise TuneSettingsError(source, f"{name}={value}", repr(value), accepted)
    return t


_TUNE_NAMES = ("seq", "max_splits", "top_k", "max_time", "reps", "confirm")


def parse_tune(text: str, source: str = TUNE_VAR) -> TuneSettings:
    """Parse the GEMM_TUNE grammar (module doc) into TuneSettings; names not given keep
    their defaults, so "" gives the defaults. Pure: reads no environment. ``source`` names
    where the text came from in error messages (the variable, or a CLI flag)."""
    given: dict[str, object] = {}
    for raw in text.split(";"):
        item = raw.strip()
        if not item:
            continue
        name, eq, value = item.partition("=")
        name, value = name.strip(), value.strip()
        if not eq:
            raise TuneSettingsError(source, item, "no '='", f"name=value with name one of {', '.join(_TUNE_NAMES)}")
        if name not in _TUNE_NAMES:
            raise TuneSettingsError(source, item, f"unknown name {name!r}", f"one of {', '.join(_TUNE_NAMES)}")
        if name in given:
            raise TuneSettingsError(source, item, f"{name} a second time", "each name at most once")
        if name == "seq":
            given[name] = _seq(value, source)
        elif name == "max_splits":
            given[name] = _int_item(source, name, value, 1, MAX_SPLITS)
        elif name == "max_time":
            given[name] = _float_item(source, name, value)
        elif name == "confirm":
            given[name] = _int_item(source, name, value, 0, None)
        else:
            given[name] = _int_item(source, name, value, 1, None)
    return TuneSettings(**given)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Settings:
    build_dir: Path  # GEMM_BUILD_DIR: cubins + manifests (`python -m gemm_runtime.build --out`)
    generated_dir: Path  # GEMM_GENERATED_DIR: generated sources (`python -m codegen --out`)
    jobs: int | None  # GEMM_BUILD_JOBS: parallel NVRTC compiles; None = os.cpu_count()
    tune: TuneSettings = field(default_factory=TuneSettings)  # GEMM_TUNE: see the module doc
    # GEMM_CHECK_ROUTING=1: grouped GEMMs check their routing's values on the host
    # (gemm_runtime.experts.check_routing), at the price of a synchronization per call.
    check_routing: bool = False
    # GEMM_UNPACK_MAX_MIB: the largest dense buffer (MiB) a whole-weight plan may unpack a
    # quantized weight into (gemm_runtime/whole_weight.py); 0: no whole-weight plans.
    # NOTE: 1 GiB holds llama3-70b's gate_up (57344 x 8192 halves, 896 MiB).
    unpack_max_mib: int = 1024


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


def _mib(var: str, default: int) -> int:
    value = os.environ.get(var, "").strip()
    if not value:
        return default
    if not _UINT.fullmatch(value) or _int(value) == _TOO_LONG:
        raise ValueError(f"{var}={value!r}: expected an integer >= 0 (MiB)")
    return int(value)


def _flag(var: str) -> bool:
    value = os.environ.get(var, "").strip()
    if value not in ("", "0", "1"):
        raise ValueError(f"{var}={value!r}: expected 0 or 1")
    return value == "1"


def from_env() -> Settings:
    return Settings(
        build_dir=_path("GEMM_BUILD_DIR", REPO_ROOT / "build"),
        generated_dir=_path("GEMM_GENERATED_DIR", REPO_ROOT / "generated"),
        jobs=_jobs("GEMM_BUILD_JOBS"),
        tune=parse_tune(os.environ.get(TUNE_VAR, "")),
        check_routing=_flag("GEMM_CHECK_ROUTING"),
        unpack_max_mib=_mib("GEMM_UNPACK_MAX_MIB", 1024),
    )


_current: Settings | None = None


def settings() -> Settings:
    """The settings of this process (read from the environment on first use)."""
    global _current
    if _current is None:
        _current = from_env()
    return _current


def tuning_seq() -> list[int]:
    """The M values to tune (GEMM_TUNE's ``seq``), ascending."""
    return list(settings().tune.seq)


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
