"""Compile generated/ into build/: one cubin per (kernel, arch) and a manifest per arch.

    python -m gemm_runtime.build [--arch 80 --arch 90] [--jobs N] [--generated DIR] [--out DIR]

Compiles are content-addressed (``<out>/.cache``), so a rebuild with nothing changed
compiles nothing. The outputs the runtime reads (``<out>/sm_XX/manifest.json`` and the
cubins it names) are written atomically and only when they change.

Each arch is compiled by the NVRTC ``compiler.backend_for`` picks (CUDA 13's; CUDA 12's
for sm_70, from the ``[volta]`` extra), and its manifest records which. An arch that no
available NVRTC targets is skipped with one line saying what to install.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from codegen.spec import KernelSpec
from codegen.vocabulary import ARCH_SMEM_LIMIT, KNOWN_ARCHS
from gemm_runtime import compiler
from codegen.fsutil import atomic_write
from gemm_runtime.compiler import ArchUnsupportedError, CompileError, CompileResult
from gemm_runtime.errors import GemmError
from gemm_runtime.settings import REPO_ROOT, settings

INCLUDE_DIR = REPO_ROOT / "templates" / "include"
DEFAULT_ARCHS = (80, 90)  # when no GPU is visible
BUILD_OPTIONS: tuple[str, ...] = ()  # extra NVRTC options for every kernel
MANIFEST_VERSION = 1


class BuildError(GemmError):
    """The build could not run, or some kernels failed to compile (``failures``)."""

    def __init__(self, message: str, failures: Sequence["Failure"] = (), report: "BuildReport | None" = None):
        super().__init__(message)
        self.failures = list(failures)
        self.report = report


@dataclass(frozen=True)
class GeneratedKernel:
    name: str
    source_file: Path
    source: str  # the YAML entry it came from, e.g. "configs/x.yaml:families[0] (fam).tiles[1]"
    spec: KernelSpec


@dataclass(frozen=True)
class Failure:
    name: str
    arch: int
    source: str
    log: str

    def describe(self) -> str:
        return f"{self.name} for sm_{self.arch} (from {self.source}):\n{self.log.rstrip()}"


@dataclass
class ArchReport:
    arch: int
    kernels: int = 0  # cubins in this arch's manifest
    compiled: int = 0
    cached: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (name, reason)
    spills: list[tuple[str, int, int]] = field(default_factory=list)  # (name, stores, loads) over the spill budget
    failed: int = 0
    seconds: float = 0.0
    nvrtc: str = ""  # version of the NVRTC that compiles this arch, e.g. "13.5" ("12.9" for sm_70)

    def summary(self) -> str:
        line = (
            f"sm_{self.arch}: {self.kernels} kernels ({self.compiled} compiled, {self.cached} cached, "
            f"{len(self.skipped)} skipped) in {self.seconds:.1f} s"
        )
        line += f", NVRTC {self.nvrtc}" if self.nvrtc else ""
        return line + (f"; {self.failed} FAILED, manifest not written" if self.failed else "")


@dataclass
class BuildReport:
    archs: list[ArchReport] = field(default_factory=list)
    skipped_archs: dict[int, str] = field(default_factory=dict)  # arch -> message
    seconds: float = 0.0

    @property
    def compiled(self) -> int:
        return sum(a.compiled for a in self.archs)

    @property
    def cached(self) -> int:
        return sum(a.cached for a in self.archs)

    def summary_lines(self) -> list[str]:
        return [a.summary() for a in self.archs]

    def warning_lines(self) -> list[str]:
        lines = list(self.skipped_archs.values())
        for a in self.archs:
            lines += [
                f"warning: {name} spills on sm_{a.arch}: {st} bytes spill stores, {ld} bytes spill loads"
                for name, st, ld in a.spills
            ]
        return lines


# ---- inputs --------------------------------------------------------------------------
def load_generated(generated_dir: Path) -> list[GeneratedKernel]:
    """The kernels of ``generated_dir/manifest.json``, sorted by name."""
    path = Path(generated_dir) / "manifest.json"
    hint = "run `make generate` (python -m codegen) first"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise BuildError(f"{path} does not exist: {hint}") from None
    except (OSError, ValueError) as e:
        raise BuildError(f"{path} is unreadable ({e}): {hint}") from None
    try:
        if data.get("version") != MANIFEST_VERSION:
            raise ValueError(f"version {data.get('version')!r}, expected {MANIFEST_VERSION}")
        kernels = []
        for entry in data["kernels"]:
            spec = KernelSpec.from_json(entry["spec"])
            if spec.name != entry["name"]:
                raise ValueError(f"entry {entry['name']!r} has a spec named {spec.name!r}")
            kernels.append(GeneratedKernel(entry["name"], path.parent / entry["file"], str(entry["source"]), spec))
    except (AttributeError, KeyError, TypeError, ValueError) as e:
        raise BuildError(f"{path} is corrupt or stale ({type(e).__name__}: {e}): {hint}") from None
    names = [k.name for k in kernels]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise BuildError(f"{path} lists kernels more than once: {', '.join(dupes)}: {hint}")
    missing = [str(k.source_file) for k in kernels if not k.source_file.is_file()]
    if missing:
        raise BuildError(f"{path} names sources that do not exist ({', '.join(missing[:3])}): {hint}")
    return sorted(kernels, key=lambda k: k.name)


def detect_archs() -> list[int]:
    """Compute capabilities of the visible GPUs (e.g. [90]); [] on any failure or no GPU."""
    try:
        from cuda.bindings import driver

        from gemm_runtime.cuda_driver import check, device_attribute

        check(driver.cuInit(0), "cuInit")
        count = int(check(driver.cuDeviceGetCount(), "cuDeviceGetCount"))
        archs = set()
        for i in range(count):
            major = device_attribute(i, "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR")
            minor = device_attribute(i, "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR")
            archs.add(10 * major + minor)
        return sorted(archs)
    except Exception:  # no driver, no device, broken install: all mean "no GPU here"
        return []


def _accepted() -> str:
    return ", ".join(f"sm_{a}" for a in KNOWN_ARCHS)


def resolve_archs(archs: Sequence[int] | None) -> tuple[list[int], dict[int, str]]:
    """(archs to build, {arch: message} for those skipped). Raises BuildError on an unknown arch."""
    skipped: dict[int, str] = {}
    if archs is None:
        detected = detect_archs()
        for a in detected:
            if a not in KNOWN_ARCHS:
                skipped[a] = f"sm_{a}: skipped, a GPU of this arch is visible but not a known arch ({_accepted()})"
        archs = [a for a in detected if a in KNOWN_ARCHS] or list(DEFAULT_ARCHS)
    unknown = sorted({a for a in archs if a not in KNOWN_ARCHS})
    if unknown:
        raise BuildError(f"unknown arch {', '.join(f'sm_{a}' for a in unknown)}; accepted: {_accepted()}")
    wanted = []
    for a in sorted(set(archs)):
        try:
            compiler.backend_for(a)
        except ArchUnsupportedError as e:
            skipped[a] = f"sm_{a}: skipped: {e.reason}"
        else:
            wanted.append(a)
    return wanted, skipped


def skip_reason(spec: KernelSpec, arch: int) -> str:
    if not spec.arch_min <= arch <= spec.arch_max:
        return f"family arch range sm_{spec.arch_min}..sm_{spec.arch_max} excludes sm_{arch}"
    return f"needs {spec.smem_bytes} B shared memory, sm_{arch} allows {ARCH_SMEM_LIMIT.get(arch, 0)} B"


# ---- outputs -------------------------------------------------------------------------
def _write_if_changed(path: Path, data: bytes) -> None:
    # Unchanged outputs keep their mtime, so make and rsync see nothing to do.
    try:
        if path.read_bytes() == data:
            return
    except OSError:
        pass
    atomic_write(path, data)


def _write_arch(
    out_dir: Path,
    arch: int,
    kernels: list[GeneratedKernel],
    results: dict[str, CompileResult],
    skipped: list,
    nvrtc: str,
) -> None:
    arch_dir = out_dir / f"sm_{arch}"
    arch_dir.mkdir(parents=True, exist_ok=True)
    records = []
    for k in kernels:
        if k.name not in results:
            continue
        r = results[k.name]
        _write_if_changed(arch_dir / f"{k.name}.cubin", r.cubin)
        records.append(
            {
                "name": k.name,
                "symbol": k.name,  # generated kernels are extern "C"
                "cubin": f"{k.name}.cubin",
                "source": k.source,
                "spec": k.spec.to_json(),
                **r.report(),
                "smem_dynamic": k.spec.smem_bytes,
                "threads": k.spec.threads,
            }
        )
    manifest = {
        "version": MANIFEST_VERSION,
        "arch": arch,
        "nvrtc": nvrtc,  # the version of the NVRTC that compiled this arch
        "kernels": records,
        "skipped": [{"name": n, "reason": why} for n, why in sorted(skipped)],
    }
    _write_if_changed(arch_dir / "manifest.json", (json.dumps(manifest, indent=2) + "\n").encode())
    keep = {rec["cubin"] for rec in records}
    for stale in arch_dir.glob("*.cubin"):
        if stale.name not in keep:
            stale.unlink()


# ---- the build -----------------------------------------------------------------------
def build(
    generated_dir: Path,
    out_dir: Path,
    archs: Sequence[int] | None = None,
    jobs: int | None = None,
    progress: bool = True,
) -> BuildReport:
    """Compile every generated kernel for every arch it fits; see the module docstring.

    Raises BuildError (with ``failures`` and the partial ``report``) after writing the
    archs that compiled cleanly, if any kernel failed.
    """
    t_start = time.perf_counter()
    generated_dir, out_dir = Path(generated_dir), Path(out_dir)
    kernels = load_generated(generated_dir)
    wanted, skipped_archs = resolve_archs(archs)
    jobs = max(1, jobs or settings().jobs or os.cpu_count() or 1)
    cache_dir = out_dir / ".cache"
    include_dirs = [INCLUDE_DIR]
    sources = {k.name: k.source_file.read_text() for k in kernels}

    reports = {a: ArchReport(a, nvrtc=compiler.backend_for(a).version_text) for a in wanted}
    tasks: list[tuple[GeneratedKernel, int]] = []
    for a in wanted:  # arch-major, so the first arch tends to finish first
        for k in kernels:
            if k.spec.archs_that_fit([a]):
                tasks.append((k, a))
            else:
                reports[a].skipped.append((k.name, skip_reason(k.spec, a)))

    from tqdm import tqdm

    results: dict[int, dict[str, CompileResult]] = {a: {} for a in wanted}
    failures: list[Failure] = []
    bar = tqdm(total=len(tasks), unit="kernel", desc="nvrtc", disable=not progress or not sys.stderr.isatty())

    def done(k: GeneratedKernel, a: int, result: CompileResult | None, error: BaseException | None) -> None:
        rep = reports[a]
        if result is not None:
            results[a][k.name] = result
            rep.cached += result.cached
            rep.compiled += not result.cached
        else:
            rep.failed += 1
            log = error.log if isinstance(error, CompileError) else f"{type(error).__name__}: {error}"
            failures.append(Failure(k.name, a, k.source, log))
        rep.seconds = time.perf_counter() - t_start
        bar.update()

    def args(k: GeneratedKernel, a: int) -> dict:
        return dict(name=k.name, arch=a, include_dirs=include_dirs, options=BUILD_OPTIONS)

    # Cache hits are served here, so a warm build starts no worker processes at all.
    misses = []
    for k, a in tasks:
        hit = compiler.lookup(sources[k.name], cache_dir=cache_dir, **args(k, a))
        if hit is not None:
            done(k, a, hit, None)
        else:
            misses.append((k, a))

    try:
        if len(misses) == 1 or jobs == 1:
            for k, a in misses:
                try:
                    done(k, a, compiler.compile_cubin(sources[k.name], cache_dir=cache_dir, **args(k, a)), None)
                except CompileError as e:
                    done(k, a, None, e)
        elif misses:
            # spawn, not fork: the parent may hold a CUDA context and tqdm's monitor thread.
            ctx = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(max_workers=min(jobs, len(misses)), mp_context=ctx) as pool:
                pending: dict[Future, tuple[GeneratedKernel, int]] = {
                    pool.submit(compiler.compile_cubin, sources[k.name], cache_dir=cache_dir, **args(k, a)): (k, a)
                    for k, a in misses
                }
                try:
                    while pending:
                        finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                        for fut in finished:
                            k, a = pending.pop(fut)
                            err = fut.exception()
                            done(k, a, None if err else fut.result(), err)
                except BaseException:
                    pool.shutdown(wait=False, cancel_futures=True)
                    raise
    finally:
        bar.close()

    report = BuildReport(skipped_archs=skipped_archs)
    for a in wanted:
        rep = reports[a]
        if not rep.failed:  # a failing arch keeps its previous outputs rather than half of new ones
            _write_arch(out_dir, a, kernels, results[a], rep.skipped, rep.nvrtc)
            rep.kernels = len(results[a])
        specs = {k.name: k.spec for k in kernels}
        rep.spills = [
            (n, r.spill_stores, r.spill_loads)
            for n, r in sorted(results[a].items())
            if max(r.spill_stores, r.spill_loads) > specs[n].spill_budget(a)
        ]
        rep.skipped.sort()
        report.archs.append(rep)
    report.seconds = time.perf_counter() - t_start

    if failures:
        failures.sort(key=lambda f: (f.name, f.arch))
        text = "\n\n".join(f.describe() for f in failures)
        raise BuildError(f"{len(failures)} kernel compile(s) failed:\n\n{text}", failures, report)
    return report


# ---- CLI -----------------------------------------------------------------------------
def _arch_arg(text: str) -> int:
    digits = text.lower().removeprefix("sm_")
    if not digits.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not an arch (e.g. 80 or sm_80)")
    return int(digits)


def main(argv: Sequence[str] | None = None) -> int:
    s = settings()
    parser = argparse.ArgumentParser(prog="python -m gemm_runtime.build", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--arch",
        type=_arch_arg,
        action="append",
        help=f"target arch, repeatable (default: the visible GPUs, else {' '.join(map(str, DEFAULT_ARCHS))})",
    )
    parser.add_argument("--jobs", type=int, default=None, help="parallel compiles (default: GEMM_BUILD_JOBS or CPUs)")
    parser.add_argument("--generated", type=Path, default=s.generated_dir, help="generated sources (%(default)s)")
    parser.add_argument("--out", type=Path, default=s.build_dir, help="output directory (%(default)s)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)

    try:
        report = build(args.generated, args.out, args.arch, args.jobs, progress=not args.no_progress)
    except BuildError as e:
        if e.report is not None:
            for line in e.report.warning_lines():
                print(line, file=sys.stderr)
            for line in e.report.summary_lines():
                print(line)
        print(f"error: {e}", file=sys.stderr)
        return 1
    for line in report.warning_lines():
        print(line, file=sys.stderr)
    for line in report.summary_lines():
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
