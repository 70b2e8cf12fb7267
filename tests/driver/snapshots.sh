#!/usr/bin/env bash
# --snapshot-every N keeps the checkpoint of every N-th step in OUT/snapshots/:
# each one is the checkpoint a run stopped at that step writes (byte for byte),
# the last one is the final checkpoint, keeping them changes nothing in the run,
# and --overwrite clears a replaced run's snapshots.
#   snapshots.sh TRAIN_EXE WORKDIR
set -euo pipefail
exe=$1 work=$2
rm -rf "$work" && mkdir -p "$work"
args=(--data synthetic --steps 12 --d 32 --layers 2 --heads 2 --seq 16 --batch 4 --eval-every 4
      --eval-batches 1 --ckpt-every 4 --threads 2 --quiet)
"$exe" "${args[@]}" --out "$work/plain"
"$exe" "${args[@]}" --out "$work/snap" --snapshot-every 3
"$exe" "${args[@]}" --out "$work/stopped" --stop-at 6
fail() { echo "snapshots: $*"; exit 1; }
got=$(cd "$work/snap/snapshots" && ls | tr '\n' ' ')
[ "$got" = "step12.safetensors step3.safetensors step6.safetensors step9.safetensors " ] || fail "snapshots are '$got'"
cmp -s "$work/snap/snapshots/step12.safetensors" "$work/snap/ckpt.safetensors" || fail "step 12 differs from the final checkpoint"
cmp -s "$work/snap/snapshots/step6.safetensors" "$work/stopped/ckpt.safetensors" || fail "step 6 differs from a run stopped there"
cmp -s "$work/snap/ckpt.safetensors" "$work/plain/ckpt.safetensors" || fail "keeping snapshots changed the final checkpoint"
strip() { python3 -c 'import json,sys; [print(json.dumps({k: v for k, v in json.loads(l).items() if "time" not in k and k not in ("tokens_per_s", "elapsed_s")})) for l in open(sys.argv[1])]' "$1"; }
[ "$(strip "$work/snap/metrics.jsonl")" = "$(strip "$work/plain/metrics.jsonl")" ] || fail "keeping snapshots changed the losses"
"$exe" "${args[@]}" --out "$work/snap" --overwrite --snapshot-every 5
got=$(cd "$work/snap/snapshots" && ls | tr '\n' ' ')
[ "$got" = "step10.safetensors step5.safetensors " ] || fail "after --overwrite the snapshots are '$got'"
echo "snapshots: all checks passed"
