"""Experiment: quantized decode with the packed weights in a deep cp.async ring (the
sm80_ring family, bench/experiments/decode_ring_tiles.yaml) against the default set's
tuned plan (the sm80 direct-B decode tiles, sm90_quant), fp16 cuBLAS on the unquantized
weight and torch's int4 kernel (bf16; W4 only), on llama3-8b and 70b layers, groups of
128. Issue 17's decode bars: at M = 1, W4 at least 2.5x cuBLAS and 1.5x torch int4 on
every llama3-8b layer, and layers of at least 100 MB of fp16 weight at 80% (W4) / 85%
(W8) of copy bandwidth.

Per problem: every ring kernel at every split count is timed alone (short medians), the
best is then timed interleaved with the default tuned plan and the peers (L2 emptied by
a read before every call, medians).

    python -m bench.experiments.decode_ring [--m 1 16] [--bits 4 8] [--models llama3-8b llama3-70b]
        [--yaml bench/experiments/decode_narrow_tiles.yaml]

With --yaml, the candidates are that file's kernels instead (any family).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch
import yaml

from bench.decode_chain import GROUP, INT4_INNER_K_TILES
from bench.quant import ROOT, copy_bandwidth, tuned_choice
from gemm_runtime import Gemm
from gemm_runtime.packed_weight import pack_for_gemm
from gemm_runtime.plan import LaunchSpec
from gemm_runtime.quant import quantize
from gemm_runtime.timing import interleaved_medians_ms, median_ms
from tests.decode_ring_kernels import YAML, build


def best_ring_plan(ring: Gemm, bits: int, a, packed, out, each: dict | None = None) -> tuple[str, int, float]:
    """(kernel, splits, ms) of the fastest candidate launch for ``a @ packed``; ``each``, if
    given, gets every candidate kernel's fastest (splits, ms)."""
    best = ("", 0, float("inf"))
    a_type = "bf16" if a.dtype == torch.bfloat16 else "f16"
    for kern in ring.kernels:
        if kern.spec.b_type.bits != bits or kern.spec.a_type.value != a_type or kern.spec.grouped:
            continue
        for splits in (1, 2, 3, 4, 6, 8):
            try:
                ring.matmul(a, packed, out=out, kernel=LaunchSpec(kern.name, splits))
            except Exception:  # a split count the problem's K cannot take
                continue
            t = median_ms(lambda: ring.matmul(a, packed, out=out, kernel=LaunchSpec(kern.name, splits)), reps=10,
                          max_ms=50)  # fmt: skip
            if t < best[2]:
                best = (kern.name, splits, t)
            if each is not None and t < each.get(kern.name, (0, float("inf")))[1]:
                each[kern.name] = (splits, t)
    return best


def short(name: str) -> str:
    """The tile part of a kernel name (16x128x256_w1x4x2_s6)."""
    parts = name.split("_")
    i = next(j for j, p in enumerate(parts) if p.count("x") == 2 and p[0].isdigit())
    capped = [p for p in parts if p.startswith("ctas")]  # a register-capped twin (spec.ctas_per_sm)
    return "_".join(parts[i:i + 3] + capped)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["llama3-8b", "llama3-70b"])
    ap.add_argument("--m", nargs="+", type=int, default=[1, 16])
    ap.add_argument("--bits", nargs="+", type=int, default=[4, 8])
    ap.add_argument("--yaml", type=Path, default=YAML, help="the candidate kernels (default: the ring tiles)")
    ap.add_argument("--a-type", default="f16", choices=["f16", "bf16"], help="activations and scales")
    ap.add_argument("--each", action="store_true", help="also print every candidate's fastest split and time")
    args = ap.parse_args()
    major, minor = torch.cuda.get_device_capability()
    ring = Gemm(build_dir=build(Path(tempfile.mkdtemp(prefix="decode_ring_")), 10 * major + minor, args.yaml))
    gemm = Gemm()
    copy = copy_bandwidth()
    print(f"copy bandwidth {copy / 1e12:.2f} TB/s; {len(ring.kernels)} ring kernels")
    print("| bits | layer | M | default plan | ring plan | default µs | ring µs | cuBLAS µs | int4 µs | "
          "cuBLAS / ring | int4 / ring | ring / default | ring of copy | max diff |")
    print("|---:|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    shapes = yaml.safe_load((ROOT / "bench" / "shapes.yaml").read_text())["models"]
    for model in args.models:
        for layer, (n, k) in shapes[model].items():
            dt = torch.bfloat16 if args.a_type == "bf16" else torch.float16
            w = torch.randn(n, k, device="cuda", dtype=dt) * 0.02
            q = torch.randint(0, 16, (n, k), dtype=torch.int32, device="cuda")
            int4 = torch._convert_weight_to_int4pack((q[:, ::2] << 4 | q[:, 1::2]).to(torch.uint8),
                                                     INT4_INNER_K_TILES)  # fmt: skip
            del q
            sz = torch.randn(k // GROUP, n, 2, device="cuda", dtype=torch.bfloat16) * 0.01
            for bits in args.bits:
                packed = pack_for_gemm(quantize(w, bits=bits, group_size=GROUP))
                weight_bytes = packed.b.numel() + packed.v.numel() * 2
                for m in args.m:
                    a = torch.randn(m, k, device="cuda", dtype=dt)
                    a_bf = a.to(torch.bfloat16)
                    out_d, out_r, out_h = (torch.empty(m, n, device="cuda", dtype=dt) for _ in range(3))
                    plan = tuned_choice(gemm, a, packed, out_d)
                    each: dict = {}
                    name, splits, _ = best_ring_plan(ring, bits, a, packed, out_r, each)
                    fns = [lambda: gemm.matmul(a, packed, out=out_d),
                           lambda: ring.matmul(a, packed, out=out_r, kernel=LaunchSpec(name, splits)),
                           lambda: torch.matmul(a, w.t(), out=out_h)]  # fmt: skip
                    if bits == 4:
                        fns.append(lambda: torch._weight_int4pack_mm(a_bf, int4, GROUP, sz))
                    t = [x * 1e3 for x in interleaved_medians_ms(fns, reps=40)]
                    t_int4 = t[3] if bits == 4 else float("nan")
                    diff = ((out_r.float() - out_d.float()).abs().max() / out_d.float().abs().max()).item()
                    print(f"| {bits} | {model} {layer} | {m} | {plan} | {short(name)} ({splits}) | {t[0]:.1f} | "
                          f"{t[1]:.1f} | {t[2]:.1f} | {t_int4:.1f} | {t[2] / t[1]:.2f} | {t_int4 / t[1]:.2f} | "
                          f"{t[1] / t[0]:.2f} | {weight_bytes / (t[1] * 1e-6) / copy:.0%} | {diff:.1e} |",
                          flush=True)  # fmt: skip
                    if args.each:
                        print("  candidates, fastest split each (short medians): " + " | ".join(
                            f"{short(k)} ({sp}) {ms * 1e3:.1f}" for k, (sp, ms) in sorted(each.items(), key=lambda e: e[1][1])),
                            flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
