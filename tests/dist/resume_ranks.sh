#!/usr/bin/env bash
# A checkpoint holds the global data position, so a run resumes on any number of
# ranks and continues the same batches: 10 steps on 2 ranks + 10 on 1 process,
# and 10 on 1 process + 10 on 2 ranks, each equal 20 steps on 1 process
# (tolerance as in equivalence.sh); the same with ZeRO-1 on the 2 ranks.
#   resume_ranks.sh TRAIN_EXE COMPARE_METRICS WORKDIR [TRAINER FLAGS...]
# (extra flags, e.g. --optimizer muon: ZeRO-1 gathers and shards that optimizer's state)
set -euo pipefail
exe=$1 compare=$2 work=$3
shift 3
source "$(dirname "$0")/common.sh"
tiny+=("$@")
rm -rf "$work" && mkdir -p "$work"
"$exe" "${tiny[@]}" --out "$work/straight"
mpi 2 "$exe" "${tiny[@]}" --stop-at 10 --out "$work/two_then_one"
"$exe" "${tiny[@]}" --resume --out "$work/two_then_one"
"$exe" "${tiny[@]}" --stop-at 10 --out "$work/one_then_two"
mpi 2 "$exe" "${tiny[@]}" --resume --out "$work/one_then_two"
# ZeRO-1's checkpoint is the same file (rank 0 gathers the moments); resumed without it, and back.
mpi 2 "$exe" "${tiny[@]}" --zero 1 --stop-at 10 --out "$work/zero_then_one"
"$exe" "${tiny[@]}" --resume --out "$work/zero_then_one"
"$exe" "${tiny[@]}" --stop-at 10 --out "$work/one_then_zero"
mpi 2 "$exe" "${tiny[@]}" --zero 1 --resume --out "$work/one_then_zero"
for d in two_then_one one_then_two zero_then_one one_then_zero; do
  "$compare" "$work/straight/metrics.jsonl" "$work/$d/metrics.jsonl" 1e-5 train_loss val_loss
done
echo "resume_ranks: 2 -> 1 and 1 -> 2 ranks (with and without ZeRO-1) continue the same run"
