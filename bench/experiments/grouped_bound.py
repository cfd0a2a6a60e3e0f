"""Experiment: what a grouped launch's bound on the experts' tile rows costs at decode.
bench.moe's problems (both configurations, bf16 and W4A16 experts) at few tokens, each at
the plan default dispatch picks, timed three ways in one process, interleaved, L2
flushed, medians, us:

  tree      this tree's bound (cost_model.tiles_of) and build;
  old bound the bound before the twenty-fifth session, ceil(R / c) + min(E, R), on the
            same cubins: its grid only adds CTAs that find no tile row;
  no ahead  with --scan-build DIR, the tree's bound on a build made with
            -DGEMM_GROUPED_SCAN_AHEAD=0 (each round of the expert scan loads its offsets
            after the round before: gemm/grouped.cuh). Make one with --make-scan-build DIR.

    python -m bench.experiments.grouped_bound [--tokens 1 16 128] [--make-scan-build DIR | --scan-build DIR]

Every variant's output is checked against the tree's, bit for bit (the same tiles run).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

import gemm_runtime.build as build_mod
import gemm_runtime.cost_model as cost_model
import gemm_runtime.feasibility as feasibility
import gemm_runtime.grouped as grouped
from bench.experiments.sm90_variants import subset_manifest
from bench.moe import key_of, sorted_problems
from gemm_runtime import Gemm
from gemm_runtime.timing import interleaved_medians_ms

ROOT = Path(__file__).resolve().parents[2]
W4_GROUP = 128


def old_tiles_of(spec, key) -> tuple[int, int]:
    """The bound as it was: each touched expert's partial tile row added to ceil(R / c)."""
    m = math.ceil(key.m / spec.cta[0]) + (min(key.experts, key.m) if key.experts else 0)
    return m, math.ceil(key.n / spec.cta[1])


@contextlib.contextmanager
def bound(tiles_of):
    """Every module that sizes a grouped launch by the bound uses ``tiles_of`` inside."""
    modules = (cost_model, grouped, feasibility)
    saved = [m.tiles_of for m in modules]
    for m in modules:
        m.tiles_of = tiles_of
    try:
        yield
    finally:
        for m, t in zip(modules, saved):
            m.tiles_of = t


def make_scan_build(out: Path) -> None:
    """The default set's grouped kernels built with the expert scan's loads a round late."""
    work = Path(tempfile.mkdtemp(prefix="grouped_bound_"))
    subprocess.run([sys.executable, "-m", "codegen", "--out", str(work / "all")], check=True, cwd=ROOT)
    subset_manifest(work / "all", work / "gen", lambda name, spec: "_grouped" in name)
    build_mod.BUILD_OPTIONS = ("-DGEMM_GROUPED_SCAN_AHEAD=0",)
    build_mod.build(work / "gen", out, progress=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", nargs="+", type=int, default=[1, 16, 128])
    ap.add_argument("--rounds", type=int, default=2, help="interleaved measurements per problem")
    ap.add_argument("--scan-build", type=Path, help="a build made by --make-scan-build: its column too")
    ap.add_argument("--make-scan-build", type=Path, help="make that build here and stop")
    args = ap.parse_args()
    if args.make_scan_build:
        make_scan_build(args.make_scan_build)
        return
    tree, old = Gemm(), Gemm()
    scan = Gemm(build_dir=args.scan_build) if args.scan_build else None
    head = "| problem | plan | tree µs | old bound µs | old / tree |" + (" no ahead µs | no ahead / tree |" if scan else "")
    rows = [head, "|---|---|---:|---:|---:|" + ("---:|---:|" if scan else "")]
    gen = torch.Generator().manual_seed(0)
    for w4_group in (None, W4_GROUP):
        for cfg_name, tokens, proj, routing, a, w, d in sorted_problems(args.tokens, gen, w4_group=w4_group):
            plan = tree.select(key_of(tree, a, w, routing))
            outs = {name: torch.full_like(d, float("nan")) for name in ("tree", "old", "scan")}
            calls = [lambda: tree.grouped_matmul(a, w, routing.offsets, out=outs["tree"], kernel=plan)]
            with bound(old_tiles_of):  # the launch it remembers (its fast plan) keeps the old grid
                old.grouped_matmul(a, w, routing.offsets, out=outs["old"], kernel=plan)
            calls.append(lambda: old.grouped_matmul(a, w, routing.offsets, out=outs["old"], kernel=plan))
            if scan:
                calls.append(lambda: scan.grouped_matmul(a, w, routing.offsets, out=outs["scan"], kernel=plan))
            for call in calls:
                call()
            torch.cuda.synchronize()
            same = all(torch.equal(outs["tree"], outs[name]) for name in ("old", "scan")[: len(calls) - 1])
            pairs = [interleaved_medians_ms(calls) for _ in range(args.rounds)]
            best = [min(p[i] for p in pairs) * 1e3 for i in range(len(calls))]
            spec = tree.registry.get(plan.kernel).spec
            text = f"{spec.mainloop.value} {'x'.join(map(str, spec.cta))} split {plan.splits}"
            kind = "W4" if w4_group else "bf16"
            cells = [f"{cfg_name} {tokens} {proj} {kind}" + ("" if same else " (OUTPUTS DIFFER)"), text,
                     *(f"{t:.1f}" for t in best[:2]), f"{best[1] / best[0]:.3f}"]
            if scan:
                cells += [f"{best[2]:.1f}", f"{best[2] / best[0]:.3f}"]
            rows.append("| " + " | ".join(cells) + " |")
            print(rows[-1], flush=True)
    print("\n".join(rows))


if __name__ == "__main__":
    main()
