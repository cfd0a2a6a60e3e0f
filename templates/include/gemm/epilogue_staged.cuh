// The mma.sync families' plain 16-bit epilogue through shared memory:
//
//   D = alpha * acc (+ bias)   for launches without C, without the gated epilogue,
//       (* row scale)          (grouped kernels: gemm/grouped.cuh)
//                              whose D rows are whole 16-byte chunks (N % 8 == 0,
//                              ldd % 8 == 0, D 16-byte aligned).
//
// Straight from the accumulators (gemm/epilogue.cuh) each warp store writes 16 bytes
// into each of 8 rows: half of every 32-byte sector it touches. Here every warp first
// writes its packed pairs into the CTA's tile in shared memory (the pipeline's
// buffers, free once the mainloop is done), and the CTA then copies the tile out row
// by row in 16-byte chunks, a warp covering 512 contiguous bytes of a row.
//
// Rows are padded by 16 bytes: the 8 rows a warp's pair stores touch then start in 8
// different 16-byte bank groups, so neither phase has bank conflicts.
#pragma once
#include "gemm/epilogue.cuh"
#include "gemm/ptx.cuh"

// Experiment knob, 1 in every build: 0 keeps every launch on the direct epilogue
// (bench/experiments/sm80_variants.py, "direct_epilogue").
#ifndef GEMM_STAGED_EPILOGUE
#define GEMM_STAGED_EPILOGUE 1
#endif

namespace gemm {

template <class Cfg>
struct StagedEpilogue {
  using TD = typename Cfg::TD;
  using Storage = typename TD::Storage;
  using PairT = Pair<TD>;
  static constexpr int kRowBytes = Cfg::kCtaN * 2 + 16;
  static constexpr int kChunksPerRow = Cfg::kCtaN * 2 / 16;
  // NOTE: one K slice of warps only: the slices other than the first leave after the
  // reduction (gemm/kernel.cuh), and the copy-out needs every thread at its barriers.
  static constexpr bool kFits = GEMM_STAGED_EPILOGUE && sizeof(Storage) == 2 && Cfg::kWarpsK == 1 && Cfg::kCtaN % 64 == 0 &&
                                Cfg::kCtaM * kRowBytes <= Cfg::kSmemBytes;

  // Uniform per launch: whether this launch's epilogue is the plain one and D's rows
  // are whole chunks.
  template <class Params>
  __device__ __forceinline__ static bool usable(const Params& p) {
    return kFits && p.beta == 0.f && (p.epilogue & kEpilogueGatedSilu) == 0 && p.N % 8 == 0 && p.ldd % 8 == 0 &&
           reinterpret_cast<u64>(p.D) % 16 == 0;
  }

  // warp_row0 / warp_col0: the warp's offset inside the CTA tile at (m0, n0).
  template <class Warp, class Params>
  __device__ __forceinline__ static void store(const Warp& warp, const Params& p, u32 smem, int m0, int n0,
                                               int warp_row0, int warp_col0) {
    const float alpha = p.alpha;
    const bool add_bias = (p.epilogue & kEpilogueBias) != 0;
    const Storage* bias = static_cast<const Storage*>(p.bias);
    const int N = p.N;
    __syncthreads();  // every warp has finished reading the pipeline's buffers
    warp.for_each_pair(warp_row0, warp_col0, [&](int r, int c, float acc0, float acc1) {
      float v0 = alpha * acc0;
      float v1 = alpha * acc1;
      // N % 8 == 0: a pair is inside N or outside it whole.
      if (add_bias && n0 + c < N) {
        v0 += TD::to_f32(bias[n0 + c]);
        v1 += TD::to_f32(bias[n0 + c + 1]);
      }
      if constexpr (Cfg::kGrouped) {
        // NOTE: rows past the expert's read no scale: their stores are dropped below.
        const float s = m0 + r < p.M ? row_scale<Cfg>(p, m0 + r) : 0.f;
        v0 *= s;
        v1 *= s;
      }
      st_shared(smem + static_cast<u32>(r * kRowBytes + c * 2), static_cast<u32>(PairT::pack(v0, v1)));
    });
    __syncthreads();
    Storage* D = static_cast<Storage*>(p.D);
    const int rows = p.M - m0 < Cfg::kCtaM ? p.M - m0 : Cfg::kCtaM;
    const int chunks = (N - n0) / 8 < kChunksPerRow ? (N - n0) / 8 : kChunksPerRow;
#pragma unroll 4
    for (int i = threadIdx.x; i < Cfg::kCtaM * kChunksPerRow; i += Cfg::kThreads) {
      const int r = i / kChunksPerRow, chunk = i % kChunksPerRow;
      if (r < rows && chunk < chunks) {
        const uint4 v = ld_shared_v4(smem + static_cast<u32>(r * kRowBytes + chunk * 16));
        *reinterpret_cast<uint4*>(D + static_cast<i64>(m0 + r) * p.ldd + n0 + chunk * 8) = v;
      }
    }
  }
};

}  // namespace gemm
