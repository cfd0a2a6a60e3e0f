"""Command line of the runtime.

    python -m gemm_runtime list [--build-dir DIR] [--allow-emulated] [--device N]
    python -m gemm_runtime build [...]        # the same as python -m gemm_runtime.build [...]
    python -m gemm_runtime tune --model llama3-8b [--model ...] --out cache.json
        [--shapes bench/shapes.yaml] [--import prev.json] [--dtype f16|bf16]
        [--seq "1-16-1,16-128-16"] [--device N]

``list`` with a GPU visible loads the registry for it (what ``Gemm()`` would load) and
prints its kernels, then the ones filtered out and why. With no GPU it prints the
kernels of each ``build/sm_XX/manifest.json`` and, per arch, what a GPU of that arch
would filter out. Either way it verifies the build directory first: a manifest entry
whose cubin is missing or damaged (size or sha256) is named, with its manifest, and
``list`` exits 1; so does a malformed manifest.

``tune`` measures, on the GPU, every linear layer (N, K) of the models named (from
``bench/shapes.yaml``) at every M of the tuning sequence (``GEMM_TUNE``'s ``seq``, or
``--seq``), and writes the dispatch cache to ``--out``. ``--import`` loads an earlier
cache first; its entries are kept (dispatch policy APPEND instead of MEASURE).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import os
import sys
import time
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple, TextIO

from codegen.fsutil import path_arg
from gemm_runtime.errors import GemmArgumentError, GemmError

BUILD_HINT = "run `make build` (python -m gemm_runtime.build) first"
DEFAULT_SHAPES = Path(__file__).resolve().parent.parent / "bench" / "shapes.yaml"


class ListError(GemmError):
    """``list`` cannot show anything; the message says what to do."""


class TuneError(GemmError):
    """``tune`` cannot start (or finish); the message says why."""


# ---- formatting ----------------------------------------------------------------------
def table(headers: Sequence[str], rows: Sequence[Sequence[object]], indent: str = "") -> list[str]:
    """Plain-text columns: numbers right-aligned, everything else left-aligned."""
    cells = [[str(c) for c in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    numeric = [all(isinstance(row[i], int) for row in rows) and bool(rows) for i in range(len(headers))]

    def line(r: list[str]) -> str:
        parts = [c.rjust(w) if num else c.ljust(w) for c, w, num in zip(r, widths, numeric)]
        return (indent + "  ".join(parts)).rstrip()

    return [line(cells[0])] + [line(r) for r in cells[1:]]


def _dims(v: Sequence[int]) -> str:
    return "x".join(str(x) for x in v)


# ---- inputs --------------------------------------------------------------------------
def visible_gpus() -> int:
    """How many GPUs the CUDA driver sees; 0 when there is no driver or no device."""
    try:
        from cuda.bindings import driver

        from gemm_runtime.cuda_driver import check

        check(driver.cuInit(0), "cuInit")
        return int(check(driver.cuDeviceGetCount(), "cuDeviceGetCount"))
    except Exception:  # no driver, no device, broken install: all mean "no GPU here"
        return 0


class BuildDirDamaged(ListError):
    """Manifest entries whose cubin is missing or damaged; ``problems`` lists them, and
    ``lines`` is the listing, printed before the error."""

    def __init__(self, problems: Sequence[Any], lines: Sequence[str]) -> None:
        self.problems = list(problems)
        self.lines = list(lines)
        text = "\n".join("  " + p.describe() for p in self.problems)
        super().__init__(f"{len(self.problems)} manifest entries are missing or damaged:\n{text}")


def read_manifests(build_dir: Path) -> list[tuple[Any, list[Any]]]:
    """(manifest, its missing or damaged entries) for each ``build_dir/sm_XX/manifest.json``,
    by arch; ListError when there are none or one is unreadable or malformed."""
    from gemm_runtime import build_manifest

    build_dir = Path(build_dir)
    paths = build_manifest.arch_dirs(build_dir)
    if not paths:
        what = "does not exist" if not build_dir.exists() else "holds no sm_XX/manifest.json"
        raise ListError(f"{build_dir} {what}: no kernels are built; {BUILD_HINT}")
    out = []
    for arch, path in paths:
        try:
            manifest, _, problems = build_manifest.read_verified(path, arch)
        except build_manifest.ManifestError as e:
            raise ListError(str(e)) from None
        out.append((manifest, problems))
    return out


# ---- list ----------------------------------------------------------------------------
def list_without_gpu(build_dir: Path, allow_emulated: bool) -> list[str]:
    from codegen.vocabulary import ARCH_SMEM_LIMIT
    from gemm_runtime.registry import filter_reason

    manifests = read_manifests(build_dir)
    lines = [
        (
            f"{build_dir}: no GPU is visible, so nothing is filtered per device; "
            "below each arch, what a GPU of that arch would filter out"
        )
    ]
    all_problems = []
    for m, problems in manifests:
        arch = m.arch
        all_problems += problems
        lines += ["", f"sm_{arch}: {len(m.records)} kernels (NVRTC {m.nvrtc})"]
        rows = []
        would_filter = []
        limit = ARCH_SMEM_LIMIT.get(arch)
        for rec in sorted(m.records, key=lambda r: r.name):
            rows.append((rec.name, rec.registers, rec.smem_dynamic, rec.spills))
            if limit is not None:
                reason = filter_reason(rec.spec, arch, limit, allow_emulated)
                if reason is not None:
                    would_filter.append(f"    {rec.name}: {reason}")
        if rows:
            lines += table(("name", "registers", "smem", "spills"), rows, indent="  ")
        if m.skipped:
            lines.append(f"  not built for sm_{arch}:")
            lines += [f"    {name}: {reason}" for name, reason in m.skipped]
        if problems:
            lines.append(f"  missing or damaged cubins in {m.directory}:")
            lines += [f"    {p.name}: {p.kind} ({p.detail})" for p in problems]
        if limit is None:
            lines.append(f"  sm_{arch} is not a known arch: no per-device filter to show")
        elif would_filter:
            lines.append(f"  on an sm_{arch} GPU ({limit} B shared memory), filtered out:")
            lines += would_filter
        else:
            lines.append(f"  on an sm_{arch} GPU ({limit} B shared memory), nothing is filtered out")
    if all_problems:
        raise BuildDirDamaged(all_problems, lines)
    return lines


def _function_registers(k) -> int:
    """Registers per thread of a loaded kernel, from the driver; the build's ptxas report
    as a fallback (some NVRTC 13.0 builds leave that report out of the log: 0)."""
    try:
        from cuda.bindings import driver

        from gemm_runtime.cuda_driver import check

        attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NUM_REGS
        return int(check(driver.cuFuncGetAttribute(attr, k.function.handle), "cuFuncGetAttribute"))
    except Exception:
        return k.registers


def list_with_gpu(device: int, build_dir: Path, allow_emulated: bool) -> list[str]:
    from gemm_runtime.registry import Registry

    # The same messages as without a GPU when nothing is built or a manifest is malformed.
    problems = [p for _, found in read_manifests(build_dir) for p in found]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the damaged entries are reported below, once
        reg = Registry.load(device, Path(build_dir), allow_emulated)
    d = reg.device
    lines = [
        f"GPU {d.index}: sm_{d.arch}, {d.sms} SMs, {d.smem_optin} B shared memory per CTA; "
        f"{len(reg.kernels)} kernels from {build_dir}" + (" (emulated MMAs allowed)" if allow_emulated else "")
    ]
    rows = []
    for k in sorted(reg.kernels, key=lambda k: k.name):
        s = k.spec
        rows.append(
            (
                k.name, s.family, s.mainloop.value, s.mma.value, _dims(s.cta), _dims(s.warps), s.stages,
                s.b_order.value, s.align, s.d_type.value, _function_registers(k), s.smem_bytes, k.ctas_per_sm,
            )
        )  # fmt: skip
    headers = (
        "name", "family", "mainloop", "mma", "cta", "warps", "stages", "b_order", "align", "d_type",
        "registers", "smem", "CTAs/SM",
    )  # fmt: skip
    lines += table(headers, rows)
    if reg.filtered:
        lines.append("filtered out:")
        lines += [f"  {name}: {why}" for name, why in sorted(reg.filtered.items())]
    else:
        lines.append("filtered out: none")
    if problems:
        raise BuildDirDamaged(problems, lines)
    return lines


def list_kernels(build_dir: Path, allow_emulated: bool = False, device: int = 0) -> list[str]:
    """The lines ``python -m gemm_runtime list`` prints; ListError/GemmError when it cannot."""
    gpus = visible_gpus()
    if gpus > 0:
        if isinstance(device, bool) or not isinstance(device, int) or not 0 <= device < gpus:
            raise ListError(f"--device {device}: {gpus} GPU(s) are visible (0..{gpus - 1})")
        return list_with_gpu(device, build_dir, allow_emulated)
    return list_without_gpu(build_dir, allow_emulated)


# ---- tune ----------------------------------------------------------------------------
class PlannedProblem(NamedTuple):
    """One problem ``tune`` measures: layer ``layer`` of ``model`` at M = ``m``."""

    model: str
    layer: str
    m: int
    n: int
    k: int


def load_shapes(path: Path) -> dict:
    """The shapes file (``bench/shapes.yaml`` format): ``models: {model: {layer: [N, K]}}``;
    TuneError when it is unreadable or malformed."""
    import yaml

    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as e:
        raise TuneError(f"cannot read the shapes file {path}: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise TuneError(f"the shapes file {path} is not UTF-8 text (byte {e.start}): not a YAML shapes file") from None
    except yaml.YAMLError as e:
        raise TuneError(f"the shapes file {path} is not valid YAML: {str(e).splitlines()[0]}") from None
    models = data.get("models") if isinstance(data, dict) else None
    if not isinstance(models, dict) or not models:
        raise TuneError(f"the shapes file {path} has no 'models' mapping (model: {{layer: [N, K]}})")
    for model, layers in models.items():
        if not isinstance(layers, dict) or not layers:
            raise TuneError(f"the shapes file {path}: model {model!r}: expected a mapping {{layer: [N, K]}}")
        for layer, nk in layers.items():
            if not (
                isinstance(nk, (list, tuple))
                and len(nk) == 2
                and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in nk)
            ):
                raise TuneError(
                    f"the shapes file {path}: {model}.{layer}: got {nk!r}; accepted: [N, K], two positive integers"
                )
    return data


def tuning_plan(shapes: Mapping[str, Any], models: Sequence[str], seq: Sequence[int]) -> list[PlannedProblem]:
    """The problems ``tune`` runs, in order: per model (in the order given), per layer
    (in file order), per M (ascending). ``shapes`` is a loaded shapes file. A problem
    (N, K, M) already planned for an earlier layer or model is left out (tuning it again
    would measure the same dispatch-cache entry); so are repeated models and Ms.
    TuneError for a model the file lacks, or an M that is not a positive integer."""
    known = shapes.get("models") or {}
    if not models:
        raise TuneError("no model given: name one or more with --model")
    unknown = [m for m in models if m not in known]
    if unknown:
        raise TuneError(
            f"unknown model{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; "
            f"the shapes file lists: {', '.join(known)}"
        )
    bad = [m for m in seq if not isinstance(m, int) or isinstance(m, bool) or m < 1]
    if bad or not seq:
        raise TuneError(f"tuning sequence: got {list(seq)!r}; accepted: one or more positive integers (values of M)")
    ms = sorted(set(seq))
    plan: list[PlannedProblem] = []
    seen: set[tuple[int, int, int]] = set()
    for model in dict.fromkeys(models):
        for layer, (n, k) in known[model].items():
            for m in ms:
                if (n, k, m) not in seen:
                    seen.add((n, k, m))
                    plan.append(PlannedProblem(model, str(layer), m, n, k))
    return plan


def resolve_seq(text: str | None) -> list[int]:
    """The Ms to tune: ``--seq`` parsed as GEMM_TUNE's ``seq`` item, else the settings'
    tuning sequence. TuneSettingsError (a GemmError) when malformed."""
    from gemm_runtime import settings as settings_module

    if text is None:
        return list(settings_module.tuning_seq())
    return list(settings_module.parse_tune(f"seq={text}", source="--seq").seq)


TUNE_DTYPES = ("f16", "bf16")  # --dtype: the type of A, W and D


def check_tune_dtype(dtype: object) -> str:
    """``dtype`` of run_tuning / shared_tuning.tune_across_ranks, or GemmArgumentError."""
    if not isinstance(dtype, str) or dtype not in TUNE_DTYPES:
        raise GemmArgumentError("dtype", dtype, " or ".join(map(repr, TUNE_DTYPES)))
    return dtype


def _dispatch_policy(appending: bool) -> object:
    from gemm_runtime import types

    return types.DispatchPolicy.APPEND if appending else types.DispatchPolicy.MEASURE


def run_tuning(
    gemm: Any,
    plan: Sequence[PlannedProblem],
    *,
    dtype: str,
    out_path: Path,
    import_path: Path | None = None,
    progress: bool = True,
    stdout: TextIO | None = None,
) -> int:
    """Tune ``plan`` on ``gemm`` (a Gemm, or anything with ``device``, ``matmul``,
    ``export_cache`` and ``import_cache``), write the cache to ``out_path`` and print a
    summary. Operands are allocated once per layer, at its largest M; each M uses views.
    A problem that fails is reported and skipped; returns 1 if any failed, else 0."""
    import torch
    from tqdm import tqdm

    from gemm_runtime import types

    stdout = stdout or sys.stdout
    torch_dtype = {"f16": torch.float16, "bf16": torch.bfloat16}[check_tune_dtype(dtype)]
    t0 = time.perf_counter()
    if import_path is not None:
        report = gemm.import_cache(import_path)
        if dataclasses.is_dataclass(report):
            report = ", ".join(f"{f.name} {getattr(report, f.name)}" for f in dataclasses.fields(report))
        print(f"imported {import_path}: {report}", file=stdout)
    operation = types.Operation(dispatch=_dispatch_policy(import_path is not None))

    tuned = 0
    failures: list[str] = []
    bar = tqdm(total=len(plan), unit="problem", desc="tune", disable=not progress, file=sys.stderr)
    try:
        for (model, layer, n, k), group in itertools.groupby(plan, key=lambda p: (p.model, p.layer, p.n, p.k)):
            ms = [p.m for p in group]
            try:
                a_full = torch.randn(max(ms), k, device=gemm.device, dtype=torch_dtype)
                w = torch.randn(n, k, device=gemm.device, dtype=torch_dtype).mul_(0.02)
                out_full = torch.empty(max(ms), n, device=gemm.device, dtype=torch_dtype)
            except torch.cuda.OutOfMemoryError:
                failures += [f"{model}.{layer} M={m} N={n} K={k}: out of GPU memory for the operands" for m in ms]
                bar.update(len(ms))
                continue
            for m in ms:
                bar.set_postfix_str(f"{model}.{layer} M={m} N={n} K={k}", refresh=False)
                try:
                    gemm.matmul(a_full[:m], w.t(), out=out_full[:m], operation=operation)
                    tuned += 1
                except (GemmError, torch.cuda.OutOfMemoryError) as e:
                    reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                    failures.append(f"{model}.{layer} M={m} N={n} K={k}: {reason}")
                bar.update(1)
            del a_full, w, out_full
        if torch.cuda.is_available() and gemm.device.type == "cuda":
            torch.cuda.synchronize(gemm.device)
    finally:
        bar.close()

    try:
        gemm.export_cache(out_path)
    except OSError as e:
        raise TuneError(f"cannot write the dispatch cache to {out_path}: {e.strerror or e}") from None
    seconds = time.perf_counter() - t0
    per = f"{seconds / tuned:.2f}" if tuned else "-"
    print(f"problems tuned: {tuned} of {len(plan)}", file=stdout)
    print(f"total seconds: {seconds:.1f}", file=stdout)
    print(f"seconds per problem: {per}", file=stdout)
    print(f"dispatch cache written to {out_path}", file=stdout)
    if failures:
        print(f"{len(failures)} problem(s) failed:", file=stdout)
        for line in failures[:20]:
            print(f"  {line}", file=stdout)
        if len(failures) > 20:
            print(f"  ... and {len(failures) - 20} more", file=stdout)
        return 1
    return 0


def tune_command(args: argparse.Namespace) -> int:
    """``python -m gemm_runtime tune``: validate everything a GPU is not needed for,
    then tune. TuneError/GemmError when it cannot."""
    if args.out is None:
        raise TuneError("no output file: give --out PATH (or --export PATH)")
    plan = tuning_plan(load_shapes(args.shapes), args.model, resolve_seq(args.seq))
    out_dir = Path(args.out).expanduser().resolve().parent
    if not out_dir.is_dir() or not os.access(out_dir, os.W_OK):
        raise TuneError(f"cannot write {args.out}: {out_dir} is not a writable folder")
    if Path(args.out).expanduser().is_dir():  # else found out only once the tuning is done
        raise TuneError(f"cannot write {args.out}: it is a folder; --out names the file to write")
    # NOTE: the cache was written over the shapes file once the tuning was done.
    if Path(args.out).expanduser().resolve() == Path(args.shapes).expanduser().resolve():
        raise TuneError(f"--out: got {args.out}, the shapes file --shapes reads; accepted: another file "
                        "(the dispatch cache would be written over the shapes)")
    if args.import_path is not None and not Path(args.import_path).is_file():
        raise TuneError(f"--import {args.import_path}: no such file")
    gpus = visible_gpus()
    if gpus == 0:
        raise TuneError("no GPU is visible: tuning measures kernels on the GPU it tunes for; run it there")
    if not 0 <= args.device < gpus:
        raise TuneError(f"--device {args.device}: {gpus} GPU(s) are visible (0..{gpus - 1})")

    import torch

    if not torch.cuda.is_available():
        raise TuneError("torch sees no CUDA device (a CPU-only torch build?); tuning needs a CUDA torch")
    from gemm_runtime.gemm import Gemm

    torch.cuda.set_device(args.device)
    gemm = Gemm(f"cuda:{args.device}")
    return run_tuning(gemm, plan, dtype=args.dtype, out_path=args.out, import_path=args.import_path)


# ---- CLI -----------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["build"]:
        from gemm_runtime.build import main as build_main

        return build_main(argv[1:])

    from gemm_runtime.settings import settings

    try:
        current = settings()
    except ValueError as e:  # a malformed GEMM_* variable (TuneSettingsError is a ValueError)
        print(f"error: {e}", file=sys.stderr)
        return 2

    parser = argparse.ArgumentParser(prog="python -m gemm_runtime", description="The GEMM runtime's commands.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="{list,build,tune}")
    lst = sub.add_parser("list", help="the kernels a GPU would use, or those built per arch when no GPU is visible")
    lst.add_argument("--build-dir", type=path_arg, default=current.build_dir, help="cubins + manifests (%(default)s)")
    lst.add_argument("--allow-emulated", action="store_true", help="keep kernels whose MMA is emulated on the GPU")
    lst.add_argument("--device", type=int, default=0, help="GPU index when a GPU is visible (%(default)s)")
    sub.add_parser("build", help="compile generated/ into build/ (see python -m gemm_runtime build --help)")
    tun = sub.add_parser(
        "tune",
        help="measure the layers of models on the GPU and write a dispatch cache",
        description="Measure, on the GPU, every layer (N, K) of the models named at every M of the tuning "
        "sequence (D = A @ W.t(), W the nn.Linear N x K weight), and write the dispatch cache.",
    )
    tun.add_argument("--shapes", type=path_arg, default=DEFAULT_SHAPES, help="models and their layers (%(default)s)")
    tun.add_argument("--model", action="append", required=True, help="a model of the shapes file; repeatable")
    tun.add_argument("--out", "--export", dest="out", type=path_arg, help="where to write the dispatch cache (JSON)")
    tun.add_argument(
        "--import", dest="import_path", type=path_arg, help="a dispatch cache to load first; its entries are kept"
    )
    tun.add_argument("--dtype", choices=TUNE_DTYPES, default="f16", help="type of A, W and D (%(default)s)")
    tun.add_argument(
        "--seq", help="values of M, as GEMM_TUNE's seq: \"start-stop-step,...\" (default: the settings' sequence)"
    )
    tun.add_argument("--device", type=int, default=0, help="GPU index (%(default)s)")
    args = parser.parse_args(argv)

    if args.command == "tune":
        try:
            return tune_command(args)
        except GemmError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2

    try:
        lines = list_kernels(args.build_dir, args.allow_emulated, args.device)
    except BuildDirDamaged as e:
        print("\n".join(e.lines))
        print(f"error: {e}", file=sys.stderr)
        return 1
    except GemmError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
