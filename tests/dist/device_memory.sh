#!/usr/bin/env bash
# The driver's data-parallel step for a model in a backend's own memory (a GPU's),
# run on the CPU by train-ngpt-separate-memory (tests/dist/train_separate_memory.cpp):
#  1. on one process it equals the CPU trainer train-ngpt bit for bit (tolerance
#     0: the same kernels, only the copies differ);
#  2. on 2 ranks it equals one process, with and without gradient accumulation
#     and ZeRO-1 (equivalence.sh, tolerance 1e-5 as there);
#  3. it resumes across rank counts, with and without ZeRO-1 (resume_ranks.sh).
#   device_memory.sh SEPARATE_EXE CPU_EXE COMPARE_METRICS WORKDIR
set -euo pipefail
sep=$1 cpu=$2 compare=$3 work=$4
here=$(dirname "$0")
source "$here/common.sh"
rm -rf "$work" && mkdir -p "$work"
"$cpu" "${tiny[@]}" --accum 2 --out "$work/cpu"
"$sep" "${tiny[@]}" --accum 2 --out "$work/separate"
"$compare" "$work/cpu/metrics.jsonl" "$work/separate/metrics.jsonl" 0 train_loss val_loss grad_norm
cmp "$work/cpu/ckpt.safetensors" "$work/separate/ckpt.safetensors" ||
  { echo "device_memory: the checkpoints of the two trainers differ"; exit 1; }
bash "$here/equivalence.sh" "$sep" "$compare" "$work/equivalence"
bash "$here/resume_ranks.sh" "$sep" "$compare" "$work/resume"
echo "device_memory: the device-memory step equals the CPU's on one process, 2 ranks equal one, resume across ranks"
