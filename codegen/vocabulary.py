"""The one vocabulary table: every enum the generator and the runtime share, with
its YAML spelling, its C++ spelling and its size. Nothing else spells these."""

from __future__ import annotations

import enum


class DataType(enum.Enum):
    """Element types. ``value`` is the short name used in YAML, kernel names and caches."""

    F16 = "f16"
    BF16 = "bf16"
    F32 = "f32"
    U4 = "u4"
    U8 = "u8"

    @property
    def bits(self) -> int:
        return _DTYPE_BITS[self]

    @property
    def cpp(self) -> str:
        """The device-side tag type (templates/include/gemm/numeric.cuh)."""
        try:
            return _DTYPE_CPP[self]
        except KeyError:
            raise ValueError(f"data type {self.value!r} has no device tag type yet") from None


_DTYPE_BITS = {DataType.F16: 16, DataType.BF16: 16, DataType.F32: 32, DataType.U4: 4, DataType.U8: 8}
_DTYPE_CPP = {
    DataType.F16: "gemm::Half",
    DataType.BF16: "gemm::BFloat16",
    DataType.F32: "gemm::Float32",
    DataType.U4: "gemm::U4",
    DataType.U8: "gemm::U8",
}
# Weight types of quantized B (weight-only quantization: A stays fp16 / bf16).
QUANT_TYPES = (DataType.U4, DataType.U8)


class Order(enum.Enum):
    """Storage order of a matrix described as (rows, cols)."""

    ROW_MAJOR = "row"
    COL_MAJOR = "col"


class BOrder(enum.Enum):
    """How B (K x N in the math) is stored.

    ``nk``: N x K row-major, K contiguous (the ``torch.nn.Linear`` weight; B col-major).
    ``kn``: K x N row-major, N contiguous.
    """

    NK = "nk"
    KN = "kn"

    @property
    def cpp(self) -> str:
        return {BOrder.NK: "gemm::OrderB::kNK", BOrder.KN: "gemm::OrderB::kKN"}[self]

    @property
    def order(self) -> Order:
        """The order of the K x N matrix B this storage amounts to."""
        return Order.COL_MAJOR if self is BOrder.NK else Order.ROW_MAJOR


class MmaAtom(enum.Enum):
    M16N8K16 = "m16n8k16"
    M16N8K8 = "m16n8k8"
    M8N8K4 = "m8n8k4"
    # Hopper's warpgroup MMA (wgmma.mma_async m64nNk16): a 64-row, N-wide (the tile's
    # N), 16-deep product per warpgroup, both operands from shared memory.
    M64NK16 = "m64nNk16"

    @property
    def shape(self) -> tuple[int, int, int]:
        return {MmaAtom.M16N8K16: (16, 8, 16), MmaAtom.M16N8K8: (16, 8, 8), MmaAtom.M8N8K4: (8, 8, 4),
                MmaAtom.M64NK16: (64, 8, 16)}[self]  # wgmma: N in steps of 8

    @property
    def cpp(self) -> str:
        """The device-side atom tag (templates/include/gemm/config.cuh)."""
        return {
            MmaAtom.M16N8K16: "gemm::AtomM16N8K16",
            MmaAtom.M16N8K8: "gemm::AtomM16N8K8",
            MmaAtom.M8N8K4: "gemm::AtomM8N8K4",
            MmaAtom.M64NK16: "gemm::AtomWgmma",
        }[self]

    @property
    def min_arch(self) -> int:
        """The oldest arch whose PTX has the instruction (and its fragment loads)."""
        return {MmaAtom.M16N8K16: 80, MmaAtom.M16N8K8: 75, MmaAtom.M8N8K4: 70, MmaAtom.M64NK16: 90}[self]

    @property
    def native_archs(self) -> tuple[int, int]:
        """Inclusive arch range where the instruction runs in hardware at full rate."""
        return {MmaAtom.M16N8K16: (80, 999), MmaAtom.M16N8K8: (75, 999), MmaAtom.M8N8K4: (70, 75),
                MmaAtom.M64NK16: (90, 90)}[self]  # sm_90a only: Blackwell has tcgen05 instead

    def native_on(self, arch: int) -> bool:
        lo, hi = self.native_archs
        return lo <= arch <= hi

    @property
    def supported_types(self) -> tuple[DataType, ...]:
        if self is MmaAtom.M8N8K4:
            return (DataType.F16,)
        return (DataType.F16, DataType.BF16)  # bf16 needs sm_80 whatever the atom


# Real architectures the project builds for, and the dynamic shared memory a CTA
# may opt into on each (cudaDevAttrMaxSharedMemoryPerBlockOptin).
ARCH_SMEM_LIMIT = {70: 98304, 75: 65536, 80: 166912, 86: 101376, 87: 166912, 89: 101376, 90: 232448}
KNOWN_ARCHS = tuple(sorted(ARCH_SMEM_LIMIT))


def parse_enum(enum_cls: type[enum.Enum], text: object) -> enum.Enum:
    """YAML spelling -> enum member, or ValueError listing what is accepted."""
    for member in enum_cls:
        if member.value == text:
            return member
    accepted = ", ".join(repr(m.value) for m in enum_cls)
    raise ValueError(f"{text!r} is not one of {accepted}")
