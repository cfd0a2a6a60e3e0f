"""How well the cost model picks among plans that were timed, and how that moves with its
latency constants: reads the output of bench.experiments.dense_plans (every timed plan of
each problem, with cuBLAS's time) and, for each M, reports the mean and worst ratio of
the time of the plan the model ranks first among the timed ones to the best timed time.
With ``--grid`` it does so for each combination of the DRAM round trip
(cost_model._DRAM_LATENCY_S) and the sm90 hand-over's latency
(codegen.families.sm90._HANDOVER_LATENCY_S), the two constants the twenty-first session
refitted this way (docs/NOTES.md; the run it used: docs/perf/data/).

    python -m bench.experiments.fit_decode_model PLANS.md [PLANS.md ...] [--grid]

Kernels are the default set's for sm_90 of the plans' type, with a stand-in for the
driver's occupancy (shared memory and threads), as the CPU tests of the cost model use;
a plan line is matched to its kernel by the tile part of the name (bench.dense._short).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import gzip
import itertools
import re
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import codegen.families.sm90 as sm90_family
import gemm_runtime.cost_model as cost_model
from bench.dense import _short
from codegen.config import default_config_paths, load_configs
from codegen.vocabulary import ARCH_SMEM_LIMIT, BOrder, DataType
from gemm_runtime.context import make_key
from gemm_runtime.registry import filter_reason

H200 = cost_model.DeviceModel.of(90, 132, 1980000, 3201000, 6144)
_TYPES = {"float16": DataType.F16, "bfloat16": DataType.BF16}


@dataclass(frozen=True)
class Timed:
    """One timed plan of one problem: (M, N, K), the tile part of its kernel's name, its
    splits, and its best time in microseconds."""

    shape: tuple[int, int, int]
    tile: str
    splits: int
    us: float


def read_plans(path: Path) -> tuple[DataType, list[Timed]]:
    """The plans' activation type and every timed (problem, tile, splits), at its best
    time over swizzles (a .gz file is read through gzip)."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        text = f.read()
    header = re.search(r"^# dense plans, .*, (\w+)$", text, re.MULTILINE)
    if header is None or header.group(1) not in _TYPES:
        raise ValueError(f"{path}: not a bench.experiments.dense_plans output (no '# dense plans, ..., <dtype>' line)")
    best: dict[tuple, float] = {}
    shape = None
    for line in text.splitlines():
        if line.startswith("## "):
            m = re.search(r"M=(\d+) N=(\d+) K=(\d+)", line)
            shape = tuple(int(x) for x in m.groups()) if m else None
            continue
        m = re.match(r"\s+(?:exp_)?(\S+)\s+k(\d+) s\d+\s+([\d.]+) us", line)
        if m and shape:
            key = (shape, m.group(1), int(m.group(2)))
            best[key] = min(float(m.group(3)), best.get(key, float("inf")))
    return _TYPES[header.group(1)], [Timed(s, t, k, us) for (s, t, k), us in best.items()]


def tile_of(name: str) -> str:
    """The tile part of a kernel name, as dense_plans prints it (bench.dense._short, less
    the "exp" an experiment family's name leaves in front)."""
    return _short(name).removeprefix("exp_")


def kernels(dtype: DataType) -> dict[str, SimpleNamespace]:
    """The default set's dense sm_90 kernels of ``dtype`` (N x K B, its own output type,
    16-byte rows) by tile, each with a stand-in occupancy."""
    out = {}
    for s in load_configs(default_config_paths()):
        spec = s.spec
        if (spec.quantized or spec.grouped or spec.a_type is not dtype or spec.d_type is not dtype
                or spec.b_order is not BOrder.NK or spec.align != 8
                or filter_reason(spec, 90, ARCH_SMEM_LIMIT[90], allow_emulated=False) is not None):  # fmt: skip
            continue
        occupancy = max(1, min(ARCH_SMEM_LIMIT[90] // spec.smem_bytes, 2048 // spec.threads))
        out.setdefault(tile_of(spec.name), SimpleNamespace(spec=spec, ctas_per_sm=occupancy))
    return out


def regrets(dtype: DataType, timed: list[Timed]) -> dict[int, tuple[float, float]]:
    """Per M: (mean, worst) over the problems of the time of the model's first choice among
    the timed plans over the best timed time."""
    table = kernels(dtype)
    problems: dict[tuple, list[tuple[float, float]]] = collections.defaultdict(list)
    for t in timed:
        k = table.get(t.tile)
        if k is None:
            continue
        key = make_key(dtype, BOrder.NK, dtype, *t.shape, arch=90)
        problems[t.shape].append((cost_model.predict(k.spec, k.ctas_per_sm, H200, key, t.splits), t.us))
    by_m: dict[int, list[float]] = collections.defaultdict(list)
    for shape, plans in problems.items():
        by_m[shape[0]].append(min(plans)[1] / min(us for _, us in plans))
    return {m: (sum(r) / len(r), max(r)) for m, r in sorted(by_m.items())}


@contextlib.contextmanager
def constants(dram_latency_s: float, handover_latency_s: float):
    """The cost model with these two latencies, restored after."""
    saved = cost_model._DRAM_LATENCY_S, sm90_family._HANDOVER_LATENCY_S
    cost_model._DRAM_LATENCY_S, sm90_family._HANDOVER_LATENCY_S = dram_latency_s, handover_latency_s
    try:
        yield
    finally:
        cost_model._DRAM_LATENCY_S, sm90_family._HANDOVER_LATENCY_S = saved


def _line(label: str, table: dict[int, tuple[float, float]]) -> str:
    return f"{label:28s} " + "  ".join(f"M={m}: {mean:.3f} / {worst:.3f}" for m, (mean, worst) in table.items())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("plans", nargs="+", type=Path, help="bench.experiments.dense_plans outputs (.md or .md.gz)")
    ap.add_argument("--grid", action="store_true", help="also every combination of the two latencies below")
    ap.add_argument("--dram-latency-us", nargs="+", type=float, default=[1.2, 1.4, 1.6, 1.8, 2.0])
    ap.add_argument("--handover-latency-us", nargs="+", type=float, default=[0.5, 1.0, 2.0, 3.0])
    args = ap.parse_args()
    runs = [read_plans(p) for p in args.plans]
    if len({dtype for dtype, _ in runs}) != 1:
        raise SystemExit("the plans files are of different activation types")
    dtype, timed = runs[0][0], [t for _, plans in runs for t in plans]
    print("model's pick / best timed, mean / worst per M")
    print(_line("as the model is", regrets(dtype, timed)))
    if args.grid:
        for dram, handover in itertools.product(args.dram_latency_us, args.handover_latency_us):
            with constants(dram * 1e-6, handover * 1e-6):
                print(_line(f"DRAM {dram} us, hand-over {handover} us", regrets(dtype, timed)))


if __name__ == "__main__":
    main()
