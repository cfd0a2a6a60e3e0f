// Where an operand tile's element (row, col) lives inside a shared-memory stage: the
// one answer the copies (TileCopy, LeanCopies) and the fragment loads (warp_mma.cuh)
// take their shared addresses from. Offsets are in bytes, elements are 16-bit.
//
// A layout gives:
//   kRowBytes           bytes from one row to the next (a stage holds Rows * kRowBytes)
//   kPeriodRows         offset(r + kPeriodRows, c) == offset(r, c) + kPeriodRows * kRowBytes:
//                       a copy that steps down a multiple of it adds a constant
//   offset(row, col)    col a multiple of 8 (one 16-byte unit) where kPeriodRows > 1
//   offset_k(row, c, k0) == offset(row, c + k0) for the fragment loads of the k16 step
//                       at k0: c is the lane's 0 or 8, k0 a multiple of 16
#pragma once
#include "gemm/ptx.cuh"

namespace gemm {

// Rows of Cols elements, each padded by 16 bytes. Rows hold a multiple of 16 elements,
// so consecutive rows start an odd number of 16-byte units apart and the 8 rows of an
// ldmatrix phase hit 8 distinct groups of 4 banks. A quarter warp's copies of a
// 64-byte-row tile (2 rows of 4 units) do not: rows r and r + 1 overlap in bank groups
// (ncu, H200, 128x128x32: 15 shared wavefronts per LDGSTS against 4 ideal).
template <int Cols>
struct PaddedRows {
  static constexpr int kPad = 8;
  static constexpr int kLd = Cols + kPad;  // elements per shared row
  static constexpr int kRowBytes = kLd * 2;
  static constexpr int kPeriodRows = 1;
  static constexpr bool kXor = false;

  __host__ __device__ __forceinline__ static constexpr u32 offset(int row, int col) {
    return static_cast<u32>((row * kLd + col) * 2);
  }
  __host__ __device__ __forceinline__ static constexpr u32 offset_k(int row, int col, int k0) {
    return static_cast<u32>((row * kLd + (k0 + col)) * 2);
  }
};

// Rows of 32 elements (64 bytes) unpadded, the 16-byte unit u of row r stored at unit
// u ^ ((r / 2) % 4). Two consecutive rows fill one 128-byte line, so:
//  - a quarter warp's 8 copies (rows r, r + 1 with r even, units 0-3 each) land in the 8
//    bank groups of one line: one wavefront each;
//  - an ldmatrix phase (8 consecutive rows, one unit column) reads rows 2j and 2j + 1 at
//    units u ^ j in lines j = 0..3, alternate halves: 8 distinct bank groups.
// The rows' units repeat every 8 rows (kPeriodRows), and the fragment loads of the
// second k16 step are those of the first with unit bit 1 flipped (offset_k).
struct XorRows64 {
  static constexpr int kLd = 32;
  static constexpr int kRowBytes = 64;
  static constexpr int kPeriodRows = 8;
  static constexpr bool kXor = true;

  __host__ __device__ __forceinline__ static constexpr u32 offset(int row, int col) {
    const u32 unit = (static_cast<u32>(col) >> 3) ^ ((static_cast<u32>(row) >> 1) & 3u);
    return static_cast<u32>(row) * kRowBytes + (unit << 4) + (static_cast<u32>(col) & 7u) * 2;
  }
  // NOTE: c in {0, 8} and k0 in {0, 16} select disjoint unit bits, so c + k0 == c ^ k0
  // and the XOR with the row's bits commutes: one XOR of the lane's own offset.
  __host__ __device__ __forceinline__ static constexpr u32 offset_k(int row, int col, int k0) {
    return offset(row, col) ^ static_cast<u32>(k0 * 2);
  }
};

// The layout of a tile whose rows hold Cols elements: XorRows64 where asked for and the
// rows are 64 bytes, else padded rows.
template <int Cols, bool Xor>
struct SmemRowsOf {
  static_assert(!Xor || Cols == 32, "XOR-swizzled rows are 32 elements (64 bytes)");
  using Type = PaddedRows<Cols>;
};
template <>
struct SmemRowsOf<32, true> {
  using Type = XorRows64;
};

}  // namespace gemm
