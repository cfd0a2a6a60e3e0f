"""Experiment: does the order in which a decode kernel reads its packed weight cost
bandwidth? (issue 17 at M = 1; docs/perf/read_bound_h200.md: our plans take 1.47-1.73x a
bare read of their bytes on the H200, the large layers included, where fixed costs are
small.)

read_bound's read is grid-strided and linear: at any moment the whole GPU reads one
window of contiguous bytes. Our decode tiles read the packed weight another way. A row of
`PackedWeight.b` is one 8-column tile's blocks along all of K (K / 2 bytes an 8-column
tile for 4-bit), so a CTA of `cols` columns with a K tile of `kt` reads, each K step,
`cols / 8` pieces of `kt * 4` bytes (4-bit) one row apart: thousands of short streams
GPU-wide. This reads the same bytes in that order, with no arithmetic:

  - `tile R x C B, S splits, D deep`: CTA (row block, split) reads rows [R * block, R *
    block + R) of the packed rows over its K split, C bytes a row a step, D steps' loads
    in flight a thread (then they are XORed, as read_bound's);

beside the linear read's fastest form (read_bound.Reader) and our tuned plan, per
llama3 layer, M = 1, W4, groups of 128, timed interleaved, L2 emptied before each call,
medians (us). The forms: the tuned plan's own geometry (its columns, K tile, splits) at
depths 1-4, then one of a row's whole K a CTA, then wide row blocks.

    python -m bench.experiments.read_order [--models llama3-8b] [--bits 4]

If the plan's geometry reads much slower than the linear read, the packed layout (not
the arithmetic) is what holds the decode plans back, and a layout whose K steps are
contiguous across a CTA's columns is the fix to try.
"""

from __future__ import annotations

import argparse
import ctypes
import re
from collections.abc import Callable
from dataclasses import dataclass

import torch
import yaml

from bench.experiments.read_bound import GROUP, THREADS, Reader, decode_operands, launcher
from bench.quant import ROOT, copy_bandwidth, tuned_choice
from gemm_runtime import Gemm, cuda_driver
from gemm_runtime.compiler import compile_cubin
from gemm_runtime.packed_weight import pack_for_gemm
from gemm_runtime.quant import quantize
from gemm_runtime.timing import interleaved_medians_ms

PER_THREAD = (1, 2, 4, 8, 16)  # 16-byte loads a thread a step
DEPTHS = (1, 2, 4)

SOURCE = r"""
// A CTA reads rows [row0, row0 + kRows... ) of a [rows][row16] array of 16-byte units,
// `chunk16` units a row a step over `steps` steps from unit k0 of each row; kPer units a
// thread a step (kPer * 256 == rows_per_cta * chunk16), kDepth steps' loads in flight.
template <int kPer, int kDepth>
__device__ __forceinline__ void read_tile(const uint4* __restrict__ src, long long row16, int rows_per_cta,
                                          int chunk_shift, int steps, int splits, unsigned* sink) {
  const int block = blockIdx.x / splits, split = blockIdx.x % splits;
  const long long row0 = static_cast<long long>(block) * rows_per_cta;
  const long long k0 = static_cast<long long>(split) * steps << chunk_shift;
  const int chunk16 = 1 << chunk_shift;
  long long offset[kPer];
#pragma unroll
  for (int p = 0; p < kPer; ++p) {
    const int unit = p * 256 + threadIdx.x;
    offset[p] = (row0 + (unit >> chunk_shift)) * row16 + k0 + (unit & (chunk16 - 1));
  }
  unsigned acc = 0;
  for (int s = 0; s < steps; s += kDepth) {
    uint4 v[kDepth][kPer];
#pragma unroll
    for (int d = 0; d < kDepth; ++d)
#pragma unroll
      for (int p = 0; p < kPer; ++p)
        asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(v[d][p].x), "=r"(v[d][p].y), "=r"(v[d][p].z), "=r"(v[d][p].w)
                     : "l"(src + offset[p] + (static_cast<long long>(s + d) << chunk_shift)));
#pragma unroll
    for (int d = 0; d < kDepth; ++d)
#pragma unroll
      for (int p = 0; p < kPer; ++p) acc ^= v[d][p].x ^ v[d][p].y ^ v[d][p].z ^ v[d][p].w;
  }
  if (acc == 0x9e3779b9u) sink[0] = acc;
}
"""


def kernel_name(per: int, depth: int) -> str:
    return f"read_tile_{per}x{depth}"


def source() -> str:
    entries = "".join(
        f'extern "C" __global__ void __launch_bounds__({THREADS}) {kernel_name(p, d)}(const uint4* src, long long row16, '
        f"int rows_per_cta, int chunk_shift, int steps, int splits, unsigned* sink) "
        f"{{ read_tile<{p}, {d}>(src, row16, rows_per_cta, chunk_shift, steps, splits, sink); }}\n"
        for p in PER_THREAD
        for d in DEPTHS
    )
    return SOURCE + entries


@dataclass(frozen=True)
class Form:
    """A read order over a [rows][row_bytes] array: `rows_per_cta` rows a CTA, `chunk`
    bytes a row a step, `splits` CTAs along each row, `depth` steps in flight."""

    rows_per_cta: int
    chunk: int
    splits: int
    depth: int

    def label(self) -> str:
        return f"tile {self.rows_per_cta} x {self.chunk} B, {self.splits} splits, {self.depth} deep"

    def per_thread(self) -> int:
        return self.rows_per_cta * self.chunk // 16 // THREADS

    def fits(self, rows: int, row_bytes: int) -> bool:
        """The form covers the array exactly with whole loads a thread."""
        steps, rest = divmod(row_bytes, self.chunk * self.splits)
        return (self.per_thread() in PER_THREAD and self.rows_per_cta * self.chunk == self.per_thread() * 16 * THREADS
                and self.depth in DEPTHS and rest == 0 and steps % self.depth == 0 and rows % self.rows_per_cta == 0
                and self.chunk & (self.chunk - 1) == 0)  # fmt: skip


def plan_form(plan: str, bits: int) -> Form | None:
    """The read order of a tuned sm80 decode plan (bench.quant.describe_launch's text, e.g.
    "sm80 16x128x256 w1x4x2 s3 (1, z0)"): its columns / 8 packed rows a CTA, its K tile's
    bytes a row a step (kt * bits bytes for an 8-column tile), its splits; one step deep."""
    match = re.match(r"sm80 (\d+)x(\d+)x(\d+) w\S+ s\d+ \((\d+), z", plan)
    if match is None:
        return None
    _, cols, kt, splits = (int(g) for g in match.groups())
    return Form(cols // 8, kt * bits, splits, 1)


def candidate_forms(rows: int, row_bytes: int, plan: Form | None, sms: int) -> list[Form]:
    forms = [] if plan is None else [Form(plan.rows_per_cta, plan.chunk, plan.splits, d) for d in DEPTHS]
    for rows_per_cta in (1, 2, 16, 64):
        for chunk in (512, 2048, 8192):
            if rows_per_cta * chunk // 16 % THREADS:
                continue
            blocks = rows // rows_per_cta
            splits = 1
            while blocks * splits < 2 * sms and row_bytes % (chunk * splits * 2) == 0:
                splits *= 2
            forms += [Form(rows_per_cta, chunk, splits, d) for d in (2, 4)]
    seen: set[Form] = set()
    return [f for f in forms if f.fits(rows, row_bytes) and not (f in seen or seen.add(f))]


class TileReader:
    def __init__(self) -> None:
        major, minor = torch.cuda.get_device_capability()
        result = compile_cubin(source(), name="read_order", arch=10 * major + minor, include_dirs=[], cache_dir=None)
        self.sink = torch.zeros(4, dtype=torch.int32, device="cuda")
        self.functions = {(p, d): cuda_driver.LoadedFunction(result.cubin, kernel_name(p, d), 0, THREADS)
                          for p in PER_THREAD for d in DEPTHS}  # fmt: skip

    def call(self, b: torch.Tensor, form: Form) -> Callable[[], None]:
        rows, row_bytes = b.shape[0], b.shape[1] * b.element_size()
        steps = row_bytes // form.chunk // form.splits
        params = [ctypes.c_void_p(b.data_ptr()), ctypes.c_longlong(row_bytes // 16), ctypes.c_int(form.rows_per_cta),
                  ctypes.c_int((form.chunk // 16).bit_length() - 1), ctypes.c_int(steps), ctypes.c_int(form.splits),
                  ctypes.c_void_p(self.sink.data_ptr())]  # fmt: skip
        return launcher(self.functions[(form.per_thread(), form.depth)], rows // form.rows_per_cta * form.splits, params)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["llama3-8b"])
    ap.add_argument("--bits", nargs="+", type=int, default=[4], choices=(4, 8))
    args = ap.parse_args()
    reader, tiles = Reader.build(), TileReader()
    copy = copy_bandwidth()
    print(f"{torch.cuda.get_device_name()}; copy bandwidth {copy / 1e12:.2f} TB/s")
    gemm = Gemm()
    shapes = yaml.safe_load((ROOT / "bench" / "shapes.yaml").read_text())["models"]
    print("\n| bits | layer | packed b MB | read | us | of copy | / linear |")
    print("|---:|---|---:|---|---:|---:|---:|")
    for model in args.models:
        for layer, (n, k) in shapes[model].items():
            w, _, _, a, _ = decode_operands(n, k)
            for bits in args.bits:
                packed = pack_for_gemm(quantize(w, bits=bits, group_size=GROUP))
                b = packed.b
                nbytes = b.numel() * b.element_size()
                _, linear, lin_form = reader.fastest(b, nbytes)
                out = torch.empty(1, n, device="cuda", dtype=torch.float16)
                plan_text = tuned_choice(gemm, a, packed, out)
                plan = plan_form(plan_text, bits)
                forms = candidate_forms(b.shape[0], b.shape[1] * b.element_size(), plan, reader.sms)
                fns = [linear, lambda: gemm.matmul(a, packed, out=out)] + [tiles.call(b, f) for f in forms]
                t = [x * 1e3 for x in interleaved_medians_ms(fns, reps=30)]
                rows = [(f"linear, {lin_form}", t[0]), (f"ours (b, v and x): {plan_text}", t[1])]
                rows += [(f.label() + (" (the plan's)" if plan is not None and (f.rows_per_cta, f.chunk, f.splits)
                                       == (plan.rows_per_cta, plan.chunk, plan.splits) else ""), x)
                         for f, x in zip(forms, t[2:])]  # fmt: skip
                for name, us in rows:
                    print(f"| {bits} | {model} {layer} | {nbytes / 1e6:.1f} | {name} | {us:.1f} | "
                          f"{nbytes / copy * 1e6 / us:.0%} | {us / t[0]:.2f} |", flush=True)  # fmt: skip
            del w


if __name__ == "__main__":
    main()
