#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, -fsanitize=fuzzer,address,undefined) and
# runs each for SECONDS (default 60) on a copy of its seed corpus in fuzz/corpus/.
# Prints the executions per target; exits non-zero on the first finding
# (the crashing input is left in build-fuzz/).
#   bash scripts/fuzz.sh [SECONDS] [TARGET...]
# CTEST_JUNIT=FILE writes a JUnit report there, one test per target (.ci/run counts it).
# FUZZ_SEED fixes libFuzzer's seed (CI uses 1, so its runs are repeatable); unset, it is random.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(safetensors checkpoint token_shard tokenizer cli)
bash scripts/bootstrap.sh
source scripts/junit-write.sh
CXX=${FUZZ_CXX:-clang++}
command -v "$CXX" >/dev/null || { echo "fuzz: $CXX not found (apt-get install clang libclang-rt-dev)"; exit 2; }
out=build-fuzz
mkdir -p "$out"
flags=(-std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -Iinclude -Iapp/include -I/usr/include/eigen3)
for t in "${targets[@]}"; do
  src=fuzz/fuzz_${t}.cpp
  [ -f "$src" ] || { echo "fuzz: no target $t"; exit 2; }
  if [ ! -x "$out/fuzz_$t" ] || [ "$src" -nt "$out/fuzz_$t" ] || [ -n "$(find include app/include -newer "$out/fuzz_$t" -name '*.hpp' | head -1)" ]; then
    echo "fuzz: building $t"
    "$CXX" "${flags[@]}" "$src" -o "$out/fuzz_$t"
  fi
done
for t in "${targets[@]}"; do
  work="$out/corpus_$t"
  mkdir -p "$work"
  log="$out/fuzz_$t.log"
  seed=()
  [ -n "${FUZZ_SEED:-}" ] && seed=(-seed="$FUZZ_SEED")
  (cd "$out" && ASAN_OPTIONS=detect_leaks=1 ./"fuzz_$t" "${seed[@]}" -max_total_time="$SECONDS_PER_TARGET" -timeout=10 \
      -rss_limit_mb=4096 -close_fd_mask=3 -print_final_stats=1 "corpus_$t" "../fuzz/corpus/$t" >"fuzz_$t.log" 2>&1) || {
    echo "fuzz: $t FOUND A FAILURE; see $log"; tail -40 "$log"
    junit_case "fuzz: $t" fail "finding, see $log"; junit_write "${CTEST_JUNIT:-}"; exit 1; }
  execs=$(grep -m1 'stat::number_of_executed_units' "$log" | awk '{print $2}')
  echo "fuzz: $t ran $SECONDS_PER_TARGET s, $execs executions, no finding"
  junit_case "fuzz: $t ($SECONDS_PER_TARGET s, $execs executions)" run
done
junit_write "${CTEST_JUNIT:-}"
