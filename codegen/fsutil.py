"""Atomic file publication, shared by the generator and the build."""

from __future__ import annotations

import os
import tempfile
import threading
from pathlib import Path

NAME_MAX = 255  # bytes per path component on Linux and macOS file systems
# A temp file is ".<name>.<pid>.<8 random chars>.tmp"; a pid has at most 7 digits
# (Linux's pid_max is at most 2**22), so the temp name is this much longer than <name>.
TEMP_NAME_OVERHEAD = len(".") + len(".") + 7 + len(".") + 8 + len(".tmp")

_umask_lock = threading.Lock()


def path_arg(text: str) -> Path:
    """An argparse ``type`` for a path option: an empty value (an unset shell variable, as
    in ``--out "$DIR"``) is refused, not read as the current folder, where an output
    folder's sync would write, and delete, files."""
    if not text:
        import argparse

        raise argparse.ArgumentTypeError("got an empty path; accepted: a non-empty path (. names the current folder)")
    return Path(text)


def current_umask() -> int:
    """The process umask, without changing it where the OS can tell (Linux's
    /proc/self/status); else by setting and restoring it under a lock."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _umask_lock:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def temp_prefix(path: Path, pid: int | None = None) -> str:
    """The prefix of ``path``'s temp files in process ``pid`` (default: this one), so a
    parent can remove what a worker it killed left half-written."""
    return f".{path.name}.{os.getpid() if pid is None else pid}."


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` so readers see the old file or the whole new one, never a part:
    a temp file in the same directory, then an atomic rename. The file gets the mode
    a plain open() would give (0666 less the umask), not mkstemp's 0600, so a build
    made by one user can be read by another."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=temp_prefix(path), suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~current_umask())
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_if_changed(path: Path, data: bytes) -> bool:
    """``atomic_write`` unless the file already holds ``data``; True if written. Unchanged
    outputs keep their mtime, so make, rsync and incremental builds see nothing to do."""
    try:
        if path.read_bytes() == data:
            return False
    except OSError:
        pass
    atomic_write(path, data)
    return True


def remove_temp_files(directory: Path, pids: "list[int] | set[int]") -> list[Path]:
    """Delete the temp files that processes ``pids`` (dead ones) left in ``directory``."""
    removed = []
    for pid in pids:
        for p in Path(directory).glob(f".*.{pid}.*.tmp"):
            p.unlink(missing_ok=True)
            removed.append(p)
    return removed
