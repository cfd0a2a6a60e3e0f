"""What a mainloop family is: everything the generator, the build, the registry and the
cost model need to know about one kind of mainloop, in one object.

A family plugs in by subclassing ``MainloopFamily`` and calling
``codegen.families.register`` (docs/EXTENDING.md). Nothing outside a family's module
asks which family a kernel belongs to; it asks the family.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from codegen.vocabulary import BOrder, MmaAtom

if TYPE_CHECKING:
    from codegen.spec import KernelSpec
    from gemm_runtime.context import ProblemKey

SMEM_PAD = 8  # elements of padding per shared row; mirrors gemm/smem_layout.cuh's PaddedRows
TENSOR_MAP_BYTES = 128  # sizeof(CUtensorMap), 64-byte aligned


@dataclass(frozen=True)
class TensorMapBox:
    """One TMA descriptor a family's kernel takes ahead of its GemmParams: which operand
    it describes ("a": M x K, "b": as stored, N x K or K x N, or packed quantized B as
    32-bit words, a row per n8 tile; "v": quantized B's scales then zeros, [2 * groups] x
    N; "d": the output, M x N or M x N/2 under a gated epilogue) and the box one copy
    moves (rows x cols of the stored matrix, cols contiguous). The runtime encodes it per launch from the
    operand's address, shape and row stride (gemm_runtime.launch); a "d" it cannot
    encode (rows not 16-byte multiples) is left zero and the kernel told to store
    directly (kEpilogueTmaStore)."""

    operand: str
    box_rows: int
    box_cols: int
    swizzle: int = 128  # bytes (gemm_runtime.tensor_map): 128 for wgmma operands, 0 for raw words


class MainloopFamily:
    """A mainloop family. Subclasses set the class attributes and override the rules
    that differ; the defaults are those of a plain multi-stage shared-memory pipeline."""

    value: str  # its YAML spelling and the kernel-name token
    min_arch: int  # the oldest arch its device code runs on
    atoms: tuple[MmaAtom, ...]  # the MMA atoms its headers implement
    header: str  # the header a generated kernel includes
    entry: str  # the device function a generated kernel calls with its Config
    summary: str = ""  # one line for listings and error messages
    template: str = "kernel.cu.j2"  # the Jinja template a generated kernel is rendered from
    # Persistent kernels launch one CTA per SM (at most) and loop over the work units;
    # the others launch one CTA per tile and split.
    persistent: bool = False
    # The rasterization (plan swizzle) the cost model prefers among equal predictions.
    preferred_swizzle: int = 0
    # An experimental family has no kernels in the default YAML (it measured slower than
    # the families there); its module says where its kernels are built and tested, and a
    # user's YAML may still name it.
    experimental: bool = False

    # ---- validation (codegen.config) --------------------------------------------------
    def tile_error(
        self, cta: tuple[int, int, int], warps: tuple[int, int, int], stages: int, cluster: int = 1
    ) -> tuple[str, str] | None:
        """(field, accepted) where a tile breaks a rule of this family, else None."""
        if cluster != 1:
            return "cluster", f"1 (the {self.value} family has no thread-block clusters)"
        return None

    def kernel_error(self, spec: KernelSpec) -> tuple[str, object, str] | None:
        """(field, got, accepted) where a whole kernel (its types, B order, alignment)
        breaks a rule of this family, else None."""
        return None

    def grouped_error(self, spec: KernelSpec) -> str | None:
        """Why the family has no grouped form of ``spec`` (docs/MOE.md), else None."""
        return f"false (the {self.value} family has no grouped kernels)"

    def ctas_per_sm_error(self, spec: KernelSpec) -> str | None:
        """Why a tile of this family may not set its own register cap (a tile's
        ``ctas_per_sm``), else None. The families rendered by kernel.cu.j2 take it as
        __launch_bounds__' second argument."""
        if self.template != "kernel.cu.j2":
            return f"no ctas_per_sm (the {self.value} family sets its kernels' registers itself)"
        return None

    # ---- what a kernel of the family implies (codegen.spec) ---------------------------
    def threads(self, spec: KernelSpec) -> int:
        """Threads per CTA: one warp per entry of ``warps``."""
        wm, wn, wk = spec.warps
        return 32 * wm * wn * wk

    def direct_b(self, spec: KernelSpec) -> bool:
        """Quantized B goes global -> registers, with no B tile in the stages."""
        return False

    def staged_b(self, spec: KernelSpec) -> bool:
        """Quantized B is dequantized once per CTA into shared memory, which the MMA
        warps read as they would a dense B (GemmConfig::kStagedB)."""
        return False

    def decode_ring(self, spec: KernelSpec) -> bool:
        """A quantized decode tile (one m16 tile per warp) whose packed weights ride the
        cp.async ring, many K tiles deep (GemmConfig::kDecodeRing)."""
        return False

    def xor_rows(self, spec: KernelSpec) -> bool:
        """The shared rows of A and of "nk" B are 64 bytes, unpadded and XOR-swizzled
        (gemm/smem_layout.cuh's XorRows64), not padded (GemmConfig::kXorRows)."""
        return False

    def lean_kn(self, spec: KernelSpec) -> bool:
        """"kn" B's K tiles inside the matrix copy from a pointer carried from tile to
        tile, as "nk" B's do, not by the general copies (GemmConfig::kLeanKN)."""
        return False

    def a_rows(self, spec: KernelSpec) -> int:
        """Rows of A a stage holds (GemmConfig's RowsA_): the CTA's M, the most rows of
        A the kernel serves per tile."""
        return spec.cta[0]

    def min_ctas_per_sm(self, spec: KernelSpec) -> int:
        """CTAs per SM the compiler must leave registers for (1: no constraint)."""
        return 1

    def min_ctas_per_sm_hopper(self, spec: KernelSpec) -> int:
        """min_ctas_per_sm where the kernel is compiled for sm_90 or later (the kernel's
        launch bounds then depend on __CUDA_ARCH__); by default the same."""
        return self.min_ctas_per_sm(spec)

    def spill_budget(self, spec: KernelSpec, arch: int) -> int:
        """Bytes of register spill accepted on ``arch``."""
        return 0

    def smem_bytes(self, spec: KernelSpec) -> int:
        """Dynamic shared memory: the stage ring, or the K-slice reduction if larger."""
        m, n, k = spec.cta
        pad = 0 if self.xor_rows(spec) else SMEM_PAD  # of A's rows and "nk" B's
        a_bytes = self.a_rows(spec) * (k + pad) * 2
        v_bytes = 0
        if spec.quantized:
            # Fragment-ordered rows of 8 columns, plus scale and zero rows per stage.
            b_bytes = 0 if spec.direct_b else n // 8 * (k // 32 * spec.quant_block_units + SMEM_PAD) * 2
            v_bytes = 2 * max(1, k // 32) * (n + SMEM_PAD) * 2
        elif spec.b_order is BOrder.NK:
            b_bytes = n * (k + pad) * 2
        else:
            b_bytes = k * (n + SMEM_PAD) * 2
        pipeline = spec.stages * (a_bytes + b_bytes + v_bytes)
        reduce = (spec.warps[2] - 1) * m * n * 4
        return max(pipeline, reduce)

    # ---- the build (gemm_runtime.build, gemm_runtime.compiler) ------------------------
    def nvrtc_target(self, arch: int) -> str:
        """The --gpu-architecture NVRTC compiles this family's kernels for on ``arch``
        (a family needing arch-specific instructions, such as wgmma, says "sm_90a")."""
        return f"sm_{arch}"

    # ---- the launch (gemm_runtime.launch, gemm_runtime.feasibility) --------------------
    def tensor_maps(self, spec: KernelSpec, key: ProblemKey | None = None) -> tuple[TensorMapBox, ...]:
        """The TMA descriptors the kernel's parameter block starts with (none: the block
        is the GemmParams struct alone); ``key``, the problem where the launch knows it,
        may shape the boxes (None: the kernel's own tile)."""
        return ()

    def reads_a_by_tma(self, spec: KernelSpec) -> bool:
        """Whether the kernel loads A by TMA boxes of consecutive rows: it cannot follow a
        row index (grouped launches sort gathered rows first, gemm_runtime.grouped), and
        its grouped form is priced for it (cost_model.predict)."""
        return any(box.operand == "a" for box in self.tensor_maps(spec))

    def params_offset(self, spec: KernelSpec) -> int:
        """Where GemmParams starts in the kernel's parameter block."""
        return TENSOR_MAP_BYTES * len(self.tensor_maps(spec))

    def max_splits(self, spec: KernelSpec) -> int | None:
        """The most K splits the kernel takes (None: the runtime's limit). Grouped kernels
        take none unless their family says so (docs/MOE.md)."""
        return 1 if spec.grouped else None

    def problem_error(self, spec: KernelSpec, k: int) -> str | None:
        """Why the kernel cannot serve a problem of depth ``k`` beyond what the
        problem key says (types, order, alignment), else None."""
        return None

    def rows_error(self, spec: KernelSpec, m: int) -> str | None:
        """Why the kernel cannot serve ``m`` rows of A, else None (every M by default:
        the grid covers M with CTA tiles)."""
        return None

    def grid(
        self, spec: KernelSpec, tiles: tuple[int, int], splits: int, swizzle: int, resident: int
    ) -> tuple[int, int, int]:
        """The launch grid for ``tiles`` (M, N) output tiles and ``splits`` K slices:
        2**swizzle CTAs per tile row of M in x, the N tile groups in y, the splits in z
        (templates/include/gemm/kernel.cuh). ``resident``: CTAs of this kernel the
        device holds at once."""
        tiles_m, tiles_n = tiles
        group = 1 << swizzle
        return tiles_m * group, math.ceil(tiles_n / group), splits

    def split_tiles(self, spec: KernelSpec, tiles: tuple[int, int], splits: int, resident: int) -> int:
        """How many of the ``tiles`` (M, N) output tiles hand K slices over through the
        split-K workspace under ``splits`` splits on the grid ``grid`` launches for
        ``resident`` CTAs: each takes one semaphore and ``splits - 1`` fp32 partial
        tiles (templates/include/gemm/split_k.cuh, slot = its index among them), which
        is what the runtime's workspace check counts (cost_model.fits_workspace). By
        default every tile splits; none without split-K."""
        return tiles[0] * tiles[1] if splits > 1 else 0

    def partial_tiles(self, spec: KernelSpec, tiles: tuple[int, int], splits: int, resident: int) -> int:
        """fp32 partial tiles of the split-K workspace (cost_model.workspace_bytes): by
        default ``splits - 1`` per split tile (split_k.cuh: the last slice sums them)."""
        return (splits - 1) * self.split_tiles(spec, tiles, splits, resident)

    def split_key(self, spec: KernelSpec, tiles: tuple[int, int], k_tiles: int, splits: int, resident: int) -> int:
        """What tells two split counts' launches apart (cost_model.split_options keeps one
        count of each): by default the K tiles per slice."""
        return math.ceil(k_tiles / splits)

    # ---- the cost model (gemm_runtime.cost_model) -------------------------------------
    def mma_efficiency(self, spec: KernelSpec) -> float:
        """The mainloop's MMA rate against the SM's mma.sync peak (the cost model's
        unit): by default the tile-shape term of an mma.sync pipeline (tile_efficiency)."""
        return self.tile_efficiency(spec)

    def tile_efficiency(self, spec: KernelSpec) -> float:
        """mma.sync warps re-read operands from shared memory for each MMA, so thin
        tiles run below the SM's peak. Quantized B: each warp dequantizes its own B
        fragments, so a B fragment serves only the warp's rows, not the CTA's."""
        cm, cn, _ = spec.cta
        rows_per_b = spec.warp_tile[0] if spec.quantized else cm
        intensity = rows_per_b * cn / (rows_per_b + cn)
        return intensity / (intensity + 48.0)

    def shared_sm_rate(self, spec: KernelSpec, resident: int) -> float:
        """A factor on mma_efficiency where ``resident`` CTAs of the kernel share an SM
        (1: the tile's own rate holds)."""
        return 1.0

    def rounds(self, spec: KernelSpec, tiles: int, splits: int, slots: int) -> tuple[int, int]:
        """(waves of CTAs, each running a 1/splits-long K slice of a tile, and the waves
        that hand K slices over) for ``tiles`` output tiles split ``splits`` ways on
        ``slots`` CTAs at a time. A persistent kernel's CTAs hand over in every round;
        a kernel of one CTA per unit pays once (what split_seconds was fitted to)."""
        waves = math.ceil(tiles * splits / slots)
        return waves, waves if self.persistent else 1

    def stages_in_flight(self, spec: KernelSpec) -> int:
        """K tiles of copies a CTA keeps in flight while it multiplies one: a multistage
        cp.async ring refills the stage it just consumed, so all but one."""
        return max(1, spec.stages - 1)

    def split_seconds(self, spec: KernelSpec, rows: int) -> float:
        """What each split beyond the first adds: one split waiting for its
        predecessor's partials, of ``rows`` rows per tile (D's, at most the tile's)."""
        return 1.5e-6

    def split_compute_factor(self, spec: KernelSpec, tiles: int, splits: int, slots: int) -> float:
        """How much longer a launch's MMA and dequantization work takes with ``tiles``
        output tiles cut ``splits`` ways on ``slots`` resident CTAs than whole (1.0: the
        split's cost is its hand-overs alone)."""
        return 1.0

    def fixed_seconds(self, spec: KernelSpec) -> float:
        """Time a launch costs beyond the cost model's common launch term."""
        return 0.0

    def dequant_rate(self, spec: KernelSpec) -> float:
        """The mainloop's dequantization rate against the SM80 one's (quantized B)."""
        return 1.0

    # ---- identity ---------------------------------------------------------------------
    def __repr__(self) -> str:
        return f"<mainloop family {self.value!r}>"

    def __reduce__(self):
        # Kernel specs travel to build workers (spawned processes): a family goes by
        # name and is the registered instance there too.
        from codegen.families import get

        return get, (self.value,)
