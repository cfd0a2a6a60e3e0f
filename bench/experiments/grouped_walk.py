"""Experiment: the quantized grouped kernels (sm90_quant, kernel_sm90_quant.cuh) walking
their tiles persistently on the resident CTAs against a CTA per tile (the device's SM
count raised so far that the grid covers every tile), on bench.moe's routings, W4 group
128, bf16. Each pair is timed in two passes, the second in reverse order, and the mean
of the two is printed (a GPU under its power cap drifts within a run).

    python -m bench.experiments.grouped_walk [--configs mixtral qwen] [--tokens 1 128 1024 8192]
"""

from __future__ import annotations

import argparse
import dataclasses

import torch

from bench.moe import CONFIGS, W4_GROUP, _projections, route
from gemm_runtime.experts import pack_experts
from gemm_runtime.plan import LaunchSpec
from gemm_runtime.quant import quantize
from gemm_runtime.timing import median_ms

PER_TILE_SMS = 1 << 20  # resident CTAs beyond any grid: one CTA per tile


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    ap.add_argument("--tokens", nargs="+", type=int, default=[1, 128, 1024, 8192])
    args = ap.parse_args()

    from gemm_runtime import Gemm

    gemm = Gemm()
    kernels = [k for k in gemm.kernels if k.spec.grouped and k.spec.quantized and k.spec.a_type.value == "bf16"
               and k.spec.b_type.bits == 4 and k.spec.mainloop.value == "sm90_quant"]  # fmt: skip
    by_name = gemm.dispatcher._by_name
    gen = torch.Generator().manual_seed(0)
    for name in args.configs:
        cfg = CONFIGS[name]
        for tokens in args.tokens:
            routing = route(tokens, cfg, gen, "cuda")
            rows = int(routing.offsets[-1])
            for proj, (n, k) in _projections(cfg).items():
                x = torch.randn(tokens, k, device="cuda", dtype=torch.bfloat16)
                w = torch.randn(cfg.experts, n, k, device="cuda", dtype=torch.bfloat16) / k**0.5
                packed = pack_experts([quantize(we, bits=4, group_size=W4_GROUP) for we in w])
                a = x[routing.index.long()].contiguous()
                d = torch.empty(rows, n, device="cuda", dtype=torch.bfloat16)
                cells = []
                for kern in kernels:
                    modes = {"walk": kern, "tile": dataclasses.replace(kern, sms=PER_TILE_SMS)}
                    times: dict[str, list[float]] = {m: [] for m in modes}
                    for order in (list(modes), list(reversed(modes))):
                        for mode in order:
                            by_name[kern.name] = modes[mode]
                            try:
                                call = lambda: gemm.grouped_matmul(a, packed, routing.offsets, out=d,  # noqa: E731
                                                                   kernel=LaunchSpec(kern.name))
                                times[mode].append(median_ms(call, max_ms=300))
                            finally:
                                by_name[kern.name] = kern
                    walk, tile = (sum(times[m]) / 2 * 1e3 for m in modes)
                    cells.append(f"{kern.spec.cta[0]}x{kern.spec.cta[1]} walk {walk:8.1f} tile {tile:8.1f} us")
                print(f"{name} {tokens} {proj} ({rows} rows): " + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
