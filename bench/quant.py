"""W4A16 (group 128) against fp16 torch.matmul on the llama3-70b linear layers, and the
effective weight bandwidth at M = 1 against the GPU's measured copy bandwidth.

    python -m bench.quant [--m 1 16 128] [--out docs/perf/quant.md]
"""

from __future__ import annotations

import argparse
import datetime
from pathlib import Path

import torch
import yaml

from gemm_runtime import DispatchPolicy, Gemm, Operation
from gemm_runtime.quant import pack_for_gemm, quantize
from gemm_runtime.timing import median_ms

ROOT = Path(__file__).resolve().parent.parent


def copy_bandwidth() -> float:
    """Bytes read + written per second by a 2 GiB device-to-device copy."""
    src = torch.empty(1 << 30, dtype=torch.float16, device="cuda").normal_()
    dst = torch.empty_like(src)
    t = median_ms(lambda: dst.copy_(src), reps=10, flush=False)
    return 2 * src.numel() * 2 / (t * 1e-3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="llama3-70b")
    ap.add_argument("--m", nargs="+", type=int, default=[1, 16, 128])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "perf" / "quant.md")
    args = ap.parse_args()
    shapes = yaml.safe_load((ROOT / "bench" / "shapes.yaml").read_text())["models"][args.model]
    gemm = Gemm()
    bw = copy_bandwidth()
    print(f"copy bandwidth: {bw / 1e12:.2f} TB/s")
    lines = [
        "# W4A16 against fp16",
        "",
        f"Measured {datetime.date.today().isoformat()} on {torch.cuda.get_device_name()} by `python -m bench.quant`: "
        f"{args.model} layers, 4-bit weights in groups of 128 (tuned dispatch) against fp16 `torch.matmul` "
        f"(cuBLAS). Copy bandwidth (read + write) measured in the same run: {bw / 1e12:.2f} TB/s. "
        "`weight BW` = packed weight bytes (with scales and zeros) / time; `of copy` = that over the copy bandwidth.",
        "",
        "| layer | M | N | K | W4A16 µs | fp16 cuBLAS µs | speedup | weight BW TB/s | of copy |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for layer, (n, k) in shapes.items():
        w = torch.randn(n, k, device="cuda", dtype=torch.float16) * 0.02
        packed = pack_for_gemm(quantize(w, bits=4, group_size=128))
        weight_bytes = packed.b.numel() + packed.v.numel() * 2
        for m in args.m:
            a = torch.randn(m, k, device="cuda", dtype=torch.float16)
            out = torch.empty(m, n, device="cuda", dtype=torch.float16)
            gemm.matmul(a, packed, out=out, operation=Operation(dispatch=DispatchPolicy.MEASURE))
            t_q = median_ms(lambda: gemm.matmul(a, packed, out=out))
            t_h = median_ms(lambda: torch.matmul(a, w.t(), out=out))
            wbw = weight_bytes / (t_q * 1e-3)
            lines.append(f"| {layer} | {m} | {n} | {k} | {t_q*1e3:.1f} | {t_h*1e3:.1f} | {t_h/t_q:.2f} | "
                         f"{wbw/1e12:.2f} | {wbw/bw:.0%} |")
            print(lines[-1], flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
