// The SM90 quantized kernel's experiment knobs: their defaults, unless the translation
// unit defines them first. kernel_sm90_quant.cuh, quant_config.cuh and stream_k.cuh read
// them, and each includes this file before it does.
#pragma once
// Experiment knobs (bench/experiments/sm90_quant_variants.py; the generated kernels
// leave them at their defaults): GEMM_SM90Q_LEAVE_OUT 1 drops the epilogue, 2 the
// wgmma (commit and waits stay), 3 the dequantization (the A registers keep whatever
// they hold), 4 the X copies, 5 the weight, scale and zero copies (the stages keep
// whatever they hold), 6 the shared-B form's warpgroup barriers and proxy fence around
// the dequantized tile's writes, 7 stream-K's hand-over of partial sums, 8 its flags
// (the partials are written and read without waiting), 9 all of it but the partials'
// writes (wrong sums: timing only); GEMM_SM90Q_WGMMA_DEPTH is the wgmma groups a
// consumer leaves in flight while it dequantizes the next K tile (0 or 1);
// GEMM_SM90Q_SK_FENCE: how a stream-K share's flag follows its partials (stream_k.cuh):
// 2 (default) a producer-warpgroup warp raises it, 1 consumer thread 0 after a fence in
// every consumer thread, 0 thread 0 without the fence. GEMM_SM90Q_SK_LAND 1 (default): a
// take's tail share lands in shared memory during the K loop (stream_k_land) where the
// staging lies after the ring; 0 reads it from L2 after the K loop. GEMM_SM90Q_SK_SKEW
// N > 0 (default 4): where the grid is twice the tiles, a tile's tail share is N K tiles
// short of half the tile (stream_k.cuh's skewed_stream_k); 0: equal shares.
#ifndef GEMM_SM90Q_LEAVE_OUT
#define GEMM_SM90Q_LEAVE_OUT 0
#endif
#ifndef GEMM_SM90Q_SK_FENCE
#define GEMM_SM90Q_SK_FENCE 2
#endif
#ifndef GEMM_SM90Q_SK_LAND
#define GEMM_SM90Q_SK_LAND 1
#endif
#ifndef GEMM_SM90Q_SK_SKEW
#define GEMM_SM90Q_SK_SKEW 4
#endif
#ifndef GEMM_SM90Q_WGMMA_DEPTH
#define GEMM_SM90Q_WGMMA_DEPTH 1
#endif
