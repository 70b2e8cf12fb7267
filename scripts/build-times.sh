#!/usr/bin/env bash
# Where a build's time goes: every translation unit's compile time and every
# link, longest first, then the totals (compiler time summed over the units, and
# the build's wall time), from ninja's own log.
#   bash scripts/build-times.sh [BUILD_DIR]       a clean build first (ccache off,
#                                                 -j 2, the test command's flags);
#                                                 BUILD_DIR default build-times
#   bash scripts/build-times.sh --log BUILD_DIR   only read BUILD_DIR/.ninja_log
#                                                 (the last entry of each output; the
#                                                 wall time is right for one clean build,
#                                                 and a ccache hit shows as a short compile)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--log" ]; then
  BUILD_DIR=${2:?"usage: bash scripts/build-times.sh --log BUILD_DIR"}
else
  BUILD_DIR=${1:-build-times}
  bash scripts/bootstrap.sh
  rm -rf "$BUILD_DIR"
  export CCACHE_DISABLE=1
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DNORMLAB_BUILD_BENCH=ON -DNORMLAB_MPI=ON \
    -DNORMLAB_BLAS=ON -DNORMLAB_BUILD_EXAMPLES=OFF ${NORMLAB_CMAKE_ARGS:-} > /dev/null
  t0=$(date +%s)
  cmake --build "$BUILD_DIR" -j 2 > /dev/null
  echo "build-times: clean build of $BUILD_DIR in $(( $(date +%s) - t0 )) s wall (ccache off, -j 2, $(nproc) cores)"
fi
log=$BUILD_DIR/.ninja_log
[ -f "$log" ] || { echo "build-times: no $log (build first)" >&2; exit 2; }
awk -F'\t' '
  /^#/ { next }
  { start[$4] = $1; end[$4] = $2 }
  END {
    for (o in start) {
      d = (end[o] - start[o]) / 1000.0
      kind = (o ~ /\.o$/) ? "compile" : (o ~ /\.cmake$/) ? "other" : "link"
      printf "%8.1f  %-7s  %s\n", d, kind, o
      if (kind == "compile") { c += d; nc++ } else if (kind == "link") { l += d; nl++ }
      if (first == "" || start[o] < first) first = start[o]
      if (end[o] > last) last = end[o]
    }
    printf "TOTAL %d compiles %.0f s, %d links %.0f s (summed); wall %.0f s from the first start to the last end\n", \
      nc, c, nl, l, (last - first) / 1000.0 > "/dev/stderr"
  }' "$log" | sort -rn
