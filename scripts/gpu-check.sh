#!/usr/bin/env bash
# The GPU check of the CUDA backend, in one call, for a machine with an NVIDIA
# GPU and no package registry (sized for one H200 with 16 cores: within 8 min):
#   1. configures against the dependencies staged by scripts/gpu-deps.sh
#      (gpu-deps/, carried by the device tool; never installs anything), for this
#      GPU's architecture only, and builds the CUDA tests (required) and the
#      benchmark (optional: without Google Benchmark the tests still run);
#   2. runs the CUDA tests: launch limits, every kernel against the float64 CPU
#      path, the one model on the CUDA backend (every variant) against the golden
#      files and the float64 CPU model, decoding, bit-identical reruns; then
#      trains every variant's train-<variant>-cuda for 20 steps through the
#      driver, and moves a checkpoint from a GPU run to a CPU run (resume);
#   3. runs the benchmark (MFU, ngpt/gpt step ratio, row kernels vs copy bandwidth);
#   4. prints one summary table (also $LOGS/summary.md).
# Logs go to $OUT (the device tool's output folder) when set, else build-gpu/logs.
# Without a GPU (the offline rehearsal, scripts/gpu-rehearsal.sh) it builds for
# CUDA_ARCH (default 90), expects the GPU tests to report skipped, and says so.
#   bash scripts/gpu-check.sh [--no-bench] [extra benchmark flags, e.g. --batch=4]
# Exit: 0 when every test passed (or, without a GPU, skipped as expected).
set -uo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
stamp() { echo "gpu-check: $1 at $(( $(date +%s) - start )) s"; }
BENCH=1
if [ "${1:-}" = "--no-bench" ]; then BENCH=0; shift; fi
BUILD_DIR=${BUILD_DIR:-build-gpu}
LOGS=${OUT:-$BUILD_DIR/logs}
DEPS=${NORMLAB_GPU_DEPS:-$PWD/gpu-deps}
mkdir -p "$LOGS"
summary="$LOGS/summary.md"
: > "$summary"
NVCC=${CUDACXX:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
[ -x "$NVCC" ] || { echo "gpu-check: no nvcc found (set CUDACXX)"; exit 1; }

# The GPU, if any, and its architecture (compute capability 9.0 -> 90).
HAVE_GPU=0
if nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader > "$LOGS/gpu.txt" 2>&1 \
   && [ -s "$LOGS/gpu.txt" ]; then
  HAVE_GPU=1
  cat "$LOGS/gpu.txt"
  ARCH=${CUDA_ARCH:-$(head -1 "$LOGS/gpu.txt" | awk -F', ' '{print $4}' | tr -d '.')}
else
  ARCH=${CUDA_ARCH:-90}
  echo "gpu-check: no GPU visible (nvidia-smi: $(head -c 200 "$LOGS/gpu.txt")): building for sm_$ARCH, GPU tests must report skipped"
fi
"$NVCC" --version | tail -2 > "$LOGS/nvcc.txt"

prefix=()
if [ -d "$DEPS/usr" ]; then
  prefix=(-DCMAKE_PREFIX_PATH="$DEPS/usr")
  echo "gpu-check: dependencies from $DEPS ($(head -1 "$DEPS/STAGED" 2>/dev/null))"
else
  echo "gpu-check: no staged dependencies at $DEPS (run scripts/gpu-deps.sh on the CPU machine and carry it); trying the system's"
fi
# NCCL for test_cuda_nccl and data-parallel trainers: NCCL_ROOT if set, else the
# nvidia-nccl wheel of the machine's Python (headers and libnccl.so.2), else the
# CUDA toolkit's own; without NCCL that test is not built and says so.
if [ -z "${NCCL_ROOT:-}" ]; then
  NCCL_ROOT=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null || true)
fi
nccl=()
[ -n "${NCCL_ROOT:-}" ] && nccl=(-DNCCL_ROOT="$NCCL_ROOT") && echo "gpu-check: NCCL from $NCCL_ROOT"
if ! cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DNORMLAB_CUDA=ON -DCMAKE_CUDA_COMPILER="$NVCC" \
     -DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DNORMLAB_BUILD_TESTS=OFF -DNORMLAB_BUILD_TOOLS=OFF \
     -DNORMLAB_BUILD_EXAMPLES=OFF "${prefix[@]}" "${nccl[@]}" > "$LOGS/configure.log" 2>&1; then
  tail -40 "$LOGS/configure.log"
  echo "gpu-check: FAIL (configure; $LOGS/configure.log)"
  exit 1
fi
tests=(test_cuda_limits test_cuda_kernels test_cuda_model)
if grep -q "normlab: NCCL /" "$LOGS/configure.log"; then
  tests+=(test_cuda_nccl)
else
  echo "gpu-check: NCCL not found (set NCCL_ROOT): test_cuda_nccl not built, the trainers run as one process"
fi
VARIANTS=(gpt gpt_qknorm gpt_alpha ngpt ngpt_slerp ngpt_noqknorm ngpt_scalar ngpt_fixedscales angpt angpt_attnfactor)
trainers=()
for v in "${VARIANTS[@]}"; do trainers+=("train-$v-cuda"); done
if ! cmake --build "$BUILD_DIR" -j "$(nproc)" --target "${tests[@]}" "${trainers[@]}" > "$LOGS/build.log" 2>&1; then
  grep -m20 -E "error|Error" "$LOGS/build.log"
  tail -30 "$LOGS/build.log"
  echo "gpu-check: FAIL (build; $LOGS/build.log)"
  exit 1
fi
stamp "build of the tests"
bench_built=0
if [ $BENCH -eq 1 ]; then
  if grep -q "normlab_cuda_bench" "$BUILD_DIR/build.ninja"; then
    if cmake --build "$BUILD_DIR" -j "$(nproc)" --target normlab_cuda_bench > "$LOGS/build-bench.log" 2>&1; then
      bench_built=1
      stamp "build of the benchmark"
    else
      echo "gpu-check: benchmark did not build (optional; $LOGS/build-bench.log)"
    fi
  else
    echo "gpu-check: Google Benchmark not found: benchmark not built (optional)"
  fi
fi

# Runs each test; a test prints "ok|FAIL <check> rel <err> tol <tol>" lines and ends
# with "<test>: N checks, M failures: PASS|FAIL", or "SKIP: ..." (exit 77).
rc=0
rows=()
for t in "${tests[@]}"; do
  timeout 300 "$BUILD_DIR/tests/cuda/$t" > "$LOGS/$t.log" 2>&1
  r=$?
  worst=$(awk '($1 == "ok" || $1 == "FAIL") {
            for (i = NF - 2; i > 1; --i) if ($i == "rel" && $(i + 2) == "tol") break
            if (i <= 1) next
            e = $(i + 1) + 0; tl = $(i + 3) + 0
            if (tl > 0 && (name == "" || e / tl > w)) { w = e / tl; we = e; wt = tl; name = $2; for (j = 3; j < i; ++j) name = name " " $j } }
          END { if (name != "") printf "%.3g (tol %.1g, %.0f%% of it) in %s", we, wt, 100 * w, name; else printf "-" }' "$LOGS/$t.log")
  checks=$(grep -oE '[0-9]+ checks, [0-9]+ failures' "$LOGS/$t.log" | tail -1)
  if [ $r -eq 0 ]; then status=PASS
  elif [ $r -eq 77 ]; then status=SKIP
  elif [ $r -eq 124 ]; then status="FAIL (timeout 300 s)"
  else status="FAIL (exit $r)"
  fi
  case $status in
    PASS) ;;
    SKIP) [ $HAVE_GPU -eq 0 ] || { rc=1; status="FAIL (skipped on a machine with a GPU)"; } ;;
    *) rc=1; grep -E "^FAIL" "$LOGS/$t.log" | head -20 ;;
  esac
  rows+=("| $t | $status | ${checks:--} | $worst |")
done
stamp "tests"

# Every variant through the driver on the GPU: 20 steps on synthetic data,
# exit 0, finite losses, the last below the first (docs/cuda.md).
TRAIN_FLAGS=(--data synthetic --steps 20 --batch 4 --seq 64 --d 64 --layers 2 --heads 4 --eval-every 10
             --eval-batches 2 --quiet --overwrite)
for v in "${VARIANTS[@]}"; do
  out="$LOGS/runs/$v"
  timeout 120 "$BUILD_DIR/train-$v-cuda" "${TRAIN_FLAGS[@]}" --out "$out" > "$LOGS/train-$v-cuda.log" 2>&1
  r=$?
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
    if [ $HAVE_GPU -eq 0 ] && grep -q "no CUDA device" "$LOGS/train-$v-cuda.log"; then status=SKIP; verdict="-"
    else status="FAIL (exit $r)"; rc=1; tail -3 "$LOGS/train-$v-cuda.log"; fi
  elif [[ $verdict == PASS* ]]; then status=PASS
  else status=FAIL; rc=1
  fi
  rows+=("| train-$v-cuda (20 steps) | $status | ${verdict#* } | - |")
done
stamp "trainers"

if [ $bench_built -eq 1 ] && [ $HAVE_GPU -eq 1 ]; then
  timeout 300 "$BUILD_DIR/bench/cuda/normlab_cuda_bench" --benchmark_counters_tabular=true \
    --benchmark_out="$LOGS/bench.json" --benchmark_out_format=json "$@" > "$LOGS/bench.log" 2>&1
  br=$?
  [ $br -eq 0 ] || { rc=1; echo "gpu-check: benchmark exit $br"; tail -20 "$LOGS/bench.log"; }
  stamp "benchmarks"
fi

{
  echo "## normlab GPU check, $(date -u +%Y-%m-%dT%H:%MZ)"
  echo
  echo "GPU: $( [ $HAVE_GPU -eq 1 ] && head -1 "$LOGS/gpu.txt" || echo "none (rehearsal)"); nvcc: $(tail -1 "$LOGS/nvcc.txt"); sm_$ARCH; $(( $(date +%s) - start )) s"
  echo
  echo "| test | result | checks | worst error (share of its tolerance) |"
  echo "|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
  echo
  if [ -s "$LOGS/bench.log" ]; then
    # The benchmark's own summary: copy and GEMM ceilings, MFU, step ratios, kernels as % of copy.
    sed -n '/==== normlab CUDA summary/,$p' "$LOGS/bench.log"
  elif [ $BENCH -eq 0 ]; then
    echo "benchmark: not run (--no-bench)"
  elif [ $bench_built -eq 0 ]; then
    echo "benchmark: not built (optional; see build-bench.log / configure.log)"
  else
    echo "benchmark: not run (no GPU)"
  fi
  echo
  echo "gpu-check: $([ $rc -eq 0 ] && echo PASS || echo FAIL)$([ $HAVE_GPU -eq 0 ] && echo ' (no GPU: GPU tests skipped as expected)') (logs in $LOGS)"
} > "$summary"
cat "$summary"
exit $rc
