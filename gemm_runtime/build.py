"""Compile generated/ into build/: one cubin per (kernel, arch) and a manifest per arch.

    python -m gemm_runtime.build [--arch 80 --arch 90] [--jobs N] [--generated DIR] [--out DIR]
        [--with-emulated]

Compiles are content-addressed (``<out>/.cache``), so a rebuild with nothing changed
compiles nothing. The outputs the runtime reads (``<out>/sm_XX/manifest.json`` and the
cubins it names, with their sha256) are published by ``build_manifest.publish`` under
the arch's lock, only when they change, so concurrent builds never mix. (kernel, arch)
pairs whose MMA is emulated on the arch are skipped unless ``--with-emulated``.

SIGINT / SIGTERM end the compile workers at once, publish nothing and exit 130 / 143
with one line.

Each arch is compiled by the NVRTC ``compiler.backend_for`` picks (CUDA 13's; CUDA 12's
for sm_70, from the ``[volta]`` extra), and its manifest records which. An arch that no
available NVRTC targets is skipped with one line saying what to install.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import signal
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from codegen.fsutil import path_arg, remove_temp_files
from codegen.spec import KernelSpec
from codegen.vocabulary import ARCH_SMEM_LIMIT, KNOWN_ARCHS
from gemm_runtime import build_manifest, compiler
from gemm_runtime.compiler import ArchUnsupportedError, CompileError, CompileResult
from gemm_runtime.errors import GemmError
from gemm_runtime.settings import REPO_ROOT, settings

INCLUDE_DIR = REPO_ROOT / "templates" / "include"
DEFAULT_ARCHS = (80, 90)  # when no GPU is visible
BUILD_OPTIONS: tuple[str, ...] = ()  # extra NVRTC options for every kernel
MANIFEST_VERSION = 1  # of generated/manifest.json (codegen.render's); build/'s is build_manifest's


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
    seconds: float = 0.0  # NVRTC time of this arch's compiles, summed over the parallel jobs
    finished_at: float | None = None  # seconds into the build when its last compile ended
    restored: list[str] = field(default_factory=list)  # kernels whose cubin was missing or damaged
    nvrtc: str = ""  # version of the NVRTC that compiles this arch, e.g. "13.5" ("12.9" for sm_70)

    def timing(self) -> str:
        if self.finished_at is None:
            return "nothing compiled"
        return f"{self.seconds:.1f} s of NVRTC time, finished {self.finished_at:.1f} s into the build"

    def summary(self) -> str:
        line = (
            f"sm_{self.arch}: {self.kernels} kernels ({self.compiled} compiled, {self.cached} cached, "
            f"{len(self.skipped)} skipped), {self.timing()}"
        )
        line += f", NVRTC {self.nvrtc}" if self.nvrtc else ""
        if self.restored:
            line += f"; {len(self.restored)} damaged or missing cubins restored"
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
            lines += [f"sm_{a.arch}: restored {name}.cubin (missing or damaged)" for name in a.restored]
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
            file = Path(entry["file"])
            if file.is_absolute() or ".." in file.parts:
                raise ValueError(f"entry {entry['name']!r} names the source {entry['file']!r}, outside {path.parent}")
            kernels.append(GeneratedKernel(entry["name"], path.parent / file, str(entry["source"]), spec))
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
    if archs is not None and (
        not isinstance(archs, (list, tuple, set, frozenset))
        or not archs
        or not all(isinstance(a, int) and not isinstance(a, bool) for a in archs)
    ):
        # NOTE: 80.0 == 80 would pass the check below and build into sm_80.0/.
        raise BuildError(f"archs: got {archs!r:.80}, accepted: None (the visible GPUs) or a non-empty list of "
                         f"integers among {', '.join(map(str, KNOWN_ARCHS))}")  # fmt: skip
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
def _publish_arch(
    out_dir: Path,
    arch: int,
    kernels: list[GeneratedKernel],
    results: dict[str, CompileResult],
    skipped: list,
    nvrtc: str,
) -> build_manifest.PublishResult:
    records, cubins = [], {}
    for k in kernels:
        if k.name not in results:
            continue
        r = results[k.name]
        cubins[k.name] = r.cubin
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
    # NOTE: a signal now would leave the cubins written and the manifest not; both are
    # consistent states, but deferring it keeps the publication one step.
    with _signals_deferred():
        return build_manifest.publish(out_dir / f"sm_{arch}", arch, nvrtc, records, cubins, skipped)


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def _signals_deferred():
    """SIGINT / SIGTERM arriving inside are delivered when it ends."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signals are only delivered to the main thread anyway
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


# ---- compiling -----------------------------------------------------------------------
def _worker_init() -> None:
    # Ctrl-C reaches the whole process group; only the parent decides what stops, and
    # it ends workers itself (a worker's KeyboardInterrupt would print a traceback).
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _end_workers(pool: ProcessPoolExecutor, cache_dir: Path, grace: float = 0.5) -> None:
    """Terminate the pool's workers now (shutdown() would let running compiles finish:
    tens of seconds), kill those that linger, and remove the temp files they left."""
    # NOTE: ProcessPoolExecutor has no public way to stop running workers before 3.14.
    procs = list(getattr(pool, "_processes", {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for p in procs:
        with contextlib.suppress(Exception):
            p.terminate()
    deadline = time.monotonic() + grace
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            with contextlib.suppress(Exception):
                p.kill()
            p.join(1.0)
    remove_temp_files(cache_dir, {p.pid for p in procs if p.pid is not None})


class _Progress:
    """The tqdm bar on a terminal; otherwise a line to stderr every ``every`` seconds and
    one per arch as it finishes, so a log shows a long build is alive."""

    def __init__(self, total: int, enabled: bool, every: float = 10.0) -> None:
        from tqdm import tqdm

        self.tty = sys.stderr.isatty()
        self.enabled = enabled
        self.total, self.done, self.every = total, 0, every
        self.t0 = self.last = time.perf_counter()
        self.bar = tqdm(total=total, unit="kernel", desc="nvrtc", disable=not enabled or not self.tty)

    def update(self) -> None:
        self.done += 1
        self.bar.update()
        now = time.perf_counter()
        if self.enabled and not self.tty and now - self.last >= self.every and self.done < self.total:
            self.last = now
            self.line(f"nvrtc: {self.done}/{self.total} kernels, {now - self.t0:.0f} s")

    def line(self, text: str) -> None:
        if not self.enabled:
            return
        if self.tty:
            self.bar.write(text, file=sys.stderr)
        else:
            print(text, file=sys.stderr, flush=True)

    def close(self) -> None:
        self.bar.close()


# ---- the build -----------------------------------------------------------------------
def emulated_reason(spec: KernelSpec, arch: int) -> str | None:
    """Why the build leaves (spec, arch) out by default: its MMA is emulated there, so
    the registry would not dispatch it unless asked."""
    if spec.mma.native_on(arch):
        return None
    return f"{spec.mma.value} MMA is emulated on sm_{arch} (build with --with-emulated to include it)"


def build(
    generated_dir: Path,
    out_dir: Path,
    archs: Sequence[int] | None = None,
    jobs: int | None = None,
    progress: bool = True,
    with_emulated: bool = False,
    cache_dir: Path | None = None,
) -> BuildReport:
    """Compile every generated kernel for every arch it fits; see the module docstring.

    ``with_emulated``: also (kernel, arch) pairs whose MMA is emulated on the arch
    (``Gemm(allow_emulated=True)`` dispatches them); otherwise they are skipped.
    ``cache_dir``: the compile cache (default ``out_dir/.cache``).

    Raises BuildError (with ``failures`` and the partial ``report``) after writing the
    archs that compiled cleanly, if any kernel failed. An exception while compiling
    (KeyboardInterrupt included) ends the worker processes and publishes nothing.
    """
    t_start = time.perf_counter()
    generated_dir, out_dir = Path(generated_dir), Path(out_dir)
    if jobs is not None and (not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1):
        raise BuildError(f"jobs: got {jobs!r:.80}, accepted: None (GEMM_BUILD_JOBS or the CPUs) or an integer >= 1")
    kernels = load_generated(generated_dir)
    wanted, skipped_archs = resolve_archs(archs)
    jobs = jobs or settings().jobs or os.cpu_count() or 1
    cache_dir = Path(cache_dir) if cache_dir is not None else out_dir / ".cache"
    for d in (out_dir, cache_dir) if wanted else ():
        # Found out here, not as one "compile failure" per kernel or a traceback at publication.
        try:
            d.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise BuildError(f"cannot write the build to {d}: {e.strerror or e}; give --out a writable folder") from None
    include_dirs = [INCLUDE_DIR]
    sources = {k.name: k.source_file.read_text() for k in kernels}

    reports = {a: ArchReport(a, nvrtc=compiler.backend_for(a).version_text) for a in wanted}
    tasks: list[tuple[GeneratedKernel, int]] = []
    for a in wanted:  # arch-major, so the first arch tends to finish first
        for k in kernels:
            if not k.spec.archs_that_fit([a]):
                reports[a].skipped.append((k.name, skip_reason(k.spec, a)))
            elif not with_emulated and emulated_reason(k.spec, a):
                reports[a].skipped.append((k.name, emulated_reason(k.spec, a)))
            else:
                tasks.append((k, a))
    remaining = {a: sum(1 for _, ta in tasks if ta == a) for a in wanted}

    results: dict[int, dict[str, CompileResult]] = {a: {} for a in wanted}
    failures: list[Failure] = []
    bar = _Progress(len(tasks), progress)

    def done(k: GeneratedKernel, a: int, result: CompileResult | None, error: BaseException | None) -> None:
        rep = reports[a]
        if result is not None:
            results[a][k.name] = result
            rep.cached += result.cached
            rep.compiled += not result.cached
            rep.seconds += 0.0 if result.cached else result.seconds
        else:
            rep.failed += 1
            log = error.log if isinstance(error, CompileError) else f"{type(error).__name__}: {error}"
            failures.append(Failure(k.name, a, k.source, log))
        bar.update()
        remaining[a] -= 1
        if remaining[a] == 0 and rep.compiled + rep.failed:
            rep.finished_at = time.perf_counter() - t_start
            bar.line(f"sm_{a}: {len(results[a])} kernels done ({rep.timing()})")

    def args(k: GeneratedKernel, a: int) -> dict:
        target = k.spec.mainloop.nvrtc_target(a)  # the family's (sm_90a for arch-specific code)
        return dict(name=k.name, arch=a, include_dirs=include_dirs, options=BUILD_OPTIONS,
                    target=None if target == f"sm_{a}" else target)  # fmt: skip

    # Cache hits are served here, so a warm build starts no worker processes at all.
    misses = []
    for k, a in tasks:
        hit = compiler.lookup(sources[k.name], cache_dir=cache_dir, **args(k, a))
        if hit is not None:
            done(k, a, hit, None)
        else:
            misses.append((k, a))

    try:
        if misses:
            # Always in worker processes, even one job: a compile in this process could
            # not be interrupted until NVRTC returns. spawn, not fork: the parent may
            # hold a CUDA context and tqdm's monitor thread.
            ctx = multiprocessing.get_context("spawn")
            pool = ProcessPoolExecutor(max_workers=min(jobs, len(misses)), mp_context=ctx, initializer=_worker_init)
            try:
                pending: dict[Future, tuple[GeneratedKernel, int]] = {
                    pool.submit(compiler.compile_cubin, sources[k.name], cache_dir=cache_dir, **args(k, a)): (k, a)
                    for k, a in misses
                }
                while pending:
                    finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                    for fut in finished:
                        k, a = pending.pop(fut)
                        err = fut.exception()
                        done(k, a, None if err else fut.result(), err)
            except BaseException:
                _end_workers(pool, cache_dir)
                raise
            pool.shutdown(wait=True)
    finally:
        bar.close()

    report = BuildReport(skipped_archs=skipped_archs)
    specs = {k.name: k.spec for k in kernels}
    for a in wanted:
        rep = reports[a]
        if not rep.failed:  # a failing arch keeps its previous outputs rather than half of new ones
            try:
                published = _publish_arch(out_dir, a, kernels, results[a], rep.skipped, rep.nvrtc)
            except OSError as e:
                raise BuildError(f"cannot write {out_dir / f'sm_{a}'}: {e}", report=report) from None
            rep.kernels = len(results[a])
            rep.restored = list(published.restored)
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
def _jobs_arg(text: str) -> int:
    if not text.strip().isdecimal() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of parallel compiles (an integer >= 1)")
    return int(text)


def _arch_arg(text: str) -> int:
    digits = text.lower().removeprefix("sm_")
    if not (digits.isascii() and digits.isdigit()):
        raise argparse.ArgumentTypeError(f"{text!r} is not an arch (e.g. 80 or sm_80)")
    return int(digits)


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived; a BaseException so no ``except Exception`` swallows it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def _stop_on_signals():
    """Turn the first SIGINT / SIGTERM into Interrupted; ignore repeats, so cleanup
    (ending workers) is not itself interrupted."""
    fired: list[int] = []

    def handler(signum, frame):
        if not fired:
            fired.append(signum)
            raise Interrupted(signum)

    old = {s: signal.signal(s, handler) for s in _STOP_SIGNALS}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        s = settings()
    except ValueError as e:  # a malformed GEMM_* variable (TuneSettingsError is a ValueError)
        print(f"error: {e}", file=sys.stderr)
        return 2
    parser = argparse.ArgumentParser(prog="python -m gemm_runtime.build", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--arch",
        type=_arch_arg,
        action="append",
        help=f"target arch, repeatable (default: the visible GPUs, else {' '.join(map(str, DEFAULT_ARCHS))})",
    )
    parser.add_argument("--jobs", type=_jobs_arg, default=None, help="parallel compiles (default: GEMM_BUILD_JOBS or CPUs)")
    parser.add_argument("--generated", type=path_arg, default=s.generated_dir, help="generated sources (%(default)s)")
    parser.add_argument("--out", type=path_arg, default=s.build_dir, help="output directory (%(default)s)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument(
        "--with-emulated",
        action="store_true",
        help="also build kernels for archs where their MMA is emulated (for Gemm(allow_emulated=True))",
    )
    args = parser.parse_args(argv)

    try:
        with _stop_on_signals():
            report = build(
                args.generated, args.out, args.arch, args.jobs, progress=not args.no_progress,
                with_emulated=args.with_emulated,
            )  # fmt: skip
    except (Interrupted, KeyboardInterrupt) as e:
        signum = e.signum if isinstance(e, Interrupted) else signal.SIGINT
        name = signal.Signals(signum).name
        print(f"interrupted by {name}: build stopped; {args.out} holds only complete outputs", file=sys.stderr)
        return 128 + signum
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
