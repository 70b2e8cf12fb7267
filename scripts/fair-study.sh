#!/usr/bin/env bash
# The fair ablation, in resumable pieces: a rerun skips finished runs
# and resumes interrupted ones, so a piece can be stopped and started again.
# Brown corpus, byte tokens, d = 128, 4 layers, 4 heads, 2048 tokens a step,
# 1500 steps; each variant at its own learning rate, chosen by normlab-ablate's
# sweep (--lr-grid, 300 steps, seed 1); time to target from step times measured
# interleaved across the variants of a piece, step by step (normlab-ablate --timing-rounds).
#
#   bash scripts/fair-study.sh main        # gpt, gpt_alpha, ngpt, angpt: 3 seeds each, T = 256
#   bash scripts/fair-study.sh others      # the other six variants, 1 seed, T = 256 (gpt's runs shared from main)
#   bash scripts/fair-study.sh context     # gpt, ngpt, angpt at T = 64 and 1024 (same tokens a step, main's lrs)
#   bash scripts/fair-study.sh precision   # gpt, gpt_qknorm, ngpt, angpt in bf16 beside fp32: 3 seeds, main's lrs
#                                          #   (fp32 runs shared from main and others; gpt_qknorm's seeds 2, 3 added)
#   bash scripts/fair-study.sh precision-v2  # precision again, both arms on one machine, with today's bf16
#                                          #   method: precision_v2.md
#   bash scripts/fair-study.sh precision-v3  # gpt and ngpt, the two that missed a bar in precision-v2, with 5
#                                          #   seeds per arm, both arms on one machine: precision_v3.md
#   bash scripts/fair-study.sh conditioning  # normlab-diagnose --compare on main's checkpoints (seed 1)
#   bash scripts/fair-study.sh conditioning-v2  # main-v2's seed-1 runs again, a checkpoint kept every 20% of
#                                          #   training, each diagnosed with the embeddings counted over the tokens
#                                          #   the training split holds
#   bash scripts/fair-study.sh main-v2     # GPT+ (gpt_qknorm) as the baseline, plain GPT beside it; gpt_alpha,
#                                          #   ngpt, angpt: 5 seeds; grid 1e-3..3e-2 extended past an edge winner,
#                                          #   its best two rates re-checked at the full 1500 steps
#   bash scripts/fair-study.sh budgets     # gpt_qknorm, ngpt, angpt at 0.25, 0.5, 1 of the steps as separate runs, 3 seeds
#   bash scripts/fair-study.sh cross       # one change at a time, 3 seeds each: gpt without warmup and decay, ngpt
#                                          #   with GPT's, ngpt with alpha0 = 1/L, angpt's attention, MLP and
#                                          #   residual factors x0.5 and x2
#   bash scripts/fair-study.sh bpe         # main-v2's variants on BPE-4096 tokens of the same text (3 seeds), and
#                                          #   gpt_qknorm vs ngpt at d = 256, 8 layers, T = 512 tokens (1 seed), at
#                                          #   the small arm's rates and at a third of them
#   bash scripts/fair-study.sh optimizers  # gpt, gpt_qknorm, ngpt, angpt under muon+cosine and adamw+wsd, 3 seeds
#                                          #   (adamw+cosine: main-v2's seeds 1-3); Muon's rate swept per variant
#                                          #   beside main-v2's --lr, WSD at main-v2's rates; optimizers.md compares them
#   bash scripts/fair-study.sh timing      # re-time every piece's variants, step by step (nothing else may run;
#                                          #   TIMING_PIECES="main-v2 budgets" picks pieces)
#   bash scripts/fair-study.sh archive     # every finished run's record (no checkpoints) into studies/fair/:
#                                          #   reports, plots and sweep.json as files; each piece's runs and its
#                                          #   other JSON in runs.tar.xz
#   bash scripts/fair-study.sh restore     # studies/fair/ (archives unpacked) back into runs/fair/ (a new work tree continues)
#
# Results: runs/fair/<piece>/results.md (+ plots); docs/study.md quotes them.
# TIMING_ROUNDS=0 skips the interleaved timing in a piece (time it later with `timing`).
# STUDY_BIN=DIR runs the piece with the tools and trainers copied into DIR (made from build/ when
# DIR does not exist yet), so that rebuilding build/ meanwhile cannot touch a running study.
set -euo pipefail
cd "$(dirname "$0")/.."
PIECE=${1:?"usage: bash scripts/fair-study.sh main|others|context|precision|precision-v2|precision-v3|conditioning|conditioning-v2|main-v2|budgets|cross|bpe|optimizers|timing|archive|restore"}
ROOT=runs/fair
ARCHIVE=studies/fair
# What a study keeps of a run for its report and a resumed study: the records, not the checkpoints.
keep() { find "$1" \( -name summary.json -o -name metrics.jsonl -o -name args.txt -o -name step_time.json \
  -o -name ablation.json -o -name sweep.json -o -name recheck.json -o -name timing.json -o -name 'results*.md' -o -name '*.png' \
  -o -name 'conditioning*.md' -o -name 'precision*.md' -o -name optimizers.md -o -name DIVERGED \) -type f; }
case $PIECE in
  archive)
    [ -d "$ROOT" ] || { echo "fair-study: nothing in $ROOT to archive" >&2; exit 2; }
    (cd "$ROOT" && keep . | while read -r f; do mkdir -p "../../$ARCHIVE/$(dirname "$f")"; cp "$f" "../../$ARCHIVE/$f"; done)
    # A piece keeps its report, its plots and its sweep's choice (sweep.json) in the
    # tree; its runs' own records (per-step metrics, per-run summaries, sweep and
    # timing runs) and the JSON only a resumed study or --report-only reads
    # (ablation.json, recheck.json, timing.json) go into one compressed archive
    # beside them, merged with the one already there (what was just copied wins).
    members() { (cd "$1" && { find . -mindepth 1 -maxdepth 1 -type d
      find . -maxdepth 1 -type f \( -name ablation.json -o -name recheck.json -o -name timing.json \); } | sort); }
    for piece in "$ARCHIVE"/*/; do
      piece=${piece%/}
      [ -n "$(members "$piece")" ] || continue
      if [ -f "$piece/runs.tar.xz" ]; then tar -xJf "$piece/runs.tar.xz" -C "$piece" --skip-old-files; fi
      inside=$(members "$piece")
      # shellcheck disable=SC2086  # one name per word
      (cd "$piece" && tar --sort=name --mtime=@0 --owner=0 --group=0 -cJf runs.tar.xz $inside && rm -rf $inside)
    done
    echo "fair-study: archived into $ARCHIVE (each piece's runs in its runs.tar.xz)"; exit 0 ;;
  restore)
    [ -d "$ARCHIVE" ] || { echo "fair-study: no $ARCHIVE to restore" >&2; exit 2; }
    mkdir -p "$ROOT"
    (cd "$ARCHIVE" && keep . | while read -r f; do
       [ -e "../../$ROOT/$f" ] || { mkdir -p "../../$ROOT/$(dirname "$f")"; cp "$f" "../../$ROOT/$f"; }; done)
    for a in "$ARCHIVE"/*/runs.tar.xz; do
      [ -f "$a" ] || continue
      piece=$(basename "$(dirname "$a")")
      mkdir -p "$ROOT/$piece"
      tar -xJf "$a" -C "$ROOT/$piece" --skip-old-files  # never over a run continued since
    done
    echo "fair-study: restored $ARCHIVE into $ROOT"; exit 0 ;;
esac
GRID=${LR_GRID:-3e-3,1e-2,3e-2}
SWEEP_STEPS=${SWEEP_STEPS:-300}
STEPS=${STEPS:-1500}
ROUNDS=${TIMING_ROUNDS:-3}
TOOLS="normlab-ablate normlab-diagnose normlab-tokenize train-gpt train-gpt_qknorm train-gpt_alpha train-ngpt
  train-ngpt_slerp train-ngpt_noqknorm train-ngpt_scalar train-ngpt_fixedscales train-angpt train-angpt_attnfactor"
BIN=$(realpath -m "${STUDY_BIN:-build}")
if [ ! -d "$BIN" ] || [ "$BIN" = "$PWD/build" ]; then
  bash scripts/bootstrap.sh
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  # shellcheck disable=SC2086  # one target per word
  cmake --build build -j 2 --target $TOOLS >/dev/null
  if [ "$BIN" != "$PWD/build" ]; then
    mkdir -p "$BIN"
    # shellcheck disable=SC2086
    (cd build && cp $TOOLS "$BIN/")
    echo "fair-study: tools and trainers copied into $BIN (commit $(git rev-parse --short HEAD))"
  fi
fi
bash scripts/fetch-corpus.sh data >/dev/null
mkdir -p "$ROOT"
# The trainers' flags at context length T (batch = 2048 / T sequences).
# DATA: another corpus (a token directory: the bpe piece).
flags() { echo --data "${DATA:-brown}" --data-dir "$PWD/data" --seq "$1" --batch $((2048 / $1)) --d 128 --layers 4 --heads 4 \
  --steps "$STEPS" --eval-every 100 --eval-batches 8 --ckpt-every 250 --quiet; }
ablate() { "$BIN/normlab-ablate" --timing-rounds "${TIMING_ROUNDS:-$ROUNDS}" "$@"; }
# A study dir reuses another's finished runs (the shared baseline) through symlinks.
share() {  # from-dir to-dir variant seed
  mkdir -p "$2/$3" "$2/sweep"
  [ -e "$2/$3/seed$4" ] || ln -s "$(realpath "$1/$3/seed$4")" "$2/$3/seed$4"
  if [ -d "$1/sweep/$3" ] && [ ! -e "$2/sweep/$3" ]; then ln -s "$(realpath "$1/sweep/$3")" "$2/sweep/$3"; fi
}
# study-dir variants [divisor] -> v=lr,... from its sweep.json, each rate over divisor, to 3
# significant digits (every grid rate exactly; a third of 1e-2 as 0.00333).
lrs_of() {
  /usr/bin/env python3 - "$1/sweep.json" "$2" "${3:-1}" <<'PY'
import json, sys
chosen = json.load(open(sys.argv[1]))
print(",".join(f"{v}={chosen[v] / float(sys.argv[3]):.3g}" for v in sys.argv[2].split(",")))
PY
}

case $PIECE in
  main)
    # shellcheck disable=SC2046
    ablate --variants gpt,gpt_alpha,ngpt,angpt --seeds 1,2,3 --lr-grid "$GRID" --sweep-steps "$SWEEP_STEPS" \
      --out "$ROOT/main" -- $(flags 256) ;;
  others)
    [ -f "$ROOT/main/gpt/seed1/summary.json" ] || { echo "fair-study: run 'main' first (gpt is shared)" >&2; exit 2; }
    share "$ROOT/main" "$ROOT/others" gpt 1
    # shellcheck disable=SC2046
    ablate --variants gpt,gpt_qknorm,ngpt_slerp,ngpt_noqknorm,ngpt_scalar,ngpt_fixedscales,angpt_attnfactor --seeds 1 \
      --lr-grid "$GRID" --sweep-steps "$SWEEP_STEPS" --out "$ROOT/others" -- $(flags 256) ;;
  context)
    [ -f "$ROOT/main/sweep.json" ] || { echo "fair-study: run 'main' first (its learning rates are used)" >&2; exit 2; }
    lrs=$(lrs_of "$ROOT/main" gpt,ngpt,angpt)
    for T in 64 1024; do
      # shellcheck disable=SC2046
      ablate --variants gpt,ngpt,angpt --seeds 1 --lrs "$lrs" --out "$ROOT/ctx$T" -- $(flags "$T")
    done ;;
  precision|precision-v2|precision-v3)
    # precision-v2: both arms again, on one machine, with today's bf16 method (nothing shared).
    # precision-v3: gpt and ngpt only (precision-v2's gpt mean fell 0.57% below fp32's, ngpt's
    # outside fp32's seed range), 5 seeds per arm, both arms on one machine.
    sfx=; V=gpt,gpt_qknorm,ngpt,angpt; seeds=1,2,3
    [ "$PIECE" = precision-v2 ] && sfx=_v2
    [ "$PIECE" = precision-v3 ] && sfx=_v3 V=gpt,ngpt seeds=1,2,3,4,5
    for p in main others; do
      [ -f "$ROOT/$p/sweep.json" ] || { echo "fair-study: run '$p' first (its learning rates and fp32 runs are used)" >&2; exit 2; }
    done
    lrs=$(lrs_of "$ROOT/main" gpt,ngpt,angpt),$(lrs_of "$ROOT/others" gpt_qknorm)
    [ "$PIECE" = precision-v3 ] && lrs=$(lrs_of "$ROOT/main" "$V")
    if [ -z "$sfx" ]; then
      for v in gpt ngpt angpt; do for s in 1 2 3; do share "$ROOT/main" "$ROOT/precision_fp32" $v $s; done; done
      share "$ROOT/others" "$ROOT/precision_fp32" gpt_qknorm 1
    fi
    for p in fp32 bf16; do
      # shellcheck disable=SC2046
      TIMING_ROUNDS=0 ablate --variants "$V" --seeds "$seeds" --lrs "$lrs" \
        --out "$ROOT/precision_$p$sfx" -- $(flags 256) --precision $p
    done
    /usr/bin/env python3 scripts/precision-table.py "$ROOT/precision_fp32$sfx" "$ROOT/precision_bf16$sfx" \
      "$V" "$seeds" > "$ROOT/precision$sfx.md"
    cat "$ROOT/precision$sfx.md" ;;
  conditioning)
    d=$ROOT/main
    "$BIN/normlab-diagnose" --compare "$d/gpt/seed1/ckpt.safetensors" "$d/ngpt/seed1/ckpt.safetensors" \
      "$d/angpt/seed1/ckpt.safetensors" "$d/gpt_alpha/seed1/ckpt.safetensors" > "$ROOT/conditioning.md"
    "$BIN/normlab-diagnose" --post-hoc-normalize --compare "$d/gpt/seed1/ckpt.safetensors" \
      "$d/ngpt/seed1/ckpt.safetensors" > "$ROOT/conditioning_posthoc.md"
    cat "$ROOT/conditioning.md" "$ROOT/conditioning_posthoc.md" ;;
  conditioning-v2)
    [ -f "$ROOT/main-v2/sweep.json" ] || { echo "fair-study: run 'main-v2' first (its learning rates are used)" >&2; exit 2; }
    V=gpt_qknorm,gpt,gpt_alpha,ngpt,angpt
    d=$ROOT/conditioning-v2
    # The same flags and seed as main-v2's seed 1 (the same bits: its final losses must match).
    # shellcheck disable=SC2046
    TIMING_ROUNDS=0 ablate --variants $V --seeds 1 --lrs "$(lrs_of "$ROOT/main-v2" $V)" --baselines gpt_qknorm,gpt \
      --out "$d" -- $(flags 256) --snapshot-every 300
    args=()
    for step in 300 600 900 1200 1500; do
      files=()
      for v in ${V//,/ }; do files+=("$d/$v/seed1/snapshots/step$step.safetensors"); done
      "$BIN/normlab-diagnose" --compare "${files[@]}" --data "${DATA:-brown}" --data-dir "$PWD/data" --batches 2 \
        > "$d/conditioning_step$step.md"
      args+=("$step=$d/conditioning_step$step.md")
    done
    /usr/bin/env python3 scripts/conditioning-table.py "${args[@]}" > "$d/conditioning_over_training.md"
    cat "$d/conditioning_over_training.md" ;;
  main-v2)
    # shellcheck disable=SC2046
    ablate --variants gpt_qknorm,gpt,gpt_alpha,ngpt,angpt --seeds 1,2,3,4,5 --lr-grid "${GRID_V2:-1e-3,3e-3,1e-2,3e-2}" \
      --sweep-steps "$SWEEP_STEPS" --baselines gpt_qknorm,gpt --out "$ROOT/main-v2" -- $(flags 256) ;;
  budgets)
    [ -f "$ROOT/main-v2/sweep.json" ] || { echo "fair-study: run 'main-v2' first (its learning rates are used)" >&2; exit 2; }
    # shellcheck disable=SC2046
    ablate --variants gpt_qknorm,ngpt,angpt --seeds 1,2,3 --lrs "$(lrs_of "$ROOT/main-v2" gpt_qknorm,ngpt,angpt)" \
      --budgets 0.25,0.5,1 --baselines gpt_qknorm --out "$ROOT/budgets" -- $(flags 256) ;;
  cross)
    [ -f "$ROOT/main-v2/sweep.json" ] || { echo "fair-study: run 'main-v2' first (its learning rates are used)" >&2; exit 2; }
    # One change per arm, at the variant's main-v2 rate; compare each with its main-v2 runs.
    arm() {  # name variant trainer-flags...
      local name=$1 v=$2; shift 2
      # shellcheck disable=SC2046
      ablate --variants "$v" --seeds 1,2,3 --lrs "$(lrs_of "$ROOT/main-v2" "$v")" --out "$ROOT/cross/$name" \
        -- $(flags 256) "$@"
    }
    arm gpt-no-warmup-no-decay gpt --warmup 0 --weight-decay 0
    arm ngpt-gpt-warmup-decay ngpt --warmup 150 --weight-decay 0.1
    arm ngpt-alpha0-1overL ngpt --alpha-init 0.25
    for m in 0.5 2; do
      arm "angpt-attn-x$m" angpt --angpt-attn-factor "$m"
      arm "angpt-mlp-x$m" angpt --angpt-mlp-factor "$m"
      arm "angpt-residual-x$m" angpt --angpt-residual-factor "$m"
    done ;;
  bpe)
    [ -f data/brown-bpe4096/train.bin ] || "$BIN/normlab-tokenize" --input data/brown.txt --vocab 4096 --out data/brown-bpe4096
    # shellcheck disable=SC2046
    DATA=$PWD/data/brown-bpe4096 ablate --variants gpt_qknorm,gpt,gpt_alpha,ngpt,angpt --seeds 1,2,3 \
      --lr-grid "${GRID_V2:-1e-3,3e-3,1e-2,3e-2}" --sweep-steps "$SWEEP_STEPS" --baselines gpt_qknorm,gpt \
      --out "$ROOT/bpe" -- $(DATA=$PWD/data/brown-bpe4096 flags 256)
    # shellcheck disable=SC2046
    ablate --variants gpt_qknorm,ngpt --seeds 1 --lrs "$(lrs_of "$ROOT/bpe" gpt_qknorm,ngpt)" --baselines gpt_qknorm \
      --out "$ROOT/bpe-large" -- $(DATA=$PWD/data/brown-bpe4096 flags 512) --d 256 --layers 8 --batch 4
    # The small arm's rates may not transfer to the larger width: both variants again at a third of them.
    # shellcheck disable=SC2046
    ablate --variants gpt_qknorm,ngpt --seeds 1 --lrs "$(lrs_of "$ROOT/bpe" gpt_qknorm,ngpt 3)" \
      --baselines gpt_qknorm --out "$ROOT/bpe-large-lr3" -- $(DATA=$PWD/data/brown-bpe4096 flags 512) \
      --d 256 --layers 8 --batch 4 ;;
  optimizers)
    [ -f "$ROOT/main-v2/sweep.json" ] || { echo "fair-study: run 'main-v2' first (its rates and AdamW runs are used)" >&2; exit 2; }
    V=gpt,gpt_qknorm,ngpt,angpt
    # Muon on the hidden matrices: its own rate swept per variant (the reference's default 0.02 lies
    # inside the grid), AdamW on the rest at the variant's main-v2 rate.
    # shellcheck disable=SC2046
    ablate --variants $V --seeds 1,2,3 --lrs "$(lrs_of "$ROOT/main-v2" $V)" --sweep-flag --muon-lr \
      --lr-grid "${MUON_GRID:-1e-2,3e-2,1e-1}" --sweep-steps "$SWEEP_STEPS" --baselines gpt_qknorm,gpt \
      --out "$ROOT/opt-muon-cosine" -- $(flags 256) --optimizer muon
    # Warmup-stable-decay (the last 20% of the steps decaying linearly to lr/10) at AdamW's swept peak
    # rates (main-v2's, as WSD studies compare schedules at one peak rate; not swept again for WSD).
    # shellcheck disable=SC2046
    ablate --variants $V --seeds 1,2,3 --lrs "$(lrs_of "$ROOT/main-v2" $V)" --baselines gpt_qknorm,gpt \
      --out "$ROOT/opt-adamw-wsd" -- $(flags 256) --schedule wsd
    /usr/bin/env python3 scripts/optimizer-table.py $V 1,2,3 "adamw+cosine=$ROOT/main-v2" \
      "muon+cosine=$ROOT/opt-muon-cosine" "adamw+wsd=$ROOT/opt-adamw-wsd" > "$ROOT/optimizers.md"
    cat "$ROOT/optimizers.md" ;;
  timing)
    # Every run finished: each rerun only times (interleaved) and re-makes the report.
    # TIMING_PIECES picks some (e.g. "main-v2 budgets"): each retimed piece's report changes.
    for p in ${TIMING_PIECES:-main others ctx64 ctx1024 main-v2 budgets opt-muon-cosine opt-adamw-wsd bpe bpe-large}; do
      [ -f "$ROOT/$p/ablation.json" ] || continue
      /usr/bin/env python3 - "$ROOT/$p/ablation.json" > "$ROOT/$p/.rerun" <<'PY'
import json, sys, shlex
r = json.load(open(sys.argv[1]))
args = ["--variants", ",".join(r["variants"]), "--seeds", ",".join(map(str, r["seeds"]))]
if r.get("lr_grid"): args += ["--lr-grid", ",".join(f"{x:g}" for x in r["lr_grid"]), "--sweep-steps", str(r["sweep_steps"])]
if r.get("lrs"): args += ["--lrs", ",".join(f"{k}={v:g}" for k, v in r["lrs"].items())]
if r.get("sweep_flag"): args += ["--sweep-flag", r["sweep_flag"]]
if r.get("baselines"): args += ["--baselines", ",".join(r["baselines"])]
if r.get("budgets"): args += ["--budgets", ",".join(f"{x:g}" for x in r["budgets"])]
print(shlex.join(args + ["--"] + r["pass_through"]))
PY
      eval "ablate --out $ROOT/$p $(cat "$ROOT/$p/.rerun")" > /dev/null
      echo "fair-study: timed $p"
    done ;;
  *) echo "fair-study: unknown piece '$PIECE' (main, others, context, precision, precision-v2, precision-v3, conditioning, conditioning-v2, main-v2, budgets, cross, bpe, optimizers, timing, archive, restore)" >&2; exit 2 ;;
esac
