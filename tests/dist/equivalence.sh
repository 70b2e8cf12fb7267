#!/usr/bin/env bash
# Data parallelism changes no result: the same global batch on 2 ranks (one
# thread each) and on 1 process gives the same losses step by step, with and
# without gradient accumulation, with and without ZeRO-1 (--zero 1).
#   equivalence.sh TRAIN_EXE COMPARE_METRICS WORKDIR
# Tolerance 1e-5 on train and val loss (about 20 float32 ulps at loss 4): the
# ranks' gradients are summed in another order (each rank's mean, then the
# mean over ranks), float32 rounding noise of ~1e-7 relative per step that
# Adam's normalised update does not amplify over 20 steps (measured over the 10
# variants: <= 7.1e-7, anGPT's; gradient norms, which reach 44 there, to <= 7e-7
# relative: bar 1e-5 relative).
set -euo pipefail
exe=$1 compare=$2 work=$3
source "$(dirname "$0")/common.sh"
rm -rf "$work" && mkdir -p "$work"
for accum in 1 2; do
  "$exe" "${tiny[@]}" --accum $accum --out "$work/one_a$accum"
  for zero in 0 1; do
    two=$work/two_a${accum}_z$zero
    mpi 2 "$exe" "${tiny[@]}" --accum $accum --zero $zero --out "$two"
    "$compare" "$work/one_a$accum/metrics.jsonl" "$two/metrics.jsonl" 1e-5 train_loss val_loss
    "$compare" "$work/one_a$accum/metrics.jsonl" "$two/metrics.jsonl" 1e-5r grad_norm
    grep -q '"ranks": 2' "$two/summary.json" || { echo "equivalence: summary.json does not record 2 ranks"; exit 1; }
    grep -q '"comm_exposed_s"' "$two/metrics.jsonl" || { echo "equivalence: metrics.jsonl lacks comm_exposed_s"; exit 1; }
    if ls "$two" | grep -q tmp; then echo "equivalence: a temporary file was left behind"; exit 1; fi
  done
done
echo "equivalence: 2 ranks = 1 process within 1e-5 (losses), accum 1 and 2, with and without --zero 1"
