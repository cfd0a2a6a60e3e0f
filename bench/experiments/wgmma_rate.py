"""Experiment: what a consumer warpgroup can do beside its wgmma, per token width. A probe
kernel (one CTA per SM, no producer, no global traffic) runs the quantized family's
consumer loop with everything but the arithmetic taken out: per K tile of 64, four
m64nNk16 wgmma (A from registers as kernel_sm90_quant.cuh issues them, or both operands
from shared memory as kernel_sm90.cuh does), one group kept in flight, and between
commit and wait `alu` independent instructions per thread on the other register set
(the dequantization's budget: kernel_sm90_quant.cuh issues about 140 instructions per
thread and K tile, ncu): LOP3s with three vector-register operands (the integer pipe),
HFMA2s (the FP pipe), integer instructions with one vector-register operand and an
immediate (`alu_imm`: IADD3 / LOP3 x, imm, RZ), or LOP3s on warp-uniform values that
ptxas keeps in the uniform datapath (`uniform`: ULOP3, no vector register; they feed the
next K tile's B descriptor so that ptxas keeps them there). It reports the clocks per K
tile and the rate in TFLOP/s of the whole GPU:

    python -m bench.experiments.wgmma_rate [--tokens 64 128 256] [--alu 0 32 64 128 192] [--warpgroups 1 2]
        [--ops lop3 hfma2 alu_imm uniform] [--forms registers shared] [--blocks 1 2]

--blocks 2 gives each warpgroup two m64 blocks of weight rows (eight wgmma a K tile into
two accumulator sets), as a consumer of 128 weight rows would run: whether the loop's
fixed instructions, spread over twice the weights, buy more than the second block's
accumulators cost.

Where the clocks per K tile stay at the wgmma's own with `alu` instructions beside
them, dequantization of that cost is hidden; where they grow, it is not. The fifth
session's variants put the 64-token tile's K loop at about 800 clocks where its wgmma
need 256 (docs/NOTES.md): this says whether the instruction form or the loop is why.
The sixteenth session found nearly nothing hidden beside N = 64 (1.4-1.8 clocks per LOP3
or HFMA2 a thread) and about 100 instructions beside N = 256. The `alu_imm` and `uniform`
ops say what a running wgmma takes from the warps beside it: if `uniform` is hidden at
N = 64 where `lop3` is not, the vector register file's ports (which a wgmma reads its
accumulators and register A through) are the limit, and `alu_imm` (one read where lop3
has three) should fall between; if `uniform` costs as much as `lop3`, it is the issue of
the instructions themselves (the sub-partition's dispatch), whatever they read.
The thirty-seventh session's run (docs/perf/wgmma_rate_kinds.md, H100) found neither
alone: beside N = 64 each `uniform` instruction cost about an issue slot as `lop3` did
(1.0 and 1.15 clocks a warp instruction), `alu_imm` 0.6.
(The instruction classes were checked in the probes' SASS, NVRTC 13.0: `uniform` 64 a
thread gives 128 ULOP3 in the two-K-tile loop and no vector LOP3; `alu_imm` 64 gives
64 LOP3 and 64 VIADD / IADD3 with one register and an immediate each.)
"""

from __future__ import annotations

import argparse
import ctypes
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import torch

from codegen.render import INCLUDE_DIR
from gemm_runtime import cuda_driver
from gemm_runtime.compiler import compile_cubin

K_TILE = 64
SOURCE = r"""
#include "gemm/sm90/ptx_sm90.cuh"
using namespace gemm;

// A K tile's worth of `alu` instructions, issued as independent chains of four so that
// they are not one dependent string. kOp 0: LOP3 on `a` (x ^ c ^ z, flipping a low
// mantissa bit; three vector-register operands); 1: HFMA2 on `a` (x * one + z); 2: the
// integer pipe with one vector-register operand (x + 0x10001, then x ^ 2: LOP3 / IADD3
// with an immediate and RZ; alternating so that ptxas cannot fold a chain into one);
// 3: LOP3 on warp-uniform values `u` (the kernel's arguments), which ptxas keeps in
// uniform registers (ULOP3, the uniform datapath: no vector register at all). `one`
// (1.0 twice) and `z` (0) are kernel arguments: with constants ptxas folds the
// identities away (x ^ c ^ c, x * 1 + 0), and `a` and `u` are summed into the result at
// the end so that the shared-memory form, whose wgmma do not read `a`, keeps them too.
template <int kAlu, int kOp>
__device__ __forceinline__ void busy(u32 (&a)[2][2][4], u32 (&u)[4], u32 c, u32 one, u32 z) {
#pragma unroll
  for (int i = 0; i < kAlu; ++i) {
    u32& x = a[(i / 8) % 2][(i / 4) % 2][i % 4];
    if constexpr (kOp == 1) {
      asm volatile("fma.rn.f16x2 %0, %0, %1, %2;\n" : "+r"(x) : "r"(one), "r"(z));
    } else if constexpr (kOp == 2) {
      if ((i / 16) % 2) {
        asm volatile("xor.b32 %0, %0, 2;\n" : "+r"(x));
      } else {
        asm volatile("add.u32 %0, %0, 0x10001;\n" : "+r"(x));
      }
    } else if constexpr (kOp == 3) {
      asm volatile("lop3.b32 %0, %0, %1, %2, 0x96;\n" : "+r"(u[i % 4]) : "r"(one), "r"(z));
    } else {
      asm volatile("lop3.b32 %0, %0, %1, %2, 0x96;\n" : "+r"(x) : "r"(c), "r"(z));
    }
  }
}

// kBlocks: m64 blocks of weight rows per warpgroup (a consumer with 64 x kBlocks rows):
// per K tile, 4 wgmma into each block's accumulators, in one commit group, and the
// `alu` instructions split between the blocks' register sets.
template <int N, bool kRegisterA, int kAlu, int kWarpgroups, bool kHandshake, int kOp, int kBlocks>
__device__ __forceinline__ void probe(long long* clocks, float* sink, int iters, u32 one, u32 z) {
  extern __shared__ unsigned char smem_raw[];
  const u32 base = (smem_addr(smem_raw) + 1023u) & ~1023u;
  constexpr int kBytesB = N * 64 * 2, kBytesA = kBlocks * 64 * 64 * 2;
  const int wg = threadIdx.x / 128;
  // kHandshake: per K tile, as the GEMM consumers wait for a full stage and release it,
  // each warp's lane 0 arrives on its warpgroup's mbarrier and the warpgroup waits for
  // the phase to complete.
  __shared__ u64 handshake[kWarpgroups];
  if (kHandshake && threadIdx.x < kWarpgroups) mbar_init(smem_addr(&handshake[threadIdx.x]), 4);
  if (kHandshake) fence_mbarrier_init();
  // Small finite halves (0x2c00 = 1/16 with low bits varying) in B and A.
  for (int i = threadIdx.x; i < (kBytesB + kWarpgroups * kBytesA) / 4; i += blockDim.x)
    st_shared(base + 4u * i, 0x2c002c00u | (static_cast<u32>(i) & 0x00ff00ffu));
  fence_proxy_async_smem();
  __syncthreads();
  const u64 desc_b0 = smem_desc_kmajor_sw128(base);
  const u64 desc_a = smem_desc_kmajor_sw128(base + kBytesB + wg * kBytesA);
  u32 a[2][kBlocks][2][2][4];  // [register set][block][k32 block][k16 step][register], as kernel_sm90_quant.cuh
#pragma unroll
  for (int s = 0; s < 2; ++s)
#pragma unroll
    for (int bl = 0; bl < kBlocks; ++bl)
#pragma unroll
      for (int k = 0; k < 4; ++k)
#pragma unroll
        for (int r = 0; r < 4; ++r) a[s][bl][k / 2][k % 2][r] = 0x2c002c00u | ((threadIdx.x + 4 * k + r + bl) & 0xffu);
  float acc[kBlocks][N / 2];
#pragma unroll
  for (int bl = 0; bl < kBlocks; ++bl)
#pragma unroll
    for (int i = 0; i < N / 2; ++i) acc[bl][i] = 0.f;
  const u32 c = 0x00010001u * (threadIdx.x & 1u);
  u32 u[4] = {one, z, one ^ 1u, z ^ 1u};
  const long long t0 = clock64();
  for (int it = 0; it < iters; it += 2) {
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      // kOp 3: the uniform chains feed this K tile's B descriptor (`z` is 0, so the
      // offset is too): a value the wgmma's uniform operand needs is what ptxas computes
      // in the uniform datapath, and the wgmma wait for it as they wait for the
      // dequantized A fragments of the GEMM.
      const u64 desc_b = kOp == 3 ? desc_b0 + ((u[0] ^ u[1] ^ u[2] ^ u[3]) & z) : desc_b0;
      wgmma_fence();
#pragma unroll
      for (int bl = 0; bl < kBlocks; ++bl)
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          if constexpr (kRegisterA) {
            wgmma_rs<N, MmaF16>(acc[bl], a[s][bl][k / 2][k % 2], smem_desc_advance(desc_b, 32 * k), true);
          } else {
            wgmma_ss<N, MmaF16>(acc[bl], smem_desc_advance(desc_a, bl * 64 * 128 + 32 * k),
                                smem_desc_advance(desc_b, 32 * k), true);
          }
        }
      wgmma_commit();
      wgmma_wait<1>();
#pragma unroll
      for (int bl = 0; bl < kBlocks; ++bl) wgmma_fence_operand(a[s ^ 1][bl]);
      if constexpr (kHandshake) {
        const u32 bar = smem_addr(&handshake[wg]);
        if (threadIdx.x % 32 == 0) mbar_arrive(bar);
        mbar_wait(bar, static_cast<u32>(it + s) & 1u);
      }
#pragma unroll
      for (int bl = 0; bl < kBlocks; ++bl) busy<kAlu / kBlocks, kOp>(a[s ^ 1][bl], u, c, one, z);
    }
  }
  wgmma_wait<0>();
#pragma unroll
  for (int bl = 0; bl < kBlocks; ++bl) wgmma_fence_operand(acc[bl]);
  const long long t1 = clock64();
  if (threadIdx.x % 128 == 0) clocks[blockIdx.x * kWarpgroups + wg] = t1 - t0;
  float total = 0.f;
#pragma unroll
  for (int bl = 0; bl < kBlocks; ++bl)
#pragma unroll
    for (int i = 0; i < N / 2; ++i) total += acc[bl][i];
#pragma unroll
  for (int i = 0; i < 32 * kBlocks; ++i) total += static_cast<float>((&a[0][0][0][0][0])[i] & 0xffu);
#pragma unroll
  for (int i = 0; i < 4; ++i) total += static_cast<float>(u[i] & 0xffu);
  if (total == 12345.f) sink[threadIdx.x] = total;  // keeps the sums (never true for these inputs)
}
"""


OPS = ("lop3", "hfma2", "alu_imm", "uniform")  # busy()'s kOp, in order


@dataclass(frozen=True)
class Probe:
    """One probe kernel: wgmma N (`tokens`), A from registers or shared memory, `alu`
    instructions (`op`) per thread and K tile beside the wgmma, consumer `warpgroups`,
    the per-K-tile mbarrier round (`handshake`), m64 weight `blocks` per warpgroup."""

    tokens: int
    register_a: bool
    alu: int
    warpgroups: int
    handshake: bool = False
    op: str = "lop3"
    blocks: int = 1

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ValueError(f"op: got {self.op!r}, accepted: {', '.join(OPS)}")
        if self.blocks not in (1, 2) or self.alu % self.blocks:
            raise ValueError(f"blocks: got {self.blocks} (alu {self.alu}), accepted: 1 or 2, dividing alu")

    @property
    def name(self) -> str:
        return (f"wgmma_rate_n{self.tokens}_{'rs' if self.register_a else 'ss'}_{self.op}{self.alu}"
                f"_wg{self.warpgroups}_b{self.blocks}" + ("_hs" if self.handshake else ""))  # fmt: skip

    @property
    def source(self) -> str:
        flags = ", ".join([str(self.tokens), str(self.register_a).lower(), str(self.alu), str(self.warpgroups),
                           str(self.handshake).lower(), str(OPS.index(self.op)), str(self.blocks)])  # fmt: skip
        return SOURCE + (
            f'extern "C" __global__ void __launch_bounds__({128 * self.warpgroups}, 1) {self.name}(long long* clocks, '
            f"float* sink, int iters, unsigned one, unsigned z) {{\n  probe<{flags}>(clocks, sink, iters, one, z);\n}}\n"
        )

    @property
    def fits_register_file(self) -> bool:
        """The accumulators (N / 2 floats a thread per m64 block) and the register A
        fragments with some room, within a thread's share of the 64K registers at one CTA
        an SM: N = 256 with four warpgroups needs 128 accumulators of 128 registers."""
        budget = min(255, 65536 // (128 * self.warpgroups))
        return self.blocks * self.tokens // 2 + 32 <= budget

    @property
    def smem_bytes(self) -> int:
        """The operands' bytes, and at least 120 KiB: one CTA per SM, as the GEMM kernels run."""
        operands = self.tokens * K_TILE * 2 + self.warpgroups * self.blocks * 64 * K_TILE * 2 + 1024
        return max(operands, 120 * 1024)


def compile_probes(probes):
    """[(Probe, CompileResult)]."""

    def build(probe: Probe):
        return probe, compile_cubin(probe.source, name=probe.name, arch=90, include_dirs=[INCLUDE_DIR], cache_dir=None,
                                    target="sm_90a")  # fmt: skip

    with ThreadPoolExecutor(max_workers=8) as pool:
        return list(pool.map(build, probes))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", nargs="+", type=int, default=[64, 128, 256], help="wgmma N")
    ap.add_argument("--alu", nargs="+", type=int, default=[0, 32, 64, 128, 192], help="instructions per thread and K tile")
    ap.add_argument("--warpgroups", nargs="+", type=int, default=[1, 2], help="consumer warpgroups per CTA")
    ap.add_argument("--iters", type=int, default=4096, help="K tiles per warpgroup (even)")
    ap.add_argument("--ops", nargs="+", choices=OPS, default=["lop3"], help="the instruction beside the wgmma")
    ap.add_argument("--forms", nargs="+", choices=("registers", "shared"), default=["registers", "shared"],
                    help="where A comes from")  # fmt: skip
    ap.add_argument("--blocks", nargs="+", type=int, choices=(1, 2), default=[1],
                    help="m64 blocks of weight rows per warpgroup (alu counts both blocks' instructions)")
    ap.add_argument("--handshake", action="store_true", help="also the per-K-tile mbarrier round")
    args = ap.parse_args()
    probes = [Probe(n, form == "registers", alu, w, False, op, b) for form in args.forms for op in args.ops
              for b in args.blocks for n in args.tokens for alu in args.alu for w in args.warpgroups
              if alu % b == 0]  # fmt: skip
    if args.handshake:
        probes += [Probe(n, True, alu, w, True, op) for op in args.ops for n in args.tokens
                   for alu in (0, max(args.alu)) for w in args.warpgroups]  # fmt: skip
    fitting = [p for p in probes if p.fits_register_file]
    for probe in (p for p in probes if p not in fitting):
        print(f"skipped {probe.name}: its accumulators do not fit a thread's registers", file=sys.stderr)
    built = compile_probes(fitting)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    sink = torch.zeros(256, device="cuda")
    stream = torch.cuda.current_stream().cuda_stream
    print("| tokens (N) | A | op | per thread / K tile | warpgroups | blocks | mbarrier per K tile | registers | "
          "clocks / K tile | TFLOP/s |")  # fmt: skip
    print("|---:|---|---|---:|---:|---:|---|---:|---:|---:|")
    for probe, result in built:
        threads = 128 * probe.warpgroups
        fn = cuda_driver.LoadedFunction(result.cubin, probe.name, probe.smem_bytes, threads)
        clocks = torch.zeros(sms * probe.warpgroups, dtype=torch.int64, device="cuda")
        params = [ctypes.c_void_p(clocks.data_ptr()), ctypes.c_void_p(sink.data_ptr()), ctypes.c_int(args.iters),
                  ctypes.c_uint(0x3C003C00), ctypes.c_uint(0)]  # one (1.0 twice), z: see busy()
        pointers = (ctypes.c_void_p * len(params))(*[ctypes.addressof(p) for p in params])
        fn.launch((sms, 1, 1), threads, probe.smem_bytes, stream, ctypes.addressof(pointers))  # warm-up
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn.launch((sms, 1, 1), threads, probe.smem_bytes, stream, ctypes.addressof(pointers))
        end.record()
        torch.cuda.synchronize()
        per_tile = clocks.double().median().item() / args.iters
        flops = 2.0 * 64 * probe.blocks * probe.warpgroups * probe.tokens * K_TILE * args.iters * sms
        print(f"| {probe.tokens} | {'registers' if probe.register_a else 'shared'} | {probe.op} | {probe.alu} | "
              f"{probe.warpgroups} | {probe.blocks} | {'yes' if probe.handshake else 'no'} | {result.registers} | "
              f"{per_tile:.0f} | {flops / start.elapsed_time(end) / 1e9:.0f} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
