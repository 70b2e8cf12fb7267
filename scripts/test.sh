#!/usr/bin/env bash
# The test command: installs what is missing, builds everything, runs every test.
#   bash scripts/test.sh            (BUILD_DIR=build by default)
# CTEST_JUNIT=FILE also writes CTest's JUnit report there (.ci/run counts it);
# NORMLAB_CTEST_ARGS adds ctest arguments (e.g. -LE example).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
BUILD_DIR=${BUILD_DIR:-build}
# MPI is required here (bootstrap installs it) so the data-parallel tests always run.
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DNORMLAB_BUILD_BENCH=ON -DNORMLAB_MPI=ON -DNORMLAB_BLAS=ON ${NORMLAB_CMAKE_ARGS:-} >/dev/null
cmake --build "$BUILD_DIR" -j 2
# Tests run one at a time: each already uses both cores through OpenMP, and
# two OpenMP programs sharing two cores slow each other down many times over.
junit=()
[ -z "${CTEST_JUNIT:-}" ] || junit=(--output-junit "$CTEST_JUNIT")
# shellcheck disable=SC2086  # NORMLAB_CTEST_ARGS is a list of words
ctest --test-dir "$BUILD_DIR" --output-on-failure -j 1 "${junit[@]}" ${NORMLAB_CTEST_ARGS:-}
