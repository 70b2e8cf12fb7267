#!/usr/bin/env bash
# scripts/check-layers.sh must catch a generic layer reaching into a backend's
# folder: for each of nn/, optim/, model/ and dist/, a copy of the headers with
# one such include planted must fail the check, naming the file; the untouched
# copy must pass.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp -r "$repo/include/normlab" "$tmp/clean"
bash "$repo/scripts/check-layers.sh" "$tmp/clean" >/dev/null
for target in nn/norms.hpp optim/adamw.hpp model/transformer.hpp dist/comm.hpp; do
  for backend in cpu/ops.hpp cuda/kernels.hpp; do
    rm -rf "$tmp/planted"
    cp -r "$repo/include/normlab" "$tmp/planted"
    printf '#include "normlab/backend/%s"\n' "$backend" >>"$tmp/planted/$target"
    if out=$(bash "$repo/scripts/check-layers.sh" "$tmp/planted"); then
      echo "FAIL: check-layers.sh accepted $target including backend/$backend"
      exit 1
    fi
    grep -q "$target:.*backend/$backend" <<<"$out" || { echo "FAIL: no line names $target: $out"; exit 1; }
    echo "caught: $target -> backend/$backend"
  done
done
echo "check-layers.sh catches every planted include from a generic layer into a backend's folder"
