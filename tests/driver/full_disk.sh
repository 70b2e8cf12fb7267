#!/usr/bin/env bash
# A full disk while writing a checkpoint (simulated with a file-size limit,
# SIGXFSZ ignored so the write fails with EFBIG) is reported, and the previous
# checkpoint stays intact and loadable.
#   full_disk.sh TRAIN_EXE WORKDIR
set -euo pipefail
exe=$1 work=$2
rm -rf "$work" && mkdir -p "$work"
args=(--data synthetic --d 32 --layers 2 --heads 2 --seq 32 --batch 2 --eval-batches 1 --ckpt-every 1 --quiet
      --out "$work/run")
"$exe" "${args[@]}" --steps 2
cp "$work/run/ckpt.safetensors" "$work/before.safetensors"
size_kb=$(( $(stat -c %s "$work/before.safetensors") / 1024 / 2 ))
set +e
out=$( (trap '' XFSZ; ulimit -f "$size_kb"; "$exe" "${args[@]}" --steps 4 --resume) 2>&1 )
rc=$?
set -e
echo "$out"
[ "$rc" -ne 0 ] || { echo "full_disk: the run did not report the failed write"; exit 1; }
grep -q "ckpt.safetensors" <<<"$out" || { echo "full_disk: the error does not name the checkpoint"; exit 1; }
cmp -s "$work/before.safetensors" "$work/run/ckpt.safetensors" || { echo "full_disk: previous checkpoint changed"; exit 1; }
ls "$work/run" | grep -q '\.tmp\.' && { echo "full_disk: a temporary file was left behind"; exit 1; }
"$exe" "${args[@]}" --steps 3 --resume  # the kept checkpoint still resumes
echo "full_disk: write failure reported, previous checkpoint intact and loadable"
