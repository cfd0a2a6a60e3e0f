"""Command line of the runtime.

    python -m gemm_runtime list [--build-dir DIR] [--allow-emulated] [--device N]
    python -m gemm_runtime build [...]        # the same as python -m gemm_runtime.build [...]

``list`` with a GPU visible loads the registry for it (what ``Gemm()`` would load) and
prints its kernels, then the ones filtered out and why. With no GPU it prints the
kernels of each ``build/sm_XX/manifest.json`` and, per arch, what a GPU of that arch
would filter out.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

from gemm_runtime.errors import GemmError

BUILD_HINT = "run `make build` (python -m gemm_runtime.build) first"


class ListError(GemmError):
    """``list`` cannot show anything; the message says what to do."""


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


def read_manifests(build_dir: Path) -> list[tuple[int, dict]]:
    """(arch, manifest) for each ``build_dir/sm_XX/manifest.json``, by arch; ListError
    when there are none or one is unreadable."""
    build_dir = Path(build_dir)
    paths = sorted(
        (int(p.name[3:]), p / "manifest.json")
        for p in (build_dir.glob("sm_*") if build_dir.is_dir() else ())
        if p.name[3:].isdigit() and (p / "manifest.json").is_file()
    )
    if not paths:
        what = "does not exist" if not build_dir.exists() else "holds no sm_XX/manifest.json"
        raise ListError(f"{build_dir} {what}: no kernels are built; {BUILD_HINT}")
    out = []
    for arch, path in paths:
        try:
            data = json.loads(path.read_text())
            if not isinstance(data.get("kernels"), list):
                raise ValueError("no kernel list")
        except (OSError, ValueError, AttributeError) as e:
            raise ListError(f"{path} is unreadable ({e}); rebuild with `make build`") from None
        out.append((arch, data))
    return out


# ---- list ----------------------------------------------------------------------------
def list_without_gpu(build_dir: Path, allow_emulated: bool) -> list[str]:
    from codegen.spec import KernelSpec
    from codegen.vocabulary import ARCH_SMEM_LIMIT
    from gemm_runtime.registry import filter_reason

    manifests = read_manifests(build_dir)
    lines = [
        (
            f"{build_dir}: no GPU is visible, so nothing is filtered per device; "
            "below each arch, what a GPU of that arch would filter out"
        )
    ]
    for arch, data in manifests:
        records = data["kernels"]
        lines += ["", f"sm_{arch}: {len(records)} kernels (NVRTC {data.get('nvrtc', '?')})"]
        rows = []
        would_filter = []
        limit = ARCH_SMEM_LIMIT.get(arch)
        for rec in sorted(records, key=lambda r: r.get("name", "")):
            name = rec.get("name", "?")
            try:
                spec = KernelSpec.from_json(rec["spec"])
            except (KeyError, TypeError, ValueError) as e:
                would_filter.append(f"    {name}: unreadable spec ({e}); rebuild with `make build`")
                spec = None
            smem = int(rec.get("smem_dynamic", spec.smem_bytes if spec else 0))
            spills = int(rec.get("spill_stores", 0)) + int(rec.get("spill_loads", 0))
            rows.append((name, int(rec.get("registers", 0)), smem, spills))
            if spec is not None and limit is not None:
                reason = filter_reason(spec, arch, limit, allow_emulated)
                if reason is not None:
                    would_filter.append(f"    {name}: {reason}")
        if rows:
            lines += table(("name", "registers", "smem", "spills"), rows, indent="  ")
        skipped = data.get("skipped") or []
        if skipped:
            lines.append(f"  not built for sm_{arch}:")
            lines += [f"    {s.get('name', '?')}: {s.get('reason', '?')}" for s in skipped]
        if limit is None:
            lines.append(f"  sm_{arch} is not a known arch: no per-device filter to show")
        elif would_filter:
            lines.append(f"  on an sm_{arch} GPU ({limit} B shared memory), filtered out:")
            lines += would_filter
        else:
            lines.append(f"  on an sm_{arch} GPU ({limit} B shared memory), nothing is filtered out")
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

    read_manifests(build_dir)  # the same message as without a GPU when nothing is built
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
    return lines


def list_kernels(build_dir: Path, allow_emulated: bool = False, device: int = 0) -> list[str]:
    """The lines ``python -m gemm_runtime list`` prints; ListError/GemmError when it cannot."""
    if visible_gpus() > 0:
        return list_with_gpu(device, build_dir, allow_emulated)
    return list_without_gpu(build_dir, allow_emulated)


# ---- CLI -----------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["build"]:
        from gemm_runtime.build import main as build_main

        return build_main(argv[1:])

    from gemm_runtime.settings import settings

    parser = argparse.ArgumentParser(prog="python -m gemm_runtime", description="The GEMM runtime's commands.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="{list,build}")
    lst = sub.add_parser("list", help="the kernels a GPU would use, or those built per arch when no GPU is visible")
    lst.add_argument("--build-dir", type=Path, default=settings().build_dir, help="cubins + manifests (%(default)s)")
    lst.add_argument("--allow-emulated", action="store_true", help="keep kernels whose MMA is emulated on the GPU")
    lst.add_argument("--device", type=int, default=0, help="GPU index when a GPU is visible (%(default)s)")
    sub.add_parser("build", help="compile generated/ into build/ (see python -m gemm_runtime build --help)")
    args = parser.parse_args(argv)

    try:
        lines = list_kernels(args.build_dir, args.allow_emulated, args.device)
    except GemmError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
