"""The SM90 family: TMA loads into an mbarrier ring, wgmma from shared memory, a
producer warpgroup and one or two consumer warpgroups, persistent over the output
tiles (templates/include/gemm/sm90/kernel_sm90.cuh). Hopper only: wgmma and
setmaxnreg are sm_90a instructions."""

from __future__ import annotations

from typing import TYPE_CHECKING

from codegen.families.base import MainloopFamily, TensorMapBox
from codegen.vocabulary import ARCH_SMEM_LIMIT, BOrder, MmaAtom

if TYPE_CHECKING:
    from codegen.spec import KernelSpec
    from gemm_runtime.context import ProblemKey

CTA_K = 64  # one 128-byte swizzle row of 16-bit elements per K tile
CTA_NS = (64, 128, 192, 256)  # the wgmma N the headers implement
ROWS_PER_CONSUMER = 64  # a consumer warpgroup's m64 wgmma
PRODUCER_THREADS = 128  # the producer is a whole warpgroup (setmaxnreg acts per warpgroup)
BOX_N = 64  # "kn" B: columns per TMA box (the 128-byte swizzle span)
CLUSTERS = (1, 2)  # CTAs along M per cluster; each loads 1/cluster of the B tile for all
SMEM_LIMIT = ARCH_SMEM_LIMIT[90]  # dynamic shared memory per block
# The epilogue stores D through TMA from staging boxes of 64 rows x 128 bytes: a consumer
# warpgroup's whole share of the tile where it fits beside the ring, else two, else one
# (store_buffers; store_sm90.cuh).
STORE_BOX_ROWS = 64
STORE_BOX_BYTES = STORE_BOX_ROWS * 128


def a_box_rows(cta_m: int, m: int) -> int:
    """Rows of A one TMA copy moves: the tile's, or for an M below the tile M rounded up
    to whole 8-row swizzle groups. The rows beyond stay stale in shared memory; wgmma
    computes them into accumulator rows no store, split-K hand-over or epilogue reads
    (all stop at M). Zero-filling them instead is not free: on the H200 at M = 1 the
    64x64 tile ran up to 35% slower than at M = 64 (70b o: 61.8 against 45.8 us).
    NOTE: kernel_sm90.cuh's a_box_bytes computes the same from M, for the bytes each
    full barrier expects: the two must agree, or the barrier never completes."""
    return cta_m if m >= cta_m else max(8, -(-m // 8) * 8)


# Split-K hand-over of one tile (split_seconds): the semaphore round trip (refitted in
# the twenty-first session, split_seconds says how), then the partials of D's rows
# written by each split and read back by the last, at what one SM moves through L2.
_HANDOVER_LATENCY_S = 2e-6
_HANDOVER_BYTES_PER_S = 50e9

# The least share of the resident CTAs an evened-out persistent grid keeps (balanced_units):
# fewer SMs could not keep a memory-bound problem's bandwidth.
BALANCED_GRID_FILL = 0.9


class Sm90Family(MainloopFamily):
    value = "sm90"
    min_arch = 90
    atoms = (MmaAtom.M64NK16,)
    header = "gemm/sm90/kernel_sm90.cuh"
    entry = "gemm::gemm_sm90"
    summary = "TMA + wgmma, warp-specialized, persistent"
    template = "kernel_sm90.cu.j2"
    persistent = True
    # bench.sm90 (H200, 4096^3 and 8192^3): groups of 8 tile rows beat row order by 3-7%
    # on every 128-row tile.
    preferred_swizzle = 3

    # ---- validation -------------------------------------------------------------------
    def tile_error(self, cta, warps, stages, cluster=1):
        m, n, k = cta
        if k != CTA_K:
            return "cta", f"a K of {CTA_K} (one 128-byte swizzled row of 16-bit elements per K tile)"
        if m not in (ROWS_PER_CONSUMER, 2 * ROWS_PER_CONSUMER):
            return "cta", f"an M of {ROWS_PER_CONSUMER} (one consumer warpgroup) or {2 * ROWS_PER_CONSUMER} (two)"
        if n not in CTA_NS:
            return "cta", f"an N of {', '.join(map(str, CTA_NS))} (the wgmma widths implemented)"
        if tuple(warps) != (m // 16, 1, 1):
            return "warps", f"[{m // 16}, 1, 1] for cta M {m}: the consumer warps, 4 per 64 rows (wgmma m64)"
        if cluster not in CLUSTERS:
            return "cluster", f"{' or '.join(map(str, CLUSTERS))} (CTAs along M multicasting each B tile)"
        return None

    def kernel_error(self, spec: KernelSpec):
        if spec.quantized:
            return "b_type", spec.b_type.value, f"{spec.a_type.value} (quantized B: the sm90_quant family)"
        if spec.align != 8:
            return "align", spec.align, "8 (TMA needs 16-byte aligned rows; lower alignments stay with sm80)"
        if spec.arch_min != 90 or spec.arch_max != 90:
            return "arch", [spec.arch_min, spec.arch_max], "[90, 90] (wgmma is an sm_90a instruction)"
        return None

    def grouped_error(self, spec: KernelSpec) -> str | None:
        """Stacked nn.Linear weights ([E, N, K], "nk"), one CTA per cluster: B's tensor map
        covers the E * N rows and each expert's tile starts at its own (kernel_sm90.cuh)."""
        if spec.b_order is not BOrder.NK:
            return "false for b_order 'kn' (grouped weights are stacked [E, N, K]: 'nk')"
        if spec.cluster != 1:
            return "false with a cluster (a cluster's CTAs share B tiles; an expert's tile rows need not pair up)"
        return None

    # ---- what a kernel implies --------------------------------------------------------
    def threads(self, spec: KernelSpec) -> int:
        return super().threads(spec) + PRODUCER_THREADS

    def store_buffers(self, spec: KernelSpec) -> int:
        """Staging boxes per consumer warpgroup (mirrors Sm90Config::kStoreBuffers): its
        whole share of the tile where that fits beside the ring, else 2, else 1."""
        m, n, k = spec.cta
        ring = spec.stages * (m + n) * k * 2
        boxes = n * spec.d_type.bits // 8 // 128

        def fits(buffers: int) -> bool:
            return ring + buffers * (m // ROWS_PER_CONSUMER) * STORE_BOX_BYTES + 1024 <= SMEM_LIMIT

        return boxes if fits(boxes) else 2 if fits(2) else 1

    def smem_bytes(self, spec: KernelSpec) -> int:
        """The stage ring (A and B tiles, no padding: the swizzle avoids bank conflicts),
        the epilogue's staging boxes, and 1024 bytes to align them to the swizzle atom
        (mirrors Sm90Config::kSmemBytes)."""
        m, n, k = spec.cta
        staging = self.store_buffers(spec) * (m // ROWS_PER_CONSUMER) * STORE_BOX_BYTES
        return spec.stages * (m + n) * k * 2 + staging + 1024

    def nvrtc_target(self, arch: int) -> str:
        return f"sm_{arch}a"

    # ---- the launch -------------------------------------------------------------------
    def tensor_maps(self, spec: KernelSpec, key: ProblemKey | None = None) -> tuple[TensorMapBox, ...]:
        """A's box is the CTA's tile, or for an M below it only M's rows (a_box_rows); B's
        is the part of the B tile one CTA of the cluster loads for all of them: rows of
        the N x K tile, or of each 64-column K x N box; D's is a staging box of the
        epilogue (64 rows, 128 bytes)."""
        cm, n, k = spec.cta
        rows = cm if key is None else a_box_rows(cm, key.m)
        if spec.b_order is BOrder.NK:
            b = TensorMapBox("b", n // spec.cluster, k)
        else:
            b = TensorMapBox("b", k // spec.cluster, BOX_N)
        d = TensorMapBox("d", STORE_BOX_ROWS, 128 * 8 // spec.d_type.bits)
        return (TensorMapBox("a", rows, k), b, d)

    def problem_error(self, spec: KernelSpec, k: int) -> str | None:
        # NOTE: a tensor map cannot describe an empty matrix.
        return "K = 0 leaves A and B empty, which TMA cannot describe" if k == 0 else None

    def max_splits(self, spec: KernelSpec) -> int | None:
        # NOTE: split-K's last split waits for the others, so every CTA that owns one must
        # be resident; the co-resident cluster count is only an estimate of the driver's
        # (cuOccupancyMaxActiveClusters), so cluster kernels do not split.
        # Grouped kernels split too (their tail of tiles past whole rounds, as dense): a
        # few experts' long K otherwise leaves the last round mostly idle.
        return 1 if spec.cluster > 1 else None

    def grid(
        self, spec: KernelSpec, tiles: tuple[int, int], splits: int, swizzle: int, resident: int
    ) -> tuple[int, int, int]:
        """As many CTAs as the device holds at once (one per SM), or as work units,
        each looping over the units (kernel_sm90.cuh); whole clusters, whose units are
        ``cluster`` tiles along M. Under split-K, a multiple of ``splits`` CTAs, and
        only the tiles beyond whole rounds of that grid split (``split_units``).

        NOTE: the multiple keeps every tile's K slices in one round of the grid, on
        consecutive CTAs: a last slice then waits only for CTAs of lower index in the
        same round, which started before it (blocks start in index order), so split-K
        cannot hang even where other kernels hold some SMs and not every CTA of the
        grid is resident. Across rounds, slice 0 of CTA 0 would wait on the last CTA of
        the round before, which may not have started."""
        c = spec.cluster
        if splits == 1:
            units = -(-tiles[0] // c) * tiles[1]
            slots = max(1, resident // c)
            return c * (max(1, min(units, slots)) if spec.grouped else self.balanced_units(units, slots)), 1, 1
        rounds_of = self._split_round(splits, resident)
        return min(self.split_units(tiles[0] * tiles[1], splits, rounds_of)[0], rounds_of), 1, 1

    @staticmethod
    def balanced_units(units: int, slots: int) -> int:
        """CTAs (or clusters) for ``units`` work units on ``slots`` at a time: as many as
        the units, up to ``slots``; where the units take several rounds and the last one
        is partial, the fewest that take the same number of rounds, if they keep at least
        BALANCED_GRID_FILL of the slots busy. (A grouped launch's units are a bound, not a
        count: grid() does not balance them.)

        NOTE: the makespan is the same (rounds x a unit), but on the H200 the even grid
        ran 0-2% faster: the tuner kept picking 8 "splits" of 128x256 tiles on llama3
        shapes at M = 1024-4096 (perf/dense_tuned.md), which on 132 SMs is a grid of 128
        with every tile whole. With 16-32 tile columns and groups of 8 tile rows, a round
        of 128 CTAs then covers whole rasterization groups, and each CTA walks the same
        number of tiles."""
        if units <= slots:
            return max(1, units)
        rounds = -(-units // slots)
        even = -(-units // rounds)
        return even if even >= BALANCED_GRID_FILL * slots else slots

    @staticmethod
    def _split_round(splits: int, resident: int) -> int:
        """CTAs in one round of a split-K grid: the resident ones, a multiple of ``splits``."""
        return max(splits, resident // splits * splits)

    def split_tiles(self, spec: KernelSpec, tiles: tuple[int, int], splits: int, resident: int) -> int:
        """Only the tiles beyond whole rounds of the grid split, and the kernel numbers
        their workspace slots among themselves (Sm90Unit::split_tile), so the workspace
        holds those alone: llama3-70b qkv at M = 1024 (320 tiles of 128x256, 132 CTAs)
        needs the partials of 56 tiles for 2 splits (7.3 MB), not of 320 (41.9 MB).

        NOTE: the count depends on the grid, so ``resident`` must be what the launch
        sizes it by (registry.Kernel.resident): it is not monotonic in the grid (320
        tiles leave 56 beyond 132 CTAs, none beyond 160). Cluster kernels do not split
        (max_splits)."""
        if splits == 1:
            return 0
        count = tiles[0] * tiles[1]
        grid = self.grid(spec, tiles, splits, 0, resident)[0]
        if spec.grouped:
            # ``tiles`` is the host's bound; the kernel splits the tail of the real tiles
            # (any count up to the bound), which leaves at most grid - 1 beyond whole rounds.
            return min(count, grid - 1)
        return count - self.split_units(count, splits, grid)[1]

    @staticmethod
    def split_units(tiles: int, splits: int, grid: int) -> tuple[int, int]:
        """(work units, tiles run whole) of a split-K launch on ``grid`` CTAs (mirrors
        sm90_whole_tiles): the tiles of whole rounds stay whole, the rest split."""
        whole = tiles // grid * grid if splits > 1 else tiles
        return whole + (tiles - whole) * splits, whole

    def rounds(self, spec: KernelSpec, tiles: int, splits: int, slots: int) -> tuple[int, int]:
        """Whole tiles split only in the last rounds (grid): (rounds counted in
        1/splits-long units, rounds that hand K slices over)."""
        if splits == 1:
            return super().rounds(spec, tiles, splits, slots)
        grid = self._split_round(splits, slots)
        units, whole = self.split_units(tiles, splits, grid)
        split_rounds = -(-(units - whole) // grid)
        return whole // grid * splits + split_rounds, split_rounds

    # ---- the cost model ---------------------------------------------------------------
    def mma_efficiency(self, spec: KernelSpec) -> float:
        """Fitted to bench/experiments/sm90_variants.py on the H200 (bf16 nk, 8192^3, where
        every tile fills 97-99% of its last wave; one run, after the TMA-store epilogue):
        128x256 760 TFLOP/s, 128x192 700, 128x128 609, 64x256 658, 64x128 537, against
        the model's unit of 132 SMs x 2048 FLOP/clock x 1.98 GHz = 535 (mma.sync's peak;
        wgmma's is twice that). The per-K-tile cost shrinks with N as n / (n + 88): each
        consumer warpgroup's m64 wgmma re-reads B from shared memory, and the tile's
        epilogue is paid per tile.
        128x192 runs 7% above the formula since it stages its whole tile for the stores
        with its ring of 4 (sm90_variants, H200, 2026-12-03: 777 TFLOP/s at 8192^3 where
        the formula says 723, 128x256 789 where it says 784); priced by the formula it lost
        llama3-8b qkv at M = 1024 to 2 splits of 128x256 (77.6 us, once 97) where it ran
        70.6 (dense_plans, one run)."""
        m, n, _ = spec.cta
        whole_tile_staged = 1.07 if (m, n) == (128, 192) else 1.0
        return (1.97 if m == 128 else 1.71) * n / (n + 88.0) * whole_tile_staged

    def stages_in_flight(self, spec: KernelSpec) -> int:
        """The producer warp refills each stage as soon as the consumers release it,
        while they work on the next: the whole ring is in flight."""
        return spec.stages

    def split_seconds(self, spec: KernelSpec, rows: int) -> float:
        """A hand-over's round trip plus its partials of ``rows`` rows, out and back in,
        at an SM's L2 rate: 7.2 us for a whole 128x256 tile (bench.dense, H200: llama3-8b
        qkv at M = 1024 ran at 0.50x cuBLAS with 2 splits of 128x256 where a constant
        1.5 us saw a tie with 128x192 unsplit, which ran at 0.82x), 2.3 us for the 16
        rows of a 64x128 decode tile. The round trip, 0.5 us when 64x128 with 2 splits
        beat it unsplit at M = 16 under the written flush (decode_splits.py), is 2 us
        under the read flush: refitted with cost_model._DRAM_LATENCY_S to the timed
        decode plans of the twenty-first session (docs/NOTES.md), where the split
        plans ran 4-16% above their prediction and the unsplit ones below."""
        return _HANDOVER_LATENCY_S + 2 * rows * spec.cta[1] * 4 / _HANDOVER_BYTES_PER_S

    def fixed_seconds(self, spec: KernelSpec) -> float:
        """A persistent CTA fetches its tensor maps and fills its ring before the first
        wgmma. A microsecond is assumed, not measured; it only tips near-ties toward the
        sm80 kernels on small problems (bench.dense: M = 16 stays with them)."""
        return 1.0e-6
