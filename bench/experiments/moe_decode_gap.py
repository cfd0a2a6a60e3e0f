"""Experiment: where one token's W4 MoE projection loses against a bare read (issue 18's
decode rows; bench.experiments.read_bound: one Qwen-MoE-like token's six experts take
1.50 / 1.82x a read of their bytes, gate_up / down, on the H100).

Per configuration and projection at one token (bench.moe's routing, bf16, W4 groups of
128), timed interleaved: the grouped launch (Gemm.grouped_matmul, tuned), the same bytes
as one dense M = 1 problem (the touched experts' weights stacked along N: N = experts x
n, the same K; Gemm.matmul, tuned) and the fastest bare read of those bytes. The dense
form has no offsets to scan and every column tile of the decode set to choose from, so
grouped / dense says what the grouped path costs, dense / read what the decode loop does.
With --yaml, that file's grouped kernels too (built into a directory of their own): each
at 1, 2 and 4 splits alone (short medians), the fastest then interleaved with the rest.

    python -m bench.experiments.moe_decode_gap [--tokens 1] [--yaml bench/experiments/moe_decode_tiles.yaml]
    ncu --profile-from-start off --clock-control none --cache-control all -k regex:gemm \\
        python -m bench.experiments.moe_decode_gap --profile qwen down
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch

from bench import moe
from bench.decode_chain import GROUP
from bench.experiments.read_bound import Reader
from bench.quant import describe_launch, tuned_choice
from gemm_runtime import DispatchPolicy, Gemm
from gemm_runtime.experts import Routing, pack_experts
from gemm_runtime.packed_weight import pack_for_gemm
from gemm_runtime.quant import quantize
from gemm_runtime.plan import LaunchSpec
from gemm_runtime.timing import interleaved_medians_ms, median_ms
from tests.decode_ring_kernels import build


def dense_twin(w: torch.Tensor, routing: Routing):
    """The touched experts' bf16 weights [E, N, K] stacked along N and packed: one M = 1
    problem of the grouped launch's bytes."""
    counts = routing.offsets[1:] - routing.offsets[:-1]
    touched = w[counts > 0]
    stacked = touched.reshape(-1, touched.shape[-1])
    return pack_for_gemm(quantize(stacked, bits=4, group_size=GROUP))


def fastest_candidate(candidates: Gemm, a, packed, routing: Routing, d) -> tuple[str, int, float]:
    """(kernel, splits, ms) of the fastest of ``candidates``' grouped kernels for the
    problem, each forced at 1, 2 and 4 splits (short medians; a split count the problem
    cannot take is skipped)."""
    best = ("", 0, float("inf"))
    a_type = "bf16" if a.dtype == torch.bfloat16 else "f16"
    for kern in candidates.kernels:
        if not kern.spec.grouped or kern.spec.a_type.value != a_type or kern.spec.b_type.bits != packed.layout.bits:
            continue
        for splits in (1, 2, 4):
            call = lambda: candidates.grouped_matmul(a, packed, routing.offsets, out=d,  # noqa: E731, B023
                                                     kernel=LaunchSpec(kern.name, splits))  # noqa: B023
            try:
                call()
            except Exception:  # a split count the problem's K cannot take
                continue
            t = median_ms(call, reps=10, max_ms=50)
            if t < best[2]:
                best = (kern.name, splits, t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=1)
    ap.add_argument("--yaml", type=Path, help="candidate grouped kernels (bench/experiments/moe_decode_tiles.yaml)")
    ap.add_argument("--profile", nargs=2, metavar=("CONFIG", "PROJ"),
                    help="tune, then launch the grouped and the dense form twice each (for a profiler)")
    args = ap.parse_args()
    gemm = Gemm()
    candidates = None
    if args.yaml is not None:
        major, minor = torch.cuda.get_device_capability()
        candidates = Gemm(build_dir=build(Path(tempfile.mkdtemp(prefix="moe_tiles_")), 10 * major + minor, args.yaml))
    reader = Reader.build() if args.profile is None else None
    print("| config | projection | experts touched | MB | read us | grouped us (plan) | dense twin us (plan) | "
          "candidate us (plan) | grouped / dense | dense / read | grouped / candidate |")  # fmt: skip
    print("|---|---|---:|---:|---:|---|---|---|---:|---:|---:|")
    gen = torch.Generator().manual_seed(0)
    for cfg_name, cfg in moe.CONFIGS.items():
        routing = moe.route(args.tokens, cfg, gen, "cuda")
        for proj, (n, k) in moe._projections(cfg).items():
            if args.profile is not None and (cfg_name, proj) != tuple(args.profile):
                continue
            x = torch.randn(args.tokens, k, device="cuda", dtype=torch.bfloat16)
            w = torch.randn(cfg.experts, n, k, device="cuda", dtype=torch.bfloat16) / k**0.5
            packed = pack_experts([quantize(we, bits=4, group_size=GROUP) for we in w])
            twin = dense_twin(w, routing)
            a = x[routing.index.long()].contiguous()
            d = torch.empty(a.shape[0], n, device="cuda", dtype=torch.bfloat16)
            a1 = x[:1].contiguous()
            d1 = torch.empty(1, twin.n, device="cuda", dtype=torch.bfloat16)
            gemm.grouped_matmul(a, packed, routing.offsets, out=d, dispatch=DispatchPolicy.MEASURE)
            dense_text = tuned_choice(gemm, a1, twin, d1)
            grouped = lambda: gemm.grouped_matmul(a, packed, routing.offsets, out=d)  # noqa: E731, B023
            dense = lambda: gemm.matmul(a1, twin, out=d1)  # noqa: E731, B023
            if args.profile is not None:
                torch.cuda.synchronize()
                torch.cuda.profiler.start()  # (ncu --profile-from-start off: the tuning's launches stay out)
                for _ in range(2):
                    grouped()
                    dense()
                torch.cuda.synchronize()
                torch.cuda.profiler.stop()
                return
            nbytes = moe.touched_packed_bytes(routing, packed) // 16 * 16
            _, read, _ = reader.fastest(torch.empty(nbytes // 4 + 1024, dtype=torch.int32, device="cuda"), nbytes)
            fns = [read, grouped, dense]
            best, best_text = None, "-"
            if candidates is not None:
                name, splits, _ = fastest_candidate(candidates, a, packed, routing, d)
                if name:
                    best = lambda: candidates.grouped_matmul(a, packed, routing.offsets, out=d,  # noqa: E731, B023
                                                             kernel=LaunchSpec(name, splits))  # noqa: B023
                    best_text = describe_launch(candidates.registry.get(name).spec, LaunchSpec(name, splits))
                    fns.append(best)
            t = [x * 1e3 for x in interleaved_medians_ms(fns, reps=40)]
            t_read, t_grouped, t_dense = t[:3]
            t_best = t[3] if best is not None else float("nan")
            grouped_text = next((describe_launch(gemm.registry.get(p.kernel).spec, p) for key, p in gemm.cache.entries()
                                 if (key.n, key.k) == (n, k) and gemm.registry.get(p.kernel).spec.grouped), "-")  # fmt: skip
            print(f"| {cfg_name} | {proj} | {moe.experts_touched(routing)} | {nbytes / 1e6:.1f} | {t_read:.1f} | "
                  f"{t_grouped:.1f} ({grouped_text}) | {t_dense:.1f} ({dense_text}) | {t_best:.1f} ({best_text}) | "
                  f"{t_grouped / t_dense:.2f} | {t_dense / t_read:.2f} | {t_grouped / t_best:.2f} |", flush=True)  # fmt: skip
            del w, packed, twin


if __name__ == "__main__":
    main()
