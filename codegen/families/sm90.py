"""The SM90 family: TMA loads into an mbarrier ring, wgmma from shared memory, a
producer warpgroup and one or two consumer warpgroups, persistent over the output
tiles (templates/include/gemm/sm90/kernel_sm90.cuh). Hopper only: wgmma and
setmaxnreg are sm_90a instructions."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from codegen.families.base import MainloopFamily, TensorMapBox
from codegen.vocabulary import BOrder, MmaAtom

if TYPE_CHECKING:
    from codegen.spec import KernelSpec

CTA_K = 64  # one 128-byte swizzle row of 16-bit elements per K tile
CTA_NS = (64, 128, 192, 256)  # the wgmma N the headers implement
ROWS_PER_CONSUMER = 64  # a consumer warpgroup's m64 wgmma
PRODUCER_THREADS = 128  # the producer is a whole warpgroup (setmaxnreg acts per warpgroup)
BOX_N = 64  # "kn" B: columns per TMA box (the 128-byte swizzle span)
# wgmma's dense fp16/bf16 rate is twice mma.sync's on the H100/H200 (4096 against 2048
# FLOP per clock per SM); the cost model counts in mma.sync's.
WGMMA_RATE = 2.0


class Sm90Family(MainloopFamily):
    value = "sm90"
    min_arch = 90
    atoms = (MmaAtom.M64NK16,)
    header = "gemm/sm90/kernel_sm90.cuh"
    entry = "gemm::gemm_sm90"
    summary = "TMA + wgmma, warp-specialized, persistent"
    template = "kernel_sm90.cu.j2"
    persistent = True

    # ---- validation -------------------------------------------------------------------
    def tile_error(self, cta, warps, stages):
        m, n, k = cta
        if k != CTA_K:
            return "cta", f"a K of {CTA_K} (one 128-byte swizzled row of 16-bit elements per K tile)"
        if m not in (64, 128):
            return "cta", "an M of 64 (one consumer warpgroup) or 128 (two)"
        if n not in CTA_NS:
            return "cta", f"an N of {', '.join(map(str, CTA_NS))} (the wgmma widths implemented)"
        if tuple(warps) != (m // 16, 1, 1):
            return "warps", f"[{m // 16}, 1, 1] for cta M {m}: the consumer warps, 4 per 64 rows (wgmma m64)"
        return None

    def kernel_error(self, spec: KernelSpec):
        if spec.quantized:
            return "b_type", spec.b_type.value, f"{spec.a_type.value} (quantized B is not in the sm90 family yet)"
        if spec.align != 8:
            return "align", spec.align, "8 (TMA needs 16-byte aligned rows; lower alignments stay with sm80)"
        if spec.arch_min != 90 or spec.arch_max != 90:
            return "arch", [spec.arch_min, spec.arch_max], "[90, 90] (wgmma is an sm_90a instruction)"
        return None

    # ---- what a kernel implies --------------------------------------------------------
    def threads(self, spec: KernelSpec) -> int:
        return super().threads(spec) + PRODUCER_THREADS

    def smem_bytes(self, spec: KernelSpec) -> int:
        """The stage ring (A and B tiles, no padding: the swizzle avoids bank conflicts)
        plus 1024 bytes to align it to the swizzle atom (mirrors Sm90Config::kSmemBytes)."""
        m, n, k = spec.cta
        return spec.stages * (m + n) * k * 2 + 1024

    def nvrtc_target(self, arch: int) -> str:
        return f"sm_{arch}a"

    # ---- the launch -------------------------------------------------------------------
    def tensor_maps(self, spec: KernelSpec) -> tuple[TensorMapBox, ...]:
        m, n, k = spec.cta
        b = TensorMapBox("b", n, k) if spec.b_order is BOrder.NK else TensorMapBox("b", k, BOX_N)
        return (TensorMapBox("a", m, k), b)

    def problem_error(self, spec: KernelSpec, k: int) -> str | None:
        # NOTE: a tensor map cannot describe an empty matrix.
        return "K = 0 leaves A and B empty, which TMA cannot describe" if k == 0 else None

    def grid(
        self, spec: KernelSpec, tiles: tuple[int, int], splits: int, swizzle: int, resident: int
    ) -> tuple[int, int, int]:
        """As many CTAs as the device holds at once (one per SM), or as work units,
        each looping over the units (kernel_sm90.cuh)."""
        return max(1, min(tiles[0] * tiles[1] * splits, resident)), 1, 1

    # ---- the cost model ---------------------------------------------------------------
    def mma_efficiency(self, spec: KernelSpec) -> float:
        """wgmma reads both operands from shared memory once per warpgroup instruction,
        so the tile shape matters less than for mma.sync; narrow N still pays per
        instruction issue and the per-K-tile barrier round trip."""
        m, n, _ = spec.cta
        shape = n / (n + 32.0) * (1.0 if m == 128 else 0.85)
        return WGMMA_RATE * shape * math.sqrt(min(spec.stages, 4) / 4)
