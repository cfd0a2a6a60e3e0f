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
