"""Experiment: the SM90 quantized family's decode widths (wgmma_rs N = 8, 16, 32 tokens)
against the launch default dispatch picks (the sm80 decode kernels at M <= 16), on the
llama3 layers at decode, W4 / W8 groups of 128, fp16, L2 flushed, interleaved medians.

Each tile is launched directly (tests/sm90_quant_kernel.py) unsplit (a persistent walk on
the resident CTAs) and as stream-K over ``--splits``; its output is checked against the
default launch's before it is timed.

    python -m bench.experiments.sm90_quant_decode [--m 1 16] [--bits 4 8]
        [--tiles 8x64s8 16x128s8 ...] [--splits 1 2 4]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
import yaml

from bench.experiments.sm90_quant_launch import parse_tile
from gemm_runtime import Gemm
from gemm_runtime.packed_weight import pack_for_gemm
from gemm_runtime.quant import quantize
from gemm_runtime.timing import interleaved_medians_ms
from tests import sm90_quant_kernel
from tests.sm90_quant_kernel import launch

ROOT = Path(__file__).resolve().parents[2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["llama3-8b", "llama3-70b"])
    ap.add_argument("--m", nargs="+", type=int, default=[1, 16])
    ap.add_argument("--bits", nargs="+", type=int, default=[4])
    ap.add_argument("--tiles", nargs="+", default=["8x64s8", "8x128s8", "16x64s8", "16x128s8", "32x128s8"])
    ap.add_argument("--splits", nargs="+", type=int, default=[1, 2, 4])
    args = ap.parse_args()
    models = yaml.safe_load((ROOT / "bench" / "shapes.yaml").read_text())["models"]
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    gemm = Gemm()
    for bits in args.bits:
        for model in args.models:
            for layer, (n, k) in models[model].items():
                w = torch.randn(n, k, device="cuda", dtype=torch.float16) * 0.02
                packed = pack_for_gemm(quantize(w, bits=bits, group_size=128))
                for m in args.m:
                    x = torch.randn(m, k, device="cuda", dtype=torch.float16)
                    ref = gemm.matmul(x, packed)
                    outs, labels, fns = [], ["default"], [lambda: gemm.matmul(x, packed, out=ref)]
                    for text in args.tiles:
                        tile = parse_tile(text)
                        if tile.tokens < m:
                            continue
                        kern = tile.kernel("f16", bits)
                        tiles = -(-n // tile.rows) * -(-m // tile.tokens)
                        for splits in args.splits:
                            # The CTAs the device holds at once (small tiles: several an SM);
                            # stream-K's wait for each other's partials, so all must be resident.
                            resident = sms * sm90_quant_kernel._loaded(kern).ctas_per_sm
                            if splits > 1 and tiles >= resident:
                                continue
                            d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)
                            launch(kern, x, packed, d, splits=splits, resident=resident)
                            err = ((d.float() - ref.float()).norm() / ref.float().norm()).item()
                            if not err < 1e-2:
                                print(f"  {text} /{splits}: WRONG (rel err {err:.2e})", flush=True)
                                continue
                            outs.append(d)
                            labels.append(f"{text}/{splits}")
                            fns.append(lambda kern=kern, d=d, s=splits, r=resident:
                                       launch(kern, x, packed, d, splits=s, resident=r, sync=False))
                    times = interleaved_medians_ms(fns)
                    best = min(range(1, len(times)), key=times.__getitem__, default=0)
                    print(f"W{bits} {model} {layer} M={m}: default {times[0]*1e3:.1f} us; "
                          + ", ".join(f"{l} {t*1e3:.1f}" for l, t in zip(labels[1:], times[1:]))
                          + f"; best {labels[best]} x{times[0]/times[best]:.2f}", flush=True)


if __name__ == "__main__":
    main()
