"""A benchmark peer: CUTLASS GEMMs built by the nvidia-cutlass package's Python interface,
timed beside cuBLAS in the same process on an H100/H200 (sm_90). Two families:

  sm90 (the default): CUTLASS 3 kernels (TMA + wgmma, warp-specialized, sm_90a);
  sm80: CUTLASS 2.x kernels (mma.sync + cp.async multistage mainloop), the
        kernel::DefaultGemmUniversal that the interface emits for cc=80 / kernel_cc=80,
        compiled (like every kernel here) for the GPU at hand, sm_90a.

    source bench/cutlass_env.sh        # GPU machine: carried wheel -> /tmp/site, nvcc env
    python3 -m bench.cutlass_peer --probe
    python3 -m bench.cutlass_peer --shapes 8192x8192x8192,4096x4096x4096 --dtype bf16 --out cutlass.json
    python3 -m bench.cutlass_peer --family sm80 --shapes llama3 --dtype bf16,fp16 --out sm80.json

D = A @ B with A M x K row-major, fp32 accumulation, D in the input dtype. B order 'nk' is
the nn.Linear weight (W N x K row-major, D = A @ W^T); 'kn' is B K x N row-major.

The interface emits CUTLASS C++ (for sm90 the CollectiveBuilder mainloop and epilogue and
the persistent tile scheduler; for sm80 the threadblock-tiled multistage GEMM with
GemmIdentityThreadblockSwizzle<8>, the swizzle CUTLASS's own library builds them with) and
compiles it with nvcc, about a minute a kernel, into a sqlite cache under --cache-dir /
$CUTLASS_PEER_CACHE (default build/cutlass_peer), so a second run reuses the binaries. Each
variant is checked against an fp32 matmul before it is timed (bench.timing.median_ms: CUDA
events, L2 flushed before each repetition, median).

Launching: CUTLASS's own run() rebuilds the kernel's Params on every call. Here the
interface's argument object (GemmArguments: GemmArguments3x for sm90, GemmArguments2x for
sm80) is built once per bound tensor set; it calls the compiled host library's
get_params (for 2.x: GemmUniversal::Params(arguments) with the problem's tiled shape and
gemm_k_size) and get_grid_shape (the swizzle's grid), and its bytes are kept. A call is
then one cuLaunchKernelEx on torch's current stream: for sm90 with the cluster attribute,
for sm80 with none (grid from the swizzle, one block of 32 x warps threads, the kernel's
SharedStorage as dynamic shared memory, the function's limit raised to it above 48 KiB).
No host work of the interface is inside the timed region.

Every failure names its step, the exception and the likely cause and exits 2; with
--allow-fail the JSON records why (status "unavailable") and the exit status is 0."""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import dataclasses
import importlib
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, ClassVar

import torch

from bench.cli import check_build, check_folder, check_out, positive_int

ROOT = Path(__file__).resolve().parent.parent
CACHE_ENV = "CUTLASS_PEER_CACHE"
DEFAULT_CACHE = ROOT / "build" / "cutlass_peer"
MAX_REL_ERR = 1e-2
ALIGN = 8  # elements: 16-byte TMA alignment for fp16/bf16, so K and N must be multiples of 8
ORDERS = ("nk", "kn")
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
_DTYPE_ALIASES = {"bfloat16": "bf16", "f16": "fp16", "float16": "fp16", "half": "fp16"}


# ----------------------------------------------------------------------------- variants


@dataclasses.dataclass(frozen=True)
class Variant:
    """One CUTLASS 3 SM90 kernel configuration: CTA tile (M, N, K), cluster (M, N) and the
    warp-specialized schedule, whose epilogue is the matching TMA epilogue."""

    schedule: str  # "cooperative" or "pingpong"
    tile: tuple[int, int, int]
    cluster: tuple[int, int]

    family: ClassVar[str] = "sm90"
    kernel_cc: ClassVar[int] = 90

    @property
    def name(self) -> str:
        m, n, k = self.tile
        return f"{self.schedule[:4]}_{m}x{n}x{k}_c{self.cluster[0]}x{self.cluster[1]}"

    @property
    def launch_cluster(self) -> tuple[int, int] | None:
        return self.cluster

    def schedule_names(self) -> tuple[str, str]:
        """(KernelScheduleType, EpilogueScheduleType) member names in cutlass_library."""
        return {
            "cooperative": ("TmaWarpSpecializedCooperative", "TmaWarpSpecializedCooperative"),
            "pingpong": ("TmaWarpSpecializedPingpong", "TmaWarpSpecialized"),
        }[self.schedule]


@dataclasses.dataclass(frozen=True)
class Sm80Variant:
    """One CUTLASS 2.x SM80 kernel configuration (mma.sync m16n8k16, cp.async multistage):
    CTA tile (M, N, K), warps (M, N) (the warp tile is the CTA tile divided by them), the
    mainloop's stages and the threadblock swizzle (GemmIdentityThreadblockSwizzle<N>)."""

    tile: tuple[int, int, int]
    warps: tuple[int, int]
    stages: int
    swizzle: int = 8  # CUTLASS's library and profiler build their SM80 GEMMs with 8

    family: ClassVar[str] = "sm80"
    kernel_cc: ClassVar[int] = 80
    launch_cluster: ClassVar[None] = None  # a plain launch: no clusters before SM90

    @property
    def name(self) -> str:
        m, n, k = self.tile
        return f"sm80_{m}x{n}x{k}_w{self.warps[0]}x{self.warps[1]}_s{self.stages}_sw{self.swizzle}"

    @property
    def warp_tile(self) -> tuple[int, int, int]:
        (m, n, k), (wm, wn) = self.tile, self.warps
        return m // wm, n // wn, k

    @property
    def threads(self) -> int:
        return 32 * self.warps[0] * self.warps[1]


AnyVariant = Variant | Sm80Variant

# Few on purpose: each is about a minute of nvcc (in parallel: about a minute for all on
# the H200's host). Large tiles for large problems, 128x128 for the smaller ones; cluster
# 2x1 multicasts B's tile to the two CTAs that share it. Measured on the H200 (bf16, nk):
# cooperative 128x256 won at 8192^3 (1x1) and 4096^3 (2x1); pingpong 128x128 reached about
# 0.55x of it at both, so one pingpong is kept, for the schedule's sake.
VARIANTS: tuple[Variant, ...] = (
    Variant("cooperative", (128, 256, 64), (1, 1)),
    Variant("cooperative", (128, 256, 64), (2, 1)),
    Variant("cooperative", (256, 128, 64), (1, 1)),
    Variant("cooperative", (256, 128, 64), (2, 1)),
    Variant("cooperative", (128, 128, 64), (2, 1)),
    Variant("pingpong", (128, 128, 64), (1, 1)),
)
PROBE_VARIANT = VARIANTS[0]

# The classic SM80 GEMM configurations, each one that the interface's generator lists for
# f16/bf16 in, fp32 accumulation on cc 80 (Gemm(cc=80, kernel_cc=80).tile_descriptions();
# there 128x256x32 has 3 stages only). 64x64 warp tiles, apart from 128x128x32's 64x64x32.
# Earlier measurement on the H200: 128x256x64, 3 stages reached 486 TFLOP/s at 4096^3.
SM80_VARIANTS: tuple[Sm80Variant, ...] = (
    Sm80Variant((128, 256, 64), (2, 4), 3),
    Sm80Variant((256, 128, 64), (4, 2), 3),
    Sm80Variant((128, 128, 64), (2, 2), 4),
    Sm80Variant((128, 256, 32), (2, 4), 3),
    Sm80Variant((128, 128, 32), (2, 2), 5),
)

FAMILIES: dict[str, tuple[AnyVariant, ...]] = {"sm90": VARIANTS, "sm80": SM80_VARIANTS, "both": VARIANTS + SM80_VARIANTS}
ALL_VARIANTS = FAMILIES["both"]
DEFAULT_FAMILY = "sm90"


def variants_named(names: Iterable[str] | None, family: str | None = None) -> list[AnyVariant]:
    """Variants in catalogue order: the family's (``family`` None: sm90) for ``names`` None,
    else those named, looked up in the family's catalogue (``family`` None: all of them)."""
    if family is not None and family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; known: {sorted(FAMILIES)}")
    if names is None:
        return list(FAMILIES[family or DEFAULT_FAMILY])
    catalogue = FAMILIES[family or "both"]
    wanted = set(names)
    unknown = wanted - {v.name for v in catalogue}
    if unknown:
        where = f" in family {family}" if family else ""
        raise ValueError(f"unknown variant(s) {sorted(unknown)}{where}; known: {[v.name for v in catalogue]}")
    return [v for v in catalogue if v.name in wanted]


def dtype_name(dtype: torch.dtype) -> str:
    for name, dt in DTYPES.items():
        if dt == dtype:
            return name
    raise ValueError(f"CUTLASS peer supports {sorted(DTYPES)}, not {dtype}")


def plan_key(dtype: torch.dtype, order: str, variant: AnyVariant) -> tuple[str, str, str]:
    """Key of the per-process cache of compiled kernels: one binary serves every problem
    size of that dtype, B order and variant."""
    if order not in ORDERS:
        raise ValueError(f"B order must be one of {ORDERS}, not {order!r}")
    return (dtype_name(dtype), order, variant.name)


def cache_subdir(base: Path, cutlass_version: str, nvcc_version: str) -> Path:
    """CUTLASS's sqlite cache keys on the emitted source only: keep one folder for each
    CUTLASS and nvcc version so that a binary is never reused across either."""
    return Path(base) / f"nvidia-cutlass-{cutlass_version}_nvcc-{nvcc_version}"


# ----------------------------------------------------------------------------- failures


class PeerError(Exception):
    """A step that failed, with the likely cause; ``detail`` holds extra lines (nvcc's log)."""

    def __init__(self, step: str, error: str, cause: str | None = None, detail: str = "") -> None:
        super().__init__(f"{step}: {error}")
        self.step = step
        self.error = error
        self.cause = cause or likely_cause(step, error)
        self.detail = detail

    @classmethod
    def wrap(cls, step: str, exc: BaseException, detail: str = "") -> PeerError:
        if isinstance(exc, PeerError):
            return exc
        return cls(step, f"{type(exc).__name__}: {exc}", detail=detail)


# (step or None for any step, a substring of the error, the likely cause); first match wins.
_CAUSES: tuple[tuple[str | None, str, str], ...] = (
    (None, "No module named 'cutlass_cppgen'",
     "nvidia-cutlass is not importable: `source bench/cutlass_env.sh` installs the carried "
     ".whl/nvidia_cutlass-*.whl into /tmp/site and puts it first on PYTHONPATH"),
    (None, "No module named 'cuda.bindings'",
     "cuda-bindings (cuda-python 13) is missing: CUTLASS's Python interface drives the GPU through it"),
    (None, "No module named",
     "a Python dependency of nvidia-cutlass is missing on this machine: carry its wheel in .whl/"),
    (None, "must be greater than or equal to NVCC version",
     "CUTLASS refuses an nvcc newer than the cuda-bindings package: use cuda-bindings >= nvcc's release"),
    (None, "Failed to dlopen libcuda",
     "the CUDA driver library (libcuda.so.1) cannot be loaded: no NVIDIA driver on this machine"),
    (None, "cannot open shared object file",
     "a CUDA library is not on the loader's path: the host-side .so CUTLASS builds needs libcudart "
     "(add $CUDA_INSTALL_PATH/lib64 to LD_LIBRARY_PATH; bench/cutlass_env.sh does)"),
    ("toolchain", "nvcc",
     "nvcc was not found or does not run: put CUDA's bin/ on PATH or set CUDA_INSTALL_PATH to the toolkit root"),
    ("headers", "",
     "the CUTLASS headers are not where cutlass_library says (CUTLASS_PATH set to another tree?)"),
    ("device", "compute capability",
     "these kernels are sm_90a (wgmma, TMA, clusters): they run on an H100/H200 only"),
    ("device", "",
     "no usable CUDA GPU in this process (torch.cuda.is_available() is False, or CUDA failed to initialise)"),
    ("compile", "Invalid Kernel",
     "nvcc rejected the generated CUTLASS source (its output is below): an nvcc that CUTLASS 4.2's "
     "headers do not support, or a tile/schedule the CollectiveBuilder (sm90) or DefaultGemmUniversal (sm80) cannot build"),
    ("compile", "CUDA_ERROR",
     "the compiled cubin could not be loaded (CUDA_ERROR_NO_BINARY_FOR_GPU: built for another arch)"),
    ("run", "CUDA_ERROR_INVALID_VALUE",
     "the launch was refused: cluster shape, block size or shared memory beyond the device's limits"),
    ("run", "ILLEGAL",
     "the kernel faulted (bad TMA descriptor or pointer): the CUDA context is lost, later steps cannot run"),
    ("check", "",
     "the kernel ran but computed wrong values: B's layout/order mismatched, or a kernel built without "
     "sm_90a features (CUTLASS compiles those bodies to nothing outside sm_90a)"),
)


def likely_cause(step: str, error: str) -> str:
    for where, needle, cause in _CAUSES:
        if (where is None or where == step) and needle in error:
            return cause
    return "not recognised: see the exception and traceback above"


def failure_record(err: PeerError) -> dict[str, Any]:
    """What the JSON says when the peer could not be built or run."""
    return {
        "peer": "cutlass",
        "status": "unavailable",
        "step": err.step,
        "error": err.error,
        "cause": err.cause,
        "detail": err.detail[-4000:],
        "message": f"CUTLASS peer could not be built because {err.step} failed: {err.error} ({err.cause})",
    }


def _nvcc_error_tail(exc: BaseException, kernel: str | None = None, lines: int = 40) -> str:
    """CUTLASS writes nvcc's output after the kernel source into the file its exception
    names, one file for all kernels: with compiles in parallel it may hold another's."""
    match = re.search(r"See '([^']+)'", str(exc))
    if not match:
        return ""
    try:
        text = Path(match.group(1)).read_text(errors="replace")
    except OSError:
        return ""
    source, _, log = text.rpartition("\nError Message:\n")
    note = "" if kernel is None or kernel in source else \
        "(nvcc's log below is another kernel's: rerun this variant alone with --jobs 1 --variants)\n"
    return note + "\n".join(log.splitlines()[-lines:])


# ----------------------------------------------------------------------------- environment


def alias_legacy_cuda_modules() -> str:
    """nvidia-cutlass 4.2 imports cuda-python 12's module names (cuda.cuda, cuda.cudart,
    cuda.nvrtc) and reads cuda.__version__. cuda-bindings 13 dropped them (``cuda`` is a bare
    namespace package there); in 12 they were re-exports of cuda.bindings.driver / runtime /
    nvrtc, so point the old names at those modules. Returns what was done."""
    try:
        importlib.import_module("cuda.cuda")
        return "legacy cuda.cuda present (cuda-python 12)"
    except ImportError:
        pass
    import cuda
    import cuda.bindings
    from cuda.bindings import driver, nvrtc, runtime

    for legacy, module in (("cuda", driver), ("cudart", runtime), ("nvrtc", nvrtc)):
        sys.modules[f"cuda.{legacy}"] = module
        setattr(cuda, legacy, module)
    if not hasattr(cuda, "__version__"):
        cuda.__version__ = cuda.bindings.__version__
    return f"cuda.cuda/cudart/nvrtc aliased to cuda.bindings {cuda.bindings.__version__}"


def find_nvcc() -> Path:
    """nvcc as CUTLASS will run it: $CUDA_INSTALL_PATH/bin/nvcc where that is set (CUTLASS
    takes it as given), else the one on PATH, $CUDA_HOME's or /usr/local/cuda's. Symlinks
    are resolved, so that the toolkit root (its include/ and lib64/) is right."""
    if os.environ.get("CUDA_INSTALL_PATH"):
        candidates = [Path(os.environ["CUDA_INSTALL_PATH"]) / "bin" / "nvcc"]
    else:
        on_path = shutil.which("nvcc")
        candidates = [Path(on_path)] if on_path else []
        candidates += [Path(os.environ[v]) / "bin" / "nvcc" for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
        candidates.append(Path("/usr/local/cuda/bin/nvcc"))
    for cand in candidates:
        if cand.is_file() and os.access(cand, os.X_OK):
            return cand.resolve()
    raise PeerError("toolchain", f"nvcc not found (tried {', '.join(map(str, candidates))})")


def nvcc_release(nvcc: Path) -> str:
    """'13.0' from `nvcc --version` (the field CUTLASS parses)."""
    out = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, timeout=60)
    match = re.search(r"release (\d+\.\d+)", out.stdout)
    if out.returncode != 0 or not match:
        raise PeerError("toolchain", f"`{nvcc} --version` failed: {out.stdout[-300:]}{out.stderr[-300:]}")
    return match.group(1)


def toolkit_root(nvcc: Path) -> Path:
    """The toolkit folder nvcc belongs to, as nvcc itself reports it (TOP in a dry run):
    an `nvcc` on PATH may be a wrapper script elsewhere (/usr/local/bin/nvcc doing
    `exec /usr/local/cuda-13.0/bin/nvcc`), where bin/.. holds no CUDA."""
    out = subprocess.run([str(nvcc), "--dryrun", "-x", "cu", "-c", os.devnull, "-o", os.devnull],
                         capture_output=True, text=True, timeout=60)
    match = re.search(r"^#\$ TOP=(.+)$", out.stdout + out.stderr, re.MULTILINE)
    root = Path(match.group(1).strip().strip('"')).resolve() if match else nvcc.parent.parent
    if not (root / "bin" / "nvcc").is_file():
        raise PeerError("toolchain", f"no bin/nvcc under {root}, the toolkit root {nvcc} reports")
    return root


def export_toolchain(nvcc: Path) -> Path:
    """CUTLASS runs $CUDA_INSTALL_PATH/bin/nvcc (it finds the root with /usr/bin/which
    where that is unset) but also a bare `nvcc --version`: set the root, and put its bin/
    first on PATH, so that both are the same nvcc."""
    root = toolkit_root(nvcc)
    os.environ["CUDA_INSTALL_PATH"] = str(root)
    on_path = shutil.which("nvcc")
    if on_path is None or Path(on_path).resolve() != (root / "bin" / "nvcc").resolve():
        os.environ["PATH"] = f"{root / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
    return root


def cutlass_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("nvidia-cutlass")
    except PackageNotFoundError:
        return "unknown"


@contextlib.contextmanager
def inside(folder: Path) -> Iterator[None]:
    """Run with ``folder`` as the working directory. CUTLASS opens its sqlite cache at a
    relative path when imported, and writes its .cu, .cubin and .so files and nvcc's error
    logs to './' (it also sets tempfile.tempdir to './': put back afterwards)."""
    folder.mkdir(parents=True, exist_ok=True)
    before, tmpdir = os.getcwd(), tempfile.tempdir
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)
        tempfile.tempdir = tmpdir


def headers_dir(cutlass: Any) -> Path:
    include = Path(cutlass.CUTLASS_PATH) / "include"
    missing = [h for h in ("cutlass/cutlass.h", "cute/tensor.hpp") if not (include / h).is_file()]
    if missing:
        raise PeerError("headers", f"{missing} not under {include}")
    return include


class _GemmOptions:
    """Stands in for CUTLASS's option registry, which describes every kernel of every
    architecture from SM50 to SM100 when first asked (about 11 s); only the GEMMs of the
    kernel_cc in use (90, and 80 for the sm80 family) are described, each when first asked
    (about 1.5 s). The device is taken to have that same cc (cc=kernel_cc in the plans):
    for 80, that bounds the stages by the A100's shared memory, which the SM80 catalogue
    keeps within."""

    CCS = (80, 90)

    def __init__(self) -> None:
        import cutlass_library as lib

        self._lib = lib
        self._kind = lib.OperationKind.Gemm
        self._gemm: dict[int, Any] = {}

    def options_for_cc(self, cc: int, op_kind: Any = None) -> Any:
        """Called by Gemm plans only, which Session makes one at a time."""
        if cc not in self.CCS or op_kind not in (None, self._kind):
            return None
        if cc not in self._gemm:
            from cutlass_cppgen.library_defaults import ArchOptions

            kinds = [self._lib.GemmKind.Universal, self._lib.GemmKind.Universal3x]
            self._gemm[cc] = ArchOptions(cc, cc, self._kind, kinds)
        return self._gemm[cc]


def install_options(cutlass: Any, nvcc_version: str) -> None:
    """Before any Gemm plan is made. The generator filters kernels by nvcc's release, which
    CUTLASS records when it first initialises CUDA; record it here so that this also works
    without a GPU (the CPU tests emit source this way)."""
    if getattr(cutlass, "_nvcc_version", None) is None:
        cutlass._nvcc_version = nvcc_version
    if not isinstance(getattr(cutlass, "_option_registry", None), _GemmOptions):
        cutlass._option_registry = _GemmOptions()


@dataclasses.dataclass
class Toolchain:
    cutlass: Any  # the cutlass_cppgen module
    version: str
    nvcc: Path
    nvcc_version: str
    cuda_root: Path
    cache_dir: Path
    aliases: str
    include: Path | None = None


def locate_nvcc() -> tuple[Path, str, Path]:
    """(nvcc, its release, the toolkit root), exported for CUTLASS."""
    try:
        nvcc = find_nvcc()
        return nvcc, nvcc_release(nvcc), export_toolchain(nvcc)
    except Exception as exc:
        raise PeerError.wrap("toolchain", exc) from exc


def import_interface(nvcc: Path, release: str, cuda_root: Path, cache_base: Path | None) -> Toolchain:
    """Import the interface (module cutlass_cppgen since nvidia-cutlass 4.2: the name
    `cutlass` went to the CuTe DSL) with its cache in the folder for these versions."""
    try:
        aliases = alias_legacy_cuda_modules()
        version = cutlass_version()
        base = Path(cache_base or os.environ.get(CACHE_ENV) or DEFAULT_CACHE).resolve()
        cache_dir = cache_subdir(base, version, release)
        with inside(cache_dir):
            cutlass = importlib.import_module("cutlass_cppgen")
        # Later opens of the cache must not depend on the working directory.
        sys.modules["cutlass_cppgen.backend.compiler"].CACHE_FILE = str(cache_dir / cutlass.CACHE_FILE)
    except Exception as exc:
        raise PeerError.wrap("import", exc, traceback.format_exc(limit=4)) from exc
    return Toolchain(cutlass, version, nvcc, release, cuda_root, cache_dir, aliases)


def load_toolchain(cache_base: Path | None = None) -> Toolchain:
    """nvcc, the interface and its headers; no GPU needed."""
    tools = import_interface(*locate_nvcc(), cache_base)
    tools.include = headers_dir(tools.cutlass)
    return tools


# ----------------------------------------------------------------------------- kernels


def _library_types(dtype: torch.dtype, order: str) -> dict[str, Any]:
    import cutlass_library as lib

    element = {torch.bfloat16: lib.DataType.bf16, torch.float16: lib.DataType.f16}[dtype]
    b_layout = lib.LayoutType.ColumnMajor if order == "nk" else lib.LayoutType.RowMajor
    return dict(
        element=element,
        element_accumulator=lib.DataType.f32,
        layout_A=lib.LayoutType.RowMajor,
        layout_B=b_layout,
        layout_C=lib.LayoutType.RowMajor,
    )


def make_operation(cutlass: Any, dtype: torch.dtype, order: str, variant: AnyVariant) -> Any:
    """The GemmOperationUniversal for a variant, not compiled (works without a GPU once
    install_options ran). B 'nk' is the K x N operand stored column-major."""
    plan_key(dtype, order, variant)  # validates dtype and order
    plan = cutlass.op.Gemm(**_library_types(dtype, order), cc=variant.kernel_cc, kernel_cc=variant.kernel_cc)
    if isinstance(variant, Sm80Variant):
        _plan_sm80(plan, variant)
    else:
        _plan_sm90(plan, variant)
    return plan.construct(plan.tile_description, alignment_A=ALIGN, alignment_B=ALIGN, alignment_C=ALIGN)


def _plan_sm90(plan: Any, variant: Variant) -> None:
    """Its kernel name (procedural_name) shows the cluster's tile, e.g. 256x256x64_2x1x1 for
    a 128x256x64 CTA tile in a 2x1 cluster."""
    import cutlass_library as lib

    kernel_schedule, epilogue_schedule = variant.schedule_names()
    (m, n, k), (cm, cn) = variant.tile, variant.cluster
    plan.tile_description = {
        # The interface takes the cluster's tile and emits threadblock_shape / cluster_shape
        # as the CTA's (cutlass_cppgen.backend.library.to_blackwell_threadblock_shape).
        "threadblock_shape": [m * cm, n * cn, k],
        "cluster_shape": [*variant.cluster, 1],
        "kernel_schedule": getattr(lib.KernelScheduleType, kernel_schedule),
        "epilogue_schedule": getattr(lib.EpilogueScheduleType, epilogue_schedule),
        "tile_scheduler": lib.TileSchedulerType.Default,  # persistent
        "stages": None,  # as many as fit beside the epilogue's shared memory
    }


def _plan_sm80(plan: Any, variant: Sm80Variant) -> None:
    """A 2.x GemmUniversal; its kernel name shows the tile and stages, e.g.
    ..._s16816gemm_bf16_128x256_64x3_tn_align8 (the swizzle is in the source only). The
    math instruction is the default operation's, mma.sync m16n8k16."""
    import cutlass_library as lib

    plan.swizzling_functor = getattr(lib.SwizzlingFunctor, f"Identity{variant.swizzle}")
    plan.tile_description = {
        "threadblock_shape": list(variant.tile),
        "warp_count": [*variant.warps, 1],
        "stages": variant.stages,
    }


@dataclasses.dataclass
class Compiled:
    """A loaded kernel; ``bind`` makes the launcher for a set of tensors."""

    key: tuple[str, str, str]
    variant: AnyVariant
    operation: Any
    compile_s: float

    @property
    def kernel_name(self) -> str:
        return self.operation.procedural_name()

    def dims(self, a: torch.Tensor, b: torch.Tensor, d: torch.Tensor) -> tuple[int, int, int]:
        """(M, N, K) once the tensors are checked against this kernel's dtype and order."""
        dtype, order, _ = self.key
        return check_operands(a, b, d, DTYPES[dtype], order)

    def bind(self, a: torch.Tensor, b: torch.Tensor, d: torch.Tensor) -> Launcher:
        return Launcher(self, a, b, d)


class Launcher:
    """D = A @ B for fixed tensors, launched on torch's current stream.

    CUTLASS's own run() rebuilds the kernel's Params (TMA descriptors included for sm90) on
    every call; the tensors are preallocated here, so the Params are built once and a call
    costs one cuLaunchKernelEx: with the cluster attribute for sm90, without attributes for
    sm80 (a plain launch)."""

    def __init__(self, compiled: Compiled, a: torch.Tensor, b: torch.Tensor, d: torch.Tensor) -> None:
        from cuda.bindings import driver

        m, n, k = compiled.dims(a, b, d)
        self.compiled = compiled
        self._tensors = (a, b, d)  # the Params hold their addresses
        self._args = _gemm_arguments(compiled.operation, m, n, k, a, b, d)
        cfg = self._args.launch_config
        self._params = (ctypes.c_char * len(self._args.host_workspace)).from_buffer(self._args.host_workspace)
        self._argv = (ctypes.c_void_p * 1)(ctypes.addressof(self._params))
        self._driver = driver
        self._kernel = compiled.operation.rt_module.kernel
        allow_dynamic_smem(driver, self._kernel, cfg.shared_memory_capacity)
        self._config = _launch_config(driver, cfg.grid, cfg.block, cfg.shared_memory_capacity,
                                      compiled.variant.launch_cluster)
        self._stream = None

    def __call__(self) -> None:
        handle = torch.cuda.current_stream().cuda_stream
        if handle != self._stream:
            self._config.hStream = self._driver.CUstream(handle)
            self._stream = handle
        (err,) = self._driver.cuLaunchKernelEx(self._config, self._kernel, ctypes.addressof(self._argv), 0)
        if int(err) != 0:
            raise RuntimeError(f"cuLaunchKernelEx({self.compiled.kernel_name}): {err!r}")


def problem_dims(a_shape: Iterable[int], b_shape: Iterable[int], d_shape: Iterable[int], order: str) -> tuple[int, int, int]:
    """(M, N, K) of D = A @ B from the stored shapes (B N x K for 'nk', K x N for 'kn')."""
    a_shape, b_shape, d_shape = tuple(a_shape), tuple(b_shape), tuple(d_shape)
    if len(a_shape) != 2 or len(b_shape) != 2 or len(d_shape) != 2:
        raise ValueError("A, B and D must be 2-D")
    m, k = a_shape
    n, kb = b_shape if order == "nk" else b_shape[::-1]
    if kb != k or d_shape != (m, n):
        raise ValueError(f"shapes A {a_shape}, B {b_shape} ({order}), D {d_shape} do not match")
    if k % ALIGN or n % ALIGN:
        raise ValueError(f"K ({k}) and N ({n}) must be multiples of {ALIGN} (16-byte rows for TMA)")
    return m, n, k


def check_operands(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, dtype: torch.dtype, order: str) -> tuple[int, int, int]:
    """(M, N, K) after checking shapes, dtype, contiguity and the 16-byte alignment."""
    dims = problem_dims(a.shape, b.shape, d.shape, order)
    for name, t in (("A", a), ("B", b), ("D", d)):
        if t.dtype != dtype or not t.is_cuda or not t.is_contiguous() or t.data_ptr() % 16:
            raise ValueError(f"{name} must be a contiguous 16-byte aligned CUDA {dtype} tensor")
    return dims


def _gemm_arguments(operation: Any, m: int, n: int, k: int, a: torch.Tensor, b: torch.Tensor, d: torch.Tensor) -> Any:
    """CUTLASS's argument object (GemmArguments3x for sm90, GemmArguments2x for sm80): builds
    the kernel's Params through the compiled host .so (host_workspace, its bytes) and the
    launch configuration (launch_config: for sm90 the persistent scheduler's grid, for sm80
    the swizzle's grid over the tiled shape, 32 x warps threads, the SharedStorage size).
    One split: no device workspace, so the 2.x semaphore stays null. C = D with beta 0: the
    epilogue then never reads C."""
    from cuda.bindings import driver
    from cutlass_cppgen.backend.gemm_operation import GemmArguments
    from cutlass_cppgen.shape import GemmCoord
    from cutlass_library import GemmUniversalMode

    ptr = [driver.CUdeviceptr(t.data_ptr()) for t in (a, b, d)]
    return GemmArguments(
        operation=operation,
        problem_size=GemmCoord(m, n, k),
        A=ptr[0], B=ptr[1], C=ptr[2], D=ptr[2],
        output_op=operation.epilogue_type(1.0, 0.0),
        gemm_mode=GemmUniversalMode.Gemm,
        split_k_slices=1,
    )


DEFAULT_SMEM_LIMIT = 48 * 1024  # bytes of dynamic shared memory a kernel may use without opting in


def allow_dynamic_smem(driver: Any, kernel: Any, smem: int) -> None:
    """Raise the kernel's dynamic shared memory limit to ``smem`` where that is above the
    48 KiB every kernel may use (CUTLASS also does this when it loads a kernel; doing it
    here keeps the launch right whatever the interface's version does)."""
    if smem <= DEFAULT_SMEM_LIMIT:
        return
    attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    (err,) = driver.cuFuncSetAttribute(kernel, attr, smem)
    if int(err) != 0:
        raise RuntimeError(f"cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES, {smem}): {err!r}")


def _launch_config(driver: Any, grid: list[int], block: list[int], smem: int, cluster: tuple[int, int] | None) -> Any:
    """A cuLaunchKernelEx configuration; with a cluster attribute where ``cluster`` is given."""
    config = driver.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = grid
    config.blockDimX, config.blockDimY, config.blockDimZ = block
    config.sharedMemBytes = smem
    attrs = []
    if cluster is not None:
        attr = driver.CUlaunchAttribute()
        attr.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = cluster[0], cluster[1], 1
        attrs.append(attr)
    config.attrs = attrs
    config.numAttrs = len(attrs)
    return config


def _loaded_library(stem: str) -> Path | None:
    """Path of a shared library this process has mapped whose name starts with ``stem``."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return None
    for line in maps.splitlines():
        path = line.split(maxsplit=5)[-1] if line.count(" ") >= 5 else ""
        if Path(path).name.startswith(stem):
            return Path(path)
    return None


def ensure_libcuda_linkable(cuda_root: Path, scratch: Path) -> str:
    """CUTLASS links each kernel's host-side .so with -lcuda, which needs an unversioned
    libcuda.so where the linker looks: the toolkit's stub (nvcc passes lib64/stubs) or, for
    a toolkit without stubs, a link to the driver library this process loaded, put on
    LIBRARY_PATH (which gcc's linker reads). Call after CUDA is initialised."""
    for stubs in (cuda_root / "lib64" / "stubs", cuda_root / "targets" / "x86_64-linux" / "lib" / "stubs"):
        if (stubs / "libcuda.so").exists():
            return f"-lcuda: the toolkit's stub in {stubs}"
    driver = _loaded_library("libcuda.so")
    if driver is None:
        return "-lcuda: no stub and no loaded driver library found; left to the system linker path"
    link_dir = scratch / "libcuda"
    link_dir.mkdir(parents=True, exist_ok=True)
    link = link_dir / "libcuda.so"
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(driver)
    os.environ["LIBRARY_PATH"] = os.pathsep.join(p for p in (str(link_dir), os.environ.get("LIBRARY_PATH")) if p)
    return f"-lcuda: {link} -> {driver} (the toolkit has no stub)"


DEFAULT_MAX_JOBS = 8


def compile_jobs(jobs: int | None, todo: int) -> int:
    """nvcc runs at a time: ``jobs`` where given, else one a core up to DEFAULT_MAX_JOBS;
    never more than there are kernels to build, never fewer than one."""
    wanted = jobs if jobs else min(os.cpu_count() or 1, DEFAULT_MAX_JOBS)
    return max(1, min(wanted, todo))


class Session:
    """The toolchain, the GPU and the kernels compiled in this process (by plan_key)."""

    def __init__(self, cache_base: Path | None = None, tools: Toolchain | None = None) -> None:
        self.tools = tools or load_toolchain(cache_base)
        self.device = _open_device(self.tools.cutlass)
        self.libcuda = ensure_libcuda_linkable(self.tools.cuda_root, self.tools.cache_dir)
        install_options(self.tools.cutlass, self.tools.nvcc_version)
        self.compiled: dict[tuple[str, str, str], Compiled] = {}
        self.failed: dict[tuple[str, str, str], PeerError] = {}  # not retried: nvcc would fail again
        self._lock = threading.Lock()

    def compile(self, dtype: torch.dtype, order: str, variants: Iterable[AnyVariant],
                jobs: int | None = None) -> dict[str, Compiled | PeerError]:
        """Compile the variants not compiled yet; each variant's kernel or why it failed."""
        results = self.compile_all([(dtype, order, v) for v in variants], jobs)
        return {name: result for (_, _, name), result in results.items()}

    def compile_all(self, tasks: Iterable[tuple[torch.dtype, str, AnyVariant]],
                    jobs: int | None = None) -> dict[tuple[str, str, str], Compiled | PeerError]:
        """Compile the (dtype, order, variant) kernels not tried yet, ``jobs`` nvcc runs at a
        time (threads: nvcc runs as a subprocess). Returns each one's kernel or why it
        failed, by plan_key, in the order given."""
        keyed = {plan_key(*task): task for task in tasks}
        todo = [key for key in keyed if key not in self.compiled and key not in self.failed]
        with inside(self.tools.cache_dir), ThreadPoolExecutor(compile_jobs(jobs, len(todo))) as pool:
            list(pool.map(lambda key: self._compile_one(*keyed[key]), todo))
        return {key: self.compiled.get(key) or self.failed[key] for key in keyed}

    def _compile_one(self, dtype: torch.dtype, order: str, variant: AnyVariant) -> Compiled | PeerError:
        from gemm_runtime import cuda_driver

        key = plan_key(dtype, order, variant)
        t0 = time.perf_counter()
        operation = None
        try:
            # CUTLASS loads the cubin with the driver API: the primary context must be current here.
            cuda_driver.ensure_context(self.device.index)
            with self._lock:  # the Gemm plan's Python state is not thread-safe; nvcc runs outside
                operation = make_operation(self.tools.cutlass, dtype, order, variant)
            self.tools.cutlass.backend.compiler.add_module([operation])
        except Exception as exc:
            name = operation.procedural_name() if operation is not None else None
            self.failed[key] = PeerError.wrap("compile", exc, _nvcc_error_tail(exc, name) or traceback.format_exc(limit=6))
            return self.failed[key]
        compiled = Compiled(key, variant, operation, time.perf_counter() - t0)
        self.compiled[key] = compiled
        return compiled


def _open_device(cutlass: Any) -> torch.device:
    """torch's current GPU, which must be SM 9.0; CUTLASS is told to use the same one."""
    if not torch.cuda.is_available():
        raise PeerError("device", "no CUDA GPU: torch.cuda.is_available() is False")
    try:
        index = torch.cuda.current_device()
        major, minor = torch.cuda.get_device_capability(index)
        torch.empty(1, device=f"cuda:{index}")  # creates torch's (primary) context
        os.environ["CUTLASS_CUDA_DEVICE_ID"] = str(index)
        cutlass.initialize_cuda_context()  # also checks cuda-bindings >= nvcc, as CUTLASS requires
    except Exception as exc:
        raise PeerError.wrap("device", exc) from exc
    if (major, minor) != (9, 0):
        raise PeerError("device", f"compute capability {major}.{minor} ({torch.cuda.get_device_name(index)}), need 9.0")
    return torch.device("cuda", index)


_session: Session | None = None


def session(cache_base: Path | None = None) -> Session:
    """The process's Session; ``cache_base`` counts on the first call only."""
    global _session
    if _session is None:
        _session = Session(cache_base)
    return _session


def gemm(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, order: str = "nk", variant: AnyVariant = PROBE_VARIANT) -> Launcher:
    """A launcher of D = A @ B for these tensors with one variant (compiled on first use)."""
    result = session().compile(a.dtype, order, [variant])[variant.name]
    if isinstance(result, PeerError):
        raise result
    return result.bind(a, b, d)


# ----------------------------------------------------------------------------- measuring


def flops(m: int, n: int, k: int) -> float:
    return 2.0 * m * n * k


def tflops(m: int, n: int, k: int, ms: float) -> float:
    return flops(m, n, k) / ms / 1e9


def logical_b(b: torch.Tensor, order: str) -> torch.Tensor:
    """The K x N operand torch.matmul takes (a view for 'nk')."""
    return b.t() if order == "nk" else b


def make_problem(dtype: torch.dtype, m: int, n: int, k: int, order: str) -> dict[str, torch.Tensor]:
    """Operands (``b`` stored in ``order``), output and the fp32 reference."""
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(m, k, device="cuda", dtype=dtype, generator=gen)
    b = torch.randn(*((n, k) if order == "nk" else (k, n)), device="cuda", dtype=dtype, generator=gen)
    return dict(a=a, b=b, d=torch.empty(m, n, device="cuda", dtype=dtype), ref=reference(a, b, order))


def reference(a: torch.Tensor, b: torch.Tensor, order: str) -> torch.Tensor:
    """fp32 A @ B (call with TF32 off: main() turns it off)."""
    return torch.matmul(a.float(), logical_b(b, order).float())


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """Frobenius-norm relative error (inf for NaN or Inf output)."""
    err = (out.float() - ref).norm() / ref.norm().clamp_min(1e-30)
    return float(err) if torch.isfinite(err) else float("inf")


def _error_fields(err: PeerError) -> dict[str, str]:
    return {"step": err.step, "error": err.error, "cause": err.cause}


def measure_variant(compiled: Compiled, a: torch.Tensor, b: torch.Tensor, d: torch.Tensor,
                    ref: torch.Tensor) -> tuple[dict[str, Any], Launcher | None]:
    """Check one kernel against ``ref``, then time it: (its row, its launcher or None where
    it failed). The kernel's own failures are recorded, not raised, so that one bad variant
    does not stop the others."""
    from bench.timing import median_ms

    m, n, k = compiled.dims(a, b, d)
    row: dict[str, Any] = {"variant": compiled.variant.name, "kernel": compiled.kernel_name,
                           "compile_s": round(compiled.compile_s, 1)}
    try:
        launch = compiled.bind(a, b, d)
        d.fill_(float("nan"))
        launch()
        torch.cuda.synchronize()
    except Exception as exc:
        return {**row, "status": "failed", **_error_fields(PeerError.wrap("run", exc))}, None
    row["rel_err"] = rel_error(d, ref)
    if not row["rel_err"] < MAX_REL_ERR:
        err = PeerError("check", f"relative error {row['rel_err']:.3g} >= {MAX_REL_ERR} against an fp32 matmul")
        return {**row, "status": "wrong", **_error_fields(err)}, None
    ms = median_ms(launch)
    return {**row, "status": "ok", "ms": ms, "tflops": tflops(m, n, k, ms)}, launch


def best_of(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, order: str = "nk",
            variants: Iterable[AnyVariant] | None = None, jobs: int | None = None,
            ref: torch.Tensor | None = None) -> tuple[Launcher | None, list[dict[str, Any]]]:
    """Compile (or reuse) the variants, check each against an fp32 matmul and time it on
    these tensors: the fastest correct one's launcher (None where none passed) and one row
    per variant, failures included. Raises PeerError only where the toolchain or GPU is
    unusable."""
    variants = list(VARIANTS if variants is None else variants)
    kernels = session().compile(a.dtype, order, variants, jobs)
    ref = reference(a, b, order) if ref is None else ref
    rows, launchers = [], {}
    for name, kernel in kernels.items():
        if isinstance(kernel, PeerError):
            rows.append({"variant": name, "status": "failed", **_error_fields(kernel), "detail": kernel.detail[-2000:]})
            continue
        row, launchers[name] = measure_variant(kernel, a, b, d, ref)
        rows.append(row)
    best = fastest(rows)
    return (launchers[best["variant"]] if best else None), rows


def fastest(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    ok = [r for r in rows if r["status"] == "ok"]
    return min(ok, key=lambda r: r["ms"]) if ok else None


def measure_cublas(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, order: str, ref: torch.Tensor) -> dict[str, Any]:
    from bench.timing import median_ms

    m, n, k = problem_dims(a.shape, b.shape, d.shape, order)
    b_kn = logical_b(b, order)
    fn = lambda: torch.matmul(a, b_kn, out=d)  # noqa: E731
    fn()
    torch.cuda.synchronize()
    ms = median_ms(fn)
    return {"ms": ms, "tflops": tflops(m, n, k, ms), "rel_err": rel_error(d, ref)}


def benchmark_shape(dtype: torch.dtype, order: str, shape: tuple[int, int, int], variants: list[AnyVariant],
                    jobs: int | None, ours_build: Path | None = None, ours_tuned: bool = False,
                    interleave: bool = False) -> dict[str, Any]:
    """One problem: every variant, cuBLAS and ours (default dispatch, and tuned with
    ``ours_tuned``), each timed on its own; with ``interleave`` CUTLASS's fastest variant
    and our plans are then timed again with their repetitions interleaved, so that the
    ratio between them sees one clock."""
    m, n, k = shape
    p = make_problem(dtype, m, n, k, order)
    cutlass_launch, rows = best_of(p["a"], p["b"], p["d"], order, variants, jobs, ref=p["ref"])
    cublas = measure_cublas(p["a"], p["b"], p["d"], order, p["ref"])
    columns = ["ours", "ours_tuned"] if ours_tuned else ["ours"]
    ours, launches = {}, {}
    for column in columns:
        ours[column], launches[column] = measure_ours(p["a"], p["b"], p["d"], order, p["ref"], ours_build,
                                                      tuned=column == "ours_tuned")
    best = fastest(rows)
    record = {"dtype": dtype_name(dtype), "order": order, "m": m, "n": n, "k": k, "cutlass_best": best,
              "cublas": cublas, **ours, "ratio": cublas["ms"] / best["ms"] if best else None, "variants": rows}
    ran = [c for c in columns if launches[c] is not None]
    if interleave and cutlass_launch is not None and ran:
        from bench.timing import interleaved_medians_ms

        times = interleaved_medians_ms([cutlass_launch, *(launches[c] for c in ran)])
        record["interleaved"] = {"cutlass_best": {"ms": times[0], "tflops": tflops(m, n, k, times[0])},
                                 **{c: {"ms": t, "tflops": tflops(m, n, k, t)} for c, t in zip(ran, times[1:])}}
    del p, launches, cutlass_launch
    torch.cuda.empty_cache()
    return record


def measure_ours(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, order: str, ref: torch.Tensor,
                 build_dir: Path | None = None, tuned: bool = False) -> tuple[dict[str, Any], Callable[[], object] | None]:
    """This project's kernel for the problem as default dispatch picks it (the cost
    model), from the build in ``build_dir`` (default build/: another build holds, e.g.,
    the SM80 family alone); with ``tuned``, as the tuner picks it (the plan a user who
    tunes gets, beside CUTLASS's best variant). ({"status": reason}, None) where there is
    none; else the plan timed and the call that launches it."""
    from bench.dense import _problem_key
    from bench.timing import median_ms
    from gemm_runtime.types import DispatchPolicy, Operation

    try:
        from gemm_runtime import Gemm

        gemm = Gemm(build_dir=build_dir)
    except Exception as e:  # noqa: BLE001 - the peer table stands without this column
        return {"status": f"no build: {type(e).__name__}: {e}"}, None
    m, n, k = problem_dims(a.shape, b.shape, d.shape, order)
    b_kn = logical_b(b, order)
    fn = lambda: gemm.matmul(a, b_kn, out=d)  # noqa: E731
    if tuned:  # MEASURE tunes on every call: once, then default dispatch finds the entry
        gemm.matmul(a, b_kn, out=d, operation=Operation(dispatch=DispatchPolicy.MEASURE))
    d.fill_(float("nan"))
    fn()
    torch.cuda.synchronize()
    err = rel_error(d, ref)
    ms = median_ms(fn)
    return {"status": "ok", "ms": ms, "tflops": tflops(m, n, k, ms), "rel_err": err,
            "plan": gemm.select(_problem_key(gemm, a, b_kn, d)).to_json()}, fn


# ----------------------------------------------------------------------------- CLI


# Llama 3 (8B and 70B) layers as (N, K) of D = A @ W^T: QKV, O, gate+up, down of each.
LLAMA3_NK: tuple[tuple[int, int], ...] = (
    (6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336),
    (10240, 8192), (8192, 8192), (57344, 8192), (8192, 28672),
)
SHAPE_SETS: dict[str, tuple[tuple[int, int, int], ...]] = {
    "llama3": tuple((m, n, k) for m in (1024, 4096) for n, k in LLAMA3_NK),
}


def parse_shapes(text: str) -> list[tuple[int, int, int]]:
    """'8192x8192x8192,4096x4096x4096' -> [(M, N, K), ...]; an item may also name a set of
    SHAPE_SETS ('llama3'). Repeats are dropped, the first place kept."""
    shapes = []
    for item in text.split(","):
        name = item.strip().lower()
        if name in SHAPE_SETS:
            shapes.extend(SHAPE_SETS[name])
            continue
        parts = name.split("x")
        if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise argparse.ArgumentTypeError(f"shape {item!r} is not MxNxK (nor one of the sets {', '.join(SHAPE_SETS)})")
        shapes.append(tuple(int(p) for p in parts))
    return list(dict.fromkeys(shapes))


def parse_dtypes(text: str) -> list[torch.dtype]:
    out = []
    for item in text.split(","):
        name = _DTYPE_ALIASES.get(item.strip().lower(), item.strip().lower())
        if name not in DTYPES:
            raise argparse.ArgumentTypeError(f"dtype {item!r}: use {', '.join(DTYPES)}")
        out.append(DTYPES[name])
    return out


def _step(name: str, fn: Callable[[], str]) -> Any:
    """Run one probe step, print its line; a failure becomes a PeerError of that step."""
    t0 = time.perf_counter()
    try:
        note = fn()
    except Exception as exc:
        err = PeerError.wrap(name, exc, getattr(exc, "detail", "") or traceback.format_exc(limit=6))
        print(f"[probe] {name:10s} FAIL {time.perf_counter() - t0:6.1f}s", flush=True)
        raise err from exc
    print(f"[probe] {name:10s} ok   {time.perf_counter() - t0:6.1f}s  {note}", flush=True)


def _versions() -> dict[str, str]:
    try:
        import cuda.bindings

        bindings = cuda.bindings.__version__
    except ImportError:
        bindings = "missing"
    return {"python": platform.python_version(), "torch": torch.__version__,
            "torch_cuda": str(torch.version.cuda), "cuda_bindings": bindings}


def probe(cache_base: Path | None, dtype: torch.dtype, size: int = 2048,
          variant: AnyVariant = PROBE_VARIANT) -> dict[str, Any]:
    """Each step on its own line with its time (``variant`` is the kernel built, run and
    checked); the first failure raises its PeerError."""
    state: dict[str, Any] = {"versions": _versions()}
    v = state["versions"]
    _step("python", lambda: f"Python {v['python']}, torch {v['torch']} (CUDA {v['torch_cuda']}), "
                            f"cuda-bindings {v['cuda_bindings']}")

    def nvcc() -> str:
        state["nvcc"] = locate_nvcc()
        path, release, root = state["nvcc"]
        return f"{path} (release {release}); CUDA_INSTALL_PATH={root}"

    def interface() -> str:
        t = state["tools"] = import_interface(*state["nvcc"], cache_base)
        return f"nvidia-cutlass {t.version} at {Path(t.cutlass.__file__).parent}; {t.aliases}"

    def headers() -> str:
        t = state["tools"]
        t.include = headers_dir(t.cutlass)
        return f"{t.include} (cuda.h: {(t.cuda_root / 'include' / 'cuda.h').is_file()})"

    def device() -> str:
        global _session
        _session = state["session"] = Session(tools=state["tools"])
        name = torch.cuda.get_device_name(_session.device)
        sms = torch.cuda.get_device_properties(_session.device).multi_processor_count
        return f"{name}, sm_90, {sms} SMs; {_session.libcuda}; cache {_session.tools.cache_dir}"

    def compile_one() -> str:
        result = state["session"].compile(dtype, "nk", [variant], jobs=1)[variant.name]
        if isinstance(result, PeerError):
            raise result
        state["compiled"] = result
        return f"{variant.name} {dtype_name(dtype)} nk -> {result.kernel_name} ({result.compile_s:.1f}s)"

    def run() -> str:
        p = state["problem"] = make_problem(dtype, size, size, size, "nk")
        state["launch"] = state["compiled"].bind(p["a"], p["b"], p["d"])
        p["d"].fill_(float("nan"))
        state["launch"]()
        torch.cuda.synchronize()
        return f"{size}x{size}x{size} launched and synchronised"

    def check() -> str:
        err = rel_error(state["problem"]["d"], state["problem"]["ref"])
        if not err < MAX_REL_ERR:
            raise PeerError("check", f"relative error {err:.3g} >= {MAX_REL_ERR} against an fp32 matmul")
        return f"relative error {err:.2e} against an fp32 matmul (limit {MAX_REL_ERR})"

    def timing() -> str:
        from bench.timing import median_ms

        ms = median_ms(state["launch"], reps=10)
        p = state["problem"]
        cublas = measure_cublas(p["a"], p["b"], p["d"], "nk", p["ref"])
        state["tflops"] = {"cutlass": tflops(size, size, size, ms), "cublas": cublas["tflops"]}
        return f"{state['tflops']['cutlass']:.0f} TFLOP/s (cuBLAS {cublas['tflops']:.0f}) at {size}^3, untuned"

    for name, fn in (("toolchain", nvcc), ("import", interface), ("headers", headers),
                     ("device", device), ("compile", compile_one),
                     ("run", run), ("check", check), ("time", timing)):
        _step(name, fn)
    return {"peer": "cutlass", "status": "ok", "probe": True, "versions": v, "kernel": state["compiled"].kernel_name,
            "compile_s": state["compiled"].compile_s, "tflops": state["tflops"]}


def _ours_cells(r: dict[str, Any], column: str) -> list[str]:
    """TFLOP/s, / cuBLAS and / CUTLASS's best of one of this project's columns."""
    ours, best = r.get(column) or {}, r["cutlass_best"]
    if ours.get("status") != "ok":
        return ["-", "-", "-"]
    return [f"{ours['tflops']:.0f}", f"{r['cublas']['ms'] / ours['ms']:.2f}",
            f"{best['ms'] / ours['ms']:.2f}" if best else "-"]


def ours_over_cutlass(results: list[dict[str, Any]], column: str = "ours") -> list[float]:
    """CUTLASS's best time / ours per problem where both ran (above 1: ours faster)."""
    return [r["cutlass_best"]["ms"] / r[column]["ms"] for r in results
            if r["cutlass_best"] and (r.get(column) or {}).get("status") == "ok"]


def interleaved_over_cutlass(results: list[dict[str, Any]], column: str = "ours") -> list[float]:
    """As ours_over_cutlass, from the times taken interleaved (--interleave)."""
    return [r["interleaved"]["cutlass_best"]["ms"] / r["interleaved"][column]["ms"] for r in results
            if column in r.get("interleaved", {})]


def print_table(results: list[dict[str, Any]]) -> None:
    tuned = any("ours_tuned" in r for r in results)
    head = ["dtype", "B", "M", "N", "K", "CUTLASS best TFLOP/s", "variant", "cuBLAS TFLOP/s", "CUTLASS/cuBLAS",
            "ours TFLOP/s", "ours/cuBLAS", "ours/CUTLASS"]
    if tuned:
        head += ["ours tuned TFLOP/s", "tuned/cuBLAS", "tuned/CUTLASS", "tuned plan"]
    print("\n| " + " | ".join(head) + " |")
    print("|" + "|".join("---" if h in ("dtype", "B", "variant", "tuned plan") else "---:" for h in head) + "|")
    for r in results:
        best = r["cutlass_best"]
        cells = [r["dtype"], r["order"], str(r["m"]), str(r["n"]), str(r["k"]),
                 f"{best['tflops']:.0f}" if best else "none ran", best["variant"] if best else "-",
                 f"{r['cublas']['tflops']:.0f}", f"{r['ratio']:.2f}" if r["ratio"] else "-", *_ours_cells(r, "ours")]
        if tuned:
            plan = (r.get("ours_tuned") or {}).get("plan")
            cells += [*_ours_cells(r, "ours_tuned"), "-" if not plan else
                      f"{plan['kernel']} split {plan['splits']} swizzle {plan['swizzle']}"]
        print("| " + " | ".join(cells) + " |")
    for column in ("ours", "ours_tuned") if tuned else ("ours",):
        ratios = ours_over_cutlass(results, column)
        if ratios:
            print(f"{column} / CUTLASS's best: median {statistics.median(ratios):.3f} (min {min(ratios):.2f}, "
                  f"max {max(ratios):.2f}, {len(ratios)} problems)")
        ratios = interleaved_over_cutlass(results, column)
        if ratios:
            print(f"{column} / CUTLASS's best, timed interleaved: median {statistics.median(ratios):.3f} "
                  f"(min {min(ratios):.2f}, max {max(ratios):.2f}, {len(ratios)} problems)")
    print("Ratios above 1: the first named is faster. Medians of CUDA-event times, L2 flushed before each repetition.")


def write_record(path: Path, record: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1, default=str) + "\n")


def benchmark(args: argparse.Namespace) -> dict[str, Any]:
    """Every kernel compiled first (all dtypes and orders at once, ``--jobs`` at a time),
    then each problem measured. With --out, the results so far are written after each
    problem (status "partial"), so that a run cut short still leaves them."""
    sess = session(args.cache_dir)
    variants = variants_named(args.variants, args.family)
    tasks = [(dtype, order, v) for dtype in args.dtype for order in args.order for v in variants]
    t0 = time.perf_counter()
    built = sess.compile_all(tasks, args.jobs)
    ok = sum(isinstance(k, Compiled) for k in built.values())
    print(f"compiled {ok} of {len(built)} kernels in {time.perf_counter() - t0:.0f}s "
          f"(up to {compile_jobs(args.jobs, len(built))} nvcc runs at a time)", flush=True)
    t = sess.tools
    header = {"peer": "cutlass", "versions": _versions(), "nvidia_cutlass": t.version, "nvcc": t.nvcc_version,
              "device": torch.cuda.get_device_name(sess.device),
              "families": sorted({v.family for v in variants}), "variants_tried": [v.name for v in variants],
              "timing": "bench.timing.median_ms (CUDA events, L2 flushed, median)", "max_rel_err": MAX_REL_ERR}
    results = []
    for dtype in args.dtype:
        for order in args.order:
            for shape in args.shapes:
                r = benchmark_shape(dtype, order, shape, variants, args.jobs, args.ours_build, args.ours_tuned,
                                    args.interleave)
                for row in r["variants"]:
                    status = f"{row.get('tflops', 0):7.0f} TFLOP/s" if row["status"] == "ok" else \
                        f"{row['status']}: {row.get('error', '')[:160]}"
                    print(f"  {r['dtype']} {order} {shape} {row['variant']:28s} {status}", flush=True)
                results.append(r)
                if args.out:
                    write_record(args.out, {**header, "status": "partial", "results": results})
    if not any(r["cutlass_best"] for r in results):
        first = next((row for r in results for row in r["variants"]), {})
        raise PeerError(first.get("step", "compile"), first.get("error", "no variant ran"), first.get("cause"),
                        first.get("detail", ""))
    print_table(results)
    return {**header, "status": "ok", "results": results}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--probe", action="store_true",
                    help="check import, nvcc, headers; build, run and check one kernel (the first variant selected)")
    ap.add_argument("--shapes", type=parse_shapes, default=parse_shapes("8192x8192x8192,4096x4096x4096"),
                    help=f"MxNxK list, comma-separated; an item may name a set: {', '.join(SHAPE_SETS)}")
    ap.add_argument("--dtype", type=parse_dtypes, default=parse_dtypes("bf16"), help="bf16, fp16 or both, comma-separated")
    ap.add_argument("--order", type=lambda s: s.split(","), default=["nk"], help="B order(s): nk (nn.Linear weight), kn")
    ap.add_argument("--family", choices=sorted(FAMILIES), default=None,
                    help="sm90: CUTLASS 3 TMA + wgmma kernels; sm80: CUTLASS 2.x mma.sync + cp.async kernels; "
                         f"both (default {DEFAULT_FAMILY}, or the families of --variants)")
    ap.add_argument("--variants", type=lambda s: s.split(","), default=None,
                    help=f"comma-separated subset of: {', '.join(v.name for v in ALL_VARIANTS)}")
    ap.add_argument("--ours-build", type=Path, default=None,
                    help="the build this project's column loads (default build/; e.g. one of the SM80 family alone)")
    ap.add_argument("--ours-tuned", action="store_true",
                    help="also time this project's tuned plan per problem (the tuner's pick, beside CUTLASS's best)")
    ap.add_argument("--interleave", action="store_true",
                    help="time CUTLASS's fastest variant and our plans again, their repetitions interleaved "
                         "(one clock for the ratio; the H200's drifts under its power cap)")
    ap.add_argument("--jobs", type=positive_int, default=None, help=f"nvcc runs at a time (default: up to {DEFAULT_MAX_JOBS})")
    ap.add_argument("--cache-dir", type=Path, default=None, help=f"compile cache (default ${CACHE_ENV} or {DEFAULT_CACHE})")
    ap.add_argument("--out", type=Path, default=None, help="JSON of the results, or of why the peer is unavailable")
    ap.add_argument("--allow-fail", action="store_true", help="on failure write the JSON and exit 0")
    args = ap.parse_args(argv)
    check_out(ap, "--out", args.out)  # written at the end, failure or not
    # NOTE: both were found only once the run reached them: --ours-build after every
    # CUTLASS kernel compiled (each row's ours column then "no build"), --cache-dir as a
    # failed run whose record held a NotADirectoryError's traceback.
    check_build(ap, "--ours-build", args.ours_build)
    check_folder(ap, "--cache-dir", args.cache_dir)
    bad = [o for o in args.order if o not in ORDERS]
    if bad:
        ap.error(f"--order: {bad} not in {ORDERS}")
    try:
        selected = variants_named(args.variants, args.family)
    except ValueError as exc:
        ap.error(str(exc))
    torch.backends.cuda.matmul.allow_tf32 = False  # the fp32 reference must be fp32
    try:
        record = probe(args.cache_dir, args.dtype[0], variant=selected[0]) if args.probe else benchmark(args)
        code = 0
    except Exception as exc:  # a PeerError names its step; anything else is the benchmark's
        err = PeerError.wrap("probe" if args.probe else "benchmark", exc, traceback.format_exc(limit=8))
        record, code = failure_record(err), (0 if args.allow_fail else 2)
        print(f"\nCUTLASS peer FAILED at step '{err.step}': {err.error}\n  likely cause: {err.cause}", file=sys.stderr)
        if err.detail:
            print(f"  detail:\n{err.detail}", file=sys.stderr)
    if args.out:
        write_record(args.out, record)
        print(f"wrote {args.out}")
    if code == 0 and record["status"] == "ok" and args.probe:
        print("probe passed")
    return code


if __name__ == "__main__":
    sys.exit(main())
