"""Experiment: where the programmatic dependent launch's trigger goes. Until the
twenty-first session every generated kernel called griddepcontrol.launch_dependents first
(gemm/ptx.cuh), so with Gemm(programmatic_launch=True) the next kernel's CTAs were
scheduled as soon as this one's had all started, and waited in their SM slots at
griddepcontrol.wait. The twentieth
session measured that slower than the plain launch on the llama3-8b W4 chain at M = 1
(64.0 against 57.4 us) since the narrow decode tiles, whose kernels are one wave of
CTAs. This builds the default set again with the other trigger (GEMM_PDL_EARLY_TRIGGER:
the early one, or none, so that the next kernel is scheduled as this one's CTAs exit)
and times the chain's CUDA graph three ways, interleaved, all with the plain Gemm's
tuned plans: plain launch, programmatic as built, programmatic with the other trigger.

    python -m bench.experiments.pdl_trigger [--model llama3-8b]

Since the twenty-first session the default is the trigger at exit (gemm/ptx.cuh), so the
build made here (GEMM_PDL_EARLY_TRIGGER=1) is the early one: the third column.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import gemm_runtime.build as build_mod
from bench.decode_chain import graphed, layer_shapes, ours
from gemm_runtime import Gemm
from gemm_runtime.timing import interleaved_medians_ms

ROOT = Path(__file__).resolve().parents[2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="llama3-8b")
    ap.add_argument("--build", type=Path, default=ROOT / "build", help="the default set as built")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pdl_trigger_"))
    subprocess.run([sys.executable, "-m", "codegen", "--out", str(work / "gen")], check=True, cwd=ROOT,
                   stdout=subprocess.DEVNULL)  # fmt: skip
    build_mod.BUILD_OPTIONS = ("-DGEMM_PDL_EARLY_TRIGGER=1",)
    build_mod.build(work / "gen", work / "build", archs=[90], progress=False)
    shapes = layer_shapes(args.model)
    plain = Gemm(build_dir=args.build)
    for m in (1, 16):
        for bits in (4, None):
            ours(plain, shapes, m, bits)  # tunes every GEMM of the chain
    plain.export_cache(work / "plans.json")
    built = Gemm(build_dir=args.build, programmatic_launch=True)
    other = Gemm(build_dir=work / "build", programmatic_launch=True)
    for g in (built, other):
        g.import_cache(work / "plans.json")
    for m in (1, 16):
        for bits in (4, None):
            chains = [ours(g, shapes, m, bits) for g in (plain, built, other)]
            t = interleaved_medians_ms([graphed(c.run) for c in chains], reps=40)
            print(f"{args.model} M = {m}, {'W4' if bits else 'fp16'}: plain {t[0] * 1e3:.1f} us, programmatic "
                  f"(as built) {t[1] * 1e3:.1f}, programmatic (the other trigger) {t[2] * 1e3:.1f}", flush=True)


if __name__ == "__main__":
    main()
