#!/usr/bin/env bash
# Prints "PASSED FAILED SKIPPED" for the test cases of a JUnit XML report, as
# written by `ctest --output-junit` (status="run" | "fail" | "notrun" | "disabled")
# or by normlab's own scripts (fuzz.sh, gpu-rehearsal.sh; same attributes).
# Exits 1 when the file has no test case at all.
#   bash scripts/junit-count.sh REPORT.xml
set -euo pipefail
report=$1
statuses=$(grep -o '<testcase [^>]*status="[a-z]*"' "$report" | sed 's/.*status="\([a-z]*\)"/\1/') || true
[ -n "$statuses" ] || { echo "junit-count: no test case in $report" >&2; exit 1; }
p=$(grep -cx run <<<"$statuses" || true)
f=$(grep -cx fail <<<"$statuses" || true)
s=$(grep -cxE 'notrun|disabled' <<<"$statuses" || true)
other=$(grep -cvxE 'run|fail|notrun|disabled' <<<"$statuses" || true)
# An unknown status is not a pass.
echo "$p $((f + other)) $s"
