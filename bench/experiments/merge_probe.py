"""Experiment: what merging a partial tile costs when every SM merges at once, through L2
against through distributed shared memory (issue 16's stream-K hand-over).

At the end of a stream-K launch most CTAs hand a partial tile to another CTA at the same
moment (docs/NOTES.md, forty-second session: 84 partial tiles of 64 KB on 8b qkv at 128
tokens). sm90_quant moves them through L2: the giver stores its fp32 sums and raises a
flag, the taker waits for the flag and loads them. In a cluster the giver could store
them straight into the taker's shared memory instead. Before building that into the
kernel, this times the two paths alone: a grid of CTA pairs (clusters of 2, as many as
the GPU holds at once), each CTA holding a partial of `kb` KB in registers (256 threads),
the pair's rank 1 giving it to rank 0, which adds it to its own:

  - none: no merge (the baseline: launch, the sums made and kept);
  - l2: rank 1 stores with st.global.cg, a barrier, thread 0 releases a flag at GPU scope;
    rank 0's thread 0 acquires it, a barrier, then every thread loads with ld.global.cg;
  - dsmem: rank 1 stores into rank 0's shared memory through the shared::cluster window
    (mapa, st.shared::cluster.v4), a cluster barrier (release / acquire), rank 0 loads
    from its own shared memory.

Each launch's time, interleaved, medians (L2 emptied by a read before every launch);
merge us = mode - none. The sums are checked against the host's once per mode.

    python -m bench.experiments.merge_probe [--kb 32 64]

First run in the forty-third session (H100, docs/perf/merge_probe_h100.md): at 64 KB the
merge through distributed shared memory cost 1.31-1.35x less than through L2 (2.2-2.4 us
against 3.0-3.1), too little to build a cluster merge on.
"""

from __future__ import annotations

import argparse
import ctypes
from dataclasses import dataclass

import torch

from codegen.render import INCLUDE_DIR
from gemm_runtime import cuda_driver
from gemm_runtime.compiler import compile_cubin
from gemm_runtime.timing import interleaved_medians_ms

THREADS = 256
MODES = ("none", "l2", "dsmem")

SOURCE = r"""
#include "gemm/ptx.cuh"
#include "gemm/sm90/ptx_sm90.cuh"
using namespace gemm;

// kFloats sums a thread (kFloats * 1 KB a CTA); kMode: 0 none, 1 through L2, 2 through
// distributed shared memory. A float4 j of thread t sits at float (j * 256 + t) * 4 of the
// partial, so a warp's 16-byte accesses cover 512 contiguous bytes.
template <int kFloats, int kMode>
__device__ __forceinline__ void merge_probe(float* partials, int* flags, float* out, int epoch) {
  extern __shared__ __align__(16) float landing[];
  const int tid = threadIdx.x;
  const u32 rank = cluster_ctarank();
  const int pair = blockIdx.x / 2;
  float acc[kFloats];
#pragma unroll
  for (int i = 0; i < kFloats; ++i) acc[i] = static_cast<float>((blockIdx.x * 7 + tid * 3 + i) % 17);
  if constexpr (kMode == 1) {
    float* slot = partials + static_cast<long long>(pair) * 256 * kFloats;
    if (rank == 1) {
#pragma unroll
      for (int j = 0; j < kFloats / 4; ++j)
        asm volatile("st.global.cg.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(slot + (j * 256 + tid) * 4),
                     "f"(acc[4 * j]), "f"(acc[4 * j + 1]), "f"(acc[4 * j + 2]), "f"(acc[4 * j + 3])
                     : "memory");
      __syncthreads();
      if (tid == 0) st_release_gpu(flags + pair, epoch);
    } else {
      if (tid == 0) {
        while (ld_acquire_gpu(flags + pair) != epoch) {
        }
      }
      __syncthreads();
#pragma unroll
      for (int j = 0; j < kFloats / 4; ++j) {
        float v[4];
        asm volatile("ld.global.cg.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                     : "=f"(v[0]), "=f"(v[1]), "=f"(v[2]), "=f"(v[3])
                     : "l"(slot + (j * 256 + tid) * 4)
                     : "memory");
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[4 * j + e] += v[e];
      }
    }
  } else if constexpr (kMode == 2) {
    if (rank == 1) {
      const u32 theirs = map_shared_rank(smem_addr(landing), 0);
#pragma unroll
      for (int j = 0; j < kFloats / 4; ++j)
        asm volatile("st.shared::cluster.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(
                         theirs + static_cast<u32>((j * 256 + tid) * 16)),
                     "f"(acc[4 * j]), "f"(acc[4 * j + 1]), "f"(acc[4 * j + 2]), "f"(acc[4 * j + 3])
                     : "memory");
    }
    cluster_sync();  // rank 1's stores are visible to rank 0 (release / acquire at cluster scope)
    if (rank == 0) {
#pragma unroll
      for (int j = 0; j < kFloats / 4; ++j) {
        const float4 v = reinterpret_cast<const float4*>(landing)[j * 256 + tid];
        acc[4 * j] += v.x;
        acc[4 * j + 1] += v.y;
        acc[4 * j + 2] += v.z;
        acc[4 * j + 3] += v.w;
      }
    }
  }
  if (rank == 0) {
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < kFloats; ++i) s += acc[i];
    out[pair * 256 + tid] = s;
  }
}
"""


def kernel_name(kb: int, mode: str) -> str:
    return f"merge_probe_{mode}_{kb}kb"


def source(kbs: list[int]) -> str:
    entries = "".join(
        f'extern "C" __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__({THREADS}, 1) '
        f"{kernel_name(kb, mode)}(float* partials, int* flags, float* out, int epoch) "
        f"{{ merge_probe<{kb}, {MODES.index(mode)}>(partials, flags, out, epoch); }}\n"
        for kb in kbs
        for mode in MODES
    )
    return SOURCE + entries


def expected_sums(pairs: int, kb: int, merged: bool) -> torch.Tensor:
    """Rank 0's per-thread sums of each pair, as the kernel makes them: its own partial
    plus, where `merged`, rank 1's."""
    tid = torch.arange(THREADS).view(1, THREADS, 1)
    i = torch.arange(kb).view(1, 1, kb)
    block0 = (2 * torch.arange(pairs)).view(pairs, 1, 1)
    sums = ((block0 * 7 + tid * 3 + i) % 17).float().sum(-1)
    if merged:
        sums += (((block0 + 1) * 7 + tid * 3 + i) % 17).float().sum(-1)
    return sums


@dataclass
class Probe:
    fn: cuda_driver.LoadedFunction
    mode: str
    kb: int


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kb", nargs="+", type=int, default=[32, 64], choices=(16, 32, 64), help="partial KB a CTA")
    args = ap.parse_args()
    major, minor = torch.cuda.get_device_capability()
    result = compile_cubin(source(args.kb), name="merge_probe", arch=10 * major + minor, include_dirs=[INCLUDE_DIR],
                           cache_dir=None)  # fmt: skip
    torch.zeros(1, device="cuda")  # (makes torch's context current before the loads)
    stream = torch.cuda.current_stream().cuda_stream
    print(f"{torch.cuda.get_device_name()}")
    print("| partial KB a CTA | pairs | none us | l2 us | dsmem us | l2 merge us | dsmem merge us | l2 / dsmem |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for kb in args.kb:
        smem = kb * 1024
        probes = [Probe(cuda_driver.LoadedFunction(result.cubin, kernel_name(kb, m), smem, THREADS, cluster=2), m, kb)
                  for m in MODES]  # fmt: skip
        pairs = min(p.fn.max_clusters for p in probes)
        partials = torch.empty(pairs * THREADS * kb, device="cuda")
        flags = torch.zeros(pairs, dtype=torch.int32, device="cuda")
        out = torch.empty(pairs * THREADS, device="cuda")
        epoch = [0]

        def call(probe: Probe) -> None:
            epoch[0] += 1  # a new flag value every launch: no reset between them
            params = [ctypes.c_void_p(partials.data_ptr()), ctypes.c_void_p(flags.data_ptr()),
                      ctypes.c_void_p(out.data_ptr()), ctypes.c_int(epoch[0])]  # fmt: skip
            pointers = (ctypes.c_void_p * len(params))(*[ctypes.addressof(p) for p in params])
            probe.fn.launch((2 * pairs, 1, 1), THREADS, smem, stream, ctypes.addressof(pointers))

        for probe in probes:
            out.fill_(float("nan"))
            call(probe)
            want = expected_sums(pairs, kb, probe.mode != "none").to(out.device)
            if not torch.equal(out.view(pairs, THREADS), want):
                raise SystemExit(f"{kernel_name(kb, probe.mode)}: wrong sums")
        t = [x * 1e3 for x in interleaved_medians_ms([lambda p=p: call(p) for p in probes], reps=50)]
        print(f"| {kb} | {pairs} | {t[0]:.2f} | {t[1]:.2f} | {t[2]:.2f} | {t[1] - t[0]:.2f} | {t[2] - t[0]:.2f} | "
              f"{(t[1] - t[0]) / max(t[2] - t[0], 1e-3):.2f} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
