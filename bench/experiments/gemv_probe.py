"""Experiment: a W4A16 decode kernel shaped like a read (issue 17's M = 1 bars).

bench.experiments.read_bound found this project's M = 1 W4 plans 1.4x slower than a
bare read of the same bytes on the small llama3-8b layers (H100: 8b o 9.5 us against
6.8, qkv 11.5 against 8.0), where the read reaches 2.6-2.8x fp16 cuBLAS. The default
set's narrow decode tiles (16 columns a CTA, 8 warps along K, the weights one K tile
ahead into registers, A through a cp.async ring in shared memory, a barrier per K tile)
keep about as many bytes in flight as the read's fastest forms, so this asks whether a
kernel without the ring, the per-K-tile barriers and the staged A tiles gets closer:

  one CTA per `rows` n8 rows of the packed weight (8 x rows columns of D), `warps` warps
  along K, each with a contiguous run of groups of 128; a group's packed words (one
  32-bit word a lane and block, 128 contiguous bytes a warp) loaded one group ahead into
  registers, the first group's before anything else; x staged once in shared memory and
  given to m16n8k16's A row 0 by ldmatrix, rows 1-7 pointed at 16 zero bytes (so lanes
  4-31 receive zeros); dequantization as every quantized kernel here (gemm/dequant.cuh);
  the warps' sums met in shared memory.

Two knobs since the forty-fourth session: `--depth` groups of packed words in flight a
warp (2: the first form's one group ahead), and `--form swapped`, which computes D^T = W .
x^T on the same instruction: the packed words of two n8 rows are, register for register,
m16n8k16's A fragment (rows g and g + 8), x is B (every column the same token), so a
packed word takes one MMA instead of two, and the weights enter as their bare codes
(gemm/dequant.cuh's deferred form: one or two LOP3 a register instead of three
instructions), scaled per group as s * sum(x q) - s * z * sum(x). That is how the default
decode tiles already multiply (gemm/warp_mma_quant.cuh, mma_transposed), so the swapped
form puts their arithmetic in this probe's structure.

fp16, 4-bit, groups of 128, M = 1, K a multiple of 128 and N of 8 (the llama3 layers).
Timed interleaved with the fastest read of the packed bytes (read_bound's sweep), the
default tuned plan, fp16 cuBLAS and torch's int4 kernel; its output against the default
plan's (max |diff| over max |out|). docs/perf/gemv_probe_h100.md has the runs: no form
beat the default plans.

    python -m bench.experiments.gemv_probe [--models llama3-8b] [--warps 8 16] [--rows 1 2 4] [--depth 2 4]
        [--form plain swapped]
"""

from __future__ import annotations

import argparse
import ctypes
import itertools

import torch
import yaml

from bench.decode_chain import GROUP
from bench.experiments.read_bound import Reader, decode_operands, packed_bytes
from bench.quant import ROOT, copy_bandwidth, launch_floor_us, tuned_choice
from codegen.render import INCLUDE_DIR
from gemm_runtime import Gemm, cuda_driver
from gemm_runtime.compiler import compile_cubin
from gemm_runtime.packed_weight import pack_for_gemm
from gemm_runtime.quant import quantize
from gemm_runtime.timing import interleaved_medians_ms

SOURCE = r"""
#include "gemm/dequant.cuh"
#include "gemm/ptx.cuh"
using namespace gemm;

// kRows n8 rows of the packed weight a CTA (8 kRows columns of D), kWarps warps along K,
// each a contiguous run of groups of 128; x staged once in shared memory; kDepth groups'
// packed words in flight a warp (the one multiplied and kDepth - 1 ahead), the first
// ones asked for before anything else.
//   kSwapped false: m16n8k16 with x as A's row 0 (ldmatrix, rows 1-7 pointed at 16 zero
//     bytes) and the dequantized weights (Dequant::apply) as B: two MMAs a packed word.
//   kSwapped true (kRows even): D^T = W . x^T on the same instruction, the weights of two
//     n8 rows as A (16 rows: the packed words of rows 2p and 2p + 1 are, register for
//     register, m16n8k16's A fragment rows g and g + 8) and x as B, every column the same
//     token: one MMA a packed word. The weights enter as their bare codes (Dequant's
//     deferred form, q * 2^-24, the high nibbles 16 q * 2^-24 met by x / 16); per group
//     the sums P become s * 2^24 * P - s * z * R with R the group's sum of x.
template <int kWarps, int kRows, int kDepth, bool kSwapped>
__device__ __forceinline__ void gemv_w4(const u32* __restrict__ b, const u16* __restrict__ v,
                                        const u16* __restrict__ x, u16* __restrict__ d, int n, int k, int groups,
                                        long long row_words, int np) {
  static_assert(!kSwapped || kRows % 2 == 0, "the swapped form takes n8 rows in pairs");
  using Dq = Dequant<Half, 4>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __shared__ float partial[kWarps][8 * kRows];
  u16* xs = reinterpret_cast<u16*>(smem_raw);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int row0 = blockIdx.x * kRows;
  const int per_warp = (groups + kWarps - 1) / kWarps;
  const int first = warp * per_warp, last = min(groups, first + per_warp);
  const u32* src = b + row0 * row_words + lane;
  // kSwapped false: ldmatrix: lane L gives row L % 8 of matrix L / 8; row 0 is x's 8
  // halves, the others zeros.
  const u32 x_base = smem_addr(xs), zeros = smem_addr(xs + k);
  const int m = lane >> 3;
  const u32 lane_x = (lane & 7) == 0 ? x_base + 2 * (16 * (m >> 1) + 8 * (m & 1)) : zeros;
  const u32 lane_step = (lane & 7) == 0 ? 64u : 0u;  // bytes of x per pair of k16 steps
  // kSwapped: x's B fragment of k16 step s for lane (g, t) at xs[(4 s + t) * 4]: x[16 s + 2 t],
  // x[16 s + 2 t + 1], x[16 s + 2 t + 8] / 16, x[16 s + 2 t + 9] / 16.
  const u32 lane_xb = x_base + 8 * t;
  constexpr int kPairs = kSwapped ? kRows / 2 : 1;
  float acc[kRows][4];
#pragma unroll
  for (int r = 0; r < kRows; ++r) acc[r][0] = acc[r][1] = acc[r][2] = acc[r][3] = 0.f;
  using Words = u32[kRows][4][1];
  Words buf[kDepth];  // indexed by unrolled constants only: registers, no local memory
  // Each row's base once; a group's four blocks are then constant offsets of one pointer.
  const u32* rows[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) rows[r] = src + r * row_words;
  auto load_group = [&](int grp, Words& into) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const u32* at = rows[r] + grp * 128;
#pragma unroll
      for (int blk = 0; blk < 4; ++blk) ld_stream(into[r][blk], at + blk * 32);
    }
  };
  auto multiply = [&](int grp, const Words& w) {
    if constexpr (kSwapped) {
      // R: the group's sum of x, from global memory (L1 / L2: every warp reads x).
      const uint2 xr = *reinterpret_cast<const uint2*>(x + grp * 128 + 4 * lane);
      float sum = f16_to_f32(static_cast<u16>(xr.x)) + f16_to_f32(static_cast<u16>(xr.x >> 16)) +
                  f16_to_f32(static_cast<u16>(xr.y)) + f16_to_f32(static_cast<u16>(xr.y >> 16));
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
#pragma unroll
      for (int p = 0; p < kPairs; ++p) {
        float sums[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int blk = 0; blk < 4; ++blk) {
          BlockFragments lo, hi;  // rows 2p and 2p + 1: A rows g and g + 8
          Dq::apply_codes(w[2 * p][blk], lo);
          Dq::apply_codes(w[2 * p + 1][blk], hi);
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int s = grp * 8 + blk * 2 + h;  // the k16 step
            u32 xb[2];
            asm volatile("ld.shared.v2.b32 {%0, %1}, [%2];\n" : "=r"(xb[0]), "=r"(xb[1]) : "r"(lane_xb + 32 * s));
            const u32 a[4] = {lo[h][0], hi[h][0], lo[h][1], hi[h][1]};
            mma_m16n8k16(sums, a, xb, MmaF16{});
          }
        }
#pragma unroll
        for (int half = 0; half < 2; ++half) {  // A rows g (n8 row 2p) and g + 8 (row 2p + 1)
          const int col = (row0 + 2 * p + half) * 8 + g;
          const float s = f16_to_f32(ld_global_u16(v + grp * np + col));
          const float z = f16_to_f32(ld_global_u16(v + (groups + grp) * np + col));
          acc[p][2 * half] = fmaf(s * 16777216.f, sums[2 * half], fmaf(-s * z, sum, acc[p][2 * half]));
        }
      }
    } else {
      u32 a[4][4];  // pairs of k16 steps: {step 2p a0, a2, step 2p + 1 a0, a2}
#pragma unroll
      for (int p = 0; p < 4; ++p) ldmatrix_x4(a[p], lane_x + (grp * 4 + p) * lane_step);
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const int col = (row0 + r) * 8 + g;
        const Dq::Consts c =
            Dq::make(ld_global_u16(v + grp * np + col), ld_global_u16(v + (groups + grp) * np + col));
#pragma unroll
        for (int blk = 0; blk < 4; ++blk) {
          BlockFragments f;
          Dq::apply(w[r][blk], c, f);
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int s = 2 * blk + h;  // the k16 step in the group
            const u32 af[4] = {a[s >> 1][2 * (s & 1)], 0u, a[s >> 1][2 * (s & 1) + 1], 0u};
            mma_m16n8k16(acc[r], af, f[h], MmaF16{});
          }
        }
      }
    }
  };
  // The first groups' weights go out before x is staged: their loads wait on nothing.
#pragma unroll
  for (int i = 0; i < kDepth; ++i)
    if (first + i < last) load_group(first + i, buf[i]);
  if constexpr (kSwapped) {
    for (int i = threadIdx.x; i < k / 4; i += 32 * kWarps) {  // (k16 step, t) pairs
      const int s = i >> 2, tt = i & 3;
      const u32 lo = *reinterpret_cast<const u32*>(x + 16 * s + 2 * tt);
      const u32 hi = *reinterpret_cast<const u32*>(x + 16 * s + 2 * tt + 8);
      reinterpret_cast<uint2*>(xs)[i] = make_uint2(lo, fma2(hi, 0x2C002C00u, 0x80008000u, MmaF16{}));  // hi / 16
    }
  } else {
    for (int i = threadIdx.x; i < k / 8; i += 32 * kWarps)
      reinterpret_cast<uint4*>(xs)[i] = reinterpret_cast<const uint4*>(x)[i];
    if (threadIdx.x == 0) reinterpret_cast<uint4*>(xs + k)[0] = make_uint4(0, 0, 0, 0);
  }
  __syncthreads();
  for (int grp = first; grp < last; grp += kDepth) {
#pragma unroll
    for (int i = 0; i < kDepth; ++i) {
      if (grp + i < last) {
        multiply(grp + i, buf[i]);
        if (grp + i + kDepth < last) load_group(grp + i + kDepth, buf[i]);
      }
    }
  }
  if (kSwapped ? t == 0 : g == 0) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if constexpr (kSwapped) {  // lane (g, 0): row g of n8 rows 2p (acc[p][0]) and 2p + 1 (acc[p][2])
        if (r < kPairs) {
          partial[warp][8 * (2 * r) + g] = acc[r][0];
          partial[warp][8 * (2 * r + 1) + g] = acc[r][2];
        }
      } else {
        partial[warp][8 * r + 2 * t] = acc[r][0];
        partial[warp][8 * r + 2 * t + 1] = acc[r][1];
      }
    }
  }
  __syncthreads();
  if (threadIdx.x < 8 * kRows) {
    float s = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) s += partial[w][threadIdx.x];
    const int c = row0 * 8 + threadIdx.x;
    if (c < n) d[c] = f32_to_f16(s);
  }
}
"""

Form = tuple[int, int, int, bool]  # warps, n8 rows a CTA, groups in flight a warp, swapped


def kernel_name(warps: int, rows: int, depth: int = 2, swapped: bool = False) -> str:
    return f"gemv_w4_w{warps}_r{rows}_d{depth}{'_t' if swapped else ''}"


def label(form: Form) -> str:
    warps, rows, depth, swapped = form
    return f"w{warps} r{rows} d{depth}{' T' if swapped else ''}"


def source(forms: list[Form]) -> str:
    entries = "".join(
        f'extern "C" __global__ void __launch_bounds__({32 * w}) {kernel_name(w, r, dd, sw)}(const u32* b, '
        f"const u16* v, const u16* x, u16* d, int n, int k, int groups, long long row_words, int np) "
        f"{{ gemv_w4<{w}, {r}, {dd}, {'true' if sw else 'false'}>(b, v, x, d, n, k, groups, row_words, np); }}\n"
        for w, r, dd, sw in forms
    )
    return SOURCE + entries


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["llama3-8b"])
    ap.add_argument("--warps", nargs="+", type=int, default=[4, 8])
    ap.add_argument("--rows", nargs="+", type=int, default=[1, 2, 4], help="n8 rows of the weight a CTA")
    ap.add_argument("--depth", nargs="+", type=int, default=[2], help="groups of packed words in flight a warp")
    ap.add_argument("--form", nargs="+", choices=["plain", "swapped"], default=["plain"],
                    help="plain: x as A's row 0, two MMAs a packed word; swapped: the weights as A, one")
    args = ap.parse_args()
    forms = [(w, r, dd, f == "swapped") for w, r, dd, f in itertools.product(args.warps, args.rows, args.depth, args.form)
             if f == "plain" or r % 2 == 0]  # fmt: skip
    major, minor = torch.cuda.get_device_capability()
    result = compile_cubin(source(forms), name="gemv_probe", arch=10 * major + minor, include_dirs=[INCLUDE_DIR],
                           cache_dir=None)  # fmt: skip
    reader = Reader.build()  # (also makes torch's context current before the module loads)
    shapes = yaml.safe_load((ROOT / "bench" / "shapes.yaml").read_text())["models"]
    max_smem = 2 * max(k for model in args.models for _, k in shapes[model].values()) + 16  # x and 16 zero bytes
    functions = {f: cuda_driver.LoadedFunction(result.cubin, kernel_name(*f), max_smem, 32 * f[0]) for f in forms}
    print("CTAs an SM at the largest x: " + ", ".join(f"{label(f)} {functions[f].ctas_per_sm}" for f in forms))
    copy, floor = copy_bandwidth(), launch_floor_us()
    print(f"{torch.cuda.get_device_name()}; copy bandwidth {copy / 1e12:.2f} TB/s; a timed launch's floor {floor:.1f} us")
    print(result.log.strip().splitlines()[-1] if result.log.strip() else "")
    gemm = Gemm()
    largest = max(n * k for model in args.models for n, k in shapes[model].values())
    buffer = torch.randint(-(2**31), 2**31 - 1, (largest // 6 + 1024,), dtype=torch.int32, device="cuda")
    head = " | ".join(f"{label(f)} us" for f in forms)
    print(f"\n| layer | MB | read us | ours us | {head} | cuBLAS us | int4 us | best probe / ours | best probe / read | "
          "cuBLAS / best probe | int4 / best probe | probe max diff |")  # fmt: skip
    print("|---|---:|---:|---:|" + "---:|" * len(forms) + "---:|---:|---:|---:|---:|---:|---:|")
    stream = torch.cuda.current_stream().cuda_stream
    for model in args.models:
        for layer, (n, k) in shapes[model].items():
            w, int4, sz, a, a_bf = decode_operands(n, k)
            packed = pack_for_gemm(quantize(w, bits=4, group_size=GROUP))
            nbytes = packed_bytes(packed)
            _, read, _ = reader.fastest(buffer, nbytes)
            out_d, out_h = (torch.empty(1, n, device="cuda", dtype=torch.float16) for _ in range(2))
            tuned_choice(gemm, a, packed, out_d)
            probe_outs, probe_calls = [], []
            for f in forms:
                out = torch.full((1, n), float("nan"), device="cuda", dtype=torch.float16)
                params = [ctypes.c_void_p(packed.b.data_ptr()), ctypes.c_void_p(packed.v.data_ptr()),
                          ctypes.c_void_p(a.data_ptr()), ctypes.c_void_p(out.data_ptr()), ctypes.c_int(n),
                          ctypes.c_int(k), ctypes.c_int(packed.groups),
                          ctypes.c_longlong(packed.b.stride(0) * packed.b.element_size() // 4),
                          ctypes.c_int(packed.v.shape[1])]  # fmt: skip
                pointers = (ctypes.c_void_p * len(params))(*[ctypes.addressof(p) for p in params])
                fn = functions[f]

                def call(fn=fn, pointers=pointers, params=params, blocks=(n + 8 * f[1] - 1) // (8 * f[1]),
                         threads=32 * f[0], smem=2 * k + 16) -> None:  # fmt: skip
                    fn.launch((blocks, 1, 1), threads, smem, stream, ctypes.addressof(pointers))

                probe_outs.append(out)
                probe_calls.append(call)
            fns = [read, lambda: gemm.matmul(a, packed, out=out_d), *probe_calls,
                   lambda: torch.matmul(a, w.t(), out=out_h), lambda: torch._weight_int4pack_mm(a_bf, int4, GROUP, sz)]
            t = [x * 1e3 for x in interleaved_medians_ms(fns, reps=40)]
            probes = t[2:2 + len(forms)]
            best = min(probes)
            ref = out_d.float()
            diff = max(((o.float() - ref).abs().max() / ref.abs().max()).item() for o in probe_outs)
            cells = " | ".join(f"{p:.1f}" for p in probes)
            print(f"| {model} {layer} | {nbytes / 1e6:.1f} | {t[0]:.1f} | {t[1]:.1f} | {cells} | {t[-2]:.1f} | "
                  f"{t[-1]:.1f} | {best / t[1]:.2f} | {best / t[0]:.2f} | {t[-2] / best:.2f} | {t[-1] / best:.2f} | "
                  f"{diff:.1e} |", flush=True)  # fmt: skip
            del w, int4, packed


if __name__ == "__main__":
    main()
