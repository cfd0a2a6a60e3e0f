"""How the tree's cost model would pick among plans a GPU run timed, without a GPU: reads
the timings files bench.dispatch writes beside its tables (docs/perf/data/*.json.gz:
every feasible plan of each problem, timed), rebuilds each run's kernels from their
recorded specs with the occupancy, spills, device model and workspace the run had, ranks
every problem with the cost model of this tree, and compares the first of its plans that
the run timed with the fastest timed:

    python -m bench.experiments.dispatch_regret FILE [FILE ...] [--show 1.05]

Prints the problems whose pick is at least ``--show`` times the fastest, then the median
and worst ratio per file beside those of the pick the run's own cost model made. What it
cannot see: plans the run did not time (the tree now offering a split count or kernel
the run's build did not: counted as `untimed ahead` of the pick).
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import dataclass
from pathlib import Path

from bench.dispatch import _short, read_timings
from codegen.spec import KernelSpec
from gemm_runtime.context import ProblemKey
from gemm_runtime.cost_model import DeviceModel
from gemm_runtime.dispatch_cache import DispatchCache
from gemm_runtime.dispatcher import Dispatcher
from gemm_runtime.plan import LaunchSpec


@dataclass(frozen=True)
class RecordedKernel:
    """A kernel as the run's registry had it: what the dispatcher ranks with."""

    spec: KernelSpec
    ctas_per_sm: int
    spills: int

    @property
    def name(self) -> str:
        return self.spec.name


@dataclass(frozen=True)
class Regret:
    label: str  # model, layer, weights, M
    key: ProblemKey
    pick: LaunchSpec  # the tree's model's first timed plan
    pick_ms: float
    best: LaunchSpec
    best_ms: float
    untimed_ahead: int  # plans the tree's model ranks above its pick that the run did not time
    run_pick_ms: float  # the time of the plan the run's own cost model picked

    @property
    def ratio(self) -> float:
        return self.pick_ms / self.best_ms


def regrets(doc: dict) -> list[Regret]:
    """Each problem of ``doc`` ranked by this tree's cost model among the run's kernels."""
    kernels = [RecordedKernel(KernelSpec.from_json(k["spec"]), k["ctas_per_sm"], k["spills"])
               for k in doc["kernels"].values()]  # fmt: skip
    device = DeviceModel(**doc["device_model"])
    workspace = tuple(doc["workspace"])
    out = []
    for problem in doc["problems"]:
        key = ProblemKey.from_json(problem["key"])
        times = {LaunchSpec.from_json(plan): ms for plan, ms in problem["times_ms"]}
        # A fresh dispatcher per problem: its memo and cache hold nothing of another.
        dispatcher = Dispatcher(kernels, device, DispatchCache(key.arch, "dispatch_regret"), workspace)
        ranking = [plan for _, plan in dispatcher.ranked(key)]
        timed = [plan for plan in ranking if plan in times]
        if not timed:
            continue
        pick = timed[0]
        best = min(times, key=times.get)
        label = f"{problem['model']} {problem['layer']} {problem['weights']} M={key.m}"
        run_pick = times[LaunchSpec.from_json(problem["model_pick"])]
        out.append(Regret(label, key, pick, times[pick], best, times[best], ranking.index(pick), run_pick))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--show", type=float, default=1.05, help="print the problems at or above this ratio")
    args = ap.parse_args()
    for path in args.files:
        doc = read_timings(path)
        rows = regrets(doc)
        print(f"## {path.name}: {doc['device']}, {doc['date']}, {doc['dtype']}, {len(rows)} problems")
        for r in rows:
            if r.ratio >= args.show:
                print(f"  {r.label:40s} pick {_short(r.pick):40s} {r.pick_ms * 1e3:9.1f} us  best {_short(r.best):40s} "
                      f"{r.best_ms * 1e3:9.1f} us  {r.ratio:.2f}x  ({r.untimed_ahead} untimed ahead)")  # fmt: skip
        if rows:
            ratios = [r.ratio for r in rows]
            run = [r.run_pick_ms / r.best_ms for r in rows]
            print(f"  model / best timed: median {statistics.median(ratios):.3f}, worst {max(ratios):.3f} "
                  f"(the run's own model: {statistics.median(run):.3f}, {max(run):.3f})")


if __name__ == "__main__":
    main()
