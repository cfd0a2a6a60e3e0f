// Global -> shared copy of one operand tile. Both operands (and both orders of B)
// are "a Rows x Cols tile of a row-major matrix whose rows hold Cols contiguous
// elements", so one loader serves them all: only the roles of (row, col) change.
//
// Thread t copies the vectors t, t + Threads, t + 2*Threads, ... of the tile in
// row-major order. Because Threads is a multiple of the vectors per row, a thread
// keeps the same column in every iteration and steps down a fixed number of rows:
// its pointer, row and column are computed once, not per copy.
#pragma once
#include "gemm/ptx.cuh"
#include "gemm/smem_layout.cuh"

namespace gemm {

// The register type of one vector of `Bytes` bytes.
template <int Bytes>
struct VectorOf;
template <>
struct VectorOf<16> {
  using Type = uint4;
};
template <>
struct VectorOf<8> {
  using Type = uint2;
};
template <>
struct VectorOf<4> {
  using Type = u32;
};
template <>
struct VectorOf<2> {
  using Type = u16;
};

// Layout: where the tile's rows go in shared memory (gemm/smem_layout.cuh).
template <int Rows, int Cols, class Layout, int Vec, int Threads>
struct TileCopy {
  static constexpr int kRows = Rows, kThreads = Threads;
  static constexpr int kVecsPerRow = Cols / Vec;
  static constexpr int kVecs = Rows * kVecsPerRow;
  static constexpr int kIters = (kVecs + Threads - 1) / Threads;
  static constexpr int kRowStep = Threads / kVecsPerRow;  // rows between a thread's copies
  static constexpr int kSmemStep = kRowStep * Layout::kRowBytes;  // shared bytes between a thread's copies
  static constexpr int kBytes = Vec * 2;
  using Vector = typename VectorOf<kBytes>::Type;
  static_assert(Cols % Vec == 0, "a tile row holds whole vectors");
  static_assert(Threads % kVecsPerRow == 0, "the CTA's threads must cover whole tile rows");
  static_assert(kRowStep % Layout::kPeriodRows == 0, "a thread's copies step down whole periods of the layout");

  static_assert(kIters <= 32, "a thread's copies fit the 32-bit row mask");

  const char* base;   // the matrix: the address of copies that read nothing
  const char* ptr;    // this thread's first element of the tile at origin (row0, col0)
  i64 ld_bytes;       // leading dimension in bytes
  i64 row_step;       // bytes between a thread's successive copies (kRowStep rows)
  int row, col;       // this thread's first element, in global coordinates
  int rows, cols;     // global extents: accesses outside read nothing and store zeros
  u32 rows_inside;    // bit i: copy i of the undisplaced tile lies in a row < rows
  u32 smem_offset;    // this thread's first element inside a shared tile, in bytes

  __device__ __forceinline__ void init(const void* base_, i64 ld, int rows_, int cols_, int row0, int col0) {
    const int r = threadIdx.x / kVecsPerRow;
    const int c = (threadIdx.x % kVecsPerRow) * Vec;
    ld_bytes = ld * 2;
    row = row0 + r;
    col = col0 + c;
    rows = rows_;
    cols = cols_;
    base = static_cast<const char*>(base_);
    ptr = base + row * ld_bytes + static_cast<i64>(col) * 2;
    smem_offset = Layout::offset(r, c);
    row_step = kRowStep * ld_bytes;
    rows_inside = 0;
#pragma unroll
    for (int i = 0; i < kIters; ++i) rows_inside |= (row + i * kRowStep < rows_ ? 1u : 0u) << i;
  }

  // Bytes of this thread's vector inside the matrix's columns, for the tile displaced by
  // `dcol`: a whole vector, part of one at the column edge, or none past it.
  __device__ __forceinline__ int row_bytes(int dcol) const {
    const int bytes = (cols - col - dcol) * 2;
    return bytes < 0 ? 0 : (bytes > kBytes ? kBytes : bytes);
  }

  // Keep the per-thread state of issue_inside_cols() in registers.
  // NOTE: the optimizer would otherwise rebuild it from the kernel parameters at every
  // copy of the mainloop (a dozen instructions each). Mainloops that copy with issue()
  // (the register-staged one, the SM80 prefill tiles) do not pin: registers are
  // scarcer there than copy instructions.
  __device__ __forceinline__ void pin() {
    opaque(ptr);
    opaque(row_step);
    opaque(rows_inside);
  }

  // issue() for a tile displaced only along the columns, for the tiles clear of the
  // column edge (`dcol` + Cols <= cols - col0): K runs along the columns (A, and B
  // stored N x K), so that is every K tile but the last. Each copy is then a whole
  // vector or, in a row past the matrix, none at all.
  // NOTE: rows past the matrix are not even zero-filled: a shared row of A (or of an
  // N x K B) only ever reaches its own output row (column), and those past the matrix
  // are never stored. At decode sizes that spares most of A's copies (15 of 16 rows at
  // M = 1).
  __device__ __forceinline__ void issue_inside_cols(u32 dst, int dcol, int begin, int end) const {
    static_assert(Vec > 1, "2-byte copies go through registers (issue)");
    const char* tile_ptr = ptr + static_cast<i64>(dcol) * 2;
#pragma unroll
    for (int i = 0; i < kIters; ++i) {
      if (i < begin || i >= end) continue;
      if (kVecs % Threads != 0 && threadIdx.x + i * Threads >= kVecs) continue;
      cp_async_if<kBytes>((rows_inside >> i) & 1u, dst + smem_offset + i * kSmemStep, tile_ptr + i * row_step);
    }
  }

  // Issue the copies of iterations [begin, end) for the tile displaced by
  // (drow, dcol) from the origin, into the shared tile at `dst`. With Vec == 1
  // (rows only 2-byte aligned, below cp.async's 4-byte minimum) the copy goes
  // through registers.
  __device__ __forceinline__ void issue(u32 dst, int drow, int dcol, int begin, int end) const {
    const char* tile_ptr = ptr + drow * ld_bytes + static_cast<i64>(dcol) * 2;
    const int bytes_in_row = row_bytes(dcol);
#pragma unroll
    for (int i = 0; i < kIters; ++i) {
      if (i < begin || i >= end) continue;
      if (kVecs % Threads != 0 && threadIdx.x + i * Threads >= kVecs) continue;
      const int bytes = row + drow + i * kRowStep < rows ? bytes_in_row : 0;
      // NOTE: a copy that reads nothing still gets a valid address (the matrix base):
      // this thread's own pointer may lie past the end for rows outside the matrix.
      const char* src = bytes ? tile_ptr + i * kRowStep * ld_bytes : base;
      const u32 dst_v = dst + smem_offset + i * kSmemStep;
      if constexpr (Vec == 1) {
        st_shared_u16(dst_v, bytes ? ld_global_u16(src) : u16(0));
      } else {
        cp_async_zfill<kBytes>(dst_v, src, bytes);
      }
    }
  }

  // issue() for rows gathered through `gather` (grouped launches, gemm/grouped.cuh): row
  // r of the tile reads the matrix's row gather[r] (the origin's row0 is 0 there, so
  // `row` counts the tile's rows). The row is looked up at each copy, not kept: a
  // register per copy is what the prefill tiles do not have.
  __device__ __forceinline__ void issue_gathered(u32 dst, int dcol, const int* gather, int begin, int end) const {
    static_assert(Vec > 1, "2-byte copies go through registers (issue)");
    const int bytes_in_row = row_bytes(dcol);
#pragma unroll
    for (int i = 0; i < kIters; ++i) {
      if (i < begin || i >= end) continue;
      if (kVecs % Threads != 0 && threadIdx.x + i * Threads >= kVecs) continue;
      const int r = row + i * kRowStep;
      const int bytes = r < rows ? bytes_in_row : 0;
      const char* src = bytes ? base + static_cast<i64>(__ldg(gather + r)) * ld_bytes + static_cast<i64>(col + dcol) * 2
                              : base;
      cp_async_zfill<kBytes>(dst + smem_offset + i * kSmemStep, src, bytes);
    }
  }

  // ---- register-staged path (no cp.async) -------------------------------------------
  // Global -> registers for the tile displaced by (drow, dcol); the same zero fill as
  // the cp.async path. A vector cut by the matrix edge is read element by element.
  __device__ __forceinline__ void load(Vector (&r)[kIters], int drow, int dcol) const {
    const char* tile_ptr = ptr + drow * ld_bytes + static_cast<i64>(dcol) * 2;
    const int bytes_in_row = row_bytes(dcol);
#pragma unroll
    for (int i = 0; i < kIters; ++i) {
      if (kVecs % Threads != 0 && threadIdx.x + i * Threads >= kVecs) continue;
      const int bytes = row + drow + i * kRowStep < rows ? bytes_in_row : 0;
      const char* src = tile_ptr + i * kRowStep * ld_bytes;
      if (bytes == kBytes) {
        r[i] = *reinterpret_cast<const Vector*>(src);
      } else {
        union {
          Vector v;
          u16 h[Vec];
        } u;
#pragma unroll
        for (int e = 0; e < Vec; ++e) u.h[e] = 2 * e < bytes ? ld_global_u16(src + 2 * e) : u16(0);
        r[i] = u.v;
      }
    }
  }

  __device__ __forceinline__ void store(u32 dst, const Vector (&r)[kIters]) const {
#pragma unroll
    for (int i = 0; i < kIters; ++i) {
      if (kVecs % Threads != 0 && threadIdx.x + i * Threads >= kVecs) continue;
      st_shared(dst + smem_offset + i * kSmemStep, r[i]);
    }
  }
};

}  // namespace gemm
