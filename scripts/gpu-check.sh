#!/usr/bin/env bash
# The GPU check of the CUDA backend, for a lent machine with an NVIDIA GPU and no
# package registry (one H200, 16 cores; 10 minutes a command, 15 in all).
#
#   first call:  bash scripts/gpu-check.sh            (device tool: timeout_s 540)
#   second call: bash scripts/gpu-check.sh --bench    (timeout_s 420, on the still-warm machine)
#
# First call, stage by stage, each with its own time limit and all within the
# budget (GPU_CHECK_BUDGET, default 500 s from the start):
#   configure   against gpu-deps/ (scripts/gpu-deps.sh; never installs), this
#               GPU's architecture, no MPI (the GPU machine has none), warnings
#               not errors (NORMLAB_WERROR=OFF: the host compiler there is unknown)
#   build tests the CUDA tests only (their own build step)                 240 s
#   tests       test_cuda_limits 20 s, _kernels 90 s, _model 120 s, _nccl 60 s
#   build trainers  train-<variant>-cuda, 10 variants                       200 s
#   trainers    each 20 steps through the driver (exit 0, finite, falling)  12 s each
# Work after the builds: 290 s of tests + 120 s of trainers = 410 s at most. The
# builds, estimated from the CPU machine (2 cores, 2026-12-03): kernels.cu for one
# architecture 14 s of nvcc; the tests' build (two architectures, four programs)
# 139 s and the 10 trainers' 218-535 s (ccache partly warm, the cores shared); one
# trainer unit is 46-78 s of one core. On 16 cores each build is bound by its
# longest unit, about 60-90 s.
# A stage that would outrun the budget is not started and says so.
#
# Second call (--bench): configure (kept from the first call when the machine is
# still warm), build and run the benchmark only (200 s + 240 s).
#
# $OUT (the device tool's output folder, else build-gpu/logs) gets at most 8
# files, the most the device tool brings back: summary.md, rewritten after every
# stage (so a call cut off at its limit still returns what finished), and one log
# per stage: build.log, tests.log, trainers.log (bench.log, bench.json with --bench).
# Without a GPU (scripts/gpu-rehearsal.sh) it builds for CUDA_ARCH (default 90)
# and the GPU tests and trainers must report skipped; GPU_CHECK_BUILD_SCALE
# multiplies the build limits (the rehearsal's 2 cores: 8) and GPU_CHECK_BUDGET
# sets the budget.
#   bash scripts/gpu-check.sh [--bench [benchmark flags, e.g. --batch=4]]
# Exit: 0 when every stage passed (or, without a GPU, skipped as expected).
set -uo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
BENCH=0
if [ "${1:-}" = "--bench" ]; then BENCH=1; shift; fi
BUDGET=${GPU_CHECK_BUDGET:-500}
# The build limits are for 16 cores; the offline rehearsal on 2 scales them (and the budget).
BUILD_SCALE=${GPU_CHECK_BUILD_SCALE:-1}
BUILD_DIR=${BUILD_DIR:-build-gpu}
OUTDIR=${OUT:-$BUILD_DIR/logs}
WORKLOGS=$BUILD_DIR/worklogs  # every test's and trainer's own log (not brought back)
DEPS=${NORMLAB_GPU_DEPS:-$PWD/gpu-deps}
mkdir -p "$OUTDIR" "$WORKLOGS"
summary=$OUTDIR/summary.md
elapsed() { echo $(( $(date +%s) - start )); }
rows=()
rc=0
NOW="starting"

# summary.md from what has finished so far; called after every stage.
write_summary() {
  {
    echo "## normlab GPU check$([ $BENCH -eq 1 ] && echo ' (--bench)'), $(date -u +%Y-%m-%dT%H:%MZ)"
    echo
    echo "GPU: ${GPU_NAME:-?}; nvcc: ${NVCC_VERSION:-?}; sm_${ARCH:-?}; $(elapsed) s of a ${BUDGET} s budget"
    echo
    echo "| stage / test | result | checks | worst error (share of its tolerance) | seconds |"
    echo "|---|---|---|---|---|"
    printf '%s\n' "${rows[@]}"
    echo
    if [ -s "$OUTDIR/bench.log" ]; then sed -n '/==== normlab CUDA summary/,$p' "$OUTDIR/bench.log"; echo; fi
    echo "state: $NOW"
    local so_far=""
    [[ $NOW == done* || $NOW == stopped* ]] || so_far=" so far"
    echo "gpu-check: $([ $rc -eq 0 ] && echo PASS || echo FAIL)$so_far$([ "${HAVE_GPU:-0}" -eq 0 ] && echo ' (no GPU: GPU tests skipped as expected)') (logs in $OUTDIR)"
  } > "$summary.tmp" && mv "$summary.tmp" "$summary"
}
# The seconds a stage may take: its own limit, or what is left of the budget
# (less a margin to write the summary); 0 when too little is left to start it.
stage_limit() {
  local want=$1 left=$(( BUDGET - $(elapsed) - 10 ))
  if [ $left -lt 15 ]; then echo 0; elif [ $left -lt "$want" ]; then echo $left; else echo "$want"; fi
}
out_of_time() {
  rows+=("| $1 | NOT RUN (budget of ${BUDGET} s spent) | - | - | - |")
  rc=1
  NOW="stopped: out of time before $1"
  write_summary
}
fail_stage() {
  rows+=("| $1 | $2 | - | - | $3 |")
  rc=1
  NOW="stopped: $1 failed"
  write_summary
  cat "$summary"
  exit 1
}

NVCC=${CUDACXX:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
[ -x "$NVCC" ] || { NOW="stopped: no nvcc found (set CUDACXX)"; rc=1; write_summary; cat "$summary"; exit 1; }
NVCC_VERSION=$("$NVCC" --version | tail -1)

# The GPU, if any, and its architecture (compute capability 9.0 -> 90).
HAVE_GPU=0
if nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader > "$WORKLOGS/gpu.txt" 2>&1 \
   && [ -s "$WORKLOGS/gpu.txt" ]; then
  HAVE_GPU=1
  GPU_NAME=$(head -1 "$WORKLOGS/gpu.txt")
  ARCH=${CUDA_ARCH:-$(head -1 "$WORKLOGS/gpu.txt" | awk -F', ' '{print $4}' | tr -d '.')}
else
  GPU_NAME="none (rehearsal)"
  ARCH=${CUDA_ARCH:-90}
  echo "gpu-check: no GPU visible (nvidia-smi: $(head -c 200 "$WORKLOGS/gpu.txt")): building for sm_$ARCH, GPU tests must report skipped"
fi
NOW="configuring"
write_summary

# ---------------------------------------------------------------- configure
prefix=()
if [ -d "$DEPS/usr" ]; then
  prefix=(-DCMAKE_PREFIX_PATH="$DEPS/usr")
  echo "gpu-check: dependencies from $DEPS ($(head -1 "$DEPS/STAGED" 2>/dev/null))"
else
  echo "gpu-check: no staged dependencies at $DEPS (run scripts/gpu-deps.sh on the CPU machine and carry it); trying the system's"
fi
# NCCL for test_cuda_nccl and the trainers: NCCL_ROOT if set, else the
# nvidia-nccl wheel of the machine's Python (headers and libnccl.so.2), else the
# CUDA toolkit's own; without NCCL that test is not built and says so.
if [ -z "${NCCL_ROOT:-}" ]; then
  NCCL_ROOT=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null || true)
fi
nccl=()
[ -n "${NCCL_ROOT:-}" ] && nccl=(-DNCCL_ROOT="$NCCL_ROOT") && echo "gpu-check: NCCL from $NCCL_ROOT"
t0=$(date +%s)
lim=$(stage_limit 90)
[ "$lim" -gt 0 ] || { out_of_time "configure"; cat "$summary"; exit 1; }
if ! timeout "$lim" cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DNORMLAB_CUDA=ON \
     -DCMAKE_CUDA_COMPILER="$NVCC" -DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DNORMLAB_BUILD_TESTS=OFF \
     -DNORMLAB_BUILD_TOOLS=OFF -DNORMLAB_BUILD_EXAMPLES=OFF -DNORMLAB_MPI=OFF -DNORMLAB_WERROR=OFF \
     "${prefix[@]}" "${nccl[@]}" > "$OUTDIR/build.log" 2>&1; then
  tail -40 "$OUTDIR/build.log"
  fail_stage "configure" "FAIL (build.log)" $(( $(date +%s) - t0 ))
fi
rows+=("| configure | PASS | - | $(grep -o 'normlab: NCCL [^ ]*' "$OUTDIR/build.log" | head -1 || true) | $(( $(date +%s) - t0 )) |")
NOW="configured"
write_summary

# build STAGE LIMIT TARGET...: one build step, its output appended to build.log.
build() {
  local name=$1 want=$2 t0 lim r
  shift 2
  t0=$(date +%s)
  lim=$(stage_limit $(( want * BUILD_SCALE )))
  if [ "$lim" -eq 0 ]; then out_of_time "$name"; return 1; fi
  NOW="$name"
  write_summary
  echo "==== $name: cmake --build --target $*" >> "$OUTDIR/build.log"
  timeout "$lim" cmake --build "$BUILD_DIR" -j "$(nproc)" --target "$@" >> "$OUTDIR/build.log" 2>&1
  r=$?
  if [ $r -ne 0 ]; then
    grep -E "error" "$OUTDIR/build.log" | head -20
    local why="exit $r"
    [ $r -eq 124 ] && why="timeout ${lim} s"
    rows+=("| $name | FAIL ($why; build.log) | - | - | $(( $(date +%s) - t0 )) |")
    rc=1
    NOW="$name failed"
    write_summary
    return 1
  fi
  rows+=("| $name | PASS | - | $(grep -c 'warning:' "$OUTDIR/build.log") warnings so far | $(( $(date +%s) - t0 )) |")
  write_summary
}

if [ $BENCH -eq 1 ]; then
  # ------------------------------------------------------------ --bench
  if ! grep -q "normlab_cuda_bench" "$BUILD_DIR/build.ninja"; then
    rows+=("| benchmark | NOT BUILT (Google Benchmark not found in gpu-deps/) | - | - | - |")
    rc=1
  elif build "build benchmark" 200 normlab_cuda_bench; then
    if [ $HAVE_GPU -eq 1 ]; then
      lim=$(stage_limit 240)
      if [ "$lim" -eq 0 ]; then out_of_time "benchmark"
      else
        NOW="benchmark"
        write_summary
        t0=$(date +%s)
        timeout "$lim" "$BUILD_DIR/bench/cuda/normlab_cuda_bench" --benchmark_counters_tabular=true \
          --benchmark_out="$OUTDIR/bench.json" --benchmark_out_format=json "$@" > "$OUTDIR/bench.log" 2>&1
        br=$?
        st=PASS
        [ $br -eq 0 ] || { rc=1; st="FAIL (exit $br; bench.log)"; tail -20 "$OUTDIR/bench.log"; }
        rows+=("| benchmark | $st | - | - | $(( $(date +%s) - t0 )) |")
      fi
    else
      rows+=("| benchmark | SKIP (no GPU) | - | - | - |")
    fi
  fi
  NOW="done"
  write_summary
  cat "$summary"
  exit $rc
fi

# ---------------------------------------------------------------- the CUDA tests
declare -A test_limit=([test_cuda_limits]=20 [test_cuda_kernels]=90 [test_cuda_model]=120 [test_cuda_nccl]=60)
tests=(test_cuda_limits test_cuda_kernels test_cuda_model)
if grep -q "normlab: NCCL /" "$OUTDIR/build.log"; then
  tests+=(test_cuda_nccl)
else
  echo "gpu-check: NCCL not found (set NCCL_ROOT): test_cuda_nccl not built, the trainers run as one process"
fi
if build "build tests" 240 "${tests[@]}"; then
  : > "$OUTDIR/tests.log"
  for t in "${tests[@]}"; do
    lim=$(stage_limit "${test_limit[$t]}")
    if [ "$lim" -eq 0 ]; then out_of_time "$t"; continue; fi
    NOW="running $t"
    write_summary
    t0=$(date +%s)
    timeout "$lim" "$BUILD_DIR/tests/cuda/$t" > "$WORKLOGS/$t.log" 2>&1
    r=$?
    { echo "==== $t (exit $r, limit $lim s)"; cat "$WORKLOGS/$t.log"; } >> "$OUTDIR/tests.log"
    worst=$(awk '($1 == "PASS" || $1 == "FAIL") {
              for (i = NF - 2; i > 1; --i) if ($i == "rel" && $(i + 2) == "tol") break
              if (i <= 1) next
              e = $(i + 1) + 0; tl = $(i + 3) + 0
              if (tl > 0 && (name == "" || e / tl > w)) { w = e / tl; we = e; wt = tl; name = $2; for (j = 3; j < i; ++j) name = name " " $j } }
            END { if (name != "") printf "%.3g (tol %.1g, %.0f%% of it) in %s", we, wt, 100 * w, name; else printf "-" }' "$WORKLOGS/$t.log")
    checks=$(grep -oE '[0-9]+ checks, [0-9]+ failures' "$WORKLOGS/$t.log" | tail -1)
    if [ $r -eq 0 ]; then status=PASS
    elif [ $r -eq 77 ]; then status=SKIP
    elif [ $r -eq 124 ]; then status="FAIL (timeout $lim s)"
    else status="FAIL (exit $r)"
    fi
    case $status in
      PASS) ;;
      SKIP) [ $HAVE_GPU -eq 0 ] || { rc=1; status="FAIL (skipped on a machine with a GPU)"; } ;;
      *) rc=1; grep -E "^FAIL" "$WORKLOGS/$t.log" | head -20 ;;
    esac
    rows+=("| $t | $status | ${checks:--} | $worst | $(( $(date +%s) - t0 )) |")
    write_summary
  done
fi

# ---------------------------------------------------------------- the trainers
mapfile -t VARIANTS < <(bash scripts/variants.sh)
trainers=()
for v in "${VARIANTS[@]}"; do trainers+=("train-$v-cuda"); done
if build "build trainers" 200 "${trainers[@]}"; then
  lim=$(stage_limit $(( 12 * ${#VARIANTS[@]} )))
  if [ "$lim" -eq 0 ]; then out_of_time "trainers"
  else
    NOW="running the trainers"
    write_summary
    # Every variant through the driver on the GPU: 20 steps on synthetic data,
    # exit 0, finite losses, the last below the first (scripts/train-smoke.sh).
    SMOKE_LIMIT=$(( lim / ${#VARIANTS[@]} )) bash scripts/train-smoke.sh "$BUILD_DIR" -cuda "$WORKLOGS/smoke" \
      "${VARIANTS[@]}" > "$OUTDIR/trainers.log" 2>&1
    while IFS='|' read -r v status verdict secs; do
      if [ "$status" = "SKIP" ] && [ $HAVE_GPU -eq 1 ]; then status="FAIL (skipped on a machine with a GPU)"; fi
      case $status in PASS|SKIP) ;; *) rc=1 ;; esac
      rows+=("| train-$v-cuda (20 steps) | $status | $verdict | - | $secs |")
    done < <(grep '^smoke|' "$OUTDIR/trainers.log" | cut -d'|' -f2-)
  fi
fi
NOW="done (the benchmark is the second call: --bench)"
write_summary
cat "$summary"
exit $rc
