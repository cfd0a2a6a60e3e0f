// The warp-level MMA a config's atom selects.
#pragma once
#include "gemm/warp_mma.cuh"
#include "gemm/warp_mma_m8n8k4.cuh"

namespace gemm {

template <class Cfg, class Atom = typename Cfg::Atom>
struct WarpMmaOf {
  using Type = WarpMmaM16N8<Cfg>;
};

template <class Cfg>
struct WarpMmaOf<Cfg, AtomM8N8K4> {
  using Type = WarpMmaM8N8K4<Cfg>;
};

template <class Cfg>
using WarpMma = typename WarpMmaOf<Cfg>::Type;

}  // namespace gemm
