#!/usr/bin/env bash
# Fault injection: a training run is killed with SIGKILL at random moments
# (checkpoints are written after every step, so many kills land inside a
# checkpoint write) and resumed each time. Its final checkpoint must equal,
# byte for byte, that of an uninterrupted run.
#   kill_resume.sh TRAIN_EXE WORKDIR [MIN_KILLS]
set -euo pipefail
exe=$1 work=$2 min_kills=${3:-5}
rm -rf "$work" && mkdir -p "$work"
args=(--data synthetic --steps 150 --d 64 --layers 2 --heads 2 --seq 64 --batch 8
      --eval-every 25 --eval-batches 2 --ckpt-every 1 --threads 2 --quiet)
"$exe" "${args[@]}" --out "$work/straight"

RANDOM=20261129  # the kill times are pseudo-random but the same on every run
inode() { stat -c %i "$work/killed/ckpt.safetensors" 2>/dev/null || echo none; }
kills=0 target=$((min_kills + 3))
while [ "$kills" -lt "$target" ]; do
  resume=()
  [ -f "$work/killed/ckpt.safetensors" ] && resume=(--resume)
  before=$(inode)
  "$exe" "${args[@]}" --out "$work/killed" "${resume[@]}" &
  pid=$!
  # Wait for at least one new checkpoint (progress, whatever the machine's
  # speed), then kill after a random 0-49 ms: often inside the next write.
  for _ in $(seq 1 6000); do
    [ "$(inode)" != "$before" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.01
  done
  sleep "0.0$((RANDOM % 5))$((RANDOM % 10))"
  if kill -9 "$pid" 2>/dev/null; then
    wait "$pid" 2>/dev/null || true
    kills=$((kills + 1))
  else
    wait "$pid"  # it finished before the kill: its exit status must be 0
    break
  fi
done
[ -f "$work/killed/summary.json" ] || "$exe" "${args[@]}" --out "$work/killed" --resume
if ! cmp -s "$work/straight/ckpt.safetensors" "$work/killed/ckpt.safetensors"; then
  echo "kill_resume: after $kills kills the final checkpoint differs from the uninterrupted run's"
  exit 1
fi
if [ "$kills" -lt "$min_kills" ]; then
  echo "kill_resume: only $kills kills landed before the run finished (need $min_kills)"
  exit 1
fi
echo "kill_resume: $kills kills, final checkpoint identical to the uninterrupted run"
