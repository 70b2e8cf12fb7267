#!/usr/bin/env bash
# Every command the README and docs/ show in their fenced code blocks runs as
# written, as far as it can without hours of compute:
#   * `bash scripts/X.sh ...`        the script exists and parses (bash -n);
#   * `build/train-<v> ...`,          run with --dry-run appended: every flag is
#     `build/normlab-ablate ...`      parsed and validated, the memory planned,
#                                     nothing trained (the tools' own dry runs);
#   * `VAR=... bash scripts/...`     the same, the assignments ignored;
#   * `mpirun -np N build/train-<v> ...`  the trainer's flags, as above (a dry run
#                                     is one process; the launcher is not run).
# Other lines (cmake, C++ and CMake snippets, commands that need a trained
# checkpoint) are counted and listed as not checked.
#   bash scripts/check-doc-commands.sh BUILD_DIR
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
checked=0 failed=0 skipped=0
check() {  # file, line
  local file=$1 line=$2 cmd
  cmd=$(sed -E 's/^([A-Z_]+=[^ ]+ +)+//' <<<"$line")  # drop leading VAR=value assignments
  cmd=${cmd%%#*}                                        # drop a trailing comment
  # A launcher's prefix (mpirun -np 2 ..., srun ...): the trainer's own flags are checked.
  if [[ $cmd =~ ^(mpirun|mpiexec|srun)\ .*\ ((\./)?build/train-.*)$ ]]; then cmd=${BASH_REMATCH[2]}; fi
  if [[ $cmd =~ ^bash\ scripts/([A-Za-z0-9_.-]+\.sh) ]]; then
    local s=scripts/${BASH_REMATCH[1]}
    if [ -f "$s" ] && bash -n "$s"; then checked=$((checked + 1)); else echo "FAIL $file: $line (no such script or syntax error)"; failed=$((failed + 1)); fi
  elif [[ $cmd =~ ^(\./)?build/train-[a-z_]+\ .*--sample\  ]]; then
    skipped=$((skipped + 1))  # needs a trained checkpoint
    [ -z "${VERBOSE:-}" ] || echo "not checked: $file: $line"
  elif [[ $cmd =~ ^(\./)?build/(train-[a-z_]+|normlab-ablate)(\ |$) ]]; then
    local exe=$BUILD/${BASH_REMATCH[2]} rest=${cmd#*${BASH_REMATCH[2]}}
    local out
    # shellcheck disable=SC2086  # the documented line is word-split as a shell would
    # normlab-ablate's own flags end at a lone "--" (the rest go to the trainers).
    if [[ $rest == *" -- "* ]]; then rest="${rest%% -- *} --dry-run -- ${rest#* -- }"; else rest="$rest --dry-run"; fi
    if out=$(eval "\"$exe\" $rest" 2>&1 </dev/null); then checked=$((checked + 1))
    else echo "FAIL $file: $line"; echo "$out" | tail -3 | sed 's/^/     /'; failed=$((failed + 1)); fi
  else
    skipped=$((skipped + 1))
    [ -z "${VERBOSE:-}" ] || echo "not checked: $file: $line"
  fi
}
for f in README.md docs/*.md; do
  open=0 shell=0
  while IFS= read -r line; do
    if [[ $line =~ ^\ *\`\`\` ]]; then  # a fence opens or closes a block
      if [ $open -eq 0 ]; then
        open=1
        shell=0
        [[ $line =~ ^\ *\`\`\`(bash|sh)?\ *$ ]] && shell=1
      else
        open=0
      fi
      continue
    fi
    [ $open -eq 1 ] && [ $shell -eq 1 ] || continue
    [[ -z ${line// } || $line =~ ^\ *# ]] && continue
    check "$f" "$line"
  done < "$f"
done
echo "check-doc-commands: $checked checked, $failed failed, $skipped not checkable here"
[ $failed -eq 0 ] && [ $checked -gt 0 ]
