// SM70 mainloop: for GPUs without cp.async (Volta, Turing). Two shared buffers;
// while the MMAs of tile t run from one, tile t+1 travels global -> registers (the
// loads are issued before the MMAs so their latency hides behind them), then
// registers -> the other buffer. One barrier per tile:
//
//   tile t : load tile t+1 into registers | MMAs of tile t from buffer t%2 |
//            store the registers into buffer (t+1)%2 | barrier
//
// NOTE: one barrier suffices. Buffer (t+1)%2 was last read during tile t-1, which
// ended with a barrier; buffer t%2 is next written during tile t+1, after this one.
#pragma once
#include "gemm/operand_copies.cuh"
#include "gemm/warp_mma_of.cuh"

namespace gemm {

template <class Cfg>
struct MainloopSm70 : OperandCopies<Cfg> {
  using Base = OperandCopies<Cfg>;
  using typename Base::CopyA;
  using typename Base::CopyB;
  // Quantized B's scale and zero rows, [groups, N] each, one after the other in V.
  using CopyV = TileCopy<Base::kGroupRows, Cfg::kCtaN, typename Cfg::LayoutV, 8, Cfg::kThreads>;
  static constexpr int kStepK = WarpMma<Cfg>::kStepK;
  static constexpr int kSteps = Cfg::kWarpTileK / kStepK;
  static_assert(Cfg::kStages == 2, "the SM70 mainloop double-buffers: stages must be 2");
  static_assert(!Cfg::kDirectB, "the SM70 mainloop stages B through shared memory");
  // Quantized B's scales and zeros travel with B; dense kernels stage nothing for them.
  static constexpr int kStagedV = Cfg::kQuantB ? CopyV::kIters : 1;

  typename CopyA::Vector staged_a[CopyA::kIters];
  typename CopyB::Vector staged_b[CopyB::kIters];
  typename CopyV::Vector staged_scales[kStagedV], staged_zeros[kStagedV];
  CopyV copy_scales, copy_zeros;

  template <class Params>
  __device__ __forceinline__ void init(const Params& p, int m0, int n0, int k0) {
    Base::init(p, m0, n0, k0);
    if constexpr (Cfg::kQuantB) {
      copy_scales.init(p.V, p.ldv, p.groups, p.N, 0, n0);
      copy_zeros.init(static_cast<const char*>(p.V) + static_cast<i64>(p.groups) * p.ldv * 2, p.ldv, p.groups, p.N, 0,
                      n0);
    }
  }

  __device__ __forceinline__ void load_tile(int tile) {
    const int k0 = tile * Cfg::kCtaK;
    this->copy_a.load(staged_a, 0, k0);
    this->copy_b.load(staged_b, Base::b_drow(k0), Base::b_dcol(k0));
    if constexpr (Cfg::kQuantB) {
      const int g0 = this->group_of(k0);
      copy_scales.load(staged_scales, g0, 0);
      copy_zeros.load(staged_zeros, g0, 0);
    }
  }

  __device__ __forceinline__ void store_tile(u32 smem, int buffer) const {
    const u32 sa = smem + buffer * Cfg::kStageBytes;
    const u32 sb = sa + Cfg::kStageBytesA;
    this->copy_a.store(sa, staged_a);
    this->copy_b.store(sb, staged_b);
    if constexpr (Cfg::kQuantB) {
      const u32 sv = sb + Cfg::kStageBytesB;
      copy_scales.store(sv, staged_scales);
      copy_zeros.store(sv + Cfg::kGroupRows * Cfg::kLdsV * 2, staged_zeros);
    }
  }

  __device__ __forceinline__ void operator()(WarpMma<Cfg>& warp, u32 smem, int k_tiles, int warp_m0, int warp_n0,
                                             int warp_k0) {
    this->begin_groups(warp, warp_m0);
    if (k_tiles > 0) {
      load_tile(0);
      store_tile(smem, 0);
    }
    __syncthreads();
    for (int t = 0; t < k_tiles; ++t) {
      const bool next = t + 1 < k_tiles;
      if (next) load_tile(t + 1);
      const u32 stage = smem + (t & 1) * Cfg::kStageBytes;
      this->load_fragments(warp, 0, stage, t, warp_k0, warp_m0, warp_n0);
#pragma unroll
      for (int step = 0; step < kSteps; ++step) {
        if (step + 1 < kSteps)
          this->load_fragments(warp, (step + 1) & 1, stage, t, warp_k0 + (step + 1) * kStepK, warp_m0, warp_n0);
        warp.mma(step & 1);
        this->end_group_after(warp, stage, t, step, k_tiles, warp_k0, warp_n0);
      }
      if (next) store_tile(smem, (t + 1) & 1);
      __syncthreads();
    }
    this->end_groups(warp);
  }
};

}  // namespace gemm
