// D = alpha * acc + beta * C, straight from the MMA accumulator layout: lane
// (g = lane/4, t = lane%4) holds rows g and g+8, columns 2t and 2t+1 of each m16n8 tile.
// C may alias D: every element is read and written by the same thread.
#pragma once
#include "gemm/warp_mma.cuh"

namespace gemm {

template <class Cfg>
struct Epilogue {
  using TD = typename Cfg::TD;
  using Storage = typename TD::Storage;
  using PairT = Pair<TD>;

  template <class Params>
  __device__ __forceinline__ static void store(const WarpMma<Cfg>& warp, const Params& p, int row0, int col0) {
    const int lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const bool read_c = p.beta != 0.f;
    Storage* D = static_cast<Storage*>(p.D);
    const Storage* C = static_cast<const Storage*>(p.C);
    // NOTE: two adjacent elements go out as one store when every row of D (and of C,
    // if read) starts on a pair boundary; decided once per thread, uniform per CTA.
    constexpr u64 kPairBytes = 2 * sizeof(Storage);
    const u64 addr_bits = reinterpret_cast<u64>(D) | (read_c ? reinterpret_cast<u64>(C) : 0ull);
    const bool paired = addr_bits % kPairBytes == 0 && p.ldd % 2 == 0 && (!read_c || p.ldc % 2 == 0);
#pragma unroll
    for (int mi = 0; mi < WarpMma<Cfg>::kMI; ++mi) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = row0 + mi * 16 + g + h * 8;
        if (r >= p.M) continue;
        Storage* d_row = D + static_cast<i64>(r) * p.ldd;
        const Storage* c_row = C + static_cast<i64>(r) * p.ldc;
#pragma unroll
        for (int ni = 0; ni < WarpMma<Cfg>::kNI; ++ni) {
          const int c = col0 + ni * 8 + t * 2;
          if (c >= p.N) continue;
          float v0 = p.alpha * warp.acc[mi][ni][h * 2];
          float v1 = p.alpha * warp.acc[mi][ni][h * 2 + 1];
          const bool pair = c + 1 < p.N;
          if (paired && pair) {
            if (read_c) {
              float c0, c1;
              PairT::unpack(*reinterpret_cast<const typename PairT::Type*>(c_row + c), c0, c1);
              v0 += p.beta * c0;
              v1 += p.beta * c1;
            }
            *reinterpret_cast<typename PairT::Type*>(d_row + c) = PairT::pack(v0, v1);
          } else {
            if (read_c) v0 += p.beta * TD::to_f32(c_row[c]);
            d_row[c] = TD::from_f32(v0);
            if (pair) {
              if (read_c) v1 += p.beta * TD::to_f32(c_row[c + 1]);
              d_row[c + 1] = TD::from_f32(v1);
            }
          }
        }
      }
    }
  }
};

}  // namespace gemm
