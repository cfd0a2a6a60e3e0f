"""Load and validate kernel-set YAML files into KernelSpecs.

Schema, in brief (docs/CONFIG.md has every field and mainloop, annotated)::

    families:
      - name: sm80_f16           # [a-z0-9_]+, unique across all loaded files
        arch: [80, 90]           # inclusive arch range the family is meant for; each in KNOWN_ARCHS
        mainloop: sm80           # sm80 | sm70 | sm90 | sm90_quant | sm80_xor | experimental ones
                                 #   (arch min must be >= the mainloop's minimum arch)
        mma: m16n8k16            # m16n8k16 | m16n8k8 | m8n8k4 | m64nNk16 (must multiply a_type)
        a_type: f16              # f16 | bf16
        b_type: f16              # a_type, or u4 | u8 for weight-only quantized B
        acc_type: f32            # only f32
        d_types: [f16, f32]      # each is a kernel: a_type or f32
        b_orders: [nk, kn]       # each is a kernel
        align: [8]               # each is a kernel: 8, 4, 2 or 1 elements per A/B vector access
        tiles:                   # each is a kernel
          - {cta: [128, 128, 32], warps: [2, 2, 1], stages: 4}

Every (tile x d_type x b_order x align) of a family is one KernelSpec, in that
nesting order (tiles outermost), files in the order given. Nothing is de-duplicated:
repeats are errors. Every problem raises ConfigError naming the file, the entry and
the field, what was given and what is accepted, e.g.::

    codegen/configs/x.yaml: families[0] (sm80_f16).tiles[2]: field 'stages': got 1, accepted: an integer >= 2

The checks mirror the static_asserts of templates/include/gemm/config.cuh, so a
config that loads also compiles; they run here first because a YAML line number
beats a template instantiation backtrace.
"""

from __future__ import annotations

import difflib
import enum
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import yaml

from codegen.families import MainloopFamily, families
from codegen.fsutil import NAME_MAX, TEMP_NAME_OVERHEAD
from codegen.spec import KernelSpec
from codegen.vocabulary import (
    ARCH_SMEM_LIMIT,
    KNOWN_ARCHS,
    QUANT_TYPES,
    BOrder,
    DataType,
    MmaAtom,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CONFIG_DIR = Path(__file__).resolve().parent / "configs"

_NAME_RE = re.compile(r"[a-z0-9_]+")
_A_TYPES = (DataType.F16, DataType.BF16)  # the 16-bit types the mainloop loads
_ACC_TYPES = (DataType.F32,)
_ALIGNS = (8, 4, 2, 1)  # cp.async moves 16, 8 or 4 bytes; 1 goes through registers
_MIN_STAGES, _MAX_STAGES = 2, 8  # deeper rings only burn shared memory
_MMA_M = 16  # the warp loop steps in m16 tiles
_LDMATRIX_N = 16  # one ldmatrix.x4 feeds two n8 MMAs
_MAX_THREADS = 1024
# A kernel name becomes file names (generated/<family>/<name>.cu, build/sm_XX/<name>.cubin,
# the longer) and their temp files ".<file>.<pid>.<random>.tmp" (codegen.fsutil): the
# longest of these must fit one path component.
_LONGEST_SUFFIX = ".cubin"
MAX_KERNEL_NAME = NAME_MAX - TEMP_NAME_OVERHEAD - len(_LONGEST_SUFFIX)


def _choices(members: Sequence[enum.Enum]) -> str:
    return ", ".join(repr(m.value) for m in members)


# What each key accepts (also the key order shown in messages), for "missing" and type errors.
_TOP_ACCEPTS: dict[str, str] = {"families": "a non-empty list of families"}
_FAMILY_ACCEPTS: dict[str, str] = {
    "name": "a name matching [a-z0-9_]+",
    "arch": f"[min, max] with min <= max, each one of {', '.join(map(str, KNOWN_ARCHS))}",
    "mainloop": _choices(families()),
    "mma": _choices(list(MmaAtom)),
    "a_type": _choices(_A_TYPES),
    "b_type": "the same type as a_type",
    "acc_type": _choices(_ACC_TYPES),
    "d_types": "a non-empty list of output types: a_type or 'f32'",
    "b_orders": f"a non-empty list of {_choices(list(BOrder))}",
    "align": f"a non-empty list of {', '.join(map(str, _ALIGNS))}",
    "tiles": "a non-empty list of {cta: [m, n, k], warps: [m, n, k], stages: s}",
    "grouped": "optional: true for grouped (mixture-of-experts) kernels, docs/MOE.md (default false)",
}
_FAMILY_OPTIONAL = {"grouped": False}
_TILE_ACCEPTS: dict[str, str] = {
    "cta": "a list of 3 integers > 0 [m, n, k]",
    "warps": "a list of 3 integers > 0 [m, n, k]",
    "stages": f"an integer from {_MIN_STAGES} to {_MAX_STAGES}",
    "cluster": "optional: CTAs of a thread-block cluster sharing B tiles (families that support it)",
    "ctas_per_sm": "optional: CTAs per SM the compiler leaves registers for, in place of the family's choice "
                   "(1: no register cap)",
}
_TILE_OPTIONAL = {"cluster": 1, "ctas_per_sm": 0}
_MAX_THREADS_PER_SM = 2048


class ConfigError(ValueError):
    """A config problem. ``entry`` and ``field`` are None where they do not apply
    (an unreadable file, malformed YAML, a tile that is not a mapping...)."""

    def __init__(self, path: str, entry: str | None, field: str | None, message: str) -> None:
        self.path = path
        self.entry = entry
        self.field = field
        self.message = message
        super().__init__(str(self))

    def __str__(self) -> str:
        parts = [self.path]
        if self.entry:
            parts.append(self.entry)
        if self.field:
            parts.append(f"field {self.field!r}")
        return ": ".join(parts) + ": " + self.message


@dataclass(frozen=True)
class LoadedKernel:
    spec: KernelSpec
    source: str  # "path:families[i] (name).tiles[j]": where the spec came from


_SHOW_MAX = 200  # characters of a value shown in a message
_SHOW_DEPTH = 32  # nesting shown: YAML aliases can make a list that holds itself (&t [*t])


def _show(v: Any) -> str:
    """A value as the user wrote it (YAML spellings for bool/null), kept short."""
    text = _spell(v, 0)
    return text if len(text) <= _SHOW_MAX else text[: _SHOW_MAX - 3] + "..."


def _spell(v: Any, depth: int) -> str:
    """_show's text, built no further than it is shown: a value made of YAML aliases may
    contain itself or be exponentially large."""
    if depth > _SHOW_DEPTH:
        return "..."
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "null"
    if isinstance(v, str):
        return repr(v)
    if not isinstance(v, (list, dict)):
        return repr(v)
    parts: list[str] = []
    size = 0
    for item in v.items() if isinstance(v, dict) else v:
        if isinstance(v, dict):
            part = f"{_spell(item[0], depth + 1)}: {_spell(item[1], depth + 1)}"
        else:
            part = _spell(item, depth + 1)
        parts.append(part)
        size += len(part) + 2
        if size > _SHOW_MAX:
            break  # past what _show keeps
    brackets = "{}" if isinstance(v, dict) else "[]"
    return brackets[0] + ", ".join(parts) + brackets[1]


def display_path(path: str | Path) -> str:
    """Paths inside the repo print relative to it (posix), so generated files and
    error messages do not depend on the working directory; others print as given."""
    p = Path(path)
    try:
        return p.resolve().relative_to(REPO_ROOT).as_posix()
    except ValueError:
        return p.as_posix()


@dataclass(frozen=True)
class _Where:
    path: str
    entry: str | None

    def fail(self, field: str | None, message: str) -> NoReturn:
        raise ConfigError(self.path, self.entry, field, message)

    def reject(self, field: str | None, got: Any, accepted: str, why: str = "") -> NoReturn:
        """'got <value><why>, accepted: <accepted>': the one shape of a value error."""
        self.reject_text(field, _show(got), accepted, why)

    def reject_text(self, field: str | None, got: str, accepted: str, why: str = "") -> NoReturn:
        self.fail(field, f"got {got}{why}, accepted: {accepted}")

    def at(self, suffix: str) -> _Where:
        return _Where(self.path, f"{self.entry}{suffix}" if self.entry else suffix)


# ---- YAML loading ---------------------------------------------------------------------


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that rejects repeated mapping keys (PyYAML keeps the last one silently)."""


_MERGE_TAG = "tag:yaml.org,2002:merge"


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    """A mapping with merge keys (``<<: *tile``, ``<<: [*a, *b]``) as the YAML merge spec
    has them: explicit keys override merged ones, and in a list the earlier mapping wins.
    Repeated explicit keys are errors (PyYAML keeps the last one silently); a merged
    mapping is checked where it is constructed. PyYAML's own flatten_mapping is not
    used: it lets a later mapping of a merge list win once an alias was merged before."""
    merged: dict[Any, Any] = {}
    explicit = []
    for key_node, value_node in node.value:
        if key_node.tag != _MERGE_TAG:
            explicit.append((key_node, value_node))
            continue
        sources = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
        for sub in sources:
            if not isinstance(sub, yaml.MappingNode):
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping", node.start_mark,
                    f"a merge key (<<) takes a mapping or a list of mappings, not a {sub.id}", sub.start_mark,
                )  # fmt: skip
            for k, v in loader.construct_object(sub, deep=True).items():
                merged.setdefault(k, v)
    seen: set[Any] = set()
    for key_node, _ in explicit:
        key = loader.construct_object(key_node, deep=deep)
        try:
            dup = key in seen
            seen.add(key)
        except TypeError:  # unhashable key: construct_mapping reports it properly
            continue
        if dup:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping", node.start_mark, f"found duplicate key {key!r}", key_node.start_mark
            )
    own = yaml.MappingNode(node.tag, explicit, node.start_mark, node.end_mark, node.flow_style)
    merged.update(loader.construct_mapping(own, deep=deep))
    return merged


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _read_yaml(path: Path, shown: str) -> Any:
    where = _Where(shown, None)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        where.fail(None, f"cannot read the file: {e}")
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        where.fail(None, f"invalid YAML{at}: {e.problem or e.context}")
    except yaml.YAMLError as e:
        where.fail(None, f"invalid YAML: {e}")


# ---- field parsers --------------------------------------------------------------------

E = TypeVar("E", bound=enum.Enum)


def _check_keys(
    where: _Where, data: Any, accepts: dict[str, str], what: str, optional: dict[str, Any] | None = None
) -> dict[Any, Any]:
    """``data`` is a mapping with exactly the keys of ``accepts`` (key -> what it accepts),
    less those of ``optional`` (key -> default) it may leave out."""
    keys = tuple(accepts)
    if not isinstance(data, dict):
        where.reject(None, data, f"a mapping with keys {', '.join(keys)}", f" ({what} must be a mapping)")
    for key in data:
        if key not in keys:
            close = difflib.get_close_matches(str(key), keys, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            where.fail(str(key), f"unknown key{hint}, accepted keys: {', '.join(keys)}")
    for key in keys:
        if key not in data and key not in (optional or {}):
            where.fail(key, f"missing, accepted: {accepts[key]}")
    return data


def _int(where: _Where, field: str, v: Any, accepted: str, lo: int | None = None, hi: int | None = None) -> int:
    if isinstance(v, bool) or not isinstance(v, int):  # YAML true/false are ints to Python
        where.reject(field, v, accepted, " (a boolean)" if isinstance(v, bool) else "")
    if lo is not None and v < lo:
        where.reject(field, v, accepted)
    if hi is not None and v > hi:
        where.reject(field, v, accepted)
    return v


def _ints(where: _Where, field: str, v: Any, n: int, accepted: str, lo: int | None = None) -> tuple[int, ...]:
    if not isinstance(v, list) or len(v) != n:
        where.reject(field, v, accepted)
    for x in v:
        if isinstance(x, bool) or not isinstance(x, int) or (lo is not None and x < lo):
            where.reject(field, v, accepted)
    return tuple(v)


def _enum(where: _Where, field: str, v: Any, choices: Sequence[E], why: str = "") -> E:
    for m in choices:
        if isinstance(v, str) and m.value == v:
            return m
    where.reject(field, v, _choices(choices), why)


def _list(where: _Where, field: str, v: Any, accepted: str, repeats: bool = False) -> list[Any]:
    """A non-empty list, by default without repeats: a repeat would be a silent duplicate kernel."""
    if not isinstance(v, list) or not v:
        where.reject(field, v, accepted)
    if repeats:
        return v
    shown = [_show(x) for x in v]
    for i, s in enumerate(shown):
        if s in shown[:i]:
            where.reject(field, v, f"{accepted}, without repeats", f" ({s} is listed twice)")
    return v


# ---- family and tile ------------------------------------------------------------------


@dataclass(frozen=True)
class _Family:
    name: str
    arch: tuple[int, int]
    mainloop: MainloopFamily
    mma: MmaAtom
    a_type: DataType
    b_type: DataType
    acc_type: DataType
    d_types: list[DataType]
    b_orders: list[BOrder]
    aligns: list[int]
    tiles: list[Any]
    grouped: bool = False


def _parse_family(where: _Where, data: Any) -> _Family:
    keys = tuple(_FAMILY_ACCEPTS)
    if not isinstance(data, dict):
        where.reject(None, data, f"a mapping with keys {', '.join(keys)}", " (a family must be a mapping)")
    # A valid name goes into the entry, so every later message says which family it is.
    name = data.get("name")
    if isinstance(name, str) and _NAME_RE.fullmatch(name):
        where = _Where(where.path, f"{where.entry} ({name})")
    _check_keys(where, data, _FAMILY_ACCEPTS, "a family", _FAMILY_OPTIONAL)
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        where.reject("name", name, _FAMILY_ACCEPTS["name"])

    lo, hi = _ints(where, "arch", data["arch"], 2, _FAMILY_ACCEPTS["arch"])
    arch = (lo, hi)
    for a in arch:
        if a not in KNOWN_ARCHS:
            where.reject("arch", data["arch"], _FAMILY_ACCEPTS["arch"], f" ({a} is not a known arch)")
    if arch[0] > arch[1]:
        where.reject("arch", data["arch"], _FAMILY_ACCEPTS["arch"], " (min > max)")

    mainloop = _enum(where, "mainloop", data["mainloop"], families())
    if mainloop.min_arch > arch[0]:
        fits = [m for m in families() if m.min_arch <= arch[0]]
        where.reject(
            "mainloop",
            mainloop.value,
            (_choices(fits) or "none") + f" (a mainloop running on arch {arch[0]})",
            f" (needs arch >= {mainloop.min_arch}, but arch starts at {arch[0]})",
        )

    mma = _enum(where, "mma", data["mma"], list(MmaAtom))
    a_type = _enum(where, "a_type", data["a_type"], _A_TYPES)
    # NOTE: an atom that is not native anywhere in the arch range is fine: whether it
    # is emulated or rejected is decided where kernels are built for a device.
    if a_type not in mma.supported_types:
        atoms = [m for m in MmaAtom if a_type in m.supported_types]
        where.reject("mma", mma.value, f"{_choices(atoms)} (atoms that multiply {a_type.value})",
                     f" (does not multiply a_type {a_type.value!r})")
    if mma not in mainloop.atoms:
        where.reject("mma", mma.value, (_choices(mainloop.atoms) or "none yet")
                     + f" (the atoms the {mainloop.value} mainloop implements)")
    if mma.min_arch > arch[0]:
        where.reject("arch", data["arch"], f"a range starting at sm_{mma.min_arch} or later for mma {mma.value!r}",
                     f" (mma {mma.value!r} does not exist before sm_{mma.min_arch})")
    if a_type is DataType.BF16 and arch[0] < 80:
        where.reject("arch", data["arch"], "a range starting at sm_80 or later for bf16",
                     " (bf16 arithmetic needs sm_80)")
    b_type = _enum(where, "b_type", data["b_type"], (a_type, *QUANT_TYPES),
                   " (b_type is a_type, or u4 / u8 for weight-only quantization)")
    # NOTE: only where the mainloop has an m16n8 atom to offer; one without says itself
    # that it takes no quantized B (MainloopFamily.kernel_error), instead of an atom
    # that the check above would refuse in turn.
    m16n8 = (MmaAtom.M16N8K16, MmaAtom.M16N8K8)
    if b_type in QUANT_TYPES and mma not in m16n8 and any(a in mainloop.atoms for a in m16n8):
        where.reject("mma", mma.value, "'m16n8k16', 'm16n8k8' for quantized B",
                     " (the packed weight layout is the m16n8 B fragment's)")
    acc_type = _enum(where, "acc_type", data["acc_type"], _ACC_TYPES)

    d_types = [
        _enum(where, f"d_types[{i}]", v, (a_type, DataType.F32), " (an output is a_type or f32)")
        for i, v in enumerate(_list(where, "d_types", data["d_types"], _FAMILY_ACCEPTS["d_types"]))
    ]
    b_orders = [
        _enum(where, f"b_orders[{i}]", v, list(BOrder))
        for i, v in enumerate(_list(where, "b_orders", data["b_orders"], _FAMILY_ACCEPTS["b_orders"]))
    ]
    aligns = _list(where, "align", data["align"], _FAMILY_ACCEPTS["align"])
    for i, v in enumerate(aligns):
        if isinstance(v, bool) or not isinstance(v, int) or v not in _ALIGNS:  # 8.0 == 8, True == 1
            where.reject(f"align[{i}]", v, ", ".join(map(str, _ALIGNS)))
    # Repeated tiles surface as duplicate kernels, with both tile entries named.
    tiles = _list(where, "tiles", data["tiles"], _FAMILY_ACCEPTS["tiles"], repeats=True)
    grouped = data.get("grouped", _FAMILY_OPTIONAL["grouped"])
    if not isinstance(grouped, bool):
        where.reject("grouped", grouped, "true or false")
    return _Family(name, arch, mainloop, mma, a_type, b_type, acc_type, d_types, b_orders, list(aligns), tiles,
                   grouped)  # fmt: skip


def _parse_tile(
    where: _Where, fam: _Family, data: Any
) -> tuple[tuple[int, int, int], tuple[int, int, int], int, int, int]:
    _check_keys(where, data, _TILE_ACCEPTS, "a tile", _TILE_OPTIONAL)
    cta = _ints(where, "cta", data["cta"], 3, _TILE_ACCEPTS["cta"], lo=1)
    warps = _ints(where, "warps", data["warps"], 3, _TILE_ACCEPTS["warps"], lo=1)
    stages = data["stages"]
    _int(where, "stages", stages, f"an integer >= {_MIN_STAGES}", lo=_MIN_STAGES)
    _int(where, "stages", stages, f"an integer <= {_MAX_STAGES} (deeper pipelines only use up shared memory)",
         hi=_MAX_STAGES)
    cluster = data.get("cluster", _TILE_OPTIONAL["cluster"])
    _int(where, "cluster", cluster, "an integer >= 1", lo=1)
    broken = fam.mainloop.tile_error(cta, warps, stages, cluster)
    if broken is not None:
        field, accepted = broken
        got = {"cta": list(cta), "warps": list(warps), "stages": stages, "cluster": cluster}[field]
        where.reject(field, got, accepted)

    got_warps = f"{_show(list(warps))} for cta {_show(list(cta))}"
    for dim, c, w in zip("MNK", cta, warps, strict=True):
        if c % w:
            where.reject_text("warps", got_warps, "warp counts that divide the cta tile in every dim",
                              f" (cta {dim} = {c} is not a multiple of {w})")
    threads = 32 * warps[0] * warps[1] * warps[2]
    if threads > _MAX_THREADS:
        where.reject_text("warps", got_warps, f"at most {_MAX_THREADS // 32} warps ({_MAX_THREADS} threads)",
                          f" ({threads} threads)")
    warp_tile = [c // w for c, w in zip(cta, warps, strict=True)]
    need = {
        "M": (_MMA_M, f"the MMA's M {_MMA_M}"),
        "N": (_LDMATRIX_N, "16: two n8 MMAs per ldmatrix.x4"),
        "K": (16, "16: every atom is driven in k16 steps"),
    }
    for dim, size in zip("MNK", warp_tile, strict=True):
        mult, why = need[dim]
        if size % mult:
            where.reject_text("cta", f"{_show(list(cta))} with warps {_show(list(warps))}",
                              f"a warp tile (cta / warps) whose {dim} is a multiple of {why}",
                              f" (warp tile {_show(warp_tile)}, {dim} = {size})")
    ctas_per_sm = data.get("ctas_per_sm", _TILE_OPTIONAL["ctas_per_sm"])
    if "ctas_per_sm" in data:
        most = max(1, _MAX_THREADS_PER_SM // threads)
        _int(where, "ctas_per_sm", ctas_per_sm,
             f"an integer from 1 to {most} ({_MAX_THREADS_PER_SM} threads per SM over {threads} a CTA)",
             lo=1, hi=most)  # fmt: skip
    return cta, warps, stages, cluster, ctas_per_sm  # type: ignore[return-value]


def _check_kernel(where: _Where, spec: KernelSpec) -> None:
    """The checks that depend on b_order and align, i.e. on the whole kernel."""
    broken = spec.mainloop.kernel_error(spec)
    if broken is not None:
        field, got, accepted = broken
        where.reject(field, got, accepted)
    if spec.grouped:
        why_not = spec.mainloop.grouped_error(spec)
        if why_not is not None:
            where.reject("grouped", True, why_not)
    if spec.ctas_per_sm:
        why_not = spec.mainloop.ctas_per_sm_error(spec)
        if why_not is not None:
            where.reject("ctas_per_sm", spec.ctas_per_sm, why_not)
    _, n, k = spec.cta
    if spec.quantized:
        if spec.b_order is not BOrder.NK:
            where.reject("b_orders", spec.b_order.value, "'nk' (quantized weights are N x K, packed along K)")
        if spec.warp_tile[2] % 32:
            where.reject("cta", list(spec.cta), "a warp tile K (cta K / warps K) that is a multiple of 32",
                         f" (quantized B is dequantized in k32 blocks; warps {list(spec.warps)})")
    # Shared rows hold whole vectors of A and dense B (packed B is copied in 16-byte
    # vectors whatever ``align`` says: spec.align_b).
    rows = {"cta K": k} if spec.b_order is BOrder.NK else {"cta K": k, "cta N": n}
    for what, size in rows.items():
        if size % spec.align:
            ok = ", ".join(str(a) for a in _ALIGNS if all(s % a == 0 for s in rows.values()))
            where.reject("align", spec.align, f"{ok} (alignments dividing {' and '.join(rows)})",
                         f" ({what} = {size} is not a multiple of it; b_order {spec.b_order.value!r})")
    # Each thread copies one fixed column of a tile (templates/include/gemm/tile_copy.cuh);
    # the families with tensor maps (TMA) copy whole boxes instead, and have no such rule.
    m, _, _ = spec.cta
    tile_rows = {"A (cta K)": k, "B (cta K)" if spec.b_order is BOrder.NK else "B (cta N)":
                 k if spec.b_order is BOrder.NK else n}
    vector = {what: spec.align for what in tile_rows}
    # The rows of each tile (config.cuh: kTileARows, kTileBRows; the groups of a K tile for V).
    rows_of = {"A (cta K)": spec.a_rows, "B (cta K)": n, "B (cta N)": k}
    if spec.quantized:
        tile_rows = {"A (cta K)": k, "B (packed cta K)": k // 32 * spec.quant_block_units, "V (cta N)": n}
        vector = {"A (cta K)": spec.align, "B (packed cta K)": spec.align_b, "V (cta N)": spec.align_b}
        rows_of = {"A (cta K)": spec.a_rows, "B (packed cta K)": n // 8, "V (cta N)": max(k // 32, 1)}
    for what, width in tile_rows.items():
        per_row = width // vector[what] if width % vector[what] == 0 else 0
        if not per_row or spec.mainloop.tensor_maps(spec):
            continue
        if spec.threads % per_row:
            where.reject("warps", list(spec.warps),
                         f"a thread count that is a multiple of the {per_row} vectors in a row of tile {what}",
                         f" ({spec.threads} threads; {vector[what]} elements per vector)")
        # A thread's copies of a tile are the bits of one 32-bit row mask (TileCopy::kIters).
        vectors = rows_of[what] * per_row
        if vectors > 32 * spec.threads:
            where.reject("warps", list(spec.warps),
                         f"at least {-(-vectors // 32)} threads, so that each copies at most 32 vectors of tile "
                         f"{what} (or a smaller cta, or a wider align)",
                         f" ({spec.threads} threads for {rows_of[what]} rows of {per_row} vectors of "
                         f"{vector[what]} elements: {-(-vectors // spec.threads)} each)")  # fmt: skip
    if not spec.archs_that_fit(KNOWN_ARCHS):
        in_range = [a for a in KNOWN_ARCHS if spec.arch_min <= a <= spec.arch_max]
        best = max(in_range, key=lambda a: ARCH_SMEM_LIMIT[a])
        limit = ARCH_SMEM_LIMIT[best]
        where.reject(
            "stages",
            spec.stages,
            f"a tile and stage count within {limit} bytes",
            f" (cta {_show(list(spec.cta))} with b_order {spec.b_order.value!r} needs {spec.smem_bytes} bytes of "
            f"shared memory; the limit is {limit} bytes, on sm_{best}, the largest in arch "
            f"[{spec.arch_min}, {spec.arch_max}])",
        )


def _check_name_length(where: _Where, spec: KernelSpec) -> None:
    size = len(spec.name.encode())
    if size <= MAX_KERNEL_NAME:
        return
    most = len(spec.family.encode()) - (size - MAX_KERNEL_NAME)
    where.reject(
        "name", spec.family, f"a name of at most {max(most, 0)} characters for this family's kernels",
        f" (kernel {spec.name[:48]!r}... would be {size} bytes; kernel names are at most {MAX_KERNEL_NAME} "
        f"bytes, so that <name>{_LONGEST_SUFFIX} and its temp file fit the {NAME_MAX}-byte file name limit)",
    )  # fmt: skip


# ---- entry points ---------------------------------------------------------------------


def default_config_paths() -> list[Path]:
    """codegen/configs/*.yaml, sorted: the default kernel set."""
    return sorted(DEFAULT_CONFIG_DIR.glob("*.yaml"))


def load_configs(paths: Sequence[str | Path]) -> list[LoadedKernel]:
    """All kernels of ``paths``, in order; ConfigError on the first problem."""
    kernels: list[LoadedKernel] = []
    families: dict[str, str] = {}  # family name -> where it was defined
    names: dict[str, str] = {}  # kernel name -> source
    for path in paths:
        shown = display_path(path)
        data = _read_yaml(Path(path), shown)
        top = _Where(shown, None)
        if not isinstance(data, dict):
            top.reject(None, data, "a mapping with the key 'families'", " (the top level must be a mapping)")
        _check_keys(top, data, _TOP_ACCEPTS, "the top level")
        fams = _list(top, "families", data["families"], _TOP_ACCEPTS["families"], repeats=True)

        for i, fam_data in enumerate(fams):
            fam = _parse_family(_Where(shown, f"families[{i}]"), fam_data)
            where = _Where(shown, f"families[{i}] ({fam.name})")
            if fam.name in families:
                where.reject("name", fam.name, "a family name not used elsewhere",
                             f" (also the name of {families[fam.name]})")
            families[fam.name] = f"{shown}:{where.entry}"

            for j, tile_data in enumerate(fam.tiles):
                tile_where = where.at(f".tiles[{j}]")
                cta, warps, stages, cluster, ctas_per_sm = _parse_tile(tile_where, fam, tile_data)
                source = f"{shown}:{tile_where.entry}"
                for d_type in fam.d_types:
                    for b_order in fam.b_orders:
                        for align in fam.aligns:
                            spec = KernelSpec(
                                family=fam.name, mainloop=fam.mainloop, mma=fam.mma, a_type=fam.a_type,
                                b_type=fam.b_type, acc_type=fam.acc_type, d_type=d_type, cta=cta, warps=warps,
                                stages=stages, b_order=b_order, align=align, cluster=cluster, grouped=fam.grouped,
                                arch_min=fam.arch[0], arch_max=fam.arch[1], ctas_per_sm=ctas_per_sm,
                            )  # fmt: skip
                            _check_kernel(tile_where, spec)
                            _check_name_length(where, spec)
                            if spec.name in names:
                                tile_where.fail(None, f"kernel {spec.name!r} is defined twice: here and at "
                                                      f"{names[spec.name]}; accepted: each kernel once")
                            names[spec.name] = source
                            kernels.append(LoadedKernel(spec, source))
    return kernels
