"""The CUDA 12 NVRTC, loaded with ctypes next to the CUDA 13 one that cuda.bindings uses.

CUDA 13's NVRTC no longer generates code for sm_70 (Volta); CUDA 12's still does. It
ships in the ``nvidia-cuda-nvrtc-cu12`` wheel (the ``[volta]`` extra), which installs
``nvidia/cuda_nvrtc/lib/libnvrtc.so.12`` beside the CUDA 13 wheel's ``nvidia/cu13/lib``;
the two libraries export the same symbol names, so this one is opened RTLD_LOCAL and
called only through its own handle.

Load order matters: cuda.bindings finds its NVRTC through cuda-pathfinder, which first
asks the dynamic loader for an already loaded ``libnvrtc.so.13`` *or* ``libnvrtc.so.12``.
Were this library loaded first, cuda.bindings would adopt it and "CUDA 13's" NVRTC would
silently be 12.x. So ``load()`` makes cuda.bindings load its own library before this one.

    lib = nvrtc_legacy.load()          # LegacyNvrtc, or raises LegacyNvrtcUnavailable
    lib.version, lib.archs             # (12, 9), (50, ..., 70, ..., 120)
    ok, log, cubin = lib.compile(source, "k.cu", ["--gpu-architecture=sm_70"])

The library is located through the wheel's installed file list (importlib.metadata),
never through a hard-coded site-packages path.
"""

from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path
from typing import Sequence

DISTRIBUTION = "nvidia-cuda-nvrtc-cu12"
LIBRARY_NAME = "libnvrtc.so.12"
INSTALL_HINT = "install the [volta] extra (pip install -e '.[volta]') for the CUDA 12 NVRTC"

_NVRTC_SUCCESS = 0


class LegacyNvrtcUnavailable(Exception):
    """The CUDA 12 NVRTC is not installed or does not load; the message says which."""


def library_path() -> Path | None:
    """libnvrtc.so.12 inside the installed ``nvidia-cuda-nvrtc-cu12`` wheel; None if the
    wheel is not installed (or lists no such file)."""
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        dist = distribution(DISTRIBUTION)
    except PackageNotFoundError:
        return None
    # The exact name: the wheel also ships libnvrtc.alt.so.12, a variant we do not want.
    # (12.x wheels put it in nvidia/cuda_nvrtc/lib/; the file list is what counts.)
    candidates = sorted((f for f in dist.files or () if f.name == LIBRARY_NAME), key=str)
    for f in candidates:
        path = Path(str(dist.locate_file(f))).resolve()
        if path.is_file():
            return path
    return None


def installed() -> bool:
    """Whether the wheel is installed (whether or not its library loads)."""
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        distribution(DISTRIBUTION)
    except PackageNotFoundError:
        return False
    return True


class LegacyNvrtc:
    """One loaded libnvrtc.so.12: its version, its targets and compile-to-cubin."""

    def __init__(self, path: Path) -> None:
        self.path = path
        # RTLD_LOCAL: the CUDA 13 library that cuda.bindings loads exports the same names.
        self._lib = lib = ctypes.CDLL(str(path), mode=os.RTLD_LOCAL)
        c_int_p = ctypes.POINTER(ctypes.c_int)
        c_size_p = ctypes.POINTER(ctypes.c_size_t)
        prog_p = ctypes.POINTER(ctypes.c_void_p)
        sigs = {
            "nvrtcGetErrorString": (ctypes.c_char_p, [ctypes.c_int]),
            "nvrtcVersion": (ctypes.c_int, [c_int_p, c_int_p]),
            "nvrtcGetNumSupportedArchs": (ctypes.c_int, [c_int_p]),
            "nvrtcGetSupportedArchs": (ctypes.c_int, [c_int_p]),
            "nvrtcCreateProgram": (
                ctypes.c_int,
                [prog_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p],
            ),
            "nvrtcCompileProgram": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]),
            "nvrtcGetProgramLogSize": (ctypes.c_int, [ctypes.c_void_p, c_size_p]),
            "nvrtcGetProgramLog": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p]),
            "nvrtcGetCUBINSize": (ctypes.c_int, [ctypes.c_void_p, c_size_p]),
            "nvrtcGetCUBIN": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p]),
            "nvrtcDestroyProgram": (ctypes.c_int, [prog_p]),
        }
        for name, (restype, argtypes) in sigs.items():
            fn = getattr(lib, name)  # AttributeError: not an NVRTC library
            fn.restype, fn.argtypes = restype, argtypes

        major, minor = ctypes.c_int(), ctypes.c_int()
        self._check(lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
        self.version: tuple[int, int] = (major.value, minor.value)
        count = ctypes.c_int()
        self._check(lib.nvrtcGetNumSupportedArchs(ctypes.byref(count)), "nvrtcGetNumSupportedArchs")
        archs = (ctypes.c_int * count.value)()
        self._check(lib.nvrtcGetSupportedArchs(archs), "nvrtcGetSupportedArchs")
        self.archs: tuple[int, ...] = tuple(sorted(int(a) for a in archs))

    def _check(self, err: int, what: str) -> None:
        if err != _NVRTC_SUCCESS:
            msg = self._lib.nvrtcGetErrorString(err) or b"unknown error"
            raise RuntimeError(f"{what} failed (CUDA 12 NVRTC): {msg.decode(errors='replace')}")

    def compile(self, source: str, filename: str, options: Sequence[str]) -> tuple[bool, str, bytes]:
        """(ok, log, cubin); ``cubin`` is empty when ``ok`` is False."""
        lib = self._lib
        prog = ctypes.c_void_p()
        self._check(
            lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), filename.encode(), 0, None, None),
            "nvrtcCreateProgram",
        )
        try:
            raw = [o.encode() for o in options]
            argv = (ctypes.c_char_p * max(1, len(raw)))(*raw)
            err = lib.nvrtcCompileProgram(prog, len(raw), argv)
            size = ctypes.c_size_t()
            self._check(lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size)), "nvrtcGetProgramLogSize")
            buf = ctypes.create_string_buffer(max(1, size.value))
            self._check(lib.nvrtcGetProgramLog(prog, buf), "nvrtcGetProgramLog")
            log = buf.raw[: size.value].rstrip(b"\x00").decode(errors="replace")
            if err != _NVRTC_SUCCESS:
                return False, log, b""
            self._check(lib.nvrtcGetCUBINSize(prog, ctypes.byref(size)), "nvrtcGetCUBINSize")
            cubin = ctypes.create_string_buffer(size.value)
            self._check(lib.nvrtcGetCUBIN(prog, cubin), "nvrtcGetCUBIN")
            return True, log, cubin.raw
        finally:
            lib.nvrtcDestroyProgram(ctypes.byref(prog))


_lock = threading.Lock()
_loaded: LegacyNvrtc | LegacyNvrtcUnavailable | None = None


def load() -> LegacyNvrtc:
    """The CUDA 12 NVRTC of this process (loaded once), or LegacyNvrtcUnavailable saying
    why not. Tests monkeypatch this function to simulate an install without the extra."""
    global _loaded
    with _lock:
        if _loaded is None:
            _loaded = _load_uncached()
    if isinstance(_loaded, LegacyNvrtcUnavailable):
        raise LegacyNvrtcUnavailable(str(_loaded))  # a fresh instance: no traceback piles up
    return _loaded


def _load_primary_first() -> None:
    """Make cuda.bindings load its (CUDA 13) NVRTC now, before libnvrtc.so.12 is in the
    process for cuda-pathfinder to adopt instead (see the module docstring)."""
    try:
        from cuda.bindings import nvrtc
    except ImportError:  # no cuda.bindings: nothing to protect
        return
    nvrtc.nvrtcVersion()


def _load_uncached() -> LegacyNvrtc | LegacyNvrtcUnavailable:
    if not installed():
        return LegacyNvrtcUnavailable(f"the {DISTRIBUTION} wheel is not installed")
    path = library_path()
    if path is None:
        return LegacyNvrtcUnavailable(f"the {DISTRIBUTION} wheel is installed but holds no {LIBRARY_NAME}")
    _load_primary_first()
    try:
        return LegacyNvrtc(path)
    except (OSError, AttributeError, RuntimeError) as e:
        return LegacyNvrtcUnavailable(f"{path} does not load: {e}")


__all__ = [
    "DISTRIBUTION",
    "INSTALL_HINT",
    "LIBRARY_NAME",
    "LegacyNvrtc",
    "LegacyNvrtcUnavailable",
    "installed",
    "library_path",
    "load",
]
