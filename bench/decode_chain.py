"""What a user sees at decode (issue 17): the four GEMMs of one decoder layer back to
back (qkv, o, gate_up with the gated SiLU, down) at M = 1 and 16, eager and replayed
from a CUDA graph, as total time and as bandwidth over all their weight bytes, beside
the same chain in fp16 cuBLAS (`torch.matmul`, SiLU-and-mul as torch ops) and in torch's
int4 kernel (`torch._weight_int4pack_mm`, bf16: the only activation type it takes).
Ours: W4A16 and W8A16 in groups of 128 and dense fp16, tuned dispatch; with
--programmatic also W4A16 and fp16 launched with programmatic dependent launch
(Gemm(programmatic_launch=True)). L2 flushed before each repetition, medians.

    python -m bench.decode_chain [--models llama3-8b llama3-70b] [--m 1 16] [--programmatic] [--out FILE]
"""

from __future__ import annotations

import argparse
import datetime
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from bench.cli import check_models, check_out, positive_int, shape_models
from gemm_runtime import DispatchPolicy, Gemm, Operation
from gemm_runtime.packed_weight import pack_for_gemm
from gemm_runtime.quant import quantize
from gemm_runtime.timing import interleaved_medians_ms
from gemm_runtime.types import Epilogue

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ("qkv", "o", "gate_up", "down")
GROUP = 128
INT4_INNER_K_TILES = 8  # torch's int4 packing; K must be a multiple of 16 x this


def layer_shapes(model: str) -> dict[str, tuple[int, int]]:
    """(N, K) of the model's four layers (bench/shapes.yaml); gate_up's N is gate and up
    interleaved, so down's K is half of it."""
    shapes = shape_models()[model]
    out = {layer: tuple(shapes[layer]) for layer in LAYERS}
    if out["gate_up"][0] != 2 * out["down"][1]:
        raise ValueError(f"{model}: gate_up N {out['gate_up'][0]} is not twice down's K {out['down'][1]}")
    return out


def int4_weight_bytes(n: int, k: int, group: int = GROUP) -> int:
    """torch's int4 weight: N x K nibbles, and a (scale, zero) bf16 pair per group and row."""
    return n * k // 2 + (k // group) * n * 2 * 2


@dataclass
class Chain:
    name: str
    weight_bytes: int
    run: Callable[[], object]


def _inputs(shapes: dict[str, tuple[int, int]], m: int, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Each layer's input: hidden states for qkv and gate_up, the attention output for o,
    gate_up's gated output for down (written by the chain itself)."""
    hidden, inter = shapes["qkv"][1], shapes["down"][1]
    x = torch.randn(m, hidden, device="cuda", dtype=dtype)
    return {"qkv": x, "o": torch.randn(m, shapes["o"][1], device="cuda", dtype=dtype), "gate_up": x,
            "down": torch.empty(m, inter, device="cuda", dtype=dtype)}  # fmt: skip


def ours(gemm: Gemm, shapes: dict[str, tuple[int, int]], m: int, bits: int | None) -> Chain:
    """Our chain: quantized (bits) or dense fp16 weights, gate_up with the gated epilogue
    writing down's input; every GEMM tuned first (the dispatch cache then serves it)."""
    x = _inputs(shapes, m, torch.float16)
    weights, outs, total = {}, {}, 0
    for layer, (n, k) in shapes.items():
        w = torch.randn(n, k, device="cuda", dtype=torch.float16) * 0.02
        if bits is None:
            weights[layer], total = w.t(), total + n * k * 2
        else:
            packed = pack_for_gemm(quantize(w, bits=bits, group_size=GROUP))
            weights[layer], total = packed, total + packed.b.numel() + packed.v.numel() * 2
        cols = n // 2 if layer == "gate_up" else n
        outs[layer] = x["down"] if layer == "gate_up" else torch.empty(m, cols, device="cuda", dtype=torch.float16)
    ops = {layer: Operation(epilogue=Epilogue.GATED_SILU if layer == "gate_up" else Epilogue.NONE) for layer in LAYERS}
    for layer in LAYERS:
        tune = Operation(epilogue=ops[layer].epilogue, dispatch=DispatchPolicy.MEASURE)
        gemm.matmul(x[layer], weights[layer], out=outs[layer], operation=tune)

    def run() -> None:
        for layer in LAYERS:
            gemm.matmul(x[layer], weights[layer], out=outs[layer], operation=ops[layer])

    name = f"ours W{bits}A16" if bits else "ours fp16"
    return Chain(name + (", PDL" if gemm.programmatic_launch else ""), total, run)


def cublas(shapes: dict[str, tuple[int, int]], m: int) -> Chain:
    """fp16 torch.matmul per layer, the gated SiLU as torch ops on gate_up's halves."""
    x = _inputs(shapes, m, torch.float16)
    w = {layer: torch.randn(n, k, device="cuda", dtype=torch.float16) * 0.02 for layer, (n, k) in shapes.items()}
    outs = {layer: torch.empty(m, n, device="cuda", dtype=torch.float16) for layer, (n, _) in shapes.items()}
    half = shapes["gate_up"][0] // 2

    def run() -> None:
        for layer in LAYERS:
            if layer == "down":
                gu = outs["gate_up"]
                torch.mul(F.silu(gu[:, :half]), gu[:, half:], out=x["down"])
            torch.matmul(x[layer], w[layer].t(), out=outs[layer])

    return Chain("fp16 cuBLAS", sum(n * k * 2 for n, k in shapes.values()), run)


def torch_int4(shapes: dict[str, tuple[int, int]], m: int) -> Chain:
    """torch._weight_int4pack_mm per layer (bf16 activations, groups of 128), the gated
    SiLU as torch ops."""
    x = _inputs(shapes, m, torch.bfloat16)
    packed = {}
    for layer, (n, k) in shapes.items():
        q = torch.randint(0, 16, (n, k), dtype=torch.int32, device="cuda")
        nibbles = (q[:, ::2] << 4 | q[:, 1::2]).to(torch.uint8)
        scales_zeros = torch.randn(k // GROUP, n, 2, device="cuda", dtype=torch.bfloat16) * 0.01
        packed[layer] = (torch._convert_weight_to_int4pack(nibbles, INT4_INNER_K_TILES), scales_zeros)
    outs: dict[str, torch.Tensor] = {}
    half = shapes["gate_up"][0] // 2

    def run() -> None:
        for layer in LAYERS:
            if layer == "down":
                gu = outs["gate_up"]
                x["down"] = F.silu(gu[:, :half]) * gu[:, half:]
            w, sz = packed[layer]
            outs[layer] = torch._weight_int4pack_mm(x[layer], w, GROUP, sz)

    return Chain("torch int4 (bf16)", sum(int4_weight_bytes(n, k) for n, k in shapes.values()), run)


def graphed(run: Callable[[], object]) -> Callable[[], object]:
    """The chain captured once into a CUDA graph (after warm-up on a side stream, as
    torch.cuda.graphs asks); calling the result replays it."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            run()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run()
    return graph.replay


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["llama3-8b", "llama3-70b"])
    ap.add_argument("--m", nargs="+", type=positive_int, default=[1, 16])
    ap.add_argument("--programmatic", action="store_true", help="also ours with programmatic dependent launch")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "perf" / "decode_chain.md")
    args = ap.parse_args(argv)
    check_models(ap, "--models", args.models)
    for model in args.models:
        try:
            layer_shapes(model)
        except (KeyError, ValueError) as e:
            ap.error(f"--models: got {model!r}, which lacks a decoder layer's {', '.join(LAYERS)} "
                     f"({e.args[0] if isinstance(e, ValueError) else f'no {e.args[0]}'}); accepted: a model of "
                     f"shapes.yaml with all four")  # fmt: skip
    check_out(ap, "--out", args.out)
    from bench.quant import copy_bandwidth

    gemm = Gemm()
    gemm_pdl = Gemm(programmatic_launch=True) if args.programmatic else None
    bw = copy_bandwidth()
    print(f"copy bandwidth: {bw / 1e12:.2f} TB/s", flush=True)
    table = [
        "| model | M | chain | weight MB | eager µs | graph µs | graph TB/s | of copy | vs fp16 cuBLAS (graph) |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for model in args.models:
        shapes = layer_shapes(model)
        for m in args.m:
            builders = [
                ("fp16 cuBLAS", lambda: cublas(shapes, m)),
                ("torch int4 (bf16)", lambda: torch_int4(shapes, m)),
                ("ours W4A16", lambda: ours(gemm, shapes, m, 4)),
                ("ours W8A16", lambda: ours(gemm, shapes, m, 8)),
                ("ours fp16", lambda: ours(gemm, shapes, m, None)),
            ]
            if gemm_pdl is not None:
                builders += [("ours W4A16, PDL", lambda: ours(gemm_pdl, shapes, m, 4)),
                             ("ours fp16, PDL", lambda: ours(gemm_pdl, shapes, m, None))]  # fmt: skip
            reference = None
            for name, build in builders:
                try:
                    chain = build()
                    # NOTE: interleaved: timed one after the other, the graph of llama3-70b's W4
                    # chain read 6-14% slower than eager on both GPUs (docs/NOTES.md, 49th session).
                    eager, graph = (t * 1e3 for t in interleaved_medians_ms([chain.run, graphed(chain.run)]))
                except Exception as exc:  # a peer missing from this torch build must not end the run
                    table.append(f"| {model} | {m} | {name} | | | | | | {type(exc).__name__}: {str(exc)[:80]} |")
                    print(table[-1], flush=True)
                    continue
                reference = graph if name == "fp16 cuBLAS" else reference
                rate = chain.weight_bytes / (graph * 1e-6)
                ratio = f"{reference / graph:.2f}" if reference else "-"
                table.append(f"| {model} | {m} | {chain.name} | {chain.weight_bytes / 1e6:.1f} | {eager:.1f} | "
                             f"{graph:.1f} | {rate / 1e12:.2f} | {rate / bw:.0%} | {ratio} |")  # fmt: skip
                print(table[-1], flush=True)
                del chain
    lines = [
        "# A decoder layer's GEMMs at decode",
        "",
        f"Measured {datetime.date.today().isoformat()} on {torch.cuda.get_device_name()} by `python -m "
        "bench.decode_chain`: qkv, o, gate_up (gated SiLU; fused in ours, torch ops in the peers) and down back to "
        f"back, eager and replayed from a CUDA graph (their repetitions interleaved). Copy bandwidth (read + write) in the same run: {bw / 1e12:.2f} "
        "TB/s; `graph TB/s` = the chain's weight bytes (with scales and zeros) / graph time. L2 flushed before each "
        "repetition, medians.",
        "",
    ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines + table) + "\n")


if __name__ == "__main__":
    main()
