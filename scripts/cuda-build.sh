#!/usr/bin/env bash
# CI stage for the CUDA backend: builds the CUDA tests and benchmark with nvcc
# (sm_80 and sm_90) in a separate build directory and runs the CUDA tests,
# which report "skipped" (exit 77) on a machine without a GPU.
#   bash scripts/cuda-build.sh          (BUILD_DIR=build-cuda, JOBS=2)
# CTEST_JUNIT=FILE also writes CTest's JUnit report there (.ci/run counts it).
# Without nvcc (CUDACXX, PATH or /usr/local/cuda/bin) it says so and exits 0.
set -euo pipefail
cd "$(dirname "$0")/.."
NVCC=${CUDACXX:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
if [ ! -x "$NVCC" ]; then
  echo "cuda-build: no nvcc (set CUDACXX or install the CUDA toolkit): CUDA build skipped"
  source scripts/junit-write.sh
  junit_case "cuda: build and tests" notrun "no nvcc"
  junit_write "${CTEST_JUNIT:-}"
  exit 0
fi
BUILD_DIR=${BUILD_DIR:-build-cuda}
JOBS=${JOBS:-2}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DNORMLAB_CUDA=ON \
  -DCMAKE_CUDA_COMPILER="$NVCC" -DNORMLAB_BUILD_TESTS=OFF -DNORMLAB_BUILD_TOOLS=OFF \
  -DNORMLAB_BUILD_EXAMPLES=OFF -DNORMLAB_PREBUILT_MODELS=OFF ${NORMLAB_CMAKE_ARGS:-} >/dev/null
# With tests, tools and examples off, "all" is the CUDA tests and the benchmark.
cmake --build "$BUILD_DIR" -j "$JOBS"
junit=()
[ -z "${CTEST_JUNIT:-}" ] || junit=(--output-junit "$CTEST_JUNIT")
ctest --test-dir "$BUILD_DIR" -L cuda --output-on-failure -j 1 "${junit[@]}"
