#!/usr/bin/env bash
# Faults of a data-parallel job:
#  1. SIGKILL of one rank mid-run: every rank is gone and mpirun exits non-zero
#     within 30 s; the last checkpoint is intact and the run resumes to the end.
#  2. Ranks started with different flags: refused with exit 2, naming both sides.
#  3. A global batch that does not split over the ranks: exit 2 with a sentence.
#  4. --sample (one process by nature) under mpirun: exit 2 with a sentence.
#   faults.sh TRAIN_EXE COMPARE_METRICS WORKDIR
set -uo pipefail
exe=$(readlink -f "$1") compare=$2 work=$3
source "$(dirname "$0")/common.sh"
rm -rf "$work" && mkdir -p "$work"
fail() { echo "faults: $*"; exit 1; }
# Long enough that the kill (right after the first checkpoint, step 5) lands mid-run, short
# enough for the sanitized build (about 40 ms a step there, 5 ms here).
long=("${tiny[@]}" --steps 300)

# 1. SIGKILL one rank.
mpirun --oversubscribe -np 2 "$exe" "${long[@]}" --out "$work/killed" > "$work/killed.log" 2>&1 &
job=$!
for _ in $(seq 1 6000); do [ -f "$work/killed/ckpt.safetensors" ] && break; sleep 0.01; done
[ -f "$work/killed/ckpt.safetensors" ] || fail "no checkpoint appeared"
victim=""
for p in $(pgrep -f -- "--out $work/killed"); do
  tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=1 && victim=$p
done
[ -n "$victim" ] || fail "rank 1 not found"
kill -9 "$victim"
t0=$(date +%s)
while kill -0 "$job" 2>/dev/null && [ $(( $(date +%s) - t0 )) -le 30 ]; do sleep 0.1; done
kill -0 "$job" 2>/dev/null && { kill -9 "$job"; fail "the job still runs 30 s after rank 1 was killed"; }
wait "$job"
rc=$?
took=$(( $(date +%s) - t0 ))
[ "$rc" -ne 0 ] || fail "mpirun exited 0 after a rank was killed"
left=$(pgrep -f -- "--out $work/killed" || true)
[ -z "$left" ] || fail "processes of the killed job are still alive: $left"
[ ! -f "$work/killed/summary.json" ] || fail "the run finished before the kill (make it longer)"
echo "faults: rank 1 SIGKILLed; job ended with exit $rc after ${took} s"
mpirun --oversubscribe -np 2 "$exe" "${long[@]}" --resume --out "$work/killed" > "$work/resume.log" 2>&1 ||
  { cat "$work/resume.log"; fail "resuming after the kill failed"; }
grep -q '"final_val_loss"' "$work/killed/summary.json" || fail "the resumed run did not finish"
# Killed and resumed = uninterrupted (same binary, same ranks: the same sums, bit for bit).
mpirun --oversubscribe -np 2 "$exe" "${long[@]}" --out "$work/straight" > "$work/straight.log" 2>&1 ||
  { cat "$work/straight.log"; fail "the uninterrupted run failed"; }
"$compare" "$work/straight/metrics.jsonl" "$work/killed/metrics.jsonl" 0 train_loss val_loss ||
  fail "the killed and resumed run's losses differ from the uninterrupted run's"
cmp -s "$work/straight/ckpt.safetensors" "$work/killed/ckpt.safetensors" ||
  fail "the killed and resumed run's final checkpoint differs from the uninterrupted run's"
echo "faults: the checkpoint was intact; resumed on 2 ranks, the run equals an uninterrupted one bit for bit"

# 2. Different flags on the two ranks (MPMD launch).
mpirun --oversubscribe -np 1 "$exe" "${tiny[@]}" --lr 1e-3 --out "$work/mismatch" : \
       -np 1 "$exe" "${tiny[@]}" --lr 3e-3 --out "$work/mismatch" > "$work/mismatch.log" 2>&1
rc=$?
[ "$rc" -eq 2 ] || { cat "$work/mismatch.log"; fail "mismatched flags: exit $rc, expected 2"; }
grep -q "disagree on lr: rank 0 has 0.001, rank 1 has 0.003" "$work/mismatch.log" ||
  { cat "$work/mismatch.log"; fail "mismatched flags: the message does not name both sides"; }
echo "faults: mismatched --lr refused with exit 2: $(grep -o 'the ranks disagree on lr[^(]*' "$work/mismatch.log" | head -1)"

# 2b. The same flags and data path, other data: the content hash differs.
mkdir -p "$work/a" "$work/b"
head -c 300000 /dev/urandom | base64 > "$work/a/corpus.txt"
head -c 300000 /dev/urandom | base64 > "$work/b/corpus.txt"
mpirun --oversubscribe -np 1 -wdir "$work/a" "$exe" "${tiny[@]}" --data corpus.txt --out "$work/datamismatch" : \
       -np 1 -wdir "$work/b" "$exe" "${tiny[@]}" --data corpus.txt --out "$work/datamismatch" > "$work/data.log" 2>&1
rc=$?
[ "$rc" -eq 2 ] && grep -q "the ranks disagree on data content" "$work/data.log" ||
  { cat "$work/data.log"; fail "other data under the same path: exit $rc, expected 2 naming the data content"; }
echo "faults: the same --data path with other contents refused with exit 2"

# 3. --batch 3 over 2 ranks.
mpirun --oversubscribe -np 2 "$exe" "${tiny[@]}" --batch 3 --out "$work/batch3" > "$work/batch3.log" 2>&1
rc=$?
[ "$rc" -eq 2 ] || { cat "$work/batch3.log"; fail "--batch 3 on 2 ranks: exit $rc, expected 2"; }
grep -q "does not split over 2 ranks" "$work/batch3.log" || { cat "$work/batch3.log"; fail "--batch 3: no sentence"; }
echo "faults: --batch 3 over 2 ranks refused with exit 2"

# 4. One-process modes under a launcher.
mpirun --oversubscribe -np 2 "$exe" --sample "$work/killed/ckpt.safetensors" > "$work/sample.log" 2>&1
rc=$?
[ "$rc" -eq 2 ] && grep -q "runs on one process" "$work/sample.log" ||
  { cat "$work/sample.log"; fail "--sample under mpirun: exit $rc, expected 2 with a sentence"; }
echo "faults: --sample under mpirun refused with exit 2"
