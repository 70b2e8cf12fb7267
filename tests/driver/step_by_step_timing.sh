#!/usr/bin/env bash
# normlab-ablate's timing round runs real trainers at once and paces them one
# step at a time: the timed steps' [start, end] intervals (steady clock, one per
# step in each variant's step_time.json) never overlap across the variants and
# alternate gpt, ngpt, gpt, ... And a trainer refuses a bad --time-gate with
# exit 2 and a sentence.
#   step_by_step_timing.sh ABLATE_EXE BIN_DIR WORKDIR
set -euo pipefail
ablate=$1 bin=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
fail() { echo "step_by_step_timing: $*"; exit 1; }
"$ablate" --variants gpt,ngpt --seeds 1 --lrs gpt=0.003,ngpt=0.01 --timing-rounds 1 --timing-steps 4 \
  --bin-dir "$bin" --out "$work/study" -- --data synthetic --steps 2 --d 32 --layers 1 --heads 2 --seq 16 --batch 2 \
  --eval-every 2 --eval-batches 1 --threads 1 > "$work/log.txt" 2>&1 || { cat "$work/log.txt"; fail "normlab-ablate failed"; }
/usr/bin/env python3 - "$work/study/timing" <<'PY' || fail "the steps overlapped or did not alternate"
import json, sys
steps = []
for v in ("gpt", "ngpt"):
    j = json.load(open(f"{sys.argv[1]}/{v}/round1/step_time.json"))
    assert j["gated"] is True and len(j["step_intervals_s"]) == 4, j
    steps += [(s, e, v) for s, e in j["step_intervals_s"]]
steps.sort()
for (s0, e0, v0), (s1, e1, v1) in zip(steps, steps[1:]):
    assert s0 <= e0 <= s1, f"{v0}'s step [{s0}, {e0}] overlaps {v1}'s starting at {s1}"
    assert v0 != v1, f"two {v0} steps in a row"
print("step-by-step: 8 timed steps, disjoint, alternating")
PY
run=("$bin/train-gpt" --data synthetic --steps 2 --d 32 --layers 1 --heads 2 --seq 16 --batch 2 --quiet --out "$work/bad")
expect_refused() {  # expected-text flags...
  local want=$1 rc=0; shift
  "${run[@]}" "$@" > "$work/err.txt" 2>&1 || rc=$?
  [ "$rc" -eq 2 ] || fail "$* exited $rc, not 2: $(cat "$work/err.txt")"
  grep -qF -- "$want" "$work/err.txt" || fail "$*: no '$want' in: $(cat "$work/err.txt")"
}
expect_refused "only with --time-steps" --time-gate 0,1
expect_refused "expected R,W" --time-steps 2 --time-gate 3
expect_refused "file descriptor 57 is not open" --time-steps 2 --time-gate 57,1
expect_refused "is not open for reading" --time-steps 2 --time-gate 1,1  # stdout: written only
echo "step_by_step_timing: all checks passed"
