#!/usr/bin/env bash
# bf16 against fp32, and against PyTorch's CPU bf16 autocast, in one run
# (docs/perf.md, "Mixed precision"): gpt and ngpt at the reference config
# (d=256, L=4, H=4, T=256, B=8) and the larger one (d=512, L=6, H=8, T=512, B=4),
# Brown bytes. Each round times, in rotating order, every normlab step
# (`train-<v> --time-steps`, median of 10 steps after 2 warm-up) in fp32 and in
# bf16, and the PyTorch reference step (bench/torch_reference.py, 2 threads) under
# autocast bf16 with OMP_WAIT_POLICY=PASSIVE and with OpenMP's default (its best
# policy is the one compared). On a CPU with AMX the bf16 step also runs with
# NORMLAB_NO_AMX=1 (the AVX-512 BF16 engine), for an A/B of the two engines.
# Medians over rounds. OPENBLAS_CORETYPE /
# OPENBLAS_L2_SIZE are unset in these commands only. Nothing else may run.
#
#   ROUNDS=3 bash scripts/bench-precision.sh     → runs/precision-bench/summary.md
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
BUILD_DIR=${BUILD_DIR:-build}
OUT=${OUT:-runs/precision-bench}
TORCH_PY=${TORCH_PY:-/usr/bin/python3}
STEPS=${STEPS:-10}
rm -rf "$OUT" && mkdir -p "$OUT"
blas_env=(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE)
torch_env=("${blas_env[@]}" LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp)
have_torch=1
"$TORCH_PY" -c "import torch" 2>/dev/null || { have_torch=0; echo "bench-precision: no torch under $TORCH_PY: PyTorch rows left out" >&2; }
config() {  # ref | big
  if [ "$1" = ref ]; then echo --d 256 --layers 4 --heads 4 --seq 256 --batch 8
  else echo --d 512 --layers 6 --heads 8 --seq 512 --batch 4; fi
}
torch_config() {
  if [ "$1" = ref ]; then echo --d 256 --layers 4 --heads 4 --T 256 --B 8
  else echo --d 512 --layers 6 --heads 8 --T 512 --B 4; fi
}
precisions=(fp32 bf16)
grep -qw amx_bf16 /proc/cpuinfo && precisions+=(bf16-avx512)
jobs=()
for c in ref big; do
  for v in gpt ngpt; do
    for p in "${precisions[@]}"; do jobs+=("normlab $c $v $p"); done
    if [ $have_torch = 1 ]; then for pol in PASSIVE default; do jobs+=("torch $c $v $pol"); done; fi
  done
done
for r in $(seq 1 "$ROUNDS"); do
  n=${#jobs[@]}
  for k in $(seq 0 $((n - 1))); do
    read -r who c v x <<<"${jobs[$(((k + r) % n))]}"
    if [ "$who" = normlab ]; then
      # shellcheck disable=SC2046
      engine=(); [ "$x" = bf16-avx512 ] && engine=(NORMLAB_NO_AMX=1)
      "${blas_env[@]}" "${engine[@]}" "$BUILD_DIR/train-$v" $(config "$c") --data brown --time-steps "$STEPS" \
        --precision "${x%-avx512}" --out "$OUT/r$r-$c-$v-$x" --quiet
    else
      pol=(); [ "$x" = PASSIVE ] && pol=(OMP_WAIT_POLICY=PASSIVE)
      # shellcheck disable=SC2046
      "${torch_env[@]}" "${pol[@]}" "$TORCH_PY" bench/torch_reference.py --variant "$v" $(torch_config "$c") \
        --threads 2 --steps "$STEPS" --autocast bf16 > "$OUT/torch-r$r-$c-$v-$x.json"
    fi
  done
  echo "bench-precision: round $r done" >&2
done
/usr/bin/env python3 - "$OUT" "$ROUNDS" <<'PY' | tee "$OUT/summary.md"
import glob, json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
med = statistics.median
def normlab(c, v, p):
    return [1e3 * json.load(open(f"{out}/r{r}-{c}-{v}-{p}/step_time.json"))["step_time_s"] for r in range(1, rounds + 1)]
def torch(c, v, pol):
    fs = [f"{out}/torch-r{r}-{c}-{v}-{pol}.json" for r in range(1, rounds + 1)]
    try:
        return [json.load(open(f))["median_ms"] for f in fs]
    except (FileNotFoundError, json.JSONDecodeError):
        return None
engine = json.load(open(f"{out}/r1-ref-gpt-bf16/step_time.json")).get("precision_engine", "?")
print(f"bf16 engine: {engine}; {rounds} rounds, medians over rounds (ms per step)\n")
import os
avx = os.path.exists(f"{out}/r1-ref-gpt-bf16-avx512/step_time.json")
if avx:
    print("bf16-avx512: the same bf16 step on the AVX-512 BF16 engine (NORMLAB_NO_AMX=1)\n")
print("| config | variant | fp32 | bf16 | bf16 speedup (per round) |" + (" bf16-avx512 |" if avx else "")
      + " PyTorch autocast bf16 (PASSIVE / default) | normlab bf16 × PyTorch's best |")
print("|---|---|---:|---:|---|" + ("---:|" if avx else "") + "---|---:|")
for c, name in (("ref", "reference (d=256, L=4, T=256, B=8)"), ("big", "larger (d=512, L=6, T=512, B=4)")):
    for v in ("gpt", "ngpt"):
        a, b = normlab(c, v, "fp32"), normlab(c, v, "bf16")
        per = ", ".join(f"{x / y:.2f}" for x, y in zip(a, b))
        tp, td = torch(c, v, "PASSIVE"), torch(c, v, "default")
        if tp and td:
            best = min(med(tp), med(td))
            tcell, ratio = f"{med(tp):.0f} / {med(td):.0f}", f"{best / med(b):.2f}×"
        else:
            tcell, ratio = "n/a", "n/a"
        acell = f" {med(normlab(c, v, 'bf16-avx512')):.1f} |" if avx else ""
        print(f"| {name} | {v} | {med(a):.1f} | {med(b):.1f} | {med(a) / med(b):.2f}× ({per}) |{acell} {tcell} | {ratio} |")
PY
