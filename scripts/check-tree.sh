#!/usr/bin/env bash
# The tree's limits, so the code stays readable as it grows:
#   * README.md ≤ 120 lines, docs/perf.md ≤ 300 (a lab notebook belongs in git);
#   * no header (include/, app/include/) over 600 lines;
#   * no function of the training driver (app/include/normlab/app/: the driver,
#     the training run, its command line) over 80 lines;
#   * the library (include/) includes no CLI11: the command line is the app's;
#   * studies/ holds summaries: no per-step metrics or checkpoints tracked, and
#     fewer than a quarter of the tracked files.
#   bash scripts/check-tree.sh        exit 1 with a line per breach
set -uo pipefail
cd "$(dirname "$0")/.."
bad=0
fail() { echo "check-tree: $*"; bad=1; }
limit() {  # file max
  local n
  n=$(wc -l <"$1")
  [ "$n" -le "$2" ] || fail "$1 has $n lines (limit $2)"
}
limit README.md 120
limit docs/perf.md 300
headers=$(git ls-files 'include/*.hpp' 'include/*.cuh' 'app/include/*.hpp')
for h in $headers; do limit "$h" 600; done
# Functions of the driver: a body opened by a line ending in '{' after a signature
# (a ')' before it, not a control statement or a lambda), closed at the brace
# that returns to the depth it opened at.
driver=$(git ls-files 'app/include/normlab/app/driver*.hpp' 'app/include/normlab/app/training_run.hpp' \
  'app/include/normlab/app/train_command.hpp' 'app/include/normlab/app/run_support.hpp' \
  'app/include/normlab/app/data_parallel.hpp' 'app/include/normlab/app/rank_agreement.hpp')
long=$(awk -v max=80 '
  FNR == 1 { depth = 0; nopen = 0; sig = "" }
  {
    line = $0
    sub(/\/\/.*/, "", line)
    gsub(/"([^"\\]|\\.)*"/, "\"\"", line)
    gsub(/'"'"'([^'"'"'\\]|\\.)*'"'"'/, "x", line)
    sig = sig " " line
    if (line ~ /\{[ \t]*$/ && sig ~ /\)[^;{}]*\{[ \t]*$/ && line !~ /^[ \t]*(if|for|while|switch|else|do|try|catch)\b/ \
        && line !~ /(\[[^]]*\]\([^)]*\)|\[[&=]\])[^;]*\{[ \t]*$/ && line !~ /^[ \t]*\} *(else|catch)/) {
      nopen++; start[nopen] = FNR; at[nopen] = depth; name[nopen] = line
    }
    opens = gsub(/\{/, "{", line); closes = gsub(/\}/, "}", line)
    depth += opens - closes
    while (nopen > 0 && depth <= at[nopen]) {
      n = FNR - start[nopen] + 1
      if (n > max) { s = name[nopen]; gsub(/^[ \t]+/, "", s); printf "%s:%d: %d lines: %s\n", FILENAME, start[nopen], n, s }
      nopen--
    }
    if (line ~ /[;{}][ \t]*$/) sig = ""
  }' $driver)
[ -z "$long" ] || fail "driver functions over 80 lines:"$'\n'"$long"
cli=$(grep -rln '#include <CLI/' include) && fail "the library includes CLI11 (app/ only): $cli"
tracked=$(git ls-files | wc -l)
in_studies=$(git ls-files studies | wc -l)
records=$(git ls-files studies | grep -E '(metrics\.jsonl|\.safetensors)$')
[ -z "$records" ] || fail "studies/ tracks run records (archive them: fair-study.sh archive): $(wc -l <<<"$records") files"
[ $((in_studies * 4)) -lt "$tracked" ] || fail "studies/ holds $in_studies of the $tracked tracked files (limit: under a quarter)"
[ $bad -eq 0 ] && echo "check-tree: README $(wc -l <README.md) lines, perf.md $(wc -l <docs/perf.md), $(wc -w <<<"$headers") headers ≤ 600 lines, driver functions ≤ 80 lines, no CLI11 in include/, studies/ $in_studies of $tracked files"
exit $bad
