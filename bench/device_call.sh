#!/usr/bin/env bash
# One call on the GPU machine (the device tool's `run`), from the repository root; logs
# under $OUT, few files (the tool returns a limited number):
#
#   bash bench/device_call.sh build tests 'quant=python3 -m bench.quant'
#   TEST_PATHS="tests/gpu/test_quant_kernels.py" bash bench/device_call.sh build tests
#
# Steps, in order:
#   build         make SYSTEM=1 WITH_EMULATED=1 generate build ARCH=90 (the README's GPU set), unless build/sm_90 is there from an
#                 earlier call on a warm machine (REBUILD=1 forces it: after a header change)
#   tests         pytest -m gpu on $TEST_PATHS (default tests/gpu), only the ids matching the
#                 extended regex $TEST_MATCH if set (e.g. 'kp|pair'), in 12 shards at once;
#                 one line per shard and the failures in $OUT/tests_summary.txt, the logs
#                 gzipped in $OUT/tests_logs.gz
#   NAME=COMMAND  runs COMMAND with its output in $OUT/NAME.txt
# $OUT/times.txt gets when each step ended.
set -u
export PYTHONPATH=.
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
start=$(date +%s)
stamp() { echo "$1 done at $(($(date +%s) - start)) s" >> "$OUT/times.txt"; }
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader > "$OUT/gpu.txt" 2>&1

build() {
  if [ -n "${REBUILD:-}" ] || [ ! -f build/sm_90/manifest.json ]; then
    rm -rf build/sm_90
    make SYSTEM=1 WITH_EMULATED=1 generate build ARCH=90 > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
  fi
}

tests() {
  local dir
  dir=$(mktemp -d)
  # shellcheck disable=SC2086 # TEST_PATHS is a list of paths
  python3 -m pytest --collect-only -q -m gpu ${TEST_PATHS:-tests/gpu} 2>/dev/null | grep '::' | grep -E "${TEST_MATCH:-.}" > "$dir/ids"
  split -n l/12 "$dir/ids" "$dir/shard_"
  for shard in "$dir"/shard_*; do
    # An empty shard would run pytest without ids: the whole suite.
    [ -s "$shard" ] || { rm -f "$shard"; continue; }
    # Line by line: some test ids hold spaces.
    (mapfile -t ids < "$shard"; python3 -m pytest -q -p no:cacheprovider "${ids[@]}" > "$shard.log" 2>&1) &
  done
  wait
  for log in "$dir"/shard_*.log; do
    echo "$(basename "$log" .log): $(grep -E '(passed|failed|error|skipped|no tests ran)' "$log" | tail -n1)"
  done > "$OUT/tests_summary.txt"
  grep -h -E '^(FAILED|ERROR)' "$dir"/shard_*.log | head -40 >> "$OUT/tests_summary.txt"
  cat "$dir"/shard_*.log | gzip > "$OUT/tests_logs.gz"
}

for step in "$@"; do
  case $step in
    build) build ;;
    tests) tests ;;
    *=*) bash -c "${step#*=}" > "$OUT/${step%%=*}.txt" 2>&1 ;;
    *) echo "unknown step: $step" >&2; exit 2 ;;
  esac
  stamp "${step%%=*}"
done
