// The warp-level MMA a config selects: by atom, and the dequantizing one for
// quantized B.
#pragma once
#include "gemm/warp_mma.cuh"
#include "gemm/warp_mma_m8n8k4.cuh"
#include "gemm/warp_mma_quant.cuh"

namespace gemm {

template <class Cfg, class Atom = typename Cfg::Atom, bool Quant = Cfg::kQuantB>
struct WarpMmaOf {
  using Type = WarpMmaM16N8<Cfg>;
};

template <class Cfg>
struct WarpMmaOf<Cfg, AtomM8N8K4, false> {
  using Type = WarpMmaM8N8K4<Cfg>;
};

template <class Cfg, class Atom>
struct WarpMmaOf<Cfg, Atom, true> {
  using Type = WarpMmaQuant<Cfg>;
};

template <class Cfg>
using WarpMma = typename WarpMmaOf<Cfg>::Type;

}  // namespace gemm
