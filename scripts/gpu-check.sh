#!/usr/bin/env bash
# The GPU check of the CUDA backend, in one script, for a machine with an
# NVIDIA GPU (sized for one H200 with 16 cores: about 4-6 minutes):
#   1. builds (Release, NORMLAB_CUDA=ON, only the CUDA targets, for this GPU's
#      architecture) in build-gpu;
#   2. runs the GPU tests (every kernel against the float64 CPU path, golden
#      files in float32, bit-identical reruns);
#   3. runs the GPU benchmarks and prints the summary table (MFU of gpt,
#      ngpt/gpt step ratio, fused row kernels as % of copy bandwidth).
# Logs go to $OUT (the device tool's output folder) when set, else build-gpu/.
#   bash scripts/gpu-check.sh [--no-bench] [extra benchmark flags, e.g. --batch=4]
set -uo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
stamp() { echo "gpu-check: $1 at $(( $(date +%s) - start )) s"; }
BENCH=1
if [ "${1:-}" = "--no-bench" ]; then BENCH=0; shift; fi
BUILD_DIR=${BUILD_DIR:-build-gpu}
LOGS=${OUT:-$BUILD_DIR}
mkdir -p "$LOGS"
NVCC=${CUDACXX:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
[ -x "$NVCC" ] || { echo "gpu-check: no nvcc found (set CUDACXX)"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | tee "$LOGS/gpu.txt"
bash scripts/bootstrap.sh || echo "gpu-check: bootstrap could not install packages (offline?); trying the build anyway"

# Only this machine's architecture: a third of the compile time of sm_80;sm_90.
ARCH=${CUDA_ARCH:-native}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DNORMLAB_CUDA=ON -DCMAKE_CUDA_COMPILER="$NVCC" \
  -DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DNORMLAB_BUILD_TESTS=OFF -DNORMLAB_BUILD_TOOLS=OFF \
  -DNORMLAB_BUILD_EXAMPLES=OFF > "$LOGS/configure.log" 2>&1 || { cat "$LOGS/configure.log"; exit 1; }
if ! cmake --build "$BUILD_DIR" -j "$(nproc)" --target test_cuda_kernels test_cuda_model normlab_cuda_bench \
     > "$LOGS/build.log" 2>&1; then
  tail -60 "$LOGS/build.log"
  exit 1
fi
stamp "build"

rc=0
for t in test_cuda_kernels test_cuda_model; do
  timeout 300 "$BUILD_DIR/tests/cuda/$t" > "$LOGS/$t.log" 2>&1
  r=$?
  grep -E "^FAIL|SKIP" "$LOGS/$t.log" | head -40
  tail -1 "$LOGS/$t.log"
  [ $r -eq 0 ] || rc=1
done
stamp "tests"

if [ $BENCH -eq 1 ]; then
  timeout 420 "$BUILD_DIR/bench/cuda/normlab_cuda_bench" --benchmark_counters_tabular=true \
    --benchmark_out="$LOGS/bench.json" --benchmark_out_format=json "$@" 2>&1 | tee "$LOGS/bench.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
  stamp "benchmarks"
fi
echo "gpu-check: $([ $rc -eq 0 ] && echo PASS || echo FAIL) (logs in $LOGS)"
exit $rc
