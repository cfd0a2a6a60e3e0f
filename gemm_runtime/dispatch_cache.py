"""The dispatch cache: tuned LaunchSpecs of one device arch, indexed by problem shape
(``ProblemKey.shape``, M erased) and then by the tuned M values of that shape.

Lookups are exact (``get``) or "the nearest tuned M at or above" (``get_at_or_above``, a
bisect on the sorted M values of the shape). The whole cache exports to, and imports from,
a versioned JSON file (docs/DISPATCH.md); an import validates the whole file before it
changes anything. Never pickled. Thread-safe: one lock guards all mutable state.
"""

from __future__ import annotations

import bisect
import io
import json
import numbers
import os
import threading
import warnings
from collections.abc import Collection, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import IO, Union

from codegen.fsutil import atomic_write
from codegen.spec import KernelSpec
from gemm_runtime.context import KEY_FIELD_TYPES, ProblemKey
from gemm_runtime.errors import DispatchCacheError, DispatchCacheWarning, GemmArgumentError
from gemm_runtime.feasibility import launch_error, plan_type_error
from gemm_runtime.plan import LaunchSpec

FORMAT = "gemm-runtime/dispatch-cache"
VERSION = 1
ACCEPTED_VERSIONS = (1,)

PathOrFile = Union[str, "os.PathLike[str]", IO[str], IO[bytes]]


@dataclass(frozen=True)
class ImportReport:
    """What an import did, counted in records of the file."""

    added: int = 0  # new exact entries
    replaced: int = 0  # exact entries that existed with a different LaunchSpec, overwritten
    skipped_unknown: int = 0  # records naming kernels not in known_kernels (one warning says so)
    unchanged: int = 0  # exact entries that existed with the same LaunchSpec
    skipped_invalid: int = 0  # well-formed records this build cannot use (the same warning says so)


def _sort_key(key: ProblemKey) -> tuple:
    return tuple(v.value if hasattr(v, "value") else v for v in key)


def _entry_sort_key(entry: tuple[ProblemKey, LaunchSpec]) -> tuple:
    key, spec = entry
    return (_sort_key(key), spec.kernel, spec.splits, spec.swizzle)


def _sm(arch: object) -> str:
    return f"sm_{arch}" if isinstance(arch, int) and not isinstance(arch, bool) else repr(arch)


_JSON_TYPES = {dict: "object", list: "array", str: "string", int: "number", float: "number", bool: "boolean"}


def _json_type(v: object) -> str:
    return "null" if v is None else _JSON_TYPES.get(type(v), type(v).__name__)


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


_KEY_INTS = tuple(f for f in ProblemKey._fields if f not in KEY_FIELD_TYPES)

# The fields of a record's "key" and "launch" objects (what to_json writes).
_FIELDS = {"key": frozenset(ProblemKey._fields), "launch": frozenset(f.name for f in fields(LaunchSpec))}

_PATH_OR_FILE = "a path (str or os.PathLike) or a file object opened for {}"


class DispatchCache:
    """Tuned launches of ONE device arch. Keys whose ``arch`` differs cannot be stored."""

    def __init__(self, arch: int, device_name: str = "") -> None:
        if not _is_int(arch) or arch < 0:
            raise GemmArgumentError("arch", arch, "10 * major + minor of the device, e.g. 90")
        self._arch = arch
        self._device_name = device_name
        self._lock = threading.Lock()
        # shape key -> (sorted tuned M values, {m: LaunchSpec}); both changed under _lock only.
        self._tables: dict[ProblemKey, tuple[list[int], dict[int, LaunchSpec]]] = {}
        self._count = 0
        self._version = 0  # bumped by every change: launch plans memoized elsewhere check it

    @property
    def version(self) -> int:
        """Changes whenever an entry is added, replaced or removed."""
        return self._version

    @property
    def arch(self) -> int:
        return self._arch

    @property
    def device_name(self) -> str:
        return self._device_name

    def __repr__(self) -> str:
        return f"DispatchCache(arch={self._arch}, device_name={self._device_name!r}, entries={len(self)})"

    # --- lookups -------------------------------------------------------------------------

    def get(self, key: ProblemKey) -> LaunchSpec | None:
        """The entry tuned for exactly this key (same shape, same M), or None."""
        with self._lock:
            table = self._tables.get(key.shape)
            return None if table is None else table[1].get(key.m)

    def get_at_or_above(self, key: ProblemKey) -> LaunchSpec | None:
        """Among entries of ``key.shape``, the one with the smallest tuned M >= ``key.m``;
        None if the shape has no entry or every tuned M is below ``key.m``."""
        with self._lock:
            table = self._tables.get(key.shape)
            if table is None:
                return None
            ms, specs = table
            i = bisect.bisect_left(ms, key.m)
            return specs[ms[i]] if i < len(ms) else None

    def __len__(self) -> int:
        with self._lock:
            return self._count

    def entries(self) -> list[tuple[ProblemKey, LaunchSpec]]:
        """Every entry, ordered by key fields (enum fields by value, numbers numerically)."""
        with self._lock:
            out = [(shape._replace(m=m), specs[m]) for shape, (ms, specs) in self._tables.items() for m in ms]
        out.sort(key=_entry_sort_key)
        return out

    # --- changes -------------------------------------------------------------------------

    def _check_key(self, key: object) -> ProblemKey:
        """``key`` checked as an import checks a record's, its integers made Python's."""
        if not isinstance(key, ProblemKey):
            raise GemmArgumentError("key", type(key).__name__, "a gemm_runtime.context.ProblemKey")
        # NOTE: of the wrong types (m 16.0, quant a QuantDesc, a_type "f16"), a key passed
        # validate, was served, and export wrote a file its own import refuses (numpy
        # integers: export raised TypeError from inside json).
        for f, v in zip(ProblemKey._fields, key):
            kind = KEY_FIELD_TYPES.get(f)
            if kind is not None and not isinstance(v, kind):
                raise GemmArgumentError(f"key.{f}", repr(v), f"a {kind.__name__}")
            if kind is None and (isinstance(v, bool) or not isinstance(v, numbers.Integral)):
                raise GemmArgumentError(f"key.{f}", repr(v), "an integer")
        key = key._replace(**{f: int(getattr(key, f)) for f in _KEY_INTS})
        if key.arch != self._arch:
            raise GemmArgumentError("key.arch", key.arch, f"{self._arch} (the arch of this cache)")
        try:
            key.validate()  # what export writes, import must read back
        except ValueError as e:
            raise GemmArgumentError("key", str(e), "a valid ProblemKey (ProblemKey.validate)") from None
        return key

    def _store(self, key: ProblemKey, spec: LaunchSpec, replace: bool) -> str:
        """Store under the lock (held by the caller). Returns "added", "replaced",
        "unchanged" or "kept" (an existing entry left alone because replace is False)."""
        ms, specs = self._tables.setdefault(key.shape, ([], {}))
        old = specs.get(key.m)
        if old is None:
            bisect.insort(ms, key.m)
            specs[key.m] = spec
            self._count += 1
            return "added"
        if not replace:
            return "kept"
        specs[key.m] = spec
        return "unchanged" if old == spec else "replaced"

    def put(self, key: ProblemKey, spec: LaunchSpec, *, replace: bool = True) -> bool:
        """Store ``spec`` for exactly ``key``. With ``replace=False`` an existing entry for
        the key is kept. Returns whether ``spec`` was stored."""
        key = self._check_key(key)
        if not isinstance(spec, LaunchSpec):
            raise GemmArgumentError("spec", type(spec).__name__, "a gemm_runtime.plan.LaunchSpec")
        # The types a file's record must have (LaunchSpec.from_json); its ranges are the
        # lookups' to check (Dispatcher.usable), as they are an imported record's.
        error = plan_type_error(spec, "spec")
        if error is not None:
            raise error
        spec = LaunchSpec(spec.kernel, int(spec.splits), int(spec.swizzle), spec.unpack)
        with self._lock:
            stored = self._store(key, spec, replace) != "kept"
            self._version += 1
            return stored

    def clear(self) -> None:
        with self._lock:
            self._tables.clear()
            self._count = 0
            self._version += 1

    # --- files ---------------------------------------------------------------------------

    def to_json_text(self) -> str:
        """The export document: sorted records, sorted keys, indent 1, trailing newline."""
        records = [{"key": key.to_json(), "launch": spec.to_json()} for key, spec in self.entries()]
        doc = {
            "format": FORMAT,
            "version": VERSION,
            "arch": self._arch,
            "device": self._device_name,
            "records": records,
        }
        return json.dumps(doc, indent=1, sort_keys=True, ensure_ascii=True) + "\n"

    def export(self, path_or_file: PathOrFile) -> None:
        """Write every entry as JSON (docs/DISPATCH.md). A path is written atomically (the
        old file or the whole new one, never a part); a file object is written as is."""
        text = self.to_json_text()
        if isinstance(path_or_file, (str, os.PathLike)):
            atomic_write(Path(path_or_file), text.encode("utf-8"))
        elif not callable(getattr(path_or_file, "write", None)):
            raise GemmArgumentError("path", type(path_or_file).__name__, _PATH_OR_FILE.format("writing"))
        elif isinstance(path_or_file, (io.RawIOBase, io.BufferedIOBase)):
            path_or_file.write(text.encode("utf-8"))
        else:
            path_or_file.write(text)

    def import_(self, path_or_file: PathOrFile, kernels: Mapping[str, KernelSpec] | Collection[str]) -> ImportReport:
        """Merge a file written by ``export`` into this cache; its records replace exact
        entries already here. The whole file is read and validated first: a file that is
        unreadable, not a well-formed export (bad JSON, another format, version or arch,
        a record with a missing field or a value of the wrong JSON type, a repeated key)
        raises DispatchCacheError and leaves the cache exactly as it was.

        ``kernels`` maps the names of this build's kernels to their specs (a collection
        of names alone skips the check that a record's kernel can serve its key). Well-
        formed records this build cannot use are skipped, with one DispatchCacheWarning
        that counts them: records naming kernels not in ``kernels``, and invalid ones
        (values out of range, names no build knows, a kernel that cannot serve the key)."""
        name, text = _read(path_or_file)
        records, invalid, total = self._parse(name, text)
        specs = kernels if isinstance(kernels, Mapping) else None
        known = kernels if isinstance(kernels, (set, frozenset, Mapping)) else frozenset(kernels)
        usable: list[tuple[ProblemKey, LaunchSpec]] = []
        unknown: list[str] = []
        for i, key, spec in records:
            if spec.kernel not in known:
                unknown.append(spec.kernel)
                continue
            # NOTE: a record is checked against its own key here, so nothing a build
            # cannot serve is stored (or exported again); lookups check every hit once
            # more against the actual problem, since REUSE serves another M with it and
            # the caller's workspace is only known then (Dispatcher.select).
            error = launch_error(specs[spec.kernel], spec, key) if specs is not None else None
            if error is not None:
                invalid.append((i, str(error)))
                continue
            usable.append((key, spec))
        counts = {"added": 0, "replaced": 0, "unchanged": 0, "kept": 0}
        with self._lock:
            for key, spec in usable:
                counts[self._store(key, spec, replace=True)] += 1
            self._version += 1
        if unknown or invalid:
            warnings.warn(
                f"dispatch cache file {name}: {_skipped_text(unknown, invalid, total)}",
                DispatchCacheWarning,
                stacklevel=2,
            )
        return ImportReport(counts["added"], counts["replaced"], len(unknown), counts["unchanged"], len(invalid))

    def _parse(self, name: str, text: str) -> tuple[list[tuple[int, ProblemKey, LaunchSpec]], list[tuple[int, str]], int]:
        """Validate a whole export document: (index, key, spec) of every valid record,
        (index, reason) of every well-formed but invalid one, and the record count."""

        def fail(reason: str) -> DispatchCacheError:
            return DispatchCacheError(name, reason)

        try:
            doc = json.loads(text)
        except json.JSONDecodeError as e:
            raise fail(
                f"not valid JSON ({e.msg} at line {e.lineno} column {e.colno}, char {e.pos} of {len(text)});"
                " the file may be truncated or not a dispatch cache export"
            ) from None
        except RecursionError:
            raise fail("nested too deeply to parse: not a dispatch cache export") from None
        except ValueError as e:  # e.g. an integer longer than Python converts (sys.get_int_max_str_digits)
            raise fail(f"not a dispatch cache export: {e}") from None
        if not isinstance(doc, dict):
            raise fail(f"the top level is a JSON {_json_type(doc)}, expected an object with \"format\": \"{FORMAT}\"")
        if doc.get("format") != FORMAT:
            raise fail(f"\"format\" is {doc.get('format')!r}, expected {FORMAT!r}: not a dispatch cache export")
        version = doc.get("version")
        if not _is_int(version) or version not in ACCEPTED_VERSIONS:
            accepted = ", ".join(map(str, ACCEPTED_VERSIONS))
            newer = ""
            if _is_int(version) and version > VERSION:
                newer = " (newer than this build: upgrade gemm_runtime or tune again)"
            raise fail(f"\"version\" is {version!r}{newer}; this build reads version(s) {accepted}")
        arch = doc.get("arch")
        if not _is_int(arch):
            raise fail(f"\"arch\" is {arch!r}, expected an integer such as 90 (sm_90)")
        if arch != self._arch:
            here = _sm(self._arch)
            raise fail(f"recorded on {_sm(arch)}, this GPU is {here}: tune again or import a file made on {here}")
        if "device" in doc and not isinstance(doc["device"], str):
            raise fail(f"\"device\" is {doc['device']!r}, expected a string")
        raw = doc.get("records")
        if not isinstance(raw, list):
            raise fail(f"\"records\" is {'missing' if raw is None else 'a JSON ' + _json_type(raw)}, expected a list")

        out: list[tuple[int, ProblemKey, LaunchSpec]] = []
        invalid: list[tuple[int, str]] = []
        seen: dict[ProblemKey, int] = {}
        for i, rec in enumerate(raw):
            if not isinstance(rec, dict):
                raise fail(f"record {i} is a JSON {_json_type(rec)}, expected an object with \"key\" and \"launch\"")
            extra = sorted(set(rec) - {"key", "launch"})
            if extra:
                raise fail(f"record {i} has unexpected field(s) {extra}; a record holds \"key\" and \"launch\"")
            # NOTE: a record that is not what export writes (a field missing, a value of
            # the wrong JSON type) refuses the file: it was damaged or hand-edited. One
            # that is well-formed but has values this build cannot use (another build's
            # names, numbers out of range) is skipped, like a kernel this build lacks.
            parsed, errors = [], []
            for part, parse in (("key", ProblemKey.from_json), ("launch", LaunchSpec.from_json)):
                if part not in rec:
                    raise fail(f"record {i} has no {part!r}")
                if not isinstance(rec[part], dict):
                    raise fail(f"record {i}: {part!r} is a JSON {_json_type(rec[part])}, expected an object")
                # NOTE: a field this build does not know (a typo such as "split") would
                # otherwise be dropped and its default used in its place.
                unknown = sorted(set(rec[part]) - _FIELDS[part])
                if unknown:
                    raise fail(f"record {i}: {part!r} has unexpected field(s) {unknown}; "
                               f"accepted: {', '.join(sorted(_FIELDS[part]))}")
                try:
                    parsed.append(parse(rec[part]))
                except KeyError as e:
                    raise fail(f"record {i}: {part!r} is missing field {e}") from None
                except TypeError as e:
                    raise fail(f"record {i}: {part!r} is malformed: {e}") from None
                except ValueError as e:
                    errors.append(str(e))
            if rec["key"]["arch"] != arch:
                raise fail(f"record {i}: key arch {rec['key']['arch']} differs from the file's arch {arch}")
            if errors:
                invalid.append((i, "; ".join(errors)))
                continue
            key, spec = parsed
            if key in seen:
                raise fail(f"record {i} repeats the key of record {seen[key]}")
            seen[key] = i
            out.append((i, key, spec))
        return out, invalid, len(raw)


def _skipped_text(unknown: list[str], invalid: list[tuple[int, str]], total: int) -> str:
    """The one warning line of an import that skipped records."""
    parts = []
    if unknown:
        names = sorted(set(unknown))
        more = "" if len(names) <= 3 else f" and {len(names) - 3} more"
        verb = "names a kernel" if len(unknown) == 1 else "name kernels"
        parts.append(f"{len(unknown)} {verb} this build does not have (e.g. {', '.join(names[:3])}{more})")
    if invalid:
        index, reason = min(invalid)
        parts.append(f"{len(invalid)} {'is' if len(invalid) == 1 else 'are'} invalid (e.g. record {index}: {reason})")
    advice = "Build those kernels or tune again." if unknown else "Tune again to replace them."
    return f"{len(unknown) + len(invalid)} of {total} records skipped: {', '.join(parts)}. {advice}"


def _read(path_or_file: PathOrFile) -> tuple[str, str]:
    """(name for messages, text) of a path or a readable file object."""
    if isinstance(path_or_file, (str, os.PathLike)):
        name = os.fspath(path_or_file)
        try:
            data: str | bytes = Path(name).read_bytes()
        except OSError as e:
            raise DispatchCacheError(name, f"cannot be read: {e.strerror or e}") from e
    elif not callable(getattr(path_or_file, "read", None)):
        raise GemmArgumentError("path", type(path_or_file).__name__, _PATH_OR_FILE.format("reading"))
    else:
        name = str(getattr(path_or_file, "name", "") or "<stream>")
        data = path_or_file.read()
        if not isinstance(data, (str, bytes)):
            raise GemmArgumentError("path", f"a {type(path_or_file).__name__} whose read() returned a "
                                    f"{type(data).__name__}", _PATH_OR_FILE.format("reading") + " (str or bytes)")
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise DispatchCacheError(name, f"not UTF-8 text (byte {e.start}): not a dispatch cache export") from None
    return name, data
