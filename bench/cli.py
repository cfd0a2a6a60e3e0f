"""Argument checks the benchmark CLIs share, run before anything touches the GPU: a bad
argument (an M of 0, a model bench/shapes.yaml lacks, an output path that cannot be
written) is an argparse error naming the option, what was given and what is accepted,
not a traceback from inside the run or a failed write after minutes of timing."""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterable
from pathlib import Path

import yaml

SHAPES = Path(__file__).resolve().parent / "shapes.yaml"


def positive_int(text: str) -> int:
    """An argparse ``type``: an integer >= 1 (a token count, a size, a repetition count)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"got {text!r}; accepted: an integer >= 1")
    return value


def int_from(lo: int, hi: int):
    """An argparse ``type``: an integer from ``lo`` to ``hi`` (a swizzle, a split count)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"got {text!r}; accepted: an integer from {lo} to {hi}")
        return value

    return parse


def tile_mn(text: str) -> str:
    """An argparse ``type``: a CTA tile's MxN, e.g. 128x256 (as the kernel names spell it)."""
    parts = text.split("x")
    if len(parts) != 2 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(f"got {text!r}; accepted: MxN, two integers >= 1 (e.g. 128x256)")
    return "x".join(str(int(p)) for p in parts)


def shape_models() -> dict:
    """bench/shapes.yaml's ``models``: {model: {layer: [N, K]}}."""
    return yaml.safe_load(SHAPES.read_text())["models"]


def check_models(ap: argparse.ArgumentParser, option: str, models: Iterable[str]) -> None:
    """``ap.error`` unless every model is one of bench/shapes.yaml's."""
    known = shape_models()
    unknown = [m for m in models if m not in known]
    if unknown:
        ap.error(f"{option}: got {', '.join(map(repr, unknown))}; accepted: models of {SHAPES.name}: "
                 f"{', '.join(known)}")  # fmt: skip


def check_out(ap: argparse.ArgumentParser, option: str, path: Path | None) -> None:
    """``ap.error`` unless ``path`` can be written as a file at the end of the run: not a
    folder, and its nearest existing parent is a writable folder (the missing
    ones are created)."""
    if path is None:
        return
    path = Path(path).expanduser()
    if path.is_dir():
        ap.error(f"{option}: got {path}, a folder; accepted: a file to write")
    parent = path.absolute().parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        ap.error(f"{option}: got {path}; cannot create it: {parent} is not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        ap.error(f"{option}: got {path}; cannot create it: {parent} is not writable")


def check_distinct(ap: argparse.ArgumentParser, *options: tuple[str, Path | None]) -> None:
    """``ap.error`` where two of ``options`` ((option, path), None: not given) name the same
    file: the later write would replace the earlier (a table by the plans or timings)."""
    seen: dict[Path, str] = {}
    for option, path in options:
        if path is None:
            continue
        resolved = Path(path).expanduser().resolve()
        if resolved in seen:
            ap.error(f"{option}: got {path}, the file {seen[resolved]} names too; accepted: another file "
                     f"(each would overwrite the other)")  # fmt: skip
        seen[resolved] = option


def check_folder(ap: argparse.ArgumentParser, option: str, path: Path | None) -> None:
    """``ap.error`` unless ``path`` is a folder or can be made one: no part of it is a file."""
    if path is None:
        return
    path = Path(path).expanduser()
    existing = path.absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        ap.error(f"{option}: got {path}; accepted: a folder (made if missing), but {existing} is a file")


def check_build(ap: argparse.ArgumentParser, option: str, path: Path | None) -> None:
    """``ap.error`` unless ``path`` (where given) is a build folder: one holding
    sm_XX/manifest.json (python -m gemm_runtime.build --out)."""
    if path is None:
        return
    from gemm_runtime.build_manifest import arch_dirs

    if not arch_dirs(Path(path).expanduser()):
        what = "does not exist" if not Path(path).expanduser().exists() else "holds no sm_XX/manifest.json"
        ap.error(f"{option}: got {path}, which {what}; accepted: a build folder (python -m gemm_runtime.build --out)")
