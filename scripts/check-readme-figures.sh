#!/usr/bin/env bash
# Every figure in README.md's tables comes from the doc the README cites for it,
# and the README and docs/perf.md stay short.
#
# Convention: each README table that holds a figure is preceded, on the line right
# before its header (a blank line between is allowed), by an HTML comment naming its
# source, e.g.
#   <!-- figures: docs/ablation/results.md -->
# (several files, separated by spaces: a figure may come from any of them).
# Every number in the table's body rows (1.7952, 1638400, 54.2, 3e-3, 1,115,264;
# the header and separator rows are labels) must occur in a source as a whole number:
# not as part of a longer one (1.00 is not found in 1.000). Tables inside fenced
# code blocks are ignored; a table with figures and no source comment is an error.
# (README's and perf.md's lengths are scripts/check-tree.sh's, with the tree's other limits.)
#   bash scripts/check-readme-figures.sh
set -uo pipefail
cd "$(dirname "$0")/.."

readme=README.md
fail=0 figures=0 tables=0

# found FIGURE FILE...: the figure occurs in one of the files, not inside a longer number.
found() {
  local fig=$1 re f
  shift
  re=$(sed -e 's/[.+]/\\&/g' <<<"$fig")
  for f in "$@"; do
    grep -qP "(?<![0-9]|[0-9][.,])${re}(?![0-9]|[.,][0-9])" "$f" && return 0
  done
  return 1
}

check_table() {  # start line, source list, body rows (newline-separated)
  local start=$1 sources=$2 body=$3 row fig f
  local -a files
  read -r -a files <<<"$sources"
  tables=$((tables + 1))
  for f in "${files[@]}"; do
    if [ ! -f "$f" ]; then
      echo "check-readme-figures: $readme:$start: source $f does not exist"; fail=1; return
    fi
  done
  while IFS= read -r row; do
    [ -n "$row" ] || continue
    while IFS= read -r fig; do
      [ -n "$fig" ] || continue
      figures=$((figures + 1))
      if ! found "$fig" "${files[@]}"; then
        echo "missing: $fig (table at $readme:$start, source ${files[*]})"; fail=1
      fi
    done < <(grep -oE '[0-9]+(,[0-9]{3})*(\.[0-9]+)?([eE][-+]?[0-9]+)?' <<<"$row")
  done <<<"$body"
}

lineno=0 fence=0 intable=0 source="" pending="" start=0 body="" header=0
flush() {
  if [ $intable -eq 1 ]; then
    if [ -n "$source" ]; then
      check_table "$start" "$source" "$body"
    elif grep -qE '[0-9]' <<<"$body"; then
      echo "check-readme-figures: $readme:$start: a table with figures and no <!-- figures: FILE --> line before it"
      fail=1
    fi
  fi
  intable=0 source="" body="" header=0
}
while IFS= read -r line || [ -n "$line" ]; do
  lineno=$((lineno + 1))
  if [[ $line =~ ^\ *\`\`\` ]]; then
    flush; pending=""; fence=$((1 - fence)); continue
  fi
  [ $fence -eq 0 ] || continue
  if [[ $line =~ ^\ *\| ]]; then
    if [ $intable -eq 0 ]; then
      intable=1 start=$lineno source=$pending header=1 pending=""
      continue
    fi
    [[ $line =~ ^\ *\|[\ :|-]+\|?\ *$ ]] && continue   # the separator row
    body+="$line"$'\n'
    continue
  fi
  flush
  if [[ $line =~ ^\ *\<!--\ *figures:\ *(.*[^\ ])\ *--\>\ *$ ]]; then
    pending=${BASH_REMATCH[1]}
  elif [[ -n ${line// } ]]; then
    pending=""
  fi
done < "$readme"
flush

if [ $fail -ne 0 ]; then
  echo "check-readme-figures: FAILED ($figures figures in $tables tables checked)"
  exit 1
fi
echo "check-readme-figures: $figures figures in $tables tables found in their sources"
