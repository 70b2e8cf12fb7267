#!/usr/bin/env bash
# Offline rehearsal of the GPU check on this (GPU-less) machine, as the lent GPU
# machine will see it: a fresh clone of HEAD with gpu-deps/ staged beside it
# (scripts/gpu-deps.sh), then scripts/gpu-check.sh inside new network and mount
# namespaces where
#   * there is no network (unshare -n),
#   * the system's copies of the staged packages (Eigen, nlohmann-json, Google
#     Benchmark, and CLI11 / Catch2, which the check must not need) are hidden
#     under empty tmpfs mounts, so only gpu-deps/ can satisfy the build,
#   * MPI is hidden too (the GPU machine has none): the trainers are
#     NcclComm<SingleProcess>, exactly what the GPU machine compiles,
#   * NCCL comes from a copy staged the way the GPU machine's nvidia-nccl wheel
#     is laid out (nvidia/nccl/{include,lib} on PYTHONPATH), found as gpu-check
#     finds the wheel,
#   * apt-get, apt and dpkg are replaced by a stub that records any call and fails.
# Before that, the trainers' flags run on the CPU (scripts/train-smoke.sh on the
# CPU trainers of BUILD_DIR, default build/: 20 steps each, exit 0, finite,
# falling), so that a failure of the same run on the GPU means the GPU path.
# The check then runs three times: the first call (tests and trainers); the same
# call killed (SIGKILL) as soon as its summary shows the tests' build finished,
# whose summary.md must still hold every stage that finished; then --bench.
# Last, the CUDA build compiled once with clang as the host compiler
# (-DCMAKE_CUDA_HOST_COMPILER=clang++, Debian's clang, warnings listed).
# It passes when the check configures and compiles everything (tests, trainers,
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
bad=0

# The trainers' flags on the CPU first (the CPU trainers of this tree's build).
CPU_BIN=${BUILD_DIR:-$PWD/build}
mapfile -t VARIANTS < <(bash scripts/variants.sh)
missing=0
for v in "${VARIANTS[@]}"; do [ -x "$CPU_BIN/train-$v" ] || missing=1; done
if [ $missing -eq 1 ]; then
  echo "gpu-rehearsal: building the CPU trainers in $CPU_BIN for the CPU smoke run"
  cmake --build "$CPU_BIN" --target $(printf 'train-%s ' "${VARIANTS[@]}") > "$WORK/cpu-build.log" 2>&1 || true
fi
bash scripts/train-smoke.sh "$CPU_BIN" "" "$WORK/cpu-smoke" "${VARIANTS[@]}" > "$WORK/cpu-smoke.log" 2>&1
cat "$WORK/cpu-smoke.log"
for v in "${VARIANTS[@]}"; do
  line=$(grep "^smoke|$v|" "$WORK/cpu-smoke.log")
  if [[ $line == "smoke|$v|PASS|"* ]]; then junit_case "gpu-check rehearsal: CPU smoke train-$v (the GPU check's flags)" run
  else junit_case "gpu-check rehearsal: CPU smoke train-$v (the GPU check's flags)" fail "${line:-no result}"; bad=1; fi
done

# NCCL as the GPU machine's wheel lays it out (python3 -c 'import nvidia.nccl').
NCCL_SRC_INC=$(dirname "$(readlink -f /usr/local/cuda/include/nccl.h 2>/dev/null || echo /nonexistent/x)")
WHEEL=$WORK/nccl-wheel
if [ -f "$NCCL_SRC_INC/nccl.h" ] && [ -f /usr/local/cuda/lib64/libnccl.so.2 ]; then
  mkdir -p "$WHEEL/nvidia/nccl/include" "$WHEEL/nvidia/nccl/lib"
  cp "$NCCL_SRC_INC/nccl.h" "$WHEEL/nvidia/nccl/include/"
  cp -L /usr/local/cuda/lib64/libnccl.so.2 "$WHEEL/nvidia/nccl/lib/"
  : > "$WHEEL/nvidia/nccl/__init__.py"
  echo "gpu-rehearsal: NCCL staged as a wheel in $WHEEL"
else
  echo "gpu-rehearsal: no NCCL in the CUDA toolkit to stage: test_cuda_nccl is not built (as on a GPU machine without it)"
fi

MARKER=$WORK/install-attempts.txt
STUB=$WORK/no-install.sh
: > "$MARKER"
printf '#!/bin/sh\necho "$0 $*" >> %s\necho "rehearsal: no package installs here" >&2\nexit 100\n' "$MARKER" > "$STUB"
chmod +x "$STUB"
MULTIARCH=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
t0=$(date +%s)
unshare -n -m bash -s "$WORK" "$STUB" "$MULTIARCH" "$WHEEL" <<'EOF' > "$WORK/gpu-check.out" 2>&1
set -u
WORK=$1 STUB=$2 MULTIARCH=$3 WHEEL=$4
for d in /usr/include/eigen3 /usr/share/eigen3 /usr/include/nlohmann /usr/share/cmake/nlohmann_json \
         /usr/include/benchmark /usr/lib/$MULTIARCH/cmake/benchmark /usr/include/CLI /usr/include/catch2 \
         /usr/lib/cmake/CLI11 /usr/share/cmake/CLI11 /usr/lib/cmake/Catch2 \
         /usr/lib/$MULTIARCH/openmpi /usr/include/$MULTIARCH/openmpi /usr/share/openmpi; do
  [ -d "$d" ] && mount -t tmpfs none "$d"
done
for b in /usr/bin/apt-get /usr/bin/apt /usr/bin/dpkg /usr/bin/mpicxx /usr/bin/mpic++ /usr/bin/mpicc /usr/bin/mpiexec \
         /usr/bin/mpirun; do
  [ -e "$b" ] && mount --bind "$STUB" "$b"
done
if curl -s -m 3 -o /dev/null https://deb.debian.org 2>/dev/null; then echo "rehearsal: network reachable!"; exit 9; fi
echo "rehearsal: no network; system copies hidden: $(ls /usr/include/eigen3 | wc -l) entries in /usr/include/eigen3, $(ls /usr/lib/$MULTIARCH/openmpi 2>/dev/null | wc -l) in openmpi"
[ -d "$WHEEL/nvidia" ] && export PYTHONPATH=$WHEEL
# 2 cores here, 16 there: the build limits 8 times longer, the budget to match.
export GPU_CHECK_BUILD_SCALE=8 GPU_CHECK_BUDGET=4000
cd "$WORK/clone" || exit 8
OUT="$WORK/logs" bash scripts/gpu-check.sh
first=$?
# The same call in a fresh build folder, killed (SIGKILL, the whole process
# group) while it builds the tests: what it wrote before must remain.
# (ccache off, so the tests' build takes minutes and the kill lands inside it)
CCACHE_DISABLE=1 BUILD_DIR=build-gpu-killed OUT="$WORK/killed" setsid bash scripts/gpu-check.sh > "$WORK/killed.out" 2>&1 &
pid=$!
for _ in $(seq 1500); do
  grep -q "^| configure | PASS" "$WORK/killed/summary.md" 2>/dev/null && break
  sleep 0.2
done
sleep 3
kill -9 -- "-$pid" 2>/dev/null
wait "$pid" 2>/dev/null
rm -rf build-gpu-killed
OUT="$WORK/bench" bash scripts/gpu-check.sh --bench > "$WORK/bench.out" 2>&1
echo "rehearsal: --bench exit $?"
exit $first
EOF
rc=$?
echo "gpu-rehearsal: gpu-check.sh exit $rc in $(( $(date +%s) - t0 )) s; output in $WORK/gpu-check.out"
tail -25 "$WORK/gpu-check.out"

case_of() { if eval "$2"; then junit_case "gpu-check rehearsal: $1" run; else junit_case "gpu-check rehearsal: $1" fail "$3"; echo "gpu-rehearsal: FAIL: $1"; bad=1; fi; }
case_of "exits 0 offline (no GPU, staged dependencies only)" '[ $rc -eq 0 ]' "gpu-check.sh exit $rc"
case_of "no network inside" '! grep -q "network reachable" "$WORK/gpu-check.out"' "network reachable"
case_of "configures and builds the tests" '[ -x "$WORK/clone/build-gpu/tests/cuda/test_cuda_model" ] && [ -x "$WORK/clone/build-gpu/tests/cuda/test_cuda_kernels" ]' "test binaries missing"
case_of "builds every train-<variant>-cuda against the staged CLI11" '[ "$(ls "$WORK/clone/build-gpu"/train-*-cuda 2>/dev/null | wc -l)" -eq 10 ]' "$(ls "$WORK/clone/build-gpu"/train-*-cuda 2>/dev/null | wc -l) of 10 trainers"
case_of "the trainers refuse to run without a GPU, with a sentence" 'grep -cE "^\| train-[a-z_]+-cuda \(20 steps\) \| SKIP" "$WORK/logs/summary.md" | grep -qx 10' "see summary.md"
case_of "builds the benchmark against the staged Google Benchmark (--bench, the second call)" '[ -x "$WORK/clone/build-gpu/bench/cuda/normlab_cuda_bench" ] && grep -qE "^\| build benchmark \| PASS" "$WORK/bench/summary.md"' "benchmark binary missing; see $WORK/bench/summary.md"
case_of "the first call builds no benchmark" '! grep -q "Linking CXX executable bench/cuda/normlab_cuda_bench" "$WORK/logs/build.log"' "the first call linked the benchmark"
case_of "compiles without MPI (NcclComm<SingleProcess> trainers), as the GPU machine" 'grep -q "NORMLAB_MPI:STRING=OFF" "$WORK/clone/build-gpu/CMakeCache.txt" && ! grep -q "NORMLAB_HAVE_MPI" "$WORK/clone/build-gpu/build.ninja"' "MPI reached the GPU build"
case_of "warnings are not errors on the GPU machine (NORMLAB_WERROR=OFF)" 'grep -q "NORMLAB_WERROR:BOOL=OFF" "$WORK/clone/build-gpu/CMakeCache.txt"' "NORMLAB_WERROR is not OFF"
if [ -d "$WHEEL/nvidia" ]; then
  case_of "finds NCCL from the staged wheel, as on the GPU machine" 'grep -q "normlab: NCCL $WHEEL/nvidia/nccl/lib" "$WORK/logs/build.log"' "$(grep -m1 "normlab: NCCL" "$WORK/logs/build.log")"
fi
case_of "at most 8 files come back from OUT (the device tool's limit)" '[ "$(find "$WORK/logs" -type f | wc -l)" -le 8 ]' "$(find "$WORK/logs" -type f | wc -l) files"
case_of "a check killed mid-way leaves a summary of every stage it finished" 'grep -qE "^\| configure \| PASS" "$WORK/killed/summary.md" && grep -q "^state: build tests" "$WORK/killed/summary.md"' "$(head -20 "$WORK/killed/summary.md" 2>/dev/null)"
case_of "used the staged Eigen" 'grep -q "gpu-deps/usr/share/eigen3/cmake" "$WORK/clone/build-gpu/CMakeCache.txt"' "Eigen3_DIR is not the staged one"
case_of "launch-limit test passes without a GPU" 'grep -qE "^\| test_cuda_limits \| PASS" "$WORK/logs/summary.md"' "see summary.md"
case_of "GPU tests report skipped" 'grep -qE "^\| test_cuda_kernels \| SKIP" "$WORK/logs/summary.md" && grep -qE "^\| test_cuda_model \| SKIP" "$WORK/logs/summary.md"' "see summary.md"
case_of "no attempt to install" '[ ! -s "$MARKER" ]' "$(head -3 "$MARKER" 2>/dev/null)"
# The CUDA build once more with clang as the host compiler (nvcc's -ccbin and the
# C++ compiler of the tests and a trainer): what another compiler says. Warnings
# are listed (not errors: GCC 12 is the compiler warnings are errors for).
if command -v clang++ > /dev/null; then
  t0=$(date +%s)
  CL=$WORK/build-clang
  if cmake -S "$WORK/clone" -B "$CL" -G Ninja -DCMAKE_BUILD_TYPE=Release -DNORMLAB_CUDA=ON -DCMAKE_CUDA_COMPILER="$NVCC" \
       -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_CUDA_HOST_COMPILER=clang++ -DCMAKE_CXX_COMPILER=clang++ \
       -DNORMLAB_BUILD_TESTS=OFF -DNORMLAB_BUILD_TOOLS=OFF -DNORMLAB_BUILD_EXAMPLES=OFF -DNORMLAB_MPI=OFF \
       -DNORMLAB_WERROR=OFF -DCMAKE_PREFIX_PATH="$WORK/clone/gpu-deps/usr" > "$WORK/clang.log" 2>&1 \
     && cmake --build "$CL" -j 2 --target normlab_cuda_kernels test_cuda_model train-ngpt-cuda >> "$WORK/clang.log" 2>&1; then
    warns=$(grep -c "warning:" "$WORK/clang.log")
    echo "gpu-rehearsal: clang host build: kernels, test_cuda_model, train-ngpt-cuda in $(( $(date +%s) - t0 )) s, $warns warnings"
    grep "warning:" "$WORK/clang.log" | sort | uniq -c | sort -rn | head -10
    junit_case "gpu-check rehearsal: the CUDA build compiles with clang as the host compiler" run
  else
    grep -m20 "error" "$WORK/clang.log"
    junit_case "gpu-check rehearsal: the CUDA build compiles with clang as the host compiler" fail "see $WORK/clang.log"
    bad=1
  fi
fi

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
