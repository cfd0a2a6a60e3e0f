"""The format of ``build/sm_XX/``: a manifest naming cubins, each with its size and
sha256; how it is published (under a per-arch lock) and how it is read and verified.

The build, ``python -m gemm_runtime list`` and the registry all go through here, so a
missing or damaged cubin reads the same everywhere: an ``EntryProblem`` that names the
manifest and the entry.

Publication holds an exclusive ``fcntl.flock`` on ``sm_XX/.lock`` while it writes the
arch's cubins, then its manifest, then deletes cubins no longer named; readers hold a
shared one while reading the manifest and its cubins. So concurrent builds into one
directory serialize their (millisecond) publications, and the last one's kernel set
is what the directory holds, complete.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from codegen.fsutil import atomic_write, write_if_changed
from codegen.spec import KernelSpec
from gemm_runtime.errors import GemmError

MANIFEST = "manifest.json"
LOCK = ".lock"
ARCH_MANIFEST_VERSION = 2  # 2: records carry the cubin's size and sha256
_ARCH_DIR = re.compile(r"sm_[1-9][0-9]*")
REBUILD_HINT = "rebuild with `make build` (python -m gemm_runtime.build)"
# Integer fields of a record (the ptxas report and the launch shape) and their floor.
INT_FIELDS = ("registers", "stack_frame", "spill_stores", "spill_loads", "smem_static", "smem_dynamic", "threads", "size")


class ManifestError(GemmError):
    """A manifest that cannot be read: ``path``, and the ``entry`` and ``field`` at fault
    where one is (None for an unreadable file)."""

    def __init__(self, path: Path, entry: str | None, field: str | None, message: str) -> None:
        self.path = Path(path)
        self.entry = entry
        self.field = field
        self.message = message
        where = ": ".join([str(path)] + ([entry] if entry else []) + ([f"field {field!r}"] if field else []))
        super().__init__(f"{where}: {message}; {REBUILD_HINT}")


@dataclass(frozen=True)
class Record:
    """One kernel of an arch's manifest."""

    name: str
    symbol: str
    cubin: str  # file name inside the arch directory
    source: str
    spec: KernelSpec
    registers: int
    stack_frame: int
    spill_stores: int
    spill_loads: int
    smem_static: int
    smem_dynamic: int
    threads: int
    size: int  # bytes of the cubin
    sha256: str

    @property
    def spills(self) -> int:
        return self.spill_stores + self.spill_loads


@dataclass(frozen=True)
class EntryProblem:
    """A record whose cubin is absent (``kind`` "missing"), not what the manifest says
    (``kind`` "damaged": wrong size, e.g. truncated, or wrong hash), or built by a version
    whose kernel of that spec launches differently (``kind`` "stale")."""

    manifest: Path
    name: str
    kind: str
    detail: str

    def describe(self) -> str:
        return f"{self.manifest}: kernel {self.name!r}: cubin {self.kind} ({self.detail}); {REBUILD_HINT}"


@dataclass(frozen=True)
class ArchManifest:
    arch: int
    path: Path
    nvrtc: str
    records: tuple[Record, ...]
    skipped: tuple[tuple[str, str], ...]  # (name, reason)

    @property
    def directory(self) -> Path:
        return self.path.parent


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ---- locking -------------------------------------------------------------------------
@contextlib.contextmanager
def arch_lock(arch_dir: Path, exclusive: bool) -> Iterator[None]:
    """flock on ``arch_dir/.lock``. A reader of a directory it may not write (a build
    served read-only) reads without the lock when the lock file cannot be created."""
    path = Path(arch_dir) / LOCK
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666) if exclusive else os.open(path, os.O_RDONLY)
    except OSError:
        if exclusive:
            raise
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)  # closing releases the lock


# ---- reading -------------------------------------------------------------------------
def _record(path: Path, i: int, raw: Any) -> Record:
    entry = f"kernels[{i}]"
    if not isinstance(raw, dict):
        raise ManifestError(path, entry, None, f"got {raw!r:.80}, accepted: a mapping (a kernel record)")
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise ManifestError(path, entry, "name", f"got {name!r:.80}, accepted: a kernel name")
    entry = f"{entry} ({name})"
    for key in ("symbol", "cubin", "source", "sha256"):
        if not isinstance(raw.get(key), str) or not raw.get(key):
            raise ManifestError(path, entry, key, f"got {raw.get(key)!r:.80}, accepted: a non-empty string")
    if "/" in raw["cubin"] or "\0" in raw["cubin"] or raw["cubin"] in (".", ".."):
        raise ManifestError(path, entry, "cubin", f"got {raw['cubin']!r}, accepted: a file name in {path.parent}")
    ints = {}
    for key in INT_FIELDS:
        v = raw.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ManifestError(path, entry, key, f"got {v!r:.80}, accepted: an integer >= 0")
        ints[key] = v
    try:
        spec = KernelSpec.from_json(raw.get("spec"))
    except (AttributeError, KeyError, TypeError, ValueError) as e:
        raise ManifestError(path, entry, "spec", f"unreadable kernel spec ({e})") from None
    if spec.name != name:
        raise ManifestError(path, entry, "spec", f"describes kernel {spec.name!r}, not {name!r}")
    return Record(name, raw["symbol"], raw["cubin"], raw["source"], spec, sha256=raw["sha256"], **ints)


def read_manifest(path: Path, arch: int) -> ArchManifest:
    """Parse and check one ``sm_XX/manifest.json``; ManifestError naming the entry and
    field at fault. Does not look at the cubins (see ``verify``)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ManifestError(path, None, None, f"unreadable ({e})") from None
    if not isinstance(data, dict):
        raise ManifestError(path, None, None, "not a JSON object")
    if data.get("version") != ARCH_MANIFEST_VERSION:
        raise ManifestError(
            path, None, "version", f"got {data.get('version')!r}, accepted: {ARCH_MANIFEST_VERSION} (this version's)"
        )
    if data.get("arch") != arch:
        # NOTE: a manifest copied from another arch's directory names cubins of that arch.
        raise ManifestError(path, None, "arch", f"got {data.get('arch')!r:.80}, accepted: {arch} (its directory's)")
    kernels, skipped = data.get("kernels"), data.get("skipped", [])
    if not isinstance(kernels, list):
        raise ManifestError(path, None, "kernels", f"got {kernels!r:.80}, accepted: a list of kernel records")
    if not isinstance(skipped, list) or not all(
        isinstance(s, dict) and isinstance(s.get("name"), str) and isinstance(s.get("reason"), str) for s in skipped
    ):
        raise ManifestError(path, None, "skipped", "accepted: a list of {name, reason}")
    records = tuple(_record(path, i, raw) for i, raw in enumerate(kernels))
    names = [r.name for r in records]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ManifestError(path, None, "kernels", f"lists {', '.join(dupes)} more than once")
    return ArchManifest(arch, path, str(data.get("nvrtc", "?")), records, tuple((s["name"], s["reason"]) for s in skipped))


def check_cubin(manifest: ArchManifest, rec: Record, data: bytes | None) -> EntryProblem | None:
    """The problem with ``data`` as ``rec``'s cubin (None: the file is absent), if any."""
    if data is None:
        return EntryProblem(manifest.path, rec.name, "missing", f"{manifest.directory / rec.cubin} does not exist")
    if len(data) != rec.size:
        what = "truncated" if len(data) < rec.size else "too long"
        return EntryProblem(manifest.path, rec.name, "damaged", f"{rec.cubin} is {len(data)} bytes, "
                            f"the manifest says {rec.size}: {what}")  # fmt: skip
    if sha256(data) != rec.sha256:
        return EntryProblem(manifest.path, rec.name, "damaged", f"{rec.cubin} does not match its sha256")
    return None


def check_record(manifest: ArchManifest, rec: Record) -> EntryProblem | None:
    """The problem with launching ``rec``'s cubin as this version launches its spec, if any.
    NOTE: the launch takes the dynamic shared memory and the block from the spec
    (KernelSpec.smem_bytes, .threads); a cubin built by a version that lays out its shared
    tiles otherwise would run with the wrong amount, so it is refused by name instead."""
    spec = rec.spec
    if rec.smem_dynamic != spec.smem_bytes or rec.threads != spec.threads:
        return EntryProblem(manifest.path, rec.name, "stale",
                            f"built for {rec.smem_dynamic} B of dynamic shared memory and {rec.threads} threads, "
                            f"where this version launches its spec with {spec.smem_bytes} B and {spec.threads}: "
                            f"built by another version")  # fmt: skip
    return None


def read_cubin(manifest: ArchManifest, rec: Record) -> tuple[bytes | None, EntryProblem | None]:
    """(the verified cubin, None), or (None, the problem)."""
    stale = check_record(manifest, rec)
    if stale is not None:
        return None, stale
    try:
        data = (manifest.directory / rec.cubin).read_bytes()
    except FileNotFoundError:
        data = None
    except OSError as e:
        return None, EntryProblem(manifest.path, rec.name, "damaged", f"unreadable: {e}")
    problem = check_cubin(manifest, rec, data)
    return (None, problem) if problem else (data, None)


def verify(manifest: ArchManifest) -> list[EntryProblem]:
    """The records of ``manifest`` whose cubin is missing, damaged or stale."""
    return [p for p in (read_cubin(manifest, r)[1] for r in manifest.records) if p is not None]


def arch_dirs(build_dir: Path) -> list[tuple[int, Path]]:
    """(arch, manifest path) of every ``build_dir/sm_XX/manifest.json``, by arch."""
    build_dir = Path(build_dir)
    found = build_dir.glob("sm_*") if build_dir.is_dir() else ()
    # NOTE: only the names the build writes (sm_80, not sm_080 or sm_²): the registry
    # reads build_dir/sm_{arch} back, and int("²") raises.
    return sorted(
        (int(p.name[3:]), p / MANIFEST) for p in found if _ARCH_DIR.fullmatch(p.name) and (p / MANIFEST).is_file()
    )


def read_verified(path: Path, arch: int) -> tuple[ArchManifest, dict[str, bytes], list[EntryProblem]]:
    """The manifest, its good cubins by kernel name and the problems of the others, read
    under the arch's shared lock so a concurrent publication is seen whole or not at all."""
    with arch_lock(Path(path).parent, exclusive=False):
        manifest = read_manifest(path, arch)
        cubins, problems = {}, []
        for rec in manifest.records:
            data, problem = read_cubin(manifest, rec)
            if problem is not None:
                problems.append(problem)
            else:
                cubins[rec.name] = data
    return manifest, cubins, problems


# ---- publishing ----------------------------------------------------------------------
@dataclass(frozen=True)
class PublishResult:
    restored: tuple[str, ...]  # kernels the previous manifest named whose cubin was missing or damaged


def _previous(path: Path, arch: int) -> ArchManifest | None:
    try:
        return read_manifest(path, arch)
    except ManifestError:
        return None  # unreadable or an older format: rewritten whole below


def record_fields(cubin: bytes) -> dict[str, Any]:
    """The fields a record gets from its cubin."""
    return {"size": len(cubin), "sha256": sha256(cubin)}


def publish(
    arch_dir: Path, arch: int, nvrtc: str, records: list[dict[str, Any]], cubins: dict[str, bytes], skipped: list
) -> PublishResult:
    """Make ``arch_dir`` hold exactly these cubins and a manifest naming them: cubins
    first, the manifest last, then stale cubins (and temp files of dead writers, which
    only the lock holder can tell apart from live ones) removed; all under the lock.
    ``records`` are manifest records without ``size``/``sha256`` (added here)."""
    arch_dir = Path(arch_dir)
    arch_dir.mkdir(parents=True, exist_ok=True)
    path = arch_dir / MANIFEST
    full = [{**rec, **record_fields(cubins[rec["name"]])} for rec in records]
    manifest = {
        "version": ARCH_MANIFEST_VERSION,
        "arch": arch,
        "nvrtc": nvrtc,  # the version of the NVRTC that compiled this arch
        "kernels": full,
        "skipped": [{"name": n, "reason": why} for n, why in sorted(skipped)],
    }
    with arch_lock(arch_dir, exclusive=True):
        old = _previous(path, arch)
        promised = {r.name: r for r in old.records} if old else {}
        restored = []
        for rec in full:
            data = cubins[rec["name"]]
            before = promised.get(rec["name"])
            on_disk = None
            with contextlib.suppress(OSError):
                on_disk = (arch_dir / rec["cubin"]).read_bytes()
            if before is not None and check_cubin(old, before, on_disk) is not None:
                restored.append(rec["name"])
            if on_disk != data:
                atomic_write(arch_dir / rec["cubin"], data)
        write_if_changed(path, (json.dumps(manifest, indent=2) + "\n").encode())
        keep = {rec["cubin"] for rec in full}
        for stale in arch_dir.glob("*.cubin"):
            if stale.name not in keep:
                stale.unlink(missing_ok=True)
        for tmp in arch_dir.glob(".*.tmp"):
            tmp.unlink(missing_ok=True)
    return PublishResult(tuple(sorted(restored)))
