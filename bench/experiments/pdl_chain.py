"""Experiment: the programmatic dependent launch on a decoder layer's chain, timed
interleaved with the same chain launched plainly (bench.decode_chain times its rows one
after another, so a clock drift between them reads as a difference). Builds the
llama3-8b chain (qkv, o, gate_up gated, down; bench.decode_chain.ours) on a plain Gemm
and on a Gemm(programmatic_launch=True), each tuned, prints both sets of plans, and
times the two CUDA graphs interleaved, L2 emptied by a read, medians, at M = 1 and 16,
W4 and fp16:

    python -m bench.experiments.pdl_chain [--model llama3-8b]
"""

from __future__ import annotations

import argparse

from bench.decode_chain import graphed, layer_shapes, ours
from gemm_runtime import Gemm
from gemm_runtime.timing import interleaved_medians_ms


def plans(gemm: Gemm, m: int, bits: int) -> list:
    """(N, K, kernel, splits) of the cached plans of M = ``m`` and B of ``bits`` bits."""
    return sorted((k.n, k.k, p.kernel, p.splits) for k, p in gemm.cache.entries()
                  if k.m == m and k.b_type.bits == bits)  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="llama3-8b")
    args = ap.parse_args()
    shapes = layer_shapes(args.model)
    plain, pdl = Gemm(), Gemm(programmatic_launch=True)
    for m in (1, 16):
        for bits in (4, None):
            chains = [ours(plain, shapes, m, bits), ours(pdl, shapes, m, bits)]
            t = interleaved_medians_ms([graphed(c.run) for c in chains], reps=40)
            same = plans(plain, m, bits or 16) == plans(pdl, m, bits or 16)
            print(f"M = {m}, {'W4' if bits else 'fp16'}: plain {t[0] * 1e3:.1f} us, programmatic {t[1] * 1e3:.1f} us "
                  f"({'the same plans' if same else 'different plans'})", flush=True)  # fmt: skip
            if not same:
                for name, g in (("plain", plain), ("programmatic", pdl)):
                    print(f"  {name}: {plans(g, m, bits or 16)}")


if __name__ == "__main__":
    main()
