"""``python -m codegen [--config A.yaml ...] [--out DIR]``: YAML kernel set -> .cu files.

Without --config, every codegen/configs/*.yaml (sorted) is loaded; without --out,
the repository's generated/ folder is written. A config error (or an --out that
is not a directory) prints one line to stderr and exits 2 (no traceback: the message
already says file, entry and field); an output that cannot be written exits 1.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from codegen.config import REPO_ROOT, ConfigError, default_config_paths, display_path, load_configs
from codegen.fsutil import path_arg
from codegen.render import write_generated


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m codegen", description="Render YAML kernel sets into .cu files.")
    parser.add_argument(
        "--config", action="extend", nargs="+", type=path_arg, metavar="YAML",
        help="kernel-set YAML files; repeat or list several (default: codegen/configs/*.yaml)",
    )  # fmt: skip
    parser.add_argument(
        "--with-defaults", action="store_true",
        help="load codegen/configs/*.yaml first, then the --config files (extend the default set)",
    )  # fmt: skip
    parser.add_argument("--out", type=path_arg, default=REPO_ROOT / "generated", help="output folder (default: generated/)")
    args = parser.parse_args(argv)

    paths: list[Path] = args.config or default_config_paths()
    if args.with_defaults and args.config:
        paths = default_config_paths() + args.config
    try:
        loaded = load_configs(paths)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.out.exists() and not args.out.is_dir():
        print(f"error: --out {display_path(args.out)}: is not a directory; accepted: a directory (created if missing)",
              file=sys.stderr)  # fmt: skip
        return 2
    try:
        result = write_generated(loaded, args.out)
    except OSError as e:  # a parent that is a file, no permission, a full disk
        print(f"error: cannot write {display_path(args.out)}: {e.strerror or e} ({e.filename or args.out})",
              file=sys.stderr)  # fmt: skip
        return 1
    print(
        f"{len(loaded)} kernels from {len(paths)} files -> {display_path(args.out)} "
        f"({len(result.written)} written, {len(result.unchanged)} unchanged, {len(result.removed)} removed)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
