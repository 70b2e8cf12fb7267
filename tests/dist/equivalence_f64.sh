#!/usr/bin/env bash
# In float64 the data-parallel step equals the single-process one to 1e-10
# (only the order of the gradient sums differs: ~1e-16 relative).
#   equivalence_f64.sh DP_F64_EXE COMPARE_METRICS WORKDIR VARIANT
set -euo pipefail
exe=$1 compare=$2 work=$3 variant=$4
source "$(dirname "$0")/common.sh"
rm -rf "$work" && mkdir -p "$work"
for accum in 1 2; do
  "$exe" "$variant" 20 $accum "$work/one_a$accum.jsonl"
  mpi 2 "$exe" "$variant" 20 $accum "$work/two_a$accum.jsonl"
  "$compare" "$work/one_a$accum.jsonl" "$work/two_a$accum.jsonl" 1e-10 train_loss grad_norm
done
