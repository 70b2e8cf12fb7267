#!/usr/bin/env bash
# Helpers for scripts that are CI stages but not CTest runs: source this file,
# call junit_case NAME STATUS [MESSAGE] per test (STATUS: run | fail | notrun),
# then junit_write FILE. The format is the subset of CTest's JUnit output that
# scripts/junit-count.sh reads.
_junit_cases=()
_junit_escape() { sed -e 's/&/\&amp;/g' -e 's/</\&lt;/g' -e 's/>/\&gt;/g' -e 's/"/\&quot;/g' <<<"$1"; }
junit_case() {
  local name msg
  name=$(_junit_escape "$1")
  msg=$(_junit_escape "${3:-}")
  case $2 in
    run) _junit_cases+=("<testcase name=\"$name\" status=\"run\"/>") ;;
    fail) _junit_cases+=("<testcase name=\"$name\" status=\"fail\"><failure message=\"$msg\"/></testcase>") ;;
    notrun) _junit_cases+=("<testcase name=\"$name\" status=\"notrun\"><skipped message=\"$msg\"/></testcase>") ;;
    *) echo "junit_case: unknown status $2" >&2; return 1 ;;
  esac
}
junit_write() {
  [ -n "${1:-}" ] || return 0
  { echo '<?xml version="1.0" encoding="UTF-8"?>'
    echo "<testsuite tests=\"${#_junit_cases[@]}\">"
    printf '%s\n' "${_junit_cases[@]}"
    echo '</testsuite>'; } > "$1"
}
