#!/usr/bin/env bash
# The main job: trains gpt, gpt_qknorm (GPT+, the papers' baseline), ngpt and angpt on the
# Brown corpus (byte tokens) with the same data, config and seed, each at the learning rate the
# fair study's sweep chose for it (studies/fair/*/sweep.json; docs/study.md); evaluates each
# final checkpoint at 1, 2, 4 and 8 times the training context (normlab-eval); then writes
# runs/ablation/results.md (tokens and time to reach GPT+'s and GPT's final validation loss, and
# the loss past the training context), runs/ablation/loss_vs_tokens.{png,svg} and
# runs/ablation/loss_vs_context.{png,svg}. A rerun skips finished runs and evaluations and
# resumes interrupted runs.
#
#   bash scripts/run-ablation.sh                      # the preset
#   VARIANTS=gpt,gpt_alpha,ngpt,angpt SEEDS=1,2,3 STEPS=2000 bash scripts/run-ablation.sh   # a fuller study
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
VARIANTS=${VARIANTS:-gpt,gpt_qknorm,ngpt,angpt}
BASELINES=${BASELINES:-gpt_qknorm,gpt}
EXTRAPOLATE=${EXTRAPOLATE:-1,2,4,8}
SEEDS=${SEEDS:-1}
STEPS=${STEPS:-800}
OUT=${OUT:-runs/ablation}
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
targets=(normlab-ablate normlab-eval)
for v in ${VARIANTS//,/ }; do targets+=("train-$v"); done
cmake --build build -j 2 --target "${targets[@]}"
bash scripts/fetch-corpus.sh data
# Each variant's learning rate: the fair study's choice (its sweep at T = 256, 2048 tokens a
# step, the same tokens a step as here). LRS=v=lr,... overrides.
if [ -z "${LRS:-}" ]; then
  LRS=$(/usr/bin/env python3 - "$VARIANTS" studies/fair/main/sweep.json studies/fair/others/sweep.json <<'PY'
import json, sys
chosen = {}
for f in sys.argv[2:]:
    chosen.update(json.load(open(f)))
missing = [v for v in sys.argv[1].split(",") if v not in chosen]
if missing:
    sys.exit("run-ablation: the fair study chose no learning rate for " + ", ".join(missing) + "; give LRS=variant=lr,...")
print(",".join(f"{v}={chosen[v]:g}" for v in sys.argv[1].split(",")))
PY
)
fi
echo "run-ablation: learning rates $LRS (the fair study's sweep choices, studies/fair/*/sweep.json)"
# The corpus lives in the repository's data/ (the trainers' own default is ~/.cache/normlab).
# Baselines that are not among VARIANTS are left out.
bases=""
for b in ${BASELINES//,/ }; do
  case ",$VARIANTS," in *",$b,"*) bases+="${bases:+,}$b" ;; esac
done
./build/normlab-ablate --variants "$VARIANTS" --seeds "$SEEDS" --lrs "$LRS" --out "$OUT" \
  ${bases:+--baselines "$bases"} ${EXTRAPOLATE:+--extrapolate "$EXTRAPOLATE"} -- \
  --data brown --data-dir "$PWD/data" --steps "$STEPS" --batch 16 --seq 128 --d 128 --layers 4 --heads 4 \
  --eval-every 50 --eval-batches 8 --ckpt-every 200 "$@"
