"""Experiment: how fast any kernel can read a decode GEMM's weight bytes under this
project's measure (CUDA events around one launch, L2 emptied by a read before it), and
so the most a weight-only kernel could gain on its peers at M = 1.

PERFORMANCE.md's "what the measure allows" bounded a kernel's time by a model: the
timed launch of a one-element kernel (about 3.4 us) plus its bytes at copy bandwidth
(4.25 TB/s, a 2 GiB copy). A small read never reaches copy bandwidth: the first bytes
wait a DRAM round trip, and the grid fills and drains. This measures that instead. A
read kernel (no arithmetic: each thread XORs `loads` 16-byte non-caching loads in
flight, grid-strided, coalesced) is swept over grids of 1-16 CTAs an SM and 1-8 loads
in flight, and its fastest form per size is then timed interleaved with the peers:
this project's default (tuned) plan, fp16 cuBLAS on the unquantized weight and torch's
int4 kernel (W4).

Per llama3 layer at M = 1 (W4 and W8, groups of 128):
  - read us: the fastest read of the packed weight with its scales and zeros;
  - cuBLAS / read, int4 / read: the most a kernel reading those bytes could be faster
    than the peer (issue 17 asks 2.5x cuBLAS and 1.5x int4 on every llama3-8b layer);
  - read of copy: the read's bandwidth over the copy's (issue 17 asks 80% / 85% of
    copy bandwidth of the W4 / W8 layers of >= 100 MB of fp16 weight; issue 18 60% of
    the MoE decode rows: the touched experts' W4 bytes, beside Gemm.grouped_matmul's
    default and tuned plans, at 1 and 16 tokens, bench.moe's routings).

    python -m bench.experiments.read_bound [--models llama3-8b llama3-70b] [--bits 4 8]
    ncu --profile-from-start off --clock-control none --cache-control all \\
        python -m bench.experiments.read_bound --profile llama3-8b o
"""

from __future__ import annotations

import argparse
import ctypes
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import yaml

from bench import moe
from bench.decode_chain import GROUP, INT4_INNER_K_TILES
from bench.quant import ROOT, copy_bandwidth, launch_floor_us, tuned_choice
from gemm_runtime import DispatchPolicy, Gemm, cuda_driver
from gemm_runtime.compiler import compile_cubin
from gemm_runtime.packed_weight import PackedWeight, pack_for_gemm
from gemm_runtime.quant import quantize
from gemm_runtime.timing import interleaved_medians_ms, median_ms

THREADS = 256
LOADS = (1, 2, 4, 8)
CTAS_PER_SM = (1, 2, 4, 8, 16)

SOURCE = r"""
// kLoads 16-byte loads in flight per thread per step, grid-strided. The XOR of all of
// them goes to `sink` only if it equals one value (random data gives it once in 2^32
// launches): that keeps every load without a store per thread.
template <int kLoads>
__device__ __forceinline__ void read_bytes(const uint4* __restrict__ src, long long n16, unsigned* sink) {
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  unsigned acc = 0;
  for (; i + (kLoads - 1) * stride < n16; i += kLoads * stride) {
    uint4 v[kLoads];
#pragma unroll
    for (int u = 0; u < kLoads; ++u)
      asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                   : "=r"(v[u].x), "=r"(v[u].y), "=r"(v[u].z), "=r"(v[u].w)
                   : "l"(src + i + u * stride));
#pragma unroll
    for (int u = 0; u < kLoads; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < n16; i += stride) {
    const uint4 v = src[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) sink[0] = acc;
}
"""


def kernel_name(loads: int) -> str:
    return f"read_bytes_{loads}"


def source() -> str:
    entries = "".join(
        f'extern "C" __global__ void __launch_bounds__({THREADS}) {kernel_name(u)}(const uint4* src, long long n16, '
        f"unsigned* sink) {{ read_bytes<{u}>(src, n16, sink); }}\n"
        for u in LOADS
    )
    return SOURCE + entries


@dataclass
class Reader:
    """The read kernels, loaded, and a way to time a read of the first ``nbytes`` of a
    buffer (a multiple of 16) with a given grid and loads in flight."""

    functions: dict[int, cuda_driver.LoadedFunction]
    sms: int
    sink: torch.Tensor

    @classmethod
    def build(cls) -> Reader:
        major, minor = torch.cuda.get_device_capability()
        result = compile_cubin(source(), name="read_bound", arch=10 * major + minor, include_dirs=[], cache_dir=None)
        sink = torch.zeros(4, dtype=torch.int32, device="cuda")  # (makes torch's context current before the loads)
        functions = {u: cuda_driver.LoadedFunction(result.cubin, kernel_name(u), 0, THREADS) for u in LOADS}
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        return cls(functions, sms, sink)

    def call(self, buffer: torch.Tensor, nbytes: int, ctas: int, loads: int) -> Callable[[], None]:
        """A launch of the read of ``buffer``'s first ``nbytes`` on ``ctas`` CTAs, ``loads``
        loads in flight a thread, on the current stream."""
        params = [ctypes.c_void_p(buffer.data_ptr()), ctypes.c_longlong(nbytes // 16), ctypes.c_void_p(self.sink.data_ptr())]
        return launcher(self.functions[loads], ctas, params)

    def fastest(self, buffer: torch.Tensor, nbytes: int) -> tuple[float, Callable[[], None], str]:
        """(ms, call, form) of the fastest read of ``nbytes`` over the sweep."""
        best: tuple[float, Callable[[], None], str] = (math.inf, lambda: None, "")
        for per_sm in CTAS_PER_SM:
            for loads in LOADS:
                ctas = per_sm * self.sms
                if ctas * THREADS * loads * 16 > 4 * nbytes:  # most threads would read nothing
                    continue
                call = self.call(buffer, nbytes, ctas, loads)
                t = median_ms(call, reps=15, max_ms=100)
                if t < best[0]:
                    best = (t, call, f"{per_sm}/SM x {loads}")
        return best


def launcher(fn: cuda_driver.LoadedFunction, ctas: int, params: list) -> Callable[[], None]:
    """A launch of ``fn`` on ``ctas`` CTAs of THREADS threads with the ctypes ``params``, on
    the stream current when it is called."""
    pointers = (ctypes.c_void_p * len(params))(*[ctypes.addressof(p) for p in params])

    def launch() -> None:
        # params / pointers stay alive in this closure
        fn.launch((ctas, 1, 1), THREADS, 0, torch.cuda.current_stream().cuda_stream, ctypes.addressof(pointers))
        _ = params

    return launch


def decode_operands(n: int, k: int) -> tuple[torch.Tensor, ...]:
    """An M = 1 problem's operands: a random fp16 weight [N, K], torch's int4 form of a
    random 4-bit weight of that shape with its bf16 scales and zeros (groups of 128), and
    a random fp16 x [1, K] with its bf16 copy (the int4 kernel's activations)."""
    w = torch.randn(n, k, device="cuda", dtype=torch.float16) * 0.02
    q = torch.randint(0, 16, (n, k), dtype=torch.int32, device="cuda")
    int4 = torch._convert_weight_to_int4pack((q[:, ::2] << 4 | q[:, 1::2]).to(torch.uint8), INT4_INNER_K_TILES)
    sz = torch.randn(k // GROUP, n, 2, device="cuda", dtype=torch.bfloat16) * 0.01
    a = torch.randn(1, k, device="cuda", dtype=torch.float16)
    return w, int4, sz, a, a.to(torch.bfloat16)


def packed_bytes(packed: PackedWeight) -> int:
    """A PackedWeight's bytes with its scales and zeros, down to a multiple of 16 (the
    read's loads)."""
    return (packed.b.numel() * packed.b.element_size() + packed.v.numel() * packed.v.element_size()) // 16 * 16


def profile(reader: Reader, model: str, layer: str) -> None:
    """One launch each of the fastest read of ``model`` ``layer``'s W4 bytes, our tuned plan
    and torch's int4 kernel at M = 1, between cudaProfilerStart and Stop (the sweep and the
    tuning stay outside)."""
    n, k = yaml.safe_load((ROOT / "bench" / "shapes.yaml").read_text())["models"][model][layer]
    w, int4, sz, a, a_bf = decode_operands(n, k)
    packed = pack_for_gemm(quantize(w, bits=4, group_size=GROUP))
    nbytes = packed_bytes(packed)
    _, read, form = reader.fastest(torch.empty(nbytes // 4 + 1024, dtype=torch.int32, device="cuda"), nbytes)
    gemm = Gemm()
    out = torch.empty(1, n, device="cuda", dtype=torch.float16)
    plan = tuned_choice(gemm, a, packed, out)
    print(f"{model} {layer}: read {form}, ours {plan}", flush=True)
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    read()
    gemm.matmul(a, packed, out=out)
    torch._weight_int4pack_mm(a_bf, int4, GROUP, sz)
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["llama3-8b", "llama3-70b"])
    ap.add_argument("--bits", nargs="+", type=int, default=[4, 8], choices=(4, 8))
    ap.add_argument("--profile", nargs=2, metavar=("MODEL", "LAYER"),
                    help="W4, M = 1: launch the layer's fastest read, our tuned plan and torch int4 once each "
                         "between cudaProfilerStart / Stop, for ncu --profile-from-start off")  # fmt: skip
    args = ap.parse_args()
    reader = Reader.build()
    if args.profile is not None:
        profile(reader, *args.profile)
        return
    copy = copy_bandwidth()
    floor = launch_floor_us()
    print(f"{torch.cuda.get_device_name()}; copy bandwidth {copy / 1e12:.2f} TB/s; a timed launch's floor {floor:.1f} us")
    gemm = Gemm()
    shapes = yaml.safe_load((ROOT / "bench" / "shapes.yaml").read_text())["models"]
    largest = max(n * k for model in args.models for n, k in shapes[model].values())
    # the largest W8 weight, or all of an MoE layer's W4 experts, with scales and zeros (4 bytes a group of 128)
    experts = max(c.experts * 2 * c.intermediate * c.hidden // 2 for c in moe.CONFIGS.values())
    buffer = torch.randint(-(2**31), 2**31 - 1, (max(largest, experts) * 33 // 32 // 4 + 1024,), dtype=torch.int32,
                           device="cuda")  # fmt: skip

    print("\n| bits | layer | MB | read form | read us | ours us | cuBLAS us | int4 us | read of copy | ours of copy | "
          "cuBLAS / read | int4 / read | cuBLAS / ours | int4 / ours | ours / read |")  # fmt: skip
    print("|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for model in args.models:
        for layer, (n, k) in shapes[model].items():
            w, int4, sz, a, a_bf = decode_operands(n, k)
            for bits in args.bits:
                packed = pack_for_gemm(quantize(w, bits=bits, group_size=GROUP))
                nbytes = packed_bytes(packed)
                _, read, form = reader.fastest(buffer, nbytes)
                out_d, out_h = (torch.empty(1, n, device="cuda", dtype=torch.float16) for _ in range(2))
                tuned_choice(gemm, a, packed, out_d)
                fns = [read, lambda: gemm.matmul(a, packed, out=out_d), lambda: torch.matmul(a, w.t(), out=out_h)]
                if bits == 4:
                    fns.append(lambda: torch._weight_int4pack_mm(a_bf, int4, GROUP, sz))
                t = [x * 1e3 for x in interleaved_medians_ms(fns, reps=40)]
                t_int4 = t[3] if bits == 4 else math.nan
                bw = nbytes / copy * 1e6
                print(f"| {bits} | {model} {layer} | {nbytes / 1e6:.1f} | {form} | {t[0]:.1f} | {t[1]:.1f} | {t[2]:.1f} | "
                      f"{t_int4:.1f} | {bw / t[0]:.0%} | {bw / t[1]:.0%} | {t[2] / t[0]:.2f} | {t_int4 / t[0]:.2f} | "
                      f"{t[2] / t[1]:.2f} | {t_int4 / t[1]:.2f} | {t[1] / t[0]:.2f} |", flush=True)  # fmt: skip
            del w, int4

    print("\n| MoE decode row | tokens | projection | MB (W4, touched experts) | read form | read us | ours us | "
          "ours tuned us | tuned / read | read of copy | ours of copy | tuned of copy |")  # fmt: skip
    print("|---|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    tuned = Gemm()  # the measured plans; `gemm` keeps the default (cost model) ones
    names = {"mixtral": "Mixtral-like", "qwen": "Qwen-MoE-like"}
    for cfg, tokens, proj, routing, a, w, d in moe.sorted_problems([1, 16], torch.Generator().manual_seed(0),
                                                                   w4_group=GROUP):  # fmt: skip
        nbytes = moe.touched_packed_bytes(routing, w) // 16 * 16
        _, read, form = reader.fastest(buffer, nbytes)
        tuned.grouped_matmul(a, w, routing.offsets, out=d, dispatch=DispatchPolicy.MEASURE)
        t_read, t_ours, t_tuned = (x * 1e3 for x in interleaved_medians_ms(
            [read, lambda: gemm.grouped_matmul(a, w, routing.offsets, out=d),  # noqa: B023
             lambda: tuned.grouped_matmul(a, w, routing.offsets, out=d)], reps=40))  # noqa: B023  # fmt: skip
        bw = nbytes / copy * 1e6
        print(f"| {names[cfg]} | {tokens} | {proj} | {nbytes / 1e6:.1f} | {form} | {t_read:.1f} | {t_ours:.1f} | "
              f"{t_tuned:.1f} | {t_tuned / t_read:.2f} | {bw / t_read:.0%} | {bw / t_ours:.0%} | {bw / t_tuned:.0%} |",
              flush=True)  # fmt: skip

if __name__ == "__main__":
    main()
