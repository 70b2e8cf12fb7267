#!/usr/bin/env bash
# In float64 the data-parallel step equals the single-process one to 1e-10
# (only the order of the gradient sums differs: ~1e-16 relative), with and
# without ZeRO-1, with and without gradient accumulation.
#   equivalence_f64.sh DP_F64_EXE COMPARE_METRICS WORKDIR VARIANT [OPTIMIZER]
set -euo pipefail
exe=$1 compare=$2 work=$3 variant=$4 opt=${5:-adamw}
source "$(dirname "$0")/common.sh"
rm -rf "$work" && mkdir -p "$work"
"$exe" "$variant" 20 1 0 "$work/one.jsonl" "$opt"
"$exe" "$variant" 20 2 0 "$work/one_a2.jsonl" "$opt"
for zero in 0 1; do
  mpi 2 "$exe" "$variant" 20 1 $zero "$work/two_z$zero.jsonl" "$opt"
  "$compare" "$work/one.jsonl" "$work/two_z$zero.jsonl" 1e-10 train_loss grad_norm
  mpi 2 "$exe" "$variant" 20 2 $zero "$work/two_a2_z$zero.jsonl" "$opt"
  "$compare" "$work/one_a2.jsonl" "$work/two_a2_z$zero.jsonl" 1e-10 train_loss grad_norm
done
