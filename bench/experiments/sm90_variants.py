"""Experiment: where an SM90 tile's time goes. Each variant rebuilds the sm90 bf16 "nk"
kernels with one experiment knob of templates/include/gemm/sm90/kernel_sm90.cuh set
(a stage of the pipeline left out, another wgmma depth, a suspend-time hint on the
barrier waits) into its own build directory, then times every kernel on the same
problems beside cuBLAS, L2 flushed, medians:

    python -m bench.experiments.sm90_variants [--variants base no_epilogue ...]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import torch

import gemm_runtime.build as build_mod
from bench.timing import median_ms
from gemm_runtime import Gemm
from gemm_runtime.plan import LaunchSpec

VARIANTS = {
    "base": (),
    "no_epilogue": ("-DGEMM_SM90_LEAVE_OUT=1",),
    "no_mma": ("-DGEMM_SM90_LEAVE_OUT=2",),
    "no_store_issue": ("-DGEMM_SM90_LEAVE_OUT=3",),
    "evict_first": ("-DGEMM_SM90_STORE_EVICT_FIRST=1",),
    "depth0": ("-DGEMM_SM90_WGMMA_DEPTH=0",),
    "suspend": ("-DGEMM_SM90_TRY_WAIT_NS=1000000",),
    "general_store": ("-DGEMM_SM90_PLAIN_STMATRIX=0",),
    "no_store_fence": ("-DGEMM_SM90_STORE_FENCE=0",),
    "single_boxes": ("-DGEMM_SM90_STORE_ROUNDS=0",),
    "vector_wg": ("-DGEMM_SM90_UNIFORM_WG=0",),  # the warpgroup index from threadIdx, as before the fifty-fourth session
    "uniform_wg": ("-DGEMM_SM90_UNIFORM_WG=1",),  # through the shuffle on 128x256 too (which spills 4-8 bytes so)
}
# (M, N, K): 8192^3, then llama3-8b's gate_up and o at M = 4096 (the weakest layers)
PROBLEMS = [(8192, 8192, 8192), (4096, 28672, 4096), (4096, 4096, 4096)]


def subset_manifest(generated: Path, out: Path, keep) -> None:
    data = json.loads((generated / "manifest.json").read_text())
    data["kernels"] = [
        dict(e, file=str((generated / e["file"]).resolve())) for e in data["kernels"] if keep(e["name"], e["spec"])
    ]
    out.mkdir(parents=True, exist_ok=True)
    (out / "manifest.json").write_text(json.dumps(data))


def problem_tensors(problems, dtype: torch.dtype, b_order: str = "nk") -> dict:
    """(A, B, D) per (M, N, K), B the transposed N x K weight ("nk") or a K x N matrix
    ("kn"), after printing cuBLAS's rate on each."""
    tensors = {}
    for m, n, k in problems:
        a = torch.randn(m, k, device="cuda", dtype=dtype)
        w = torch.randn(n, k, device="cuda", dtype=dtype)
        b = w.t() if b_order == "nk" else w.t().contiguous()
        tensors[m, n, k] = (a, b, torch.empty(m, n, device="cuda", dtype=dtype))
    for (m, n, k), (a, b, out) in tensors.items():
        t = median_ms(lambda: torch.matmul(a, b, out=out))
        print(f"cublas {m}x{n}x{k}: {2 * m * n * k / t / 1e9:.0f} TFLOP/s ({t * 1e3:.1f} us)", flush=True)
    return tensors


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    ap.add_argument("--generated", type=Path, default=Path("generated"))
    ap.add_argument("--tiles", nargs="+", help="only these tiles, e.g. 128x256 128x256c2 (default: every sm90 tile)")
    ap.add_argument("--problems", nargs="+", help="M,N,K triples (default: 8192^3, 4096,28672,4096, 4096^3)")
    args = ap.parse_args()
    problems = [tuple(int(x) for x in p.split(",")) for p in args.problems] if args.problems else PROBLEMS
    work = Path(tempfile.mkdtemp(prefix="sm90_variants_"))
    subset_manifest(args.generated, work / "gen", lambda name, spec: "sm90_bf16_sm90" in name and "_nk_" in name)
    tensors = problem_tensors(problems, torch.bfloat16)
    for variant in args.variants:
        build_mod.BUILD_OPTIONS = VARIANTS[variant]
        build_mod.build(work / "gen", work / variant, archs=[90], progress=False)
        gemm = Gemm(build_dir=work / variant)
        for kern in sorted(gemm.kernels, key=lambda k: k.name):
            s = kern.spec
            tile = f"{s.cta[0]}x{s.cta[1]}" + (f"c{s.cluster}" if s.cluster > 1 else "")
            if args.tiles and tile not in args.tiles:
                continue
            row = []
            for (m, n, k), (a, b, out) in tensors.items():
                t = median_ms(lambda: gemm.matmul(a, b, out=out, kernel=LaunchSpec(kern.name, 1, 3)))
                row.append(f"{2 * m * n * k / t / 1e9:5.0f}")
            print(f"{variant:12s} {tile:10s} s{s.stages}: " + " ".join(row) + " TFLOP/s", flush=True)


if __name__ == "__main__":
    main()
