"""Experiment: why a decoder layer's chain replayed from a CUDA graph read slower than the
same chain launched eagerly (bench.decode_chain: llama3-70b W4 at M = 1 took 157 / 167 us
eager / graph on the H200 and 184 / 210 on an H100; W8 at M = 16 332 / 358 on the H100;
the 8b chains were 2-5% faster in the graph as expected). decode_chain timed the eager
chain's repetitions first and the graph's after them, so the clock's drift under the power
cap is one suspect; the graph's own split-K workspace (gemm.py's _graph_workspace) is
another. Per model, M and bits, interleaved medians (L2 emptied) of:

* the chain eager, from a graph, and from a graph captured with the eager stream's own
  workspace passed explicitly;
* each layer alone, eager and from a graph (which layer holds a gap, if any);
* with --profile, each kernel's mean duration under torch.profiler (CUPTI's kernel
  records), eager and replayed, over --profile chains each (L2 not emptied there).

    python -m bench.experiments.graph_gap [--models llama3-70b] [--m 1 16] [--bits 4 8] [--profile 20]
"""

from __future__ import annotations

import argparse

import torch

from bench.decode_chain import GROUP, LAYERS, _inputs, graphed, layer_shapes
from gemm_runtime import DispatchPolicy, Gemm, Operation
from gemm_runtime.packed_weight import pack_for_gemm
from gemm_runtime.quant import quantize
from gemm_runtime.timing import interleaved_medians_ms
from gemm_runtime.types import Epilogue


def layer_calls(gemm: Gemm, model: str, m: int, bits: int) -> dict[str, tuple]:
    """Per layer (x, packed weight, out, operation), each tuned once (as decode_chain's)."""
    shapes = layer_shapes(model)
    x = _inputs(shapes, m, torch.float16)
    calls = {}
    for layer, (n, k) in shapes.items():
        w = torch.randn(n, k, device="cuda", dtype=torch.float16) * 0.02
        packed = pack_for_gemm(quantize(w, bits=bits, group_size=GROUP))
        out = x["down"] if layer == "gate_up" else torch.empty(m, n, device="cuda", dtype=torch.float16)
        epilogue = Epilogue.GATED_SILU if layer == "gate_up" else Epilogue.NONE
        gemm.matmul(x[layer], packed, out=out, operation=Operation(epilogue=epilogue, dispatch=DispatchPolicy.MEASURE))
        calls[layer] = (x[layer], packed, out, Operation(epilogue=epilogue))
    return calls


def kernel_means(fn, chains: int) -> dict[str, tuple[float, int]]:
    """Each kernel's mean duration in us (and its launches per chain) over ``chains``
    calls of ``fn``, from torch.profiler's CUDA kernel records."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(chains):
            fn()
        torch.cuda.synchronize()
    sums: dict[str, list[float]] = {}
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            sums.setdefault(event.name, []).append(event.time_range.elapsed_us())
    return {name: (sum(t) / len(t), len(t) // chains) for name, t in sums.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["llama3-70b"])
    ap.add_argument("--m", nargs="+", type=int, default=[1, 16])
    ap.add_argument("--bits", nargs="+", type=int, default=[4, 8])
    ap.add_argument("--profile", type=int, default=0, help="chains profiled per mode (0: none)")
    args = ap.parse_args()
    gemm = Gemm()
    print(f"{torch.cuda.get_device_name()}; medians in us, L2 emptied, repetitions interleaved", flush=True)
    for model in args.models:
        for m in args.m:
            for bits in args.bits:
                calls = layer_calls(gemm, model, m, bits)
                handle = torch.cuda.current_stream().cuda_stream
                own = gemm._workspace(handle, False)  # the eager calls' workspace on this stream

                def run(layers=LAYERS, workspace=None) -> None:
                    for layer in layers:
                        x, w, out, op = calls[layer]
                        gemm.matmul(x, w, out=out, operation=op, workspace=workspace)

                eager, graph, graph_own = interleaved_medians_ms(
                    [run, graphed(run), graphed(lambda: run(workspace=own))], reps=60)
                print(f"\n{model} W{bits} M = {m}: chain eager {eager * 1e3:.1f}, graph {graph * 1e3:.1f}, "
                      f"graph with the eager workspace {graph_own * 1e3:.1f}", flush=True)
                for layer in LAYERS:
                    e, g = interleaved_medians_ms([lambda: run((layer,)), graphed(lambda: run((layer,)))], reps=60)
                    print(f"  {layer:8s} eager {e * 1e3:7.1f}  graph {g * 1e3:7.1f}  ({g / e:.3f})", flush=True)
                if args.profile:
                    replay = graphed(run)
                    eager_k, graph_k = kernel_means(run, args.profile), kernel_means(replay, args.profile)
                    print("  kernels under the profiler (mean us, eager / graph):", flush=True)
                    for name in sorted(set(eager_k) | set(graph_k), key=lambda k: -eager_k.get(k, (0, 0))[0]):
                        e, g = eager_k.get(name, (float("nan"), 0)), graph_k.get(name, (float("nan"), 0))
                        print(f"    {e[0]:8.1f} x{e[1]:<3d} / {g[0]:8.1f} x{g[1]:<3d}  {name[:110]}", flush=True)


if __name__ == "__main__":
    main()
