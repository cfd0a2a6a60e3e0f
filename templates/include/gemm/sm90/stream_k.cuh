// Stream-K for the SM90 quantized family (kernel_sm90_quant.cuh): the K tiles of all
// output tiles form one sequence, tile after tile (iteration t * k_tiles + k is K tile k
// of tile t), and each CTA of the grid takes an equal contiguous share of it, so no SM
// idles in a last, partly filled wave (224 tiles on 132 SMs run as 1.7 waves of work,
// not 2); but for a grid of exactly two CTAs per tile (skewed_stream_k).
//
// A tile cut between CTAs is finished by the CTA holding its K tile 0: the others (their
// shares start inside the tile) hand their sums over through the workspace, one fp32
// partial tile per CTA in its own slot and a flag, and that CTA adds them in order of
// rank, so every run gives the same sums.
// NOTE: ranks run against block order (rank = ctas - 1 - blockIdx.x). The CTA finishing
// a tile holds the tile's head at the end of its share and waits for the ranks above
// it, which hold the tile's rest at the start of theirs: by then they are long done, and
// being of lower block index they started first, so no wait can hang even when other
// kernels hold some SMs and not all of the grid is resident.
// NOTE: a give's flag is raised by a warp of the producer warpgroup (idle in stream-K
// launches), not by the consumers: they store their partials, arrive on a named barrier
// and go on with their next K tiles, while that warp waits at the barrier and releases
// the flag (a release is cumulative: it carries the stores the barrier ordered before
// it). The consumers first fenced in every thread (__threadfence: MEMBAR.SC.GPU) and
// raised the flag themselves: H100, W4, the llama3 layers' split plans at 64 and 128
// tokens 2% slower in the median, up to 4% (docs/NOTES.md, fortieth session).
// NOTE: the take's tail share (the last rank's: it handed over at the start of its own
// share) is brought into shared memory by the bulk copy engine while the head's K loop
// still runs (stream_k_land, where the kernel's staging lies after its ring), so the
// head reads only the middle shares from L2 after its K loop: H100, W4, the split plans
// 2-9% faster at 64 tokens, 1-4% at 128 (the fortieth session). Reading the partials
// after the K loop had cost 2-5 us a launch: all CTAs end their shares together, so
// their takes meet in one burst of L2 traffic.
// Its experiment knobs (GEMM_SM90Q_LEAVE_OUT, GEMM_SM90Q_SK_FENCE, GEMM_SM90Q_SK_LAND,
// GEMM_SM90Q_SK_SKEW) are the quantized kernel's, defined in quant_knobs.cuh, which this
// file includes before it reads them.
#pragma once
#include "gemm/ptx.cuh"
#include "gemm/sm90/ptx_sm90.cuh"
#include "gemm/sm90/quant_knobs.cuh"
#include "gemm/split_k.cuh"

namespace gemm {

// The named barrier between a give's partials and the warp raising its flag.
constexpr int kStreamKGiveBarrier = 8;

struct StreamK {
  long long total;  // K tiles of all output tiles
  int ctas;         // the grid: ranks 0 .. ctas - 1
  // Where the grid is the tiles times `ways` (> 0), every tile is cut among `ways`
  // consecutive ranks: the head's share holds `head` K tiles, the others `other` each.
  int k_tiles = 0, ways = 0, head = 0, other = 0;

  // The first iteration of rank r's share ([begin(r), begin(r + 1)); none when equal).
  __device__ __forceinline__ long long begin(int r) const {
    if (ways > 0) {
      const int t = r / ways, j = r - t * ways;
      return static_cast<long long>(t) * k_tiles + (j > 0 ? head + (j - 1) * other : 0);
    }
    return static_cast<long long>(r) * total / ctas;
  }
  // The rank whose share holds iteration g: the last r with begin(r) <= g.
  __device__ __forceinline__ int rank_of(long long g) const {
    if (ways > 0) {
      const int t = static_cast<int>(g / k_tiles), off = static_cast<int>(g - static_cast<long long>(t) * k_tiles);
      return t * ways + (off < head ? 0 : 1 + (off - head) / other);
    }
    return static_cast<int>(((g + 1) * ctas - 1) / total);
  }
};

// The shares of a grid of two CTAs per tile: the tail's GEMM_SM90Q_SK_SKEW K tiles short
// of half the tile, the head's as many over. There each tile's rest is the tail's whole
// share, handed over at its end: equal shares end together, and the head waited out the
// whole hand-over after its K loop. A shorter tail hands over while the head still runs
// its K loop, and the partials land in shared memory meanwhile (stream_k_land). H100,
// W4, the llama3 layers cut in two at 64 and 128 tokens: 4 K tiles 1-4% faster, 2 about
// 2%, 8 slower; for three or four ways (only the head takes, so it would carry every
// other share's cut) 2 K tiles were 1-3% slower (docs/NOTES.md, forty-first session).
__device__ __forceinline__ StreamK skewed_stream_k(long long tiles, int k_tiles, int ctas, int ways) {
  StreamK sk{tiles * k_tiles, ctas};
  if (GEMM_SM90Q_SK_SKEW > 0 && ways == 2 && 2 * tiles == ctas && k_tiles / 2 > GEMM_SM90Q_SK_SKEW) {
    sk.k_tiles = k_tiles;
    sk.ways = ways;
    sk.other = k_tiles / ways - GEMM_SM90Q_SK_SKEW;
    sk.head = k_tiles - (ways - 1) * sk.other;
  }
  return sk;
}

// A share that starts inside a tile: its sums go to the rank's slot of the partials
// (D's rows of the tile only, rows_left of them), then its flag is raised. `kThreads`
// threads take part, each holding `kAcc` accumulators, acc[i] in tile row row_of(i).
template <int kThreads, int kAcc, int kTileFloats, class RowOf, class Params>
__device__ __forceinline__ void stream_k_give(const float* acc, RowOf row_of, const Params& p, int rank, int rows_left,
                                              int tid) {
  float* mine = p.partials + static_cast<i64>(rank) * kTileFloats;
#pragma unroll
  for (int i = 0; i < kAcc; ++i) st_cg_if(row_of(i) < rows_left, mine + i * kThreads + tid, acc[i]);
  if (GEMM_SM90Q_SK_FENCE == 2) {
    named_barrier_arrive<kThreads + 32>(kStreamKGiveBarrier);  // stream_k_raise's
    return;
  }
  if (GEMM_SM90Q_SK_FENCE) __threadfence();  // the partials are visible GPU-wide before the flag
  named_barrier_sync<kThreads>(kSplitKBarrier);
  if (tid == 0 && GEMM_SM90Q_LEAVE_OUT != 8 && GEMM_SM90Q_LEAVE_OUT != 9) st_release_gpu(p.semaphores + rank, 1);
}

// The give's flag, raised by one whole warp outside the `kConsumers` threads once they
// have stored their partials and arrived (the NOTE above).
template <int kConsumers, class Params>
__device__ __forceinline__ void stream_k_raise(const Params& p, int rank, int lane) {
  named_barrier_sync<kConsumers + 32>(kStreamKGiveBarrier);
  if (lane == 0 && GEMM_SM90Q_LEAVE_OUT != 8 && GEMM_SM90Q_LEAVE_OUT != 9) st_release_gpu(p.semaphores + rank, 1);
}

// The tile's head share adds the sums of ranks first .. last (their shares hold the rest
// of the tile), lowering each flag for the next launch once it is seen raised. `landed`:
// where stream_k_land put rank last's sums (in shared memory, once `land_full` completes),
// or null to read them from the workspace too.
template <int kThreads, int kAcc, int kTileFloats, class RowOf, class Params>
__device__ __forceinline__ void stream_k_take(float* acc, RowOf row_of, const Params& p, const StreamK& sk, int first,
                                              int last, int rows_left, int tid, const float* landed = nullptr,
                                              u32 land_full = 0) {
  const int last_read = landed != nullptr ? last - 1 : last;
  if (tid == 0 && GEMM_SM90Q_LEAVE_OUT != 8) {
    for (int r = first; r <= last_read; ++r) {
      if (sk.begin(r) == sk.begin(r + 1)) continue;  // an empty share hands nothing over
      while (ld_acquire_gpu(p.semaphores + r) == 0) {
      }
      st_release_gpu(p.semaphores + r, 0);
    }
  }
  named_barrier_sync<kThreads>(kSplitKBarrier);
  for (int r = first; r <= last_read; ++r) {
    if (sk.begin(r) == sk.begin(r + 1)) continue;
    const float* theirs = p.partials + static_cast<i64>(r) * kTileFloats;
#pragma unroll
    for (int i = 0; i < kAcc; ++i) acc[i] += ld_cg_or_zero(row_of(i) < rows_left, theirs + i * kThreads + tid);
  }
  if (landed != nullptr) {
    mbar_wait(land_full, 0);  // (a memory clobber: the reads below stay after it)
#pragma unroll
    for (int i = 0; i < kAcc; ++i) {
      const float v = landed[i * kThreads + tid];
      if (row_of(i) < rows_left) acc[i] += v;
    }
  }
}

// While the head share's CTA still runs the tile's K loop, one warp
// outside its consumers waits for the flag of rank `last` (the tile's tail share, which
// handed over at the start of its own share, long before the head's ends; or, in a grid
// of two CTAs per tile, at the end of its shorter share: skewed_stream_k) and has the
// bulk copy engine bring those sums into shared memory at `landed` (once the consumers
// have left it: `land_ok`), so the take reads them from there instead of from L2 after
// its K loop. Called by one whole warp; at most one take a launch (phase 0 only).
template <int kTileFloats, class Params>
__device__ __forceinline__ void stream_k_land(const Params& p, int last, u32 landed, u32 land_ok, u32 land_full,
                                              int lane) {
  mbar_wait(land_ok, 0);
  if (lane == 0) {
    if (GEMM_SM90Q_LEAVE_OUT != 8) {
      while (ld_acquire_gpu(p.semaphores + last) == 0) {
      }
      st_release_gpu(p.semaphores + last, 0);
    }
    fence_proxy_async_global();  // the bulk copy reads what the acquire made visible
    mbar_arrive_expect_tx(land_full, kTileFloats * 4);
    bulk_load(landed, p.partials + static_cast<i64>(last) * kTileFloats, kTileFloats * 4, land_full);
  }
  __syncwarp();
}

}  // namespace gemm
