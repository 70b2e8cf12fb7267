#!/usr/bin/env bash
# Step time of two builds of the trainers, interleaved in one run: for each
# round and variant, OLD then NEW (the order alternates by round), each a
# --time-steps run (2 warm-up steps, then STEPS timed optimizer steps; the
# median is kept) at the reference config on synthetic data. Prints one line per
# variant: the median over rounds of each build and NEW/OLD. For a refactor
# that must not change speed (within 3%, interleaved).
#   bash scripts/bench-paired.sh OLD_DIR NEW_DIR [variant ...]
#   ROUNDS (3), STEPS (8), FLAGS (the reference config), OUT (a scratch folder)
set -euo pipefail
old=$1 new=$2
shift 2
variants=("$@")
[ ${#variants[@]} -gt 0 ] || mapfile -t variants < <(bash "$(dirname "$0")/variants.sh")
ROUNDS=${ROUNDS:-3} STEPS=${STEPS:-8}
FLAGS=${FLAGS:---data synthetic --d 256 --layers 4 --heads 4 --seq 256 --batch 8}
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
log=$OUT/paired.tsv
: > "$log"
for r in $(seq 1 "$ROUNDS"); do
  for v in "${variants[@]}"; do
    order=(old new)
    [ $((r % 2)) -eq 0 ] && order=(new old)
    for which in "${order[@]}"; do
      dir=$old
      [ "$which" = new ] && dir=$new
      # shellcheck disable=SC2086
      "$dir/train-$v" $FLAGS --time-steps "$STEPS" --out "$OUT/$which-$v" --quiet > /dev/null
      t=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['step_time_s'])" "$OUT/$which-$v/step_time.json")
      printf '%s\t%s\t%s\t%s\n' "$r" "$v" "$which" "$t" >> "$log"
    done
  done
done
python3 - "$log" <<'PY'
import statistics, sys
rows = [l.split('\t') for l in open(sys.argv[1]).read().split('\n') if l]
by = {}
for r, v, w, t in rows:
    by.setdefault(v, {}).setdefault(w, []).append(float(t))
print(f"{'variant':18s} {'old ms':>8s} {'new ms':>8s} {'new/old':>8s}  (medians of {len(by[next(iter(by))]['old'])} rounds)")
for v, d in by.items():
    o, n = statistics.median(d['old']), statistics.median(d['new'])
    print(f"{v:18s} {o*1e3:8.1f} {n*1e3:8.1f} {n/o:8.3f}")
PY
