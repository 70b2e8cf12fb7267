#!/usr/bin/env bash
# Data-parallel throughput on this machine, measured interleaved (docs/distributed.md,
# docs/perf.md): per round and variant, one process with 2 threads, then 2 ranks with
# one thread each (mpirun), both `train-<variant> --time-steps N` at the reference
# config (d = 256, 4 layers, 4 heads, T = 256, global batch 8); then the collective's
# bandwidth (bench_allreduce). Nothing else may run meanwhile.
#   bash scripts/bench-distributed.sh [BUILD_DIR] [ROUNDS] [VARIANTS]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build} ROUNDS=${2:-3} VARIANTS=${3:-gpt,ngpt}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
OUT=$(mktemp -d)
cfg=(--data brown --data-dir "$PWD/data" --d 256 --layers 4 --heads 4 --seq 256 --batch 8 --time-steps 10 --quiet)
step() { sed -n 's/.*"step_time_s": \([0-9.e-]*\).*/\1/p' "$1/step_time.json"; }
exposed() { sed -n 's/.*"comm_exposed_s": \([0-9.e-]*\).*/\1/p' "$1/step_time.json"; }
printf "%-6s %5s %18s %18s %10s %16s\n" variant round "1 proc x 2 thr ms" "2 ranks x 1 thr ms" "ratio" "exposed comm ms"
for r in $(seq 1 "$ROUNDS"); do
  for v in ${VARIANTS//,/ }; do
    "$BUILD/train-$v" "${cfg[@]}" --threads 2 --out "$OUT/$v-1p-$r"
    mpirun -np 2 "$BUILD/train-$v" "${cfg[@]}" --threads 1 --out "$OUT/$v-2r-$r"
    a=$(step "$OUT/$v-1p-$r") b=$(step "$OUT/$v-2r-$r") e=$(exposed "$OUT/$v-2r-$r")
    awk -v v="$v" -v r="$r" -v a="$a" -v b="$b" -v e="$e" \
      'BEGIN { printf "%-6s %5d %18.1f %18.1f %10.3f %16.2f\n", v, r, a * 1e3, b * 1e3, a / b, e * 1e3 }'
  done
done
echo "(ratio = tokens/s of 2 ranks / tokens/s of 1 process: > 1 means the 2 ranks are faster)"
mpirun -np 2 "$BUILD/bench/bench_allreduce"  # built with -DNORMLAB_BUILD_BENCH=ON (scripts/test.sh does)
rm -rf "$OUT"
