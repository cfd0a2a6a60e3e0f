// D = alpha * acc + beta * C, straight from the accumulator registers: the warp MMA
// hands out pairs of adjacent columns, whatever its atom's register layout.
// C may alias D: every element is read and written by the same thread.
//
// Grouped kernels (gemm/grouped.cuh) scale each row by its routing weight, U[r], before C.
//
// Fused LLM epilogues (runtime flags, uniform per launch):
//   bias       : v = alpha * acc + bias[col]
//   gated SiLU : the accumulator's columns are interleaved (gate, up) pairs; output
//                column c/2 = silu(v[c]) * v[c + 1], so D has N/2 columns. A pair is
//                always held by one thread (even column first), so no exchange is needed.
#pragma once
#include "gemm/config.cuh"
#include "gemm/grouped.cuh"
#include "gemm/numeric.cuh"

namespace gemm {

constexpr int kEpilogueBias = 1;
constexpr int kEpilogueGatedSilu = 2;
// Set by the runtime (gemm_runtime.launch) for SM90 kernels whose D tensor map it could
// encode: they may store through it (gemm/sm90/store_sm90.cuh). The others ignore it.
constexpr int kEpilogueTmaStore = 4;

// A warp fragment's accumulators per thread (Warp::kAcc), or "many" for the fragments
// that do not say (the sm90 shared-B tiles' staged rows).
template <class Warp, class = void>
struct AccumulatorsOf {
  static constexpr int value = 1 << 30;
};
template <class Warp>
struct AccumulatorsOf<Warp, decltype(void(Warp::kAcc))> {
  static constexpr int value = Warp::kAcc;
};

template <class Cfg>
struct Epilogue {
  using TD = typename Cfg::TD;
  using Storage = typename TD::Storage;
  using PairT = Pair<TD>;

  template <class Warp, class Params>
  __device__ __forceinline__ static void store(const Warp& warp, const Params& p, int row0, int col0) {
    const bool read_c = p.beta != 0.f;
    Storage* D = static_cast<Storage*>(p.D);
    const Storage* C = static_cast<const Storage*>(p.C);
    // NOTE: two adjacent elements go out as one store when every row of D (and of C,
    // if read) starts on a pair boundary; decided once per thread, uniform per CTA.
    constexpr u64 kPairBytes = 2 * sizeof(Storage);
    const u64 addr_bits = reinterpret_cast<u64>(D) | (read_c ? reinterpret_cast<u64>(C) : 0ull);
    const bool paired = addr_bits % kPairBytes == 0 && p.ldd % 2 == 0 && (!read_c || p.ldc % 2 == 0);
    const float alpha = p.alpha, beta = p.beta;
    const int M = p.M, N = p.N;
    const bool add_bias = (p.epilogue & kEpilogueBias) != 0;
    const bool gated = (p.epilogue & kEpilogueGatedSilu) != 0;
    const Storage* bias = static_cast<const Storage*>(p.bias);
    if constexpr (GEMM_LEAN_TAIL && !Cfg::kGrouped && AccumulatorsOf<Warp>::value <= 16) {
      // D = alpha * acc alone (config.cuh's knob): none of the other cases' addresses,
      // loads or branches on the path. Only for warps of few accumulators (decode tiles,
      // where this chain follows the K loop directly): the second path cost the 128x128
      // tiles' registers (8 bytes of spills).
      if (!read_c && !add_bias && !gated && paired) {
        warp.for_each_pair(row0, col0, [&](int r, int c, float acc0, float acc1) {
          if (r >= M || c >= N) return;
          Storage* d = D + static_cast<i64>(r) * p.ldd + c;
          if (c + 1 < N) {
            *reinterpret_cast<typename PairT::Type*>(d) = PairT::pack(alpha * acc0, alpha * acc1);
          } else {
            *d = TD::from_f32(alpha * acc0);
          }
        });
        return;
      }
    }
    warp.for_each_pair(row0, col0, [&](int r, int c, float acc0, float acc1) {
      if (r >= M || c >= N) return;
      Storage* d_row = D + static_cast<i64>(r) * p.ldd;
      const Storage* c_row = C + static_cast<i64>(r) * p.ldc;
      float v0 = alpha * acc0;
      float v1 = alpha * acc1;
      const bool pair = c + 1 < N;
      if (add_bias) {
        v0 += TD::to_f32(bias[c]);
        if (pair) v1 += TD::to_f32(bias[c + 1]);
      }
      if (gated) {
        // N is even (checked by the runtime): the pair is whole.
        float out = v0 / (1.f + __expf(-v0)) * v1;
        if constexpr (Cfg::kGrouped) out *= row_scale<Cfg>(p, r);
        if (read_c) out += beta * TD::to_f32(c_row[c >> 1]);
        d_row[c >> 1] = TD::from_f32(out);
        return;
      }
      if constexpr (Cfg::kGrouped) {
        const float s = row_scale<Cfg>(p, r);
        v0 *= s;
        v1 *= s;
      }
      if (paired && pair) {
        if (read_c) {
          float c0, c1;
          PairT::unpack(*reinterpret_cast<const typename PairT::Type*>(c_row + c), c0, c1);
          v0 += beta * c0;
          v1 += beta * c1;
        }
        *reinterpret_cast<typename PairT::Type*>(d_row + c) = PairT::pack(v0, v1);
      } else {
        if (read_c) v0 += beta * TD::to_f32(c_row[c]);
        d_row[c] = TD::from_f32(v0);
        if (pair) {
          if (read_c) v1 += beta * TD::to_f32(c_row[c + 1]);
          d_row[c + 1] = TD::from_f32(v1);
        }
      }
    });
  }
};

}  // namespace gemm
