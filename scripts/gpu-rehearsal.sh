#!/usr/bin/env bash
# Offline rehearsal of the GPU check on this (GPU-less) machine, as the lent GPU
# machine will see it: a fresh clone of HEAD with gpu-deps/ staged beside it
# (scripts/gpu-deps.sh), then scripts/gpu-check.sh inside new network and mount
# namespaces where
#   * there is no network (unshare -n),
#   * the system's copies of the staged packages (Eigen, nlohmann-json, Google
#     Benchmark, and CLI11 / Catch2, which the check must not need) are hidden
#     under empty tmpfs mounts, so only gpu-deps/ can satisfy the build,
#   * apt-get, apt and dpkg are replaced by a stub that records any call and fails.
# It passes when the check configures and compiles everything (tests and
# benchmark), the launch-limit test passes, the GPU tests report skipped, and
# nothing tried to install. Needs root (namespaces, mounts) and nvcc.
#   bash scripts/gpu-rehearsal.sh          (CTEST_JUNIT=FILE: JUnit report for .ci/run)
# CUDA_ARCH (e.g. "80;90") is passed to gpu-check.sh (default there: 90 without a GPU).
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/junit-write.sh
finish() { junit_write "${CTEST_JUNIT:-}"; exit "$1"; }
NVCC=${CUDACXX:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
if [ ! -x "$NVCC" ]; then
  echo "gpu-rehearsal: no nvcc: not run"
  junit_case "gpu-check rehearsal" notrun "no nvcc"
  finish 0
fi
if [ "$(id -u)" -ne 0 ] || ! unshare -n -m true 2>/dev/null; then
  echo "gpu-rehearsal: needs root for network and mount namespaces (unshare -n -m): not run"
  junit_case "gpu-check rehearsal" notrun "needs root for unshare -n -m"
  finish 0
fi

WORK=$PWD/build-rehearsal
rm -rf "$WORK"
mkdir -p "$WORK"
git clone -q "$PWD" "$WORK/clone" || { junit_case "gpu-check rehearsal: fresh clone" fail "git clone failed"; finish 1; }
echo "gpu-rehearsal: fresh clone of $(git -C "$WORK/clone" rev-parse --short HEAD) in $WORK/clone"
bash scripts/gpu-deps.sh "$WORK/clone/gpu-deps" || { junit_case "gpu-check rehearsal: gpu-deps.sh" fail "staging failed"; finish 1; }

MARKER=$WORK/install-attempts.txt
STUB=$WORK/no-install.sh
: > "$MARKER"
printf '#!/bin/sh\necho "$0 $*" >> %s\necho "rehearsal: no package installs here" >&2\nexit 100\n' "$MARKER" > "$STUB"
chmod +x "$STUB"
MULTIARCH=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
t0=$(date +%s)
unshare -n -m bash -s "$WORK" "$STUB" "$MULTIARCH" <<'EOF' > "$WORK/gpu-check.out" 2>&1
set -u
WORK=$1 STUB=$2 MULTIARCH=$3
for d in /usr/include/eigen3 /usr/share/eigen3 /usr/include/nlohmann /usr/share/cmake/nlohmann_json \
         /usr/include/benchmark /usr/lib/$MULTIARCH/cmake/benchmark /usr/include/CLI /usr/include/catch2 \
         /usr/lib/cmake/CLI11 /usr/share/cmake/CLI11 /usr/lib/cmake/Catch2; do
  [ -d "$d" ] && mount -t tmpfs none "$d"
done
for b in /usr/bin/apt-get /usr/bin/apt /usr/bin/dpkg; do
  [ -e "$b" ] && mount --bind "$STUB" "$b"
done
if curl -s -m 3 -o /dev/null https://deb.debian.org 2>/dev/null; then echo "rehearsal: network reachable!"; exit 9; fi
echo "rehearsal: no network; system copies hidden: $(ls /usr/include/eigen3 | wc -l) entries in /usr/include/eigen3"
cd "$WORK/clone" && OUT="$WORK/logs" bash scripts/gpu-check.sh
EOF
rc=$?
echo "gpu-rehearsal: gpu-check.sh exit $rc in $(( $(date +%s) - t0 )) s; output in $WORK/gpu-check.out"
tail -25 "$WORK/gpu-check.out"

case_of() { if eval "$2"; then junit_case "gpu-check rehearsal: $1" run; else junit_case "gpu-check rehearsal: $1" fail "$3"; echo "gpu-rehearsal: FAIL: $1"; bad=1; fi; }
bad=0
case_of "exits 0 offline (no GPU, staged dependencies only)" '[ $rc -eq 0 ]' "gpu-check.sh exit $rc"
case_of "no network inside" '! grep -q "network reachable" "$WORK/gpu-check.out"' "network reachable"
case_of "configures and builds the tests" '[ -x "$WORK/clone/build-gpu/tests/cuda/test_cuda_model" ] && [ -x "$WORK/clone/build-gpu/tests/cuda/test_cuda_kernels" ]' "test binaries missing"
case_of "builds every train-<variant>-cuda against the staged CLI11" '[ "$(ls "$WORK/clone/build-gpu"/train-*-cuda 2>/dev/null | wc -l)" -eq 10 ]' "$(ls "$WORK/clone/build-gpu"/train-*-cuda 2>/dev/null | wc -l) of 10 trainers"
case_of "the trainers refuse to run without a GPU, with a sentence" 'grep -cE "^\| train-[a-z_]+-cuda \(20 steps\) \| SKIP" "$WORK/logs/summary.md" | grep -qx 10' "see summary.md"
case_of "builds the benchmark against the staged Google Benchmark" '[ -x "$WORK/clone/build-gpu/bench/cuda/normlab_cuda_bench" ]' "benchmark binary missing"
case_of "used the staged Eigen" 'grep -q "gpu-deps/usr/share/eigen3/cmake" "$WORK/clone/build-gpu/CMakeCache.txt"' "Eigen3_DIR is not the staged one"
case_of "launch-limit test passes without a GPU" 'grep -qE "^\| test_cuda_limits \| PASS" "$WORK/logs/summary.md"' "see summary.md"
case_of "GPU tests report skipped" 'grep -qE "^\| test_cuda_kernels \| SKIP" "$WORK/logs/summary.md" && grep -qE "^\| test_cuda_model \| SKIP" "$WORK/logs/summary.md"' "see summary.md"
case_of "no attempt to install" '[ ! -s "$MARKER" ]' "$(head -3 "$MARKER" 2>/dev/null)"
# The CUDA tests themselves, as gpu-check ran them: the launch-limit test passes
# without a GPU, the GPU tests are skipped (counted as skipped, never as passed).
# test_cuda_nccl where the build found NCCL (gpu-check adds it then).
cuda_tests=(test_cuda_limits test_cuda_kernels test_cuda_model)
grep -qE "^\| test_cuda_nccl \|" "$WORK/logs/summary.md" 2>/dev/null && cuda_tests+=(test_cuda_nccl)
for t in "${cuda_tests[@]}"; do
  row=$(grep -E "^\| $t \|" "$WORK/logs/summary.md" 2>/dev/null | head -1)
  case $row in
    *"| PASS |"*) junit_case "cuda: $t" run ;;
    *"| SKIP |"*) junit_case "cuda: $t" notrun "no GPU on this machine" ;;
    *) junit_case "cuda: $t" fail "${row:-no result}"; bad=1 ;;
  esac
done
finish $bad
