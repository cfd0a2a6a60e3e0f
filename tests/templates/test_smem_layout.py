"""The shared-memory layouts of gemm/smem_layout.cuh, checked where the kernels use them:
NVRTC evaluates each property below at compile time (static_assert over the layouts'
constexpr offsets), so a layout that breaks one does not compile. Bank groups are the
eight 16-byte groups of four banks a 128-byte shared line spans; a warp's access takes
one wavefront per distinct line a bank group is asked for, so "conflict-free" is 8
accesses of a phase in 8 distinct bank groups.

Properties, per layout: every (row, 16-byte unit) of a period of rows has a unit of its
own inside the period (a bijection); offsets repeat every kPeriodRows rows; offset_k
equals offset at the step's column; an ldmatrix phase (8 rows from a multiple of 8, one
unit column) is conflict-free; and a quarter warp's 16-byte copies of a 64-byte-row
tile (rows r and r + 1, r even, units 0-3 each) are conflict-free for XorRows64, and are
not for padded rows (the bank conflict the swizzle exists to remove: the check can
fail). A deliberately broken swizzle must fail to compile. CPU only."""

from __future__ import annotations

import pytest

pytest.importorskip("cuda.bindings.nvrtc")

from codegen.render import INCLUDE_DIR  # noqa: E402
from gemm_runtime.compiler import CompileError, compile_cubin  # noqa: E402

_CHECKS = r"""
#include "gemm/numeric.cuh"
#include "gemm/smem_layout.cuh"

using namespace gemm;

constexpr int bank_group(u32 offset) { return static_cast<int>((offset >> 4) & 7u); }

// 8 offsets in 8 distinct bank groups.
constexpr bool distinct_groups(const u32 (&offsets)[8]) {
  bool seen[8] = {};
  for (int i = 0; i < 8; ++i) {
    if (seen[bank_group(offsets[i])]) return false;
    seen[bank_group(offsets[i])] = true;
  }
  return true;
}

template <class L, int Cols>
constexpr bool bijective_over_a_period() {
  constexpr int kRows = L::kPeriodRows, kUnits = Cols / 8, kSlots = kRows * L::kRowBytes / 16;
  bool taken[kSlots] = {};
  for (int r = 0; r < kRows; ++r)
    for (int u = 0; u < kUnits; ++u) {
      const u32 at = L::offset(r, u * 8);
      if (at % 16 != 0 || at / 16 >= static_cast<u32>(kSlots) || taken[at / 16]) return false;
      taken[at / 16] = true;
      // the unit's 8 elements lie in order inside it
      for (int e = 0; e < 8; ++e)
        if (L::offset(r, u * 8 + e) != at + 2 * e) return false;
    }
  return true;
}

template <class L, int Cols>
constexpr bool periodic() {
  for (int r = 0; r < 4 * L::kPeriodRows; ++r)
    for (int c = 0; c < Cols; c += 8)
      if (L::offset(r + L::kPeriodRows, c) != L::offset(r, c) + L::kPeriodRows * L::kRowBytes) return false;
  return true;
}

template <class L, int Cols>
constexpr bool offset_k_is_offset() {
  for (int r = 0; r < 32; ++r)
    for (int c = 0; c <= 8; c += 8)
      for (int k0 = 0; k0 + 16 <= Cols; k0 += 16)
        if (L::offset_k(r, c, k0) != L::offset(r, c + k0)) return false;
  return true;
}

template <class L, int Cols>
constexpr bool ldmatrix_phases_conflict_free() {
  for (int r0 = 0; r0 < 32; r0 += 8)
    for (int c = 0; c < Cols; c += 8) {
      u32 at[8] = {};
      for (int i = 0; i < 8; ++i) at[i] = L::offset(r0 + i, c);
      if (!distinct_groups(at)) return false;
    }
  return true;
}

// A 64-byte-row tile (4 units a row): copy t of a quarter warp writes row t / 4, unit t % 4.
template <class L>
constexpr bool quarter_warp_copies_conflict_free() {
  for (int r0 = 0; r0 < 32; r0 += 2) {
    u32 at[8] = {};
    for (int t = 0; t < 8; ++t) at[t] = L::offset(r0 + t / 4, (t % 4) * 8);
    if (!distinct_groups(at)) return false;
  }
  return true;
}

template <class L, int Cols>
constexpr bool sound() {
  return bijective_over_a_period<L, Cols>() && periodic<L, Cols>() && offset_k_is_offset<L, Cols>() &&
         ldmatrix_phases_conflict_free<L, Cols>();
}
"""

_PROPERTIES = _CHECKS + r"""
static_assert(sound<XorRows64, 32>(), "XorRows64");
static_assert(quarter_warp_copies_conflict_free<XorRows64>(), "XorRows64 copies");
static_assert(sound<PaddedRows<32>, 32>() && sound<PaddedRows<64>, 64>() && sound<PaddedRows<256>, 256>(), "padded");
// Why the swizzle exists: padded 64-byte rows put a quarter warp's copies in conflict.
static_assert(!quarter_warp_copies_conflict_free<PaddedRows<32>>(), "padded 64-byte rows conflict");
static_assert(kSame<SmemRowsOf<32, true>::Type, XorRows64> && kSame<SmemRowsOf<32, false>::Type, PaddedRows<32>> &&
              kSame<SmemRowsOf<64, false>::Type, PaddedRows<64>>, "SmemRowsOf");
extern "C" __global__ void smem_layout_checks() {}
"""

# Unit u of row r at u ^ (r % 4): rows 0 and 4 of an ldmatrix phase share a bank group.
_BROKEN = _CHECKS + r"""
struct BrokenXor : XorRows64 {
  __host__ __device__ static constexpr u32 offset(int row, int col) {
    return static_cast<u32>(row) * 64 + ((((static_cast<u32>(col) >> 3) ^ (static_cast<u32>(row) & 3u))) << 4) +
           (static_cast<u32>(col) & 7u) * 2;
  }
  __host__ __device__ static constexpr u32 offset_k(int row, int col, int k0) {
    return offset(row, col) ^ static_cast<u32>(k0 * 2);
  }
};
static_assert(sound<BrokenXor, 32>(), "BrokenXor is not sound");
extern "C" __global__ void smem_layout_checks() {}
"""


def _compile(source: str, arch: int = 90):
    return compile_cubin(source, name="smem_layout_checks", arch=arch, include_dirs=[INCLUDE_DIR], cache_dir=None)


@pytest.mark.parametrize("arch", [80, 90])
def test_the_layouts_have_their_properties(arch: int) -> None:
    try:
        _compile(_PROPERTIES, arch)
    except CompileError as err:
        pytest.fail(str(err))


def test_a_broken_swizzle_fails_the_checks() -> None:
    with pytest.raises(CompileError, match="BrokenXor is not sound"):
        _compile(_BROKEN)
