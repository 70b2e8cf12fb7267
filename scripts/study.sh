#!/usr/bin/env bash
# Small studies on the Brown corpus (byte tokens), each variant at its own tuned
# learning rate, in resumable pieces: a rerun skips finished runs and resumes
# interrupted ones. Results go to runs/study/<arm>/ (results.md, plots, eval
# tables); docs/study.md and docs/angpt.md quote them with this command.
#
#   bash scripts/study.sh angpt          # angpt vs angpt_attnfactor (+ hidden norms per layer)
#   bash scripts/study.sh extrapolation  # gpt, gpt_qknorm, ngpt, ngpt_noqknorm at T=128, evaluated at 128..1024
#   bash scripts/study.sh fixedscales    # ngpt vs ngpt_fixedscales at the training length
#   bash scripts/study.sh lr-rest        # the lr sweep alone for gpt_alpha, ngpt_slerp, ngpt_scalar
#
# Per arm: (1) a learning-rate sweep, one seed, SWEEP_STEPS steps, grid LR_GRID;
# each variant's lr = the grid point with the lowest final validation loss;
# (2) SEEDS full runs of STEPS steps per variant at its lr; (3) the report.
# Environment: LR_GRID (3e-3,1e-2,3e-2), SWEEP_STEPS (300), STEPS (800), SEEDS (1,2).
set -euo pipefail
cd "$(dirname "$0")/.."
ARM=${1:?"usage: bash scripts/study.sh angpt|extrapolation|fixedscales"}
LR_GRID=${LR_GRID:-3e-3,1e-2,3e-2}
SWEEP_STEPS=${SWEEP_STEPS:-300}
STEPS=${STEPS:-800}
SEEDS=${SEEDS:-1,2}
case $ARM in
  angpt) VARIANTS=angpt,angpt_attnfactor ;;
  extrapolation) VARIANTS=gpt,gpt_qknorm,ngpt,ngpt_noqknorm ;;
  fixedscales) VARIANTS=ngpt,ngpt_fixedscales ;;
  lr-rest) VARIANTS=gpt_alpha,ngpt_slerp,ngpt_scalar; FULL=0 ;;  # only the sweep: the trainers' default lrs
  *) echo "study: unknown arm '$ARM' (angpt, extrapolation, fixedscales, lr-rest)" >&2; exit 2 ;;
esac
FULL=${FULL:-1}
bash scripts/bootstrap.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
targets=(normlab-ablate normlab-eval normlab-diagnose)
for v in ${VARIANTS//,/ }; do targets+=("train-$v"); done
cmake --build build -j 2 --target "${targets[@]}" >/dev/null
bash scripts/fetch-corpus.sh data
OUT=runs/study/$ARM
mkdir -p "$OUT"
COMMON=(--data brown --data-dir "$PWD/data" --batch 16 --seq 128 --d 128 --layers 4 --heads 4 --eval-every 50
        --eval-batches 8 --ckpt-every 100 --quiet)

# Runs one training unless it finished; resumes it when interrupted.
train() {  # variant out-dir flags...
  local v=$1 dir=$2
  shift 2
  if [ -f "$dir/summary.json" ]; then return 0; fi
  if [ -f "$dir/DIVERGED" ]; then return 3; fi
  local resume=()
  [ -f "$dir/ckpt.safetensors" ] && resume=(--resume)
  echo "study: train-$v $* -> $dir ${resume[*]}"
  ./build/train-"$v" "${COMMON[@]}" "$@" --out "$dir" "${resume[@]}"
}
final_val() { sed -n 's/.*"final_val_loss": *\([-0-9.e+]*\).*/\1/p' "$1/summary.json"; }

# (1) the sweep
: > "$OUT/sweep.md"
{ echo "| variant | lr | final val loss ($SWEEP_STEPS steps, seed 1) |"; echo "|---|---|---|"; } >> "$OUT/sweep.md"
declare -A LR
for v in ${VARIANTS//,/ }; do
  best="" bestl=""
  for lr in ${LR_GRID//,/ }; do
    dir=$OUT/sweep/$v/lr$lr
    # A run that diverges (exit 3: non-finite loss) is a result of the sweep, not an error.
    if train "$v" "$dir" --lr "$lr" --min-lr "$(awk -v l="$lr" 'BEGIN{print l/10}')" --steps "$SWEEP_STEPS" --seed 1; then
      l=$(final_val "$dir")
      echo "| $v | $lr | $l |" >> "$OUT/sweep.md"
    else
      rc=$?
      [ $rc -eq 3 ] || exit $rc
      touch "$dir/DIVERGED"
      l=1e9
      echo "| $v | $lr | diverged (non-finite loss) |" >> "$OUT/sweep.md"
    fi
    if [ -z "$bestl" ] || awk -v a="$l" -v b="$bestl" 'BEGIN{exit !(a < b)}'; then best=$lr bestl=$l; fi
  done
  LR[$v]=$best
  echo "| $v | **chosen: $best** | $bestl |" >> "$OUT/sweep.md"
done
cat "$OUT/sweep.md"

[ "$FULL" -eq 1 ] || exit 0

# (2) the full runs, each variant at its lr, into OUT/full/<variant>/seed<S>
for v in ${VARIANTS//,/ }; do
  for s in ${SEEDS//,/ }; do
    lr=${LR[$v]}
    train "$v" "$OUT/full/$v/seed$s" --lr "$lr" --min-lr "$(awk -v l="$lr" 'BEGIN{print l/10}')" --steps "$STEPS" --seed "$s"
  done
done

# (3) the report (tokens to target against the first variant, the per-variant lrs)
./build/normlab-ablate --report-only --variants "$VARIANTS" --seeds "$SEEDS" --out "$OUT/full" > /dev/null
{ echo "# Study arm: $ARM"; echo; echo "Command: \`bash scripts/study.sh $ARM\` (LR_GRID=$LR_GRID SWEEP_STEPS=$SWEEP_STEPS STEPS=$STEPS SEEDS=$SEEDS)"; echo
  echo "## Learning-rate sweep"; echo; cat "$OUT/sweep.md"; echo
  echo "## Full runs at the chosen learning rates"; echo; sed -n '/^| variant/,$p' "$OUT/full/results"*.md | head -20; } > "$OUT/report.md"

case $ARM in
  extrapolation)
    # Each checkpoint at 128, 256, 512 and 1024 (positions bucketed by 128).
    for v in ${VARIANTS//,/ }; do
      for s in ${SEEDS//,/ }; do
        d=$OUT/full/$v/seed$s
        [ -f "$d/eval/eval.json" ] || ./build/normlab-eval "$d/ckpt.safetensors" --data brown --data-dir "$PWD/data" \
          --seq 128,256,512,1024 --batch 4 --batches 4 --bucket 128 --out "$d/eval" > /dev/null
        echo "$v seed $s: $(sed -n 's/.*"loss": *\([0-9.]*\).*/\1/p' "$d/eval/eval.json" | tr '\n' ' ')"
      done
    done | tee "$OUT/eval.txt"
    { echo; echo "## Validation loss at 128, 256, 512, 1024 (per seed; normlab-eval, 4 batches of 4)"; echo
      echo '```'; cat "$OUT/eval.txt"; echo '```'; } >> "$OUT/report.md" ;;
  angpt)
    # Hidden-state norms per layer on validation batches.
    for v in ${VARIANTS//,/ }; do
      ./build/normlab-diagnose "$OUT/full/$v/seed1/ckpt.safetensors" --data brown --data-dir "$PWD/data" \
        --batches 2 --batch 4 > "$OUT/diagnose_$v.txt"
    done
    { echo; echo "## Hidden-state norms per layer (seed 1, normlab-diagnose --data brown)"; echo
      for v in ${VARIANTS//,/ }; do echo "### $v"; echo '```'; sed -n '/^Activations on/,$p' "$OUT/diagnose_$v.txt"; echo '```'; done; } >> "$OUT/report.md" ;;
esac
cat "$OUT/report.md"
