"""NVRTC compilation of one kernel source to a cubin, with a content-addressed disk cache.

``cuda.bindings.nvrtc`` is imported inside the functions that need it, so importing
this module (e.g. from the build CLI's argument parsing) stays cheap.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from codegen.fsutil import atomic_write
from gemm_runtime.errors import GemmError

# Bump when the cache entry layout changes, so old entries become misses.
_CACHE_FORMAT = 1
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
def nvrtc_version() -> tuple[int, int]:
    from cuda.bindings import nvrtc

    major, minor = _check(nvrtc.nvrtcVersion(), "nvrtcVersion")
    return int(major), int(minor)


@functools.lru_cache(maxsize=None)
def supported_archs() -> tuple[int, ...]:
    """The real architectures this NVRTC can generate code for (e.g. 75, 80, ... for 13.x)."""
    from cuda.bindings import nvrtc

    return tuple(int(a) for a in _check(nvrtc.nvrtcGetSupportedArchs(), "nvrtcGetSupportedArchs"))


def compile_options(arch: int, include_dirs: Sequence[Path], options: Sequence[str] = ()) -> list[str]:
    return [
        f"--gpu-architecture=sm_{arch}",
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
        size = _check(nvrtc.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
        buf = b" " * size
        _check(nvrtc.nvrtcGetProgramLog(prog, buf), "nvrtcGetProgramLog")
        log = buf.rstrip(b"\x00").decode(errors="replace")
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            return False, log, b""
        size = _check(nvrtc.nvrtcGetCUBINSize(prog), "nvrtcGetCUBINSize")
        cubin = b" " * size
        _check(nvrtc.nvrtcGetCUBIN(prog, cubin), "nvrtcGetCUBIN")
        return True, log, cubin
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


def cache_key(source: str, *, name: str, arch: int, include_dirs: Sequence[Path], options: Sequence[str] = ()) -> str:
    opts = compile_options(arch, include_dirs, options)
    parts = {
        "format": _CACHE_FORMAT,
        "name": name,
        "arch": arch,
        "options": opts,
        "nvrtc": list(nvrtc_version()),
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
        report = {k: int(meta[k]) for k in _REPORT_FIELDS}
        log = str(meta["log"])
    except (OSError, ValueError, KeyError, TypeError):
        return None  # missing or corrupt entry: a miss, overwritten by the recompile
    return CompileResult(cubin=cubin, log=log, cached=True, seconds=time.perf_counter() - t0, **report)


def _cache_store(cache_dir: Path, key: str, result: CompileResult) -> None:
    # The cubin first, the json last: the json's presence (and its digest of the
    # cubin) is what marks the entry complete.
    atomic_write(cache_dir / f"{key}.cubin", result.cubin)
    meta = {**result.report(), "log": result.log, "cubin_sha256": hashlib.sha256(result.cubin).hexdigest()}
    atomic_write(cache_dir / f"{key}.json", json.dumps(meta, indent=1).encode())


def lookup(
    source: str, *, name: str, arch: int, include_dirs: Sequence[Path], options: Sequence[str] = (), cache_dir: Path
) -> CompileResult | None:
    """The cached result for these inputs, or None; never compiles."""
    key = cache_key(source, name=name, arch=arch, include_dirs=include_dirs, options=options)
    return _cache_load(Path(cache_dir), key)


def compile_cubin(
    source: str,
    *,
    name: str,
    arch: int,
    include_dirs: Sequence[Path],
    options: Sequence[str] = (),
    cache_dir: Path | None,
) -> CompileResult:
    """Compile ``source`` for ``sm_{arch}``; raise CompileError with the NVRTC log on failure."""
    t0 = time.perf_counter()
    key = None
    if cache_dir is not None:
        key = cache_key(source, name=name, arch=arch, include_dirs=include_dirs, options=options)
        hit = _cache_load(Path(cache_dir), key)
        if hit is not None:
            return hit
    ok, log, cubin = _nvrtc_compile(source, name, compile_options(arch, include_dirs, options))
    if not ok:
        raise CompileError(name, arch, log)
    result = CompileResult(
        cubin=cubin, log=log, cached=False, seconds=time.perf_counter() - t0, **parse_ptxas_report(log, name)
    )
    if cache_dir is not None and key is not None:
        _cache_store(Path(cache_dir), key, result)
    return result


__all__ = [
    "CompileError",
    "CompileResult",
    "atomic_write",
    "cache_key",
    "compile_cubin",
    "compile_options",
    "include_digest",
    "lookup",
    "nvrtc_version",
    "parse_ptxas_report",
    "supported_archs",
]
