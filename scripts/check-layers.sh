#!/usr/bin/env bash
# Nothing includes a higher layer (docs/design.md, "Layers of the headers"):
# every #include "normlab/<folder>/…" in include/normlab/<folder>/ must name a
# lower layer or its own. Layers, low to high: core; tensor, io; backend; nn,
# dist; model; optim; train; diag (layers of one rank do not include each other;
# normlab.hpp, the umbrella header, sits above them all). The application layer
# (app/: driver, command line, reports) is above the library: nothing here includes it.
#
# Folders are ranked with their sub-folders: backend/cpu and backend/cuda are
# the backends, backend/ itself holds what every backend shares. The generic
# layers (nn, dist, model, optim) reach a backend only through that shared
# part (the concept): they include no backend's folder. Code written for one
# backend lives in a sub-folder named after it (dist/cuda/: NCCL over the CUDA
# backend's streams) and may include that backend's folder and no other.
#
#   bash scripts/check-layers.sh [ROOT]   (ROOT: an include/normlab tree; default the repo's)
# Exit 1 with each offending line when one does.
set -euo pipefail
root=${1:-"$(dirname "$0")/../include/normlab"}
cd "$root"
backends=" cpu cuda "
rank() {  # rank=<rank of the top-level folder $1> (a variable, not a subshell: one fork per include line made the check take seconds)
  case $1 in
    core) rank=0 ;; tensor | io) rank=1 ;; backend) rank=2 ;; nn | dist) rank=3 ;;
    model) rank=4 ;; optim) rank=5 ;; train) rank=6 ;; diag) rank=7 ;; *) rank=99 ;;
  esac
}
generic() { case $1 in nn | dist | model | optim) return 0 ;; *) return 1 ;; esac; }
bad=0 n=0
while IFS= read -r line; do
  file=${line%%:*}
  [[ $file == */* ]] || continue  # normlab.hpp, the umbrella above every layer
  own=${file%%/*}
  rest=${file#*/}
  own_sub=""  # the sub-folder of the including file (cpu, cuda, …), if any
  [[ $rest == */* ]] && own_sub=${rest%%/*}
  [[ $line =~ \#include\ \"normlab/([^\"]+)\" ]] || continue
  path=${BASH_REMATCH[1]}
  inc=${path%%/*}
  inc_rest=${path#*/}
  inc_sub=""
  [[ $inc_rest == */* ]] && inc_sub=${inc_rest%%/*}
  n=$((n + 1))
  # A backend's folder from outside it: only from the same backend's sub-folder
  # (or from train/diag/tools above the generic layers, which pick a backend).
  if [ "$inc" = backend ] && [ -n "$inc_sub" ] && [[ $backends == *" $inc_sub "* ]]; then
    [ "$own" = backend ] && continue  # a backend may build on another's host routines (cuda on cpu's)
    if generic "$own" && [ "$own_sub" != "$inc_sub" ]; then
      echo "layering: $line ($own/ is generic: it reaches a backend only through backend/'s concept, not backend/$inc_sub)"
      bad=1
      continue
    fi
  fi
  [ "$inc" = "$own" ] && continue
  rank "$own"
  ro=$rank
  rank "$inc"
  ri=$rank
  if [ "$ro" = 99 ] || [ "$ri" = 99 ] || [ "$ri" -ge "$ro" ]; then
    echo "layering: $line ($own includes $inc)"
    bad=1
  fi
done < <(grep -rn '#include "normlab/[a-z_]*/' --include='*.hpp' --include='*.cuh' . | sed 's|^\./||')
# The library parses no command line: CLI11 belongs to the application layer
# (app/include/normlab/app/), which sits above every folder here.
while IFS= read -r line; do
  echo "layering: $line (CLI11 belongs to the application layer, app/)"
  bad=1
done < <(grep -rn '#include <CLI/' --include='*.hpp' --include='*.cuh' . | sed 's|^\./||')
[ $bad -eq 0 ] && echo "layering: $n includes across $(ls -d */ | wc -l) layers, none of a higher layer, no generic layer into a backend's folder"
exit $bad
