"""TFLOP/s of the SM90 smoke GEMM (TMA + mbarrier ring + wgmma, one 128x128 tile per
CTA, not persistent; templates/include/gemm/sm90/smoke_gemm.cuh) beside cuBLAS, one run:
where the building blocks start before the real SM90 family (issue 15).

    python -m bench.sm90_smoke"""

from __future__ import annotations

import time

import torch

from tests.sm90_smoke import SmokeKernel, launch


def _seconds(fn, reps: int = 10) -> float:
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


def main() -> None:
    from gemm_runtime import cuda_driver

    torch.cuda.init()
    cuda_driver.ensure_context(torch.cuda.current_device())
    print("| M=N=K | dtype | smoke TFLOP/s | cuBLAS TFLOP/s | ratio |\n|---|---|---:|---:|---:|")
    for size in (4096, 8192):
        for name, dt in (("bf16", torch.bfloat16), ("f16", torch.float16)):
            a = torch.randn(size, size, device="cuda", dtype=dt)
            b = torch.randn(size, size, device="cuda", dtype=dt)
            d = torch.empty(size, size, device="cuda", dtype=dt)
            kernel = SmokeKernel(name, name, 4)
            ours = _seconds(lambda: launch(kernel, a, b, d, size))
            ref = _seconds(lambda: torch.matmul(a, b.t(), out=d))
            flop = 2 * size**3
            print(f"| {size} | {name} | {flop / ours / 1e12:.0f} | {flop / ref / 1e12:.0f} | {ref / ours:.2f} |")


if __name__ == "__main__":
    main()
