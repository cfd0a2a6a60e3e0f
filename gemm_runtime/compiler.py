"""NVRTC compilation of one kernel source to a cubin, with a content-addressed disk cache.

Two NVRTCs may serve a compile: CUDA 13's (``cuda.bindings.nvrtc``, always installed)
and CUDA 12's (``gemm_runtime.nvrtc_legacy``, from the optional ``[volta]`` extra), which
still targets sm_70. ``backend_for(arch)`` picks CUDA 13's whenever it supports the arch,
else CUDA 12's, else raises ArchUnsupportedError; the cache key holds the version of the
one that compiled.

``cuda.bindings.nvrtc`` is imported inside the functions that need it, so importing
this module (e.g. from the build CLI's argument parsing) stays cheap.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from codegen.fsutil import atomic_write
from gemm_runtime.errors import GemmError

# Bump when the cache entry layout or key changes, so old entries become misses.
_CACHE_FORMAT = 2
_REPORT_FIELDS = ("registers", "stack_frame", "spill_stores", "spill_loads", "smem_static")


class CompileError(GemmError):
    """NVRTC rejected a source; the message carries the kernel, the arch and the full log."""

    def __init__(self, name: str, arch: int, log: str) -> None:
        super().__init__(f"NVRTC failed to compile {name} for sm_{arch}:\n{log.rstrip()}")
        self.name = name
        self.arch = arch
        self.log = log

    def __reduce__(self) -> tuple[Any, ...]:
        # Default exception pickling replays self.args (the message) into __init__,
        # which would break when the error crosses a ProcessPoolExecutor boundary.
        return (CompileError, (self.name, self.arch, self.log))


class ArchUnsupportedError(GemmError):
    """No available NVRTC generates code for the arch; ``reason`` says which were tried
    (and, where the CUDA 12 NVRTC is missing, to install the ``[volta]`` extra)."""

    def __init__(self, arch: int, reason: str, tried: Sequence[str] = ()) -> None:
        super().__init__(f"no NVRTC can generate code for sm_{arch}: {reason}")
        self.arch = arch
        self.reason = reason
        self.tried = tuple(tried)  # e.g. ("13.5",) or ("13.5", "12.9")

    def __reduce__(self) -> tuple[Any, ...]:
        return (ArchUnsupportedError, (self.arch, self.reason, self.tried))


@dataclass(frozen=True)
class CompileResult:
    cubin: bytes
    log: str
    registers: int
    stack_frame: int
    spill_stores: int
    spill_loads: int
    smem_static: int
    cached: bool
    seconds: float

    @property
    def spills(self) -> int:
        return self.spill_stores + self.spill_loads

    def report(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in _REPORT_FIELDS}


# ---- NVRTC ---------------------------------------------------------------------------
def _check(result: Any, what: str) -> Any:
    from cuda.bindings import nvrtc

    err, *rest = result
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        _, msg = nvrtc.nvrtcGetErrorString(err)
        raise RuntimeError(f"{what} failed: {msg.decode(errors='replace')}")
    return rest[0] if len(rest) == 1 else rest


@functools.lru_cache(maxsize=None)
def _primary_version() -> tuple[int, int]:
    from cuda.bindings import nvrtc

    major, minor = _check(nvrtc.nvrtcVersion(), "nvrtcVersion")
    return int(major), int(minor)


@functools.lru_cache(maxsize=None)
def _primary_archs() -> tuple[int, ...]:
    from cuda.bindings import nvrtc

    return tuple(sorted(int(a) for a in _check(nvrtc.nvrtcGetSupportedArchs(), "nvrtcGetSupportedArchs")))


@dataclass(frozen=True)
class NvrtcBackend:
    """One NVRTC library: its version, the real archs it targets and its compile call."""

    label: str  # "CUDA 13" / "CUDA 12"
    version: tuple[int, int]
    archs: tuple[int, ...]
    compile: Callable[[str, str, list[str]], tuple[bool, str, bytes]] = field(repr=False, compare=False)
    # The exact library ("path size mtime"), for the cache key: nvrtcVersion gives only
    # major.minor, and a patch release (13.5.37 -> 13.5.40) may emit other code.
    library: str = ""

    @property
    def version_text(self) -> str:
        return f"{self.version[0]}.{self.version[1]}"

    def describe(self) -> str:
        """e.g. "CUDA 13's NVRTC 13.5 (sm_75..sm_121)"."""
        span = f"sm_{self.archs[0]}..sm_{self.archs[-1]}" if self.archs else "no archs"
        return f"{self.label}'s NVRTC {self.version_text} ({span})"


def library_identity(path: str | Path) -> str:
    """"<resolved path> <size> <mtime_ns>" of a shared library; "" if it cannot be stat'ed."""
    try:
        p = Path(path).resolve()
        st = p.stat()
    except OSError:
        return ""
    return f"{p} {st.st_size} {st.st_mtime_ns}"


@functools.lru_cache(maxsize=None)
def _primary_library() -> str:
    major = _primary_version()[0]  # loads the library first
    try:
        with open("/proc/self/maps") as f:
            paths = [line.split()[-1] for line in f if f"libnvrtc.so.{major}" in line]
    except OSError:
        paths = []  # not Linux: the version alone identifies it
    return library_identity(paths[0]) if paths else ""


def primary_backend() -> NvrtcBackend:
    """The NVRTC of cuda.bindings (CUDA 13, a hard dependency)."""
    version = _primary_version()
    return NvrtcBackend(f"CUDA {version[0]}", version, _primary_archs(), _nvrtc_compile, _primary_library())


def legacy_backend() -> NvrtcBackend:
    """The CUDA 12 NVRTC of the ``[volta]`` extra; raises LegacyNvrtcUnavailable without it."""
    from gemm_runtime import nvrtc_legacy

    lib = nvrtc_legacy.load()
    return NvrtcBackend(
        f"CUDA {lib.version[0]}", lib.version, lib.archs, lambda src, name, opts: lib.compile(src, f"{name}.cu", opts),
        library_identity(lib.path),
    )


def _legacy_or_reason() -> tuple[NvrtcBackend | None, str]:
    from gemm_runtime.nvrtc_legacy import LegacyNvrtcUnavailable

    try:
        return legacy_backend(), ""
    except LegacyNvrtcUnavailable as e:
        return None, str(e)


def backends() -> list[NvrtcBackend]:
    """The NVRTCs available to this process, in order of preference (CUDA 13 first)."""
    legacy, _ = _legacy_or_reason()
    return [primary_backend()] + ([legacy] if legacy is not None else [])


def backend_for(arch: int) -> NvrtcBackend:
    """The NVRTC that compiles for ``sm_{arch}``: CUDA 13's when it can, else CUDA 12's
    (the ``[volta]`` extra) when installed and able; else ArchUnsupportedError."""
    primary = primary_backend()
    if arch in primary.archs:
        return primary
    legacy, why = _legacy_or_reason()
    if legacy is not None and arch in legacy.archs:
        return legacy
    if legacy is None:
        from gemm_runtime.nvrtc_legacy import INSTALL_HINT

        reason = (
            f"{primary.describe()} cannot target sm_{arch}, and the CUDA 12 NVRTC is not available "
            f"({why}); {INSTALL_HINT}"
        )
        raise ArchUnsupportedError(arch, reason, (primary.version_text,))
    reason = f"neither {primary.describe()} nor {legacy.describe()} can target sm_{arch}"
    raise ArchUnsupportedError(arch, reason, (primary.version_text, legacy.version_text))


def nvrtc_version(arch: int | None = None) -> tuple[int, int]:
    """The version of the NVRTC that compiles for ``sm_{arch}`` (ArchUnsupportedError if
    none can); with no arch, that of the primary (CUDA 13) NVRTC."""
    if arch is None:
        return _primary_version()
    return backend_for(arch).version


def supported_archs() -> tuple[int, ...]:
    """The real architectures some available NVRTC can generate code for: CUDA 13's
    (75, 80, ...) plus, with the ``[volta]`` extra, CUDA 12's (which adds 70)."""
    return tuple(sorted({a for b in backends() for a in b.archs}))


def compile_options(
    arch: int, include_dirs: Sequence[Path], options: Sequence[str] = (), target: str | None = None
) -> list[str]:
    """NVRTC's options for ``sm_{arch}``; ``target`` names another --gpu-architecture of
    that arch (an arch-specific one such as "sm_90a", from the kernel's family)."""
    return [
        f"--gpu-architecture={target or f'sm_{arch}'}",
        "-std=c++17",
        "-Xptxas=-v",  # makes the log carry the ptxas resource report parsed below
        "-default-device",
        *(f"-I{Path(d).resolve()}" for d in include_dirs),
        *options,
    ]


def _nvrtc_compile(source: str, name: str, opts: list[str]) -> tuple[bool, str, bytes]:
    from cuda.bindings import nvrtc

    prog = _check(nvrtc.nvrtcCreateProgram(source.encode(), f"{name}.cu".encode(), 0, [], []), "nvrtcCreateProgram")
    try:
        raw = [o.encode() for o in opts]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(raw), raw)
        # Writable buffers: NVRTC writes through the pointer, and a bytes object of
        # length 1 (an empty log is just its NUL) is CPython's shared b" " singleton.
        size = _check(nvrtc.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
        buf = bytearray(max(1, size))
        _check(nvrtc.nvrtcGetProgramLog(prog, buf), "nvrtcGetProgramLog")
        log = bytes(buf).rstrip(b"\x00").decode(errors="replace")
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            return False, log, b""
        size = _check(nvrtc.nvrtcGetCUBINSize(prog), "nvrtcGetCUBINSize")
        cubin = bytearray(size)
        _check(nvrtc.nvrtcGetCUBIN(prog, cubin), "nvrtcGetCUBIN")
        return True, log, bytes(cubin)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def parse_ptxas_report(log: str, name: str) -> dict[str, int]:
    """Resource usage of entry ``name`` from a ``-Xptxas=-v`` log; 0 where absent."""
    # Restrict to the entry's own section: non-inlined device functions get
    # "Function properties" blocks of their own.
    start = log.find(f"Compiling entry function '{name}'")
    section = log
    if start >= 0:
        end = log.find("Compiling entry function", start + 1)
        section = log[start : end if end >= 0 else len(log)]

    def num(pattern: str) -> int:
        m = re.search(pattern, section)
        return int(m.group(1)) if m else 0

    return {
        "registers": num(r"Used (\d+) registers"),
        "stack_frame": num(r"(\d+) bytes stack frame"),
        "spill_stores": num(r"(\d+) bytes spill stores"),
        "spill_loads": num(r"(\d+) bytes spill loads"),
        "smem_static": num(r"(\d+) bytes smem"),
    }


# ---- cache ---------------------------------------------------------------------------
def _package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gemm-runtime")
    except PackageNotFoundError:
        return "dev"


def _dir_signature(d: Path) -> tuple[str, tuple[tuple[str, int, int], ...]]:
    root = Path(d).resolve()
    files = sorted(p for p in root.rglob("*") if p.is_file())
    return str(root), tuple((p.relative_to(root).as_posix(), p.stat().st_mtime_ns, p.stat().st_size) for p in files)


@functools.lru_cache(maxsize=64)
def _hash_dirs(signature: tuple[tuple[str, tuple[tuple[str, int, int], ...]], ...]) -> str:
    # Keyed on (path, [(file, mtime, size)]) so headers are read once per process
    # per state of the tree; any edit changes a stat and so the key.
    h = hashlib.sha256()
    for root, files in signature:
        h.update(f"dir {root}\n".encode())
        for rel, _, _ in files:
            data = (Path(root) / rel).read_bytes()
            h.update(f"file {rel} {len(data)}\n".encode())
            h.update(data)
    return h.hexdigest()


def include_digest(include_dirs: Sequence[Path]) -> str:
    """sha256 of every file under ``include_dirs``: a superset of the headers any source includes."""
    return _hash_dirs(tuple(_dir_signature(Path(d)) for d in include_dirs))


def cache_key(
    source: str, *, name: str, arch: int, include_dirs: Sequence[Path], options: Sequence[str] = (),
    target: str | None = None,
) -> str:  # fmt: skip
    opts = compile_options(arch, include_dirs, options, target)
    backend = backend_for(arch)
    parts = {
        "format": _CACHE_FORMAT,
        "name": name,
        "arch": arch,
        "options": opts,
        "nvrtc": list(backend.version),  # the NVRTC that compiles it, not just any
        "nvrtc_library": backend.library,
        "package": _package_version(),
        "includes": include_digest(include_dirs),
        "source": hashlib.sha256(source.encode()).hexdigest(),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def _cache_load(cache_dir: Path, key: str) -> CompileResult | None:
    t0 = time.perf_counter()
    try:
        meta = json.loads((cache_dir / f"{key}.json").read_text())
        cubin = (cache_dir / f"{key}.cubin").read_bytes()
        if hashlib.sha256(cubin).hexdigest() != meta["cubin_sha256"]:
            return None
        report = {k: meta[k] for k in _REPORT_FIELDS}
        log = meta["log"]
    except (OSError, ValueError, KeyError, TypeError):
        return None  # missing or corrupt entry: a miss, overwritten by the recompile
    # NOTE: checked like a fresh report: int(Infinity) raises OverflowError, and a negative
    # count would publish a manifest that every reader refuses.
    if not isinstance(log, str) or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                                           for v in report.values()):  # fmt: skip
        return None
    return CompileResult(cubin=cubin, log=log, cached=True, seconds=time.perf_counter() - t0, **report)


def _cache_store(cache_dir: Path, key: str, result: CompileResult) -> None:
    # The cubin first, the json last: the json's presence (and its digest of the
    # cubin) is what marks the entry complete.
    atomic_write(cache_dir / f"{key}.cubin", result.cubin)
    meta = {**result.report(), "log": result.log, "cubin_sha256": hashlib.sha256(result.cubin).hexdigest()}
    atomic_write(cache_dir / f"{key}.json", json.dumps(meta, indent=1).encode())


def lookup(
    source: str, *, name: str, arch: int, include_dirs: Sequence[Path], options: Sequence[str] = (), cache_dir: Path,
    target: str | None = None,
) -> CompileResult | None:  # fmt: skip
    """The cached result for these inputs, or None; never compiles."""
    key = cache_key(source, name=name, arch=arch, include_dirs=include_dirs, options=options, target=target)
    return _cache_load(Path(cache_dir), key)


def compile_cubin(
    source: str,
    *,
    name: str,
    arch: int,
    include_dirs: Sequence[Path],
    options: Sequence[str] = (),
    cache_dir: Path | None,
    target: str | None = None,
) -> CompileResult:
    """Compile ``source`` for ``sm_{arch}`` (or ``target``, an arch-specific name of it)
    with the NVRTC ``backend_for(arch)`` picks; raise CompileError with the NVRTC log on
    failure, ArchUnsupportedError when no available NVRTC targets the arch."""
    t0 = time.perf_counter()
    backend = backend_for(arch)
    key = None
    if cache_dir is not None:
        key = cache_key(source, name=name, arch=arch, include_dirs=include_dirs, options=options, target=target)
        hit = _cache_load(Path(cache_dir), key)
        if hit is not None:
            return hit
    ok, log, cubin = backend.compile(source, name, compile_options(arch, include_dirs, options, target))
    if not ok:
        raise CompileError(name, arch, log)
    result = CompileResult(
        cubin=cubin, log=log, cached=False, seconds=time.perf_counter() - t0, **parse_ptxas_report(log, name)
    )
    if cache_dir is not None and key is not None:
        _cache_store(Path(cache_dir), key, result)
    return result


__all__ = [
    "ArchUnsupportedError",
    "CompileError",
    "CompileResult",
    "NvrtcBackend",
    "atomic_write",
    "backend_for",
    "backends",
    "cache_key",
    "compile_cubin",
    "compile_options",
    "include_digest",
    "legacy_backend",
    "lookup",
    "nvrtc_version",
    "parse_ptxas_report",
    "primary_backend",
    "supported_archs",
]
