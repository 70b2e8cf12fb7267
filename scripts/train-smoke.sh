#!/usr/bin/env bash
# train-smoke.sh BINDIR SUFFIX WORKDIR VARIANT...: each BINDIR/train-VARIANT SUFFIX
# trains 20 steps on synthetic data with the same flags everywhere (the GPU
# check's trainers, SUFFIX -cuda; the rehearsal's CPU run of the same flags,
# SUFFIX empty, so that a GPU failure there means the GPU path). One line per
# variant: smoke|VARIANT|PASS, FAIL (...) or SKIP|what it saw|seconds
# PASS: exit 0, 20 finite losses, the last below the first. SKIP: a CUDA trainer
# on a machine without a GPU, refused with its sentence. SMOKE_LIMIT (default 60)
# bounds each run in seconds. Exit 1 when any failed.
set -uo pipefail
bindir=$1 suffix=$2 work=$3
shift 3
limit=${SMOKE_LIMIT:-60}
FLAGS=(--data synthetic --steps 20 --batch 4 --seq 64 --d 64 --layers 2 --heads 4 --eval-every 10
       --eval-batches 2 --quiet --overwrite)
mkdir -p "$work"
bad=0
for v in "$@"; do
  exe=$bindir/train-$v$suffix out=$work/$v log=$work/train-$v$suffix.log
  t0=$(date +%s)
  timeout "$limit" "$exe" "${FLAGS[@]}" --out "$out" > "$log" 2>&1
  r=$?
  secs=$(( $(date +%s) - t0 ))
  verdict=$(python3 - "$out/metrics.jsonl" <<'PY' 2>&1
import json, math, sys
try:
    rows = [json.loads(l) for l in open(sys.argv[1]) if '"train_loss"' in l]
except OSError as e:
    print(f"FAIL no metrics ({e.strerror})"); sys.exit()
ls = [r["train_loss"] for r in rows]
ok = len(ls) == 20 and all(math.isfinite(x) for x in ls) and ls[-1] < ls[0]
print(("PASS" if ok else "FAIL") + f" {len(ls)} steps, loss {ls[0]:.4f} -> {ls[-1]:.4f}" if ls else "FAIL no steps")
PY
)
  if [ $r -ne 0 ]; then
    if grep -q "no CUDA device" "$log"; then status=SKIP verdict="- $(grep -m1 -o 'no CUDA device.*' "$log" | head -c 80)"
    elif [ $r -eq 124 ]; then status="FAIL (timeout $limit s)"; bad=1
    else status="FAIL (exit $r)"; bad=1; fi
    tail -3 "$log"
  elif [[ $verdict == PASS* ]]; then status=PASS
  else status=FAIL; bad=1
  fi
  echo "smoke|$v|$status|${verdict#* }|$secs"
done
exit $bad
