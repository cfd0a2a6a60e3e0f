"""Mixture-of-experts grouped GEMMs (issue 18, docs/MOE.md): the two projections of an
expert layer (gate_up, E x 2I x H, and down, E x H x I) over the rows a top-k routing
sends to each expert, at a given number of tokens, bf16, beside

  - `torch._grouped_mm` (the grouped-GEMM peer; cumulative row ends as offsets),
  - a loop of `torch.matmul`, one per expert with rows (the offsets read on the host
    before timing),
  - ours: Gemm.grouped_matmul, its default choice (the ratios and the bandwidth) and the
    fastest grouped kernel forced (what tuning could reach),
  - ours with the experts' weights quantized to 4 bits (W4A16, group 128): its default
    choice and its fastest kernel, against the dense `torch._grouped_mm`.

Each is checked against experts.grouped_reference first (W4A16: with the dequantized
weights). L2 flushed, medians. The ratios to the peer and the default columns come from
calls interleaved with the peer's (gemm_runtime.timing.interleaved_medians_ms: the same
clock for both under the board's power cap); the forced kernels are timed one after
another, so "best" may differ from the default on the same kernel by that drift. Weight bandwidth counts the weights of the experts the
routing touches (W4A16: their packed bytes, scales and zeros).

    python -m bench.moe [--configs mixtral qwen] [--tokens 1 16 128 1024 8192] [--out FILE]
"""

from __future__ import annotations

import argparse
import datetime
from dataclasses import dataclass
from pathlib import Path

import torch

from bench.cli import check_out, positive_int
from gemm_runtime import grouped
from gemm_runtime.experts import PackedExperts, Routing, check_routing, grouped_reference, pack_experts
from gemm_runtime.plan import LaunchSpec
from gemm_runtime.quant import quantize
from gemm_runtime.timing import interleaved_medians_ms

ROOT = Path(__file__).resolve().parent.parent
TOL = 1e-2
W4_GROUP = 128


@dataclass(frozen=True)
class MoeConfig:
    experts: int
    top_k: int
    hidden: int
    intermediate: int


# Mixtral-8x7B-like and DeepSeek/Qwen-MoE-like (issue 18).
CONFIGS = {
    "mixtral": MoeConfig(experts=8, top_k=2, hidden=4096, intermediate=14336),
    "qwen": MoeConfig(experts=64, top_k=6, hidden=2048, intermediate=1408),
}


def route(tokens: int, cfg: MoeConfig, gen: torch.Generator, device: str = "cpu") -> Routing:
    """A top-k routing of ``tokens`` tokens from random router logits: the tokens * k rows
    sorted by expert (``offsets``, E + 1 row starts), each row's token (``index``) and its
    softmax-normalized routing weight (``row_scale``, fp32)."""
    logits = torch.randn(tokens, cfg.experts, generator=gen)
    weights, experts = torch.topk(torch.softmax(logits, dim=-1), cfg.top_k, dim=-1)
    weights = weights / weights.sum(dim=-1, keepdim=True)
    flat_expert = experts.reshape(-1)
    order = torch.argsort(flat_expert, stable=True)
    counts = torch.bincount(flat_expert, minlength=cfg.experts)
    offsets = torch.zeros(cfg.experts + 1, dtype=torch.int32)
    offsets[1:] = torch.cumsum(counts, 0).to(torch.int32)
    index = (order // cfg.top_k).to(torch.int32)
    scale = weights.reshape(-1)[order].float()
    rows = tokens * cfg.top_k
    return check_routing(offsets.to(device), experts=cfg.experts, rows=rows, device=torch.device(device),
                         tokens=tokens, index=index.to(device), row_scale=scale.to(device), check_values=True)  # fmt: skip


def experts_touched(routing: Routing) -> int:
    """The experts with at least one row."""
    return int(((routing.offsets[1:] - routing.offsets[:-1]) > 0).sum())


def touched_weight_bytes(routing: Routing, n: int, k: int, element_bytes: int = 2) -> int:
    """Bytes of the N x K weights of the experts with at least one row."""
    return experts_touched(routing) * n * k * element_bytes


def touched_packed_bytes(routing: Routing, w: PackedExperts) -> int:
    """Bytes of the packed weights, scales and zeros of the experts with at least one row."""
    per_expert = (w.b.numel() * w.b.element_size() + w.v.numel() * w.v.element_size()) // w.experts
    return experts_touched(routing) * per_expert


def _projections(cfg: MoeConfig) -> dict[str, tuple[int, int]]:
    """(N, K) of the two grouped GEMMs: gate_up's N holds gate and up interleaved."""
    return {"gate_up": (2 * cfg.intermediate, cfg.hidden), "down": (cfg.hidden, cfg.intermediate)}


def sorted_problems(tokens_list: list[int], gen: torch.Generator, *, w4_group: int | None = None):
    """Each configuration's two projections at each of ``tokens_list``, on the GPU, bf16:
    (config name, tokens, projection, routing, a, w, d), with ``a`` the routed rows sorted
    by expert (x gathered through the routing's index), ``w`` the stacked experts (packed
    at 4 bits in groups of ``w4_group`` where given) and ``d`` an output for the rows."""
    for cfg_name, cfg in CONFIGS.items():
        for tokens in tokens_list:
            routing = route(tokens, cfg, gen, "cuda")
            for proj, (n, k) in _projections(cfg).items():
                x = torch.randn(tokens, k, device="cuda", dtype=torch.bfloat16)
                w = torch.randn(cfg.experts, n, k, device="cuda", dtype=torch.bfloat16) / k**0.5
                if w4_group is not None:
                    w = pack_experts([quantize(we, bits=4, group_size=w4_group) for we in w])
                a = x[routing.index.long()].contiguous()
                d = torch.empty(a.shape[0], n, device="cuda", dtype=torch.bfloat16)
                yield cfg_name, tokens, proj, routing, a, w, d


def _rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.float() - ref).norm() / ref.norm().clamp_min(1e-6)).item()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    ap.add_argument("--tokens", nargs="+", type=positive_int, default=[1, 16, 128, 1024, 8192])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "perf" / "moe.md")
    ap.add_argument("--swizzles", action="store_true",
                    help="also force the persistent (sm90) kernels at every rasterization group, for the log")
    args = ap.parse_args(argv)
    check_out(ap, "--out", args.out)

    from gemm_runtime import Gemm
    from gemm_runtime.timing import median_ms

    gemm = Gemm()
    # Each grouped kernel forced, rasterized as its family prefers (sm90: groups of 8 tile rows).
    plans = [LaunchSpec(k.name, 1, k.spec.mainloop.preferred_swizzle if k.spec.mainloop.persistent else 0)
             for k in gemm.kernels if k.spec.grouped and k.spec.a_type.value == "bf16" and not k.spec.quantized]  # fmt: skip
    w4_plans = [LaunchSpec(k.name) for k in gemm.kernels if k.spec.grouped and k.spec.a_type.value == "bf16"
                and k.spec.quantized and k.spec.b_type.bits == 4]  # fmt: skip
    if args.swizzles:
        plans += [LaunchSpec(p.kernel, 1, s) for p in plans if gemm.registry.get(p.kernel).spec.mainloop.persistent
                  for s in range(4) if s != p.swizzle]  # fmt: skip
    copy_bw = _copy_bandwidth()
    lines = [f"# Grouped GEMMs for mixture-of-experts ({datetime.date.today()}, {torch.cuda.get_device_name()})", "",
             f"bf16, `python -m bench.moe`; copy bandwidth {copy_bw / 1e12:.2f} TB/s. Times in µs; ratios above 1: "
             "ours is faster.", "",
             "| config | tokens | GEMM | rows | experts touched | _grouped_mm | matmul loop | ours, default (tile) | "
             "ours, best (tile) | _grouped_mm / ours | loop / ours | ours, of copy BW | W4A16 ours, default (tile) | "
             "W4A16, best (tile) | _grouped_mm / W4A16 | W4A16, of copy BW |",
             "|---|---:|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---|---:|---:|"]  # fmt: skip
    gen = torch.Generator().manual_seed(0)
    for name in args.configs:
        cfg = CONFIGS[name]
        for tokens in args.tokens:
            routing = route(tokens, cfg, gen, "cuda")
            starts = routing.offsets.tolist()
            rows = starts[-1]
            for proj, (n, k) in _projections(cfg).items():
                x = torch.randn(tokens, k, device="cuda", dtype=torch.bfloat16)
                w = torch.randn(cfg.experts, n, k, device="cuda", dtype=torch.bfloat16) / k**0.5
                a = x[routing.index.long()].contiguous()  # the sorted rows (ours and the peers take them so)
                sorted_routing = Routing(routing.offsets, None, None)
                ref = grouped_reference(a, w, sorted_routing)
                results = {}
                if hasattr(torch, "_grouped_mm"):
                    ends = routing.offsets[1:].contiguous()
                    peer = lambda: torch._grouped_mm(a, w.transpose(1, 2), offs=ends)  # noqa: E731
                    err = _rel_err(peer(), ref)
                    results["grouped_mm"] = median_ms(peer) if err < TOL else float("nan")
                out = torch.empty(rows, n, device="cuda", dtype=torch.bfloat16)

                def loop() -> None:
                    for e, (lo, hi) in enumerate(zip(starts, starts[1:])):
                        if hi > lo:
                            torch.matmul(a[lo:hi], w[e].t(), out=out[lo:hi])

                loop()
                results["loop"] = median_ms(loop) if _rel_err(out, ref) < TOL else float("nan")
                timed = _time_ours(gemm, a, w, routing, [None, *plans, *_top_ranked(gemm, a, w, routing)], ref)
                default = timed.get(None, float("nan"))
                # The peer ran and matched the reference (a NaN time otherwise).
                peer_ok = results.get("grouped_mm", float("nan")) == results.get("grouped_mm", float("nan"))
                if peer_ok and None in timed:
                    results["grouped_mm"], default = interleaved_medians_ms(
                        [peer, lambda: gemm.grouped_matmul(a, w, routing.offsets, out=out)])  # noqa: B023
                # Every forced kernel's time, for the log (what the cost model's rules are fitted to).
                print(f"# {name} {tokens} {proj}: " + _timed_text(gemm, timed, key_of(gemm, a, w, routing)),
                      flush=True)
                chosen = gemm.select(key_of(gemm, a, w, routing))
                best_name = min((kk for kk in timed if kk is not None), key=timed.get, default=None)
                ours = timed[best_name] if best_name else float("nan")
                bw = touched_weight_bytes(routing, n, k) / (default * 1e-3) / copy_bw
                gm = results.get("grouped_mm", float("nan"))
                tile_text = _plan_text(gemm, best_name) if best_name else "-"
                w4 = _w4_columns(gemm, a, w, routing, w4_plans, peer if peer_ok else None, copy_bw)
                lines.append(f"| {name} | {tokens} | {proj} | {rows} | {experts_touched(routing)} | {gm * 1e3:.1f} | "
                             f"{results['loop'] * 1e3:.1f} | {default * 1e3:.1f} ({_plan_text(gemm, chosen)}) | {ours * 1e3:.1f} ({tile_text}) | "
                             f"{gm / default:.2f} | {results['loop'] / default:.2f} | {bw:.0%} | {w4}")  # fmt: skip
                print(lines[-1], flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")


def _top_ranked(gemm, a, w, routing: Routing, count: int = 4) -> list:
    """The cost model's best ``count`` plans for the launch (split and rasterized as it
    ranks them; the forced kernels run unsplit)."""
    return [plan for _, plan in gemm.ranked(key_of(gemm, a, w, routing))[:count]]


def key_of(gemm, a, w, routing: Routing):
    """The grouped launch's dispatch key."""
    return grouped.grouped_key(grouped.grouped_operands(a, w, routing.offsets), gemm.registry.device.arch)


def _timed_text(gemm, timed: dict, key) -> str:
    """Each forced plan's measured time beside the cost model's prediction (µs), for the
    log: what the model's terms are fitted to."""
    predicted = {plan: cost for cost, plan in gemm.ranked(key)}
    return ", ".join(f"{_plan_text(gemm, p)}/s{p.swizzle} {t * 1e3:.1f} (model {predicted.get(p, float('nan')) * 1e6:.1f})"
                     for p, t in timed.items() if p is not None)  # fmt: skip


def _plan_text(gemm, plan) -> str:
    """A plan by family and tile, with its split where it has one."""
    tile = _tile(gemm.registry.get(plan.kernel).spec)
    return f"{tile} split {plan.splits}" if plan.splits > 1 else tile


def _time_ours(gemm, a, w, routing: Routing, plans: list, ref: torch.Tensor) -> dict:
    """Gemm.grouped_matmul's median ms per plan (None: its default choice), for the plans
    whose result matches ``ref``."""
    from gemm_runtime.timing import median_ms

    rows, n = a.shape[0], ref.shape[1]
    timed = {}
    for kernel in dict.fromkeys(plans):  # each plan once, in order
        d = torch.full((rows, n), float("nan"), device="cuda", dtype=a.dtype)
        call = lambda: gemm.grouped_matmul(a, w, routing.offsets, out=d, kernel=kernel)  # noqa: E731, B023
        call()
        if _rel_err(d, ref) < TOL:
            timed[kernel] = median_ms(call)
    return timed


def _w4_columns(gemm, a, w, routing: Routing, plans: list, peer, copy_bw: float) -> str:
    """The W4A16 columns of a row: the experts' weights quantized (4 bits, group 128),
    ours by default and at its fastest kernel, the dense peer's time over ours (`peer`
    its call, timed interleaved with our default), and the packed weights' bandwidth."""
    packed = pack_experts([quantize(we, bits=4, group_size=W4_GROUP) for we in w])
    ref = grouped_reference(a, packed.dequantize(torch.float32), Routing(routing.offsets, None, None))
    timed = _time_ours(gemm, a, packed, routing, [None, *plans, *_top_ranked(gemm, a, packed, routing)], ref)
    key = key_of(gemm, a, packed, routing)
    print("#   W4A16: " + _timed_text(gemm, timed, key), flush=True)
    default = timed.get(None, float("nan"))
    grouped_mm_ms = float("nan")
    if peer is not None and None in timed:
        d = torch.empty(a.shape[0], w.shape[1], device="cuda", dtype=a.dtype)
        grouped_mm_ms, default = interleaved_medians_ms([peer, lambda: gemm.grouped_matmul(a, packed, routing.offsets,
                                                                                           out=d)])  # fmt: skip
    chosen = _plan_text(gemm, gemm.select(key))
    best = min((p for p in timed if p is not None), key=timed.get, default=None)
    best_text = f"{timed[best] * 1e3:.1f} ({_plan_text(gemm, best)})" if best else "-"
    bw = touched_packed_bytes(routing, packed) / (default * 1e-3) / copy_bw
    return f"{default * 1e3:.1f} ({chosen}) | {best_text} | {grouped_mm_ms / default:.2f} | {bw:.0%} |"


def _tile(spec) -> str:
    """A grouped kernel by family and tile: sm80 64x64, sm90 128x256."""
    return f"{spec.mainloop.value} {spec.cta[0]}x{spec.cta[1]}"


def _copy_bandwidth() -> float:
    from gemm_runtime.timing import median_ms

    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    return 2 * src.numel() / (median_ms(lambda: dst.copy_(src)) * 1e-3)


if __name__ == "__main__":
    main()
