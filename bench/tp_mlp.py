"""One llama3-70b decoder MLP (gate_up with the gated epilogue, then down) tensor-parallel
over the ranks of torchrun, fp16 and W4A16, checked against the same MLP on one GPU and
timed per step, with the all_reduce's share of the step (docs/PARALLEL.md).

    torchrun --nproc-per-node 2 -m bench.tp_mlp [--tokens 1 16 128 1024] [--out tp_mlp.md]

Every rank builds the whole MLP from the same seed on the CPU and keeps its shard
(gemm_runtime.parallel.ParallelGatedMLP); rank 0 also runs the whole MLP on its GPU as the
reference. ``--cpu`` runs on the CPU over gloo with the layers' CPU implementations (small
sizes: what the test suite runs)."""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import torch
import torch.distributed as dist

from bench.cli import check_out, positive_int
from gemm_runtime.timing import event_ms

TOL = 1e-2


def _time_ms(fn, device: torch.device, reps: int, together: bool = True) -> float:
    """Median milliseconds of one step; ``together``: the ranks start each repetition
    together (a barrier; every rank must call it alike)."""
    times = []
    for _ in range(3):
        fn()
    for _ in range(reps):
        if together:
            dist.barrier()
        if device.type == "cuda":
            times.append(event_ms(fn))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def _mlp(hidden: int, intermediate: int, dtype: torch.dtype) -> tuple[torch.nn.Linear, ...]:
    gen = torch.Generator().manual_seed(0)

    def linear(k: int, n: int) -> torch.nn.Linear:
        layer = torch.nn.Linear(k, n, bias=False, dtype=dtype)
        with torch.no_grad():
            layer.weight.copy_(torch.randn(n, k, generator=gen) * k**-0.5)
        return layer

    return linear(hidden, intermediate), linear(hidden, intermediate), linear(intermediate, hidden)


def _whole(gate, up, down, quantize: dict | None, device: torch.device) -> torch.nn.Module:
    """The MLP on one device with the single-GPU layers (the reference)."""
    from gemm_runtime.nn import GatedMLPProjection, Linear, QuantGatedMLPProjection, QuantLinear

    gate, up, down = (m.to(device) for m in (gate, up, down))
    if quantize is None:
        return torch.nn.Sequential(GatedMLPProjection(gate, up), Linear(down.weight, None))
    return torch.nn.Sequential(QuantGatedMLPProjection.from_gate_up(gate.weight, up.weight, **quantize),
                               QuantLinear.from_float(down, **quantize))  # fmt: skip


def main(argv: list[str] | None = None) -> list[str]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hidden", type=positive_int, default=8192)
    ap.add_argument("--intermediate", type=positive_int, default=28672)
    ap.add_argument("--tokens", type=positive_int, nargs="+", default=[1, 16, 128, 1024])
    ap.add_argument("--reps", type=positive_int, default=20)
    ap.add_argument("--cpu", action="store_true", help="run on the CPU over gloo (small sizes)")
    ap.add_argument("--out", type=Path, help="also write the table (markdown) here, from rank 0")
    args = ap.parse_args(argv)
    check_out(ap, "--out", args.out)

    from gemm_runtime.parallel import ParallelGatedMLP

    if not dist.is_initialized():
        # NOTE: run without torchrun, the rendezvous raised from inside torch.distributed.
        missing = [v for v in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if v not in os.environ]
        if missing:
            ap.error(f"no torchrun rendezvous ({', '.join(missing)} not set); accepted: a run under torchrun, "
                     "e.g. torchrun --nproc-per-node 2 -m bench.tp_mlp")
        dist.init_process_group("gloo" if args.cpu else "nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cpu") if args.cpu else torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)))
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dtype = torch.float16
    gate, up, down = _mlp(args.hidden, args.intermediate, dtype)
    lines = [f"| weights | tokens | TP {world} step (ms) | all_reduce (ms) | its share | one GPU (ms) | rel err |",
             "|---|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for label, quantize in (("fp16", None), ("W4A16 g128", {"bits": 4, "group_size": 128})):
        tp = ParallelGatedMLP.from_mlp(gate, up, down, quantize=quantize).to(device)
        whole = _whole(gate, up, down, quantize, device) if rank == 0 else None
        for tokens in args.tokens:
            x = torch.randn(tokens, args.hidden, generator=torch.Generator().manual_seed(tokens), dtype=dtype).to(device)
            with torch.no_grad():
                got = tp(x)
                step = _time_ms(lambda: tp(x), device, args.reps)  # noqa: B023
                y = torch.empty_like(got)
                reduce = _time_ms(lambda: dist.all_reduce(y), device, args.reps)  # noqa: B023
                if rank == 0:
                    want = whole(x)
                    err = ((got.float() - want.float()).norm() / want.float().norm()).item()
                    single = _time_ms(lambda: whole(x), device, args.reps, together=False)  # noqa: B023
                    if not err < TOL:
                        raise SystemExit(f"{label}, {tokens} tokens: TP {world} differs from one GPU by {err:.2e}")
                    lines.append(f"| {label} | {tokens} | {step:.3f} | {reduce:.3f} | {reduce / step:.0%} | "
                                 f"{single:.3f} | {err:.1e} |")  # fmt: skip
                    print(lines[-1], flush=True)
    if rank == 0 and args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)  # check_out accepts folders still to be made
        args.out.write_text("\n".join(lines) + "\n")
    return lines


if __name__ == "__main__":
    main()
