#!/usr/bin/env bash
# The GPU-machine calls that decide the sm80_xor family (docs/NOTES.md, twenty-ninth
# session), from the repository root, logs and tables under $OUT:
#
#   bash bench/experiments/sm80_xor_device.sh first    # ~6 min: default build, the GPU tests of the
#                                                      # kernels no GPU has run yet, and the two
#                                                      # swizzled tiles that decide issue 17's bar
#                                                      # timed beside their twins (a session whose
#                                                      # lending stops after one call has these)
#   bash bench/experiments/sm80_xor_device.sh tests    # ~7 min: default build, the GPU suite
#   bash bench/experiments/sm80_xor_device.sh bench    # ~5 min: swizzled vs padded twins, cuBLAS (fp16,
#                                                      # and the grouped bf16 tiles)
#   bash bench/experiments/sm80_xor_device.sh bench-bf16  # ~4 min: the bf16 dense tiles
#   bash bench/experiments/sm80_xor_device.sh cutlass  # ~9 min, carry .whl: CUTLASS 2.x's SM80
#                                                      # table with the swizzled tiles in our build
#   bash bench/experiments/sm80_xor_device.sh cutlass-shipped  # ~3 min, carry .whl: the same table
#                                                      # over the default set as it ships, fp16 / bf16,
#                                                      # M = 1024 and 4096
#   bash bench/experiments/sm80_xor_device.sh ncu      # ~2 min: 128x128x32 s5, swizzled and padded,
#                                                      # per SASS instruction (LDGSTS, LDSM)
#   bash bench/experiments/sm80_xor_device.sh ncu-kn   # ~3 min: the same for "kn" B (128x128x32 s4 at
#                                                      # 1024 x 6144 x 4096, where swizzling A alone
#                                                      # ran 1.23x the padded time), with the warp
#                                                      # stall reasons beside the "nk" pair's
#
# `tests` builds the default set (make SYSTEM=1 generate build ARCH=90 WITH_EMULATED=1) and
# runs the whole `pytest -m gpu`: tests/gpu/test_sm80_xor.py and test_sm80_100k.py among it
# (the thirtieth session's kernels: the 100 KB GPUs' prefill tiles, Turing's and Volta's
# fallbacks, none yet run on a GPU). `bench` runs
# bench.experiments.sm80_xor. `cutlass` builds the SM80 prefill tiles with the candidates
# and the swizzled ones (bench.experiments.sm80_variants --build-only --with-candidates
# --with-xor) and runs bench.cutlass_peer --family sm80 on the llama3 shapes at M = 1024,
# tuned, interleaved.
set -u
OUT=${OUT:-/tmp/sm80_xor_out}
mkdir -p "$OUT"
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > "$OUT/gpu.txt" 2>&1

case "${1:-}" in
first)
    make SYSTEM=1 generate build ARCH=90 WITH_EMULATED=1 > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
    timeout 300 python3 -m pytest -q -m gpu tests/gpu/test_sm80_xor.py tests/gpu/test_sm80_100k.py \
        tests/gpu/test_sm70_fallbacks.py tests/gpu/test_dense_kernels.py -k "xor or 100k or fallback or sm70" \
        -p no:cacheprovider > "$OUT/new_kernels.log" 2>&1
    tail -8 "$OUT/new_kernels.log"
    timeout 150 python3 -m bench.experiments.sm80_xor --dtypes f16 --m 1024 --models llama3-8b llama3-70b \
        --tiles 128x128x32s5 128x256x32s3 --tokens > "$OUT/sm80_xor_first.md" 2>&1
    tail -25 "$OUT/sm80_xor_first.md"
    ;;
tests)
    # WITH_EMULATED: the m8n8k4 kernels (Volta's and Turing's, emulated on sm_90) are in the
    # build, so the suite runs them too (tests/gpu/conftest.py registers them).
    make SYSTEM=1 generate build ARCH=90 WITH_EMULATED=1 > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
    timeout 480 python3 -m pytest -q -m gpu tests -p no:cacheprovider > "$OUT/gpu_tests.log" 2>&1
    tail -15 "$OUT/gpu_tests.log"
    ;;
bench)
    # Rows are printed as they are timed, so a timeout keeps what was measured.
    timeout 560 python3 -m bench.experiments.sm80_xor --dtypes f16 > "$OUT/sm80_xor.md" 2>&1
    tail -40 "$OUT/sm80_xor.md"
    ;;
bench-bf16)
    timeout 560 python3 -m bench.experiments.sm80_xor --dtypes bf16 --tokens > "$OUT/sm80_xor_bf16.md" 2>&1
    tail -40 "$OUT/sm80_xor_bf16.md"
    ;;
cutlass)
    # shellcheck source=/dev/null
    source bench/cutlass_env.sh || exit 1
    python3 -m bench.experiments.sm80_variants --build-only /tmp/sm80_xor_build --with-candidates --with-xor \
        > "$OUT/ours_build.log" 2>&1 || { tail -40 "$OUT/ours_build.log"; exit 1; }
    shapes=$(python3 -c "from bench.cutlass_peer import LLAMA3_NK; print(','.join(f'1024x{n}x{k}' for n, k in LLAMA3_NK))")
    timeout 500 python3 -m bench.cutlass_peer --family sm80 --shapes "$shapes" --dtype fp16 --jobs 16 \
        --ours-build /tmp/sm80_xor_build --ours-tuned --interleave --allow-fail --out "$OUT/cutlass_sm80_xor.json" \
        > "$OUT/cutlass.log" 2>&1
    tail -40 "$OUT/cutlass.log"
    ;;
cutlass-shipped)
    # The SM80 family as it ships (the default set's sm80-class fp16 / bf16 "nk" kernels,
    # the swizzled prefill tiles among them), default dispatch and tuned, beside CUTLASS
    # 2.x's best SM80 tile: issue 17's table, all 32 llama3 problems (carry .whl).
    # shellcheck source=/dev/null
    source bench/cutlass_env.sh || exit 1
    python3 -m bench.experiments.sm80_variants --build-only /tmp/sm80_shipped > "$OUT/shipped_build.log" 2>&1 \
        || { tail -40 "$OUT/shipped_build.log"; exit 1; }
    shapes=$(python3 -c "from bench.cutlass_peer import LLAMA3_NK; print(','.join(f'{m}x{n}x{k}' for m in (1024, 4096) for n, k in LLAMA3_NK))")
    timeout 500 python3 -m bench.cutlass_peer --family sm80 --shapes "$shapes" --dtype fp16,bf16 --jobs 16 \
        --ours-build /tmp/sm80_shipped --ours-tuned --interleave --allow-fail --out "$OUT/cutlass_sm80_shipped.json" \
        > "$OUT/cutlass_shipped.log" 2>&1
    tail -8 "$OUT/cutlass_shipped.log"
    ;;
ncu)
    # One launch of each at 1024 x 10240 x 8192 (CUTLASS's 128x128x32 s5 problem of the
    # twenty-seventh session), source counters, then the copies' and fragment loads'
    # shared wavefronts and L2 sectors per instruction.
    python3 -m bench.experiments.sm80_xor --build-only /tmp/sm80_xor_ncu > "$OUT/ncu_build.log" 2>&1 \
        || { tail -40 "$OUT/ncu_build.log"; exit 1; }
    for layout in sm80_xor sm80; do
        timeout 240 ncu --section SourceCounters -k "regex:_${layout}_m16n8k16_af16_bf16_accf32_df16_128x128x32_w2x2x1_s5_nk" \
            -c 1 -f -o "$OUT/ncu_$layout" python3 -m bench.experiments.sm80_xor --build /tmp/sm80_xor_ncu/build \
            --launch-once 128x128x32s5 1024 10240 8192 > "$OUT/ncu_$layout.log" 2>&1
        echo "== $layout"
        python3 -m bench.experiments.ncu_sass_table "$OUT/ncu_$layout.ncu-rep" --opcodes LDGSTS LDSM
    done
    ;;
ncu-kn)
    # Where the "kn" tiles' time goes (0.40 of cuBLAS against 0.58 for the "nk" swizzled
    # ones; padded rows of N have no bank conflicts by tests/templates/test_smem_layout.py's
    # count): per SASS instruction for LDGSTS / LDSM, and the stall reasons, of the padded
    # "kn" 128x128x32 s4, its swizzled-A form and the "nk" pair, one launch each.
    python3 -m bench.experiments.sm80_xor --build-only /tmp/sm80_xor_ncu > "$OUT/ncu_build.log" 2>&1 \
        || { tail -40 "$OUT/ncu_build.log"; exit 1; }
    for order in kn nk; do
        for layout in sm80_xor sm80; do
            tag=${order}_$layout
            timeout 120 ncu --section SourceCounters --section WarpStateStats --section MemoryWorkloadAnalysis_Tables --section LaunchStats --section Occupancy \
                -k "regex:_${layout}_m16n8k16_af16_bf16_accf32_df16_128x128x32_w2x2x1_s4_${order}" -c 1 -f \
                -o "$OUT/ncu_$tag" python3 -m bench.experiments.sm80_xor --build /tmp/sm80_xor_ncu/build \
                --launch-once 128x128x32s4 1024 6144 4096 --order "$order" > "$OUT/ncu_$tag.log" 2>&1
            echo "== $tag"
            python3 -m bench.experiments.ncu_sass_table "$OUT/ncu_$tag.ncu-rep" --opcodes LDGSTS LDSM
            ncu --import "$OUT/ncu_$tag.ncu-rep" --page details 2>/dev/null \
                | grep -iE "stall|cycles per|registers per|block limit|achieved occupancy|waves per" | head -20
        done
    done
    ;;
*)
    echo "usage: bash bench/experiments/sm80_xor_device.sh first|tests|bench|bench-bf16|cutlass|cutlass-shipped|ncu|ncu-kn" >&2
    exit 2
    ;;
esac
