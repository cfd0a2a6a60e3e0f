"""Experiment: TFLOP/s of the cluster-2 SM90 kernels at 8192^3 bf16 against the number of
clusters the persistent grid launches (is the driver's co-resident estimate reachable?)."""

from __future__ import annotations

import torch

from bench.timing import median_ms
from gemm_runtime import Gemm
from gemm_runtime.plan import LaunchSpec


def main() -> None:
    gemm = Gemm()
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
    b = w.t()
    for kern in gemm.kernels:
        s = kern.spec
        if s.mainloop.value != "sm90" or s.cluster == 1 or s.b_order.value != "nk" or s.a_type.value != "bf16":
            continue
        for clusters in (66, 64, 62, 60, 56, 48, 33):
            kern.function.max_clusters = clusters
            gemm._fast._plans.clear()
            t = median_ms(lambda: gemm.matmul(a, b, out=out, kernel=LaunchSpec(kern.name, 1, 3)))
            print(f"{s.cta} c2 clusters={clusters}: {2 * n**3 / t / 1e9:.0f} TFLOP/s", flush=True)


if __name__ == "__main__":
    main()
