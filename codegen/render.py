"""Render KernelSpecs into .cu files and keep an output folder in sync with a kernel set.

Output layout: ``<out>/<family>/<kernel name>.cu`` plus ``<out>/manifest.json``.
The output is a pure function of the loaded YAML (byte for byte), and files whose
content did not change are not touched, so their mtimes stay put and incremental
builds recompile only what changed.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import jinja2

from codegen import params
from codegen.fsutil import write_if_changed
from codegen.config import REPO_ROOT, LoadedKernel
from codegen.spec import KernelSpec

TEMPLATE_DIR = REPO_ROOT / "templates"
INCLUDE_DIR = TEMPLATE_DIR / "include"  # the -I directory generated files need
MANIFEST = "manifest.json"
MANIFEST_VERSION = 1


@functools.cache
def environment() -> jinja2.Environment:
    # StrictUndefined: a misspelt variable is an error, not an empty string in C++.
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATE_DIR)),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )


def render_kernel(spec: KernelSpec, source: str) -> str:
    """The .cu text of one kernel; ``source`` says where in the YAML it came from."""
    return environment().get_template(spec.mainloop.template).render(
        spec=spec,
        spec_source=source,
        spec_fields=list(spec.to_json().items()),
        params_struct=params.cpp_struct(),
        param_block_bytes=params.block_bytes(spec.mainloop.params_offset(spec)),
    )


def kernel_file(spec: KernelSpec) -> str:
    """Path of a kernel's .cu relative to the output folder (posix, as in the manifest)."""
    return f"{spec.family}/{spec.name}.cu"


def manifest_text(loaded: Sequence[LoadedKernel]) -> str:
    kernels = [
        {"name": k.spec.name, "file": kernel_file(k.spec), "source": k.source, "spec": k.spec.to_json()}
        for k in loaded
    ]
    return json.dumps({"version": MANIFEST_VERSION, "kernels": kernels}, sort_keys=True, indent=2) + "\n"


@dataclass
class WriteResult:
    written: list[Path] = field(default_factory=list)  # created or changed
    unchanged: list[Path] = field(default_factory=list)
    removed: list[Path] = field(default_factory=list)  # stale .cu files and emptied family dirs


def _write_if_changed(path: Path, text: str) -> bool:
    return write_if_changed(path, text.encode("utf-8"))


def write_generated(loaded: Sequence[LoadedKernel], out_dir: str | Path) -> WriteResult:
    """Make ``out_dir`` hold exactly the kernels of ``loaded`` plus the manifest.

    Only ``<out>/<family>/*.cu`` files that are not in the set are deleted (and their
    folders if that empties them); anything else under ``out_dir`` is left alone.
    """
    out = Path(out_dir)
    result = WriteResult()
    wanted: set[Path] = set()
    for k in loaded:
        path = out / kernel_file(k.spec)
        if path in wanted:  # load_configs already rejects this; guard against other callers
            raise ValueError(f"two kernels map to {path}")
        wanted.add(path)
        (result.written if _write_if_changed(path, render_kernel(k.spec, k.source)) else result.unchanged).append(
            path
        )
    manifest = out / MANIFEST
    (result.written if _write_if_changed(manifest, manifest_text(loaded)) else result.unchanged).append(manifest)

    if out.is_dir():
        for family_dir in sorted(p for p in out.iterdir() if p.is_dir() and not p.is_symlink()):
            stale = sorted(p for p in family_dir.glob("*.cu") if p not in wanted and (p.is_file() or p.is_symlink()))
            for p in stale:
                p.unlink()
                result.removed.append(p)
            if stale and not any(family_dir.iterdir()):
                family_dir.rmdir()
                result.removed.append(family_dir)
    return result
