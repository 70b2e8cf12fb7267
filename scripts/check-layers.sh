#!/usr/bin/env bash
# Nothing includes a higher layer (docs/design.md, "Layers of the headers"):
# every #include "normlab/<layer>/…" in include/normlab/<own>/ must name a lower
# layer or its own. Layers, low to high: core; tensor, io; backend; nn, dist;
# model; optim; train; diag (layers of one rank do not include each other;
# normlab.hpp, the umbrella header, sits above them all).
# Exit 1 with each offending line when one does.
set -euo pipefail
cd "$(dirname "$0")/../include/normlab"
rank() {
  case $1 in
    core) echo 0 ;; tensor | io) echo 1 ;; backend) echo 2 ;; nn | dist) echo 3 ;;
    model) echo 4 ;; optim) echo 5 ;; train) echo 6 ;; diag) echo 7 ;; *) echo 99 ;;
  esac
}
bad=0 n=0
while IFS= read -r line; do
  file=${line%%:*}
  [[ $file == */* ]] || continue  # normlab.hpp, the umbrella above every layer
  own=${file%%/*}
  inc=$(sed -E 's/.*#include "normlab\/([a-z_]+)\/.*/\1/' <<<"$line")
  n=$((n + 1))
  [ "$inc" = "$own" ] && continue
  ro=$(rank "$own") ri=$(rank "$inc")
  if [ "$ro" = 99 ] || [ "$ri" = 99 ] || [ "$ri" -ge "$ro" ]; then
    echo "layering: $line ($own includes $inc)"
    bad=1
  fi
done < <(grep -rn '#include "normlab/[a-z_]*/' --include='*.hpp' --include='*.cuh' . | sed 's|^\./||')
[ $bad -eq 0 ] && echo "layering: $n includes across $(ls -d */ | wc -l) layers, none of a higher layer"
exit $bad
