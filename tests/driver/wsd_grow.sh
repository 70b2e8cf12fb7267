#!/usr/bin/env bash
# wsd_grow.sh TRAINER WORKDIR: warmup-stable-decay and a longer --steps on resume.
#  * stopped at step 6 of 20 (decay from step 16), resumed with --steps 30: the
#    steps taken keep their rates, so the resume is accepted and the metrics'
#    rates up to step 6 equal the first run's;
#  * stopped at step 18 of 20 (in the decay), resumed with --steps 30: refused
#    with exit 2 and a sentence, since step 17 would have had another rate.
set -euo pipefail
exe=$1 work=$2
rm -rf "$work" && mkdir -p "$work"
common=(--data synthetic --d 32 --layers 2 --heads 2 --seq 32 --batch 4 --eval-every 0 --eval-batches 1
        --ckpt-every 0 --threads 2 --quiet --schedule wsd --decay-frac 0.2)
"$exe" "${common[@]}" --steps 20 --stop-at 6 --out "$work/grow"
"$exe" "${common[@]}" --steps 30 --resume --out "$work/grow"
lines=$(wc -l < "$work/grow/metrics.jsonl")
[ "$lines" -eq 30 ] || { echo "expected 30 metrics lines after growing to 30 steps, got $lines"; exit 1; }
"$exe" "${common[@]}" --steps 20 --stop-at 18 --out "$work/late"
set +e
out=$("$exe" "${common[@]}" --steps 30 --resume --out "$work/late" 2>&1)
rc=$?
set -e
echo "$out"
[ "$rc" -eq 2 ] || { echo "expected exit 2 for growing a run inside its decay, got $rc"; exit 1; }
grep -q "a WSD run: before its decay begins" <<<"$out" || { echo "no sentence naming the decay"; exit 1; }
echo "wsd: grown in its stable phase, refused inside its decay"
