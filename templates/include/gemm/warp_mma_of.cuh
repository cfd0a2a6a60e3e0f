// The warp-level MMA a config selects: by atom, and the dequantizing one for
// quantized B (or, with B staged in shared memory, the one that reads it there).
#pragma once
#include "gemm/warp_mma.cuh"
#include "gemm/warp_mma_m8n8k4.cuh"
#include "gemm/warp_mma_quant.cuh"
#include "gemm/warp_mma_staged.cuh"

namespace gemm {

template <class Cfg, class Atom = typename Cfg::Atom, bool Quant = Cfg::kQuantB, bool Staged = Cfg::kStagedB>
struct WarpMmaOf {
  using Type = WarpMmaM16N8<Cfg>;
};

template <class Cfg>
struct WarpMmaOf<Cfg, AtomM8N8K4, false, false> {
  using Type = WarpMmaM8N8K4<Cfg>;
};

template <class Cfg, class Atom>
struct WarpMmaOf<Cfg, Atom, true, false> {
  using Type = WarpMmaQuant<Cfg>;
};

template <class Cfg, class Atom>
struct WarpMmaOf<Cfg, Atom, true, true> {
  using Type = WarpMmaStaged<Cfg>;
};

template <class Cfg>
using WarpMma = typename WarpMmaOf<Cfg>::Type;

}  // namespace gemm
