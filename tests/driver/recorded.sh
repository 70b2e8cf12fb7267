#!/usr/bin/env bash
# recorded.sh TRAINER COMPARE_METRICS WORKDIR VARIANT: the trainer's default run
# (AdamW, cosine schedule) gives the losses, gradient norms and rates recorded
# by normlab before the optimizer and the schedule became parameters
# (tests/data/recorded/VARIANT.jsonl, 20 steps, written 2026-12-03 on an AMD EPYC
# Zen 5 by the trainers of commit 86ef88b). On the AVX-512 kernels the bits are
# the same (measured difference 0); the tolerance, 1e-5 relative, admits only
# float32 reordering noise from another GEMM engine, never a changed update.
set -euo pipefail
exe=$1 compare=$2 work=$3 variant=$4
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work"
"$exe" --data synthetic --steps 20 --d 32 --layers 2 --heads 2 --seq 32 --batch 4 --eval-every 5 --eval-batches 2 \
  --ckpt-every 0 --threads 2 --quiet --out "$work/run"
"$compare" "$here/../data/recorded/$variant.jsonl" "$work/run/metrics.jsonl" 1e-5r train_loss val_loss grad_norm lr
