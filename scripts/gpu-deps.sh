#!/usr/bin/env bash
# Stages, from this machine's Debian packages, everything the CUDA build needs
# besides nvcc, CMake and ninja into one ignored folder (default gpu-deps/), for a
# GPU machine that reaches no package registry:
#   Eigen 3 (headers + CMake config), nlohmann-json (headers + CMake config),
#   CLI11 (headers + config, for the train-<variant>-cuda executables) and, for
#   the optional benchmark, Google Benchmark (headers, shared library, config).
# The folder mirrors /usr (gpu-deps/usr/include, .../share, .../lib), so each
# package's own CMake config finds its files relative to itself, and
# scripts/gpu-check.sh configures with CMAKE_PREFIX_PATH=gpu-deps/usr.
# Prints the device tool's `carry` entry to use. Installs what is missing first
# (scripts/bootstrap.sh), so run it here, not on the GPU machine.
#   bash scripts/gpu-deps.sh [DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-gpu-deps}
bash scripts/bootstrap.sh
rm -rf "$DIR"
mkdir -p "$DIR"
MULTIARCH=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)

# Copies one file to the same path under $DIR (links resolved: the device tool carries plain files).
stage_file() { mkdir -p "$DIR$(dirname "$1")" && cp -L "$1" "$DIR$1"; }
# Each package's files under /usr that a CMake build uses (no docs, no pkg-config).
stage_package() {
  local pkg=$1
  dpkg -L "$pkg" | while read -r f; do
    case $f in
      /usr/include/* | /usr/share/eigen3/cmake/* | /usr/share/cmake/* | /usr/lib/"$MULTIARCH"/cmake/* | \
      /usr/lib/"$MULTIARCH"/lib*.so* | /usr/lib/"$MULTIARCH"/lib*.a) if [ -f "$f" ]; then stage_file "$f"; fi ;;
    esac
  done
}
stage_package libeigen3-dev
stage_package nlohmann-json3-dev
stage_package libbenchmark-dev
stage_package libcli11-dev  # the train-<variant>-cuda executables' command line
# libbenchmark.so is a link to the runtime package's libbenchmark.so.1.x.
for f in /usr/lib/"$MULTIARCH"/libbenchmark.so.*; do stage_file "$f"; done

for need in usr/include/eigen3/Eigen/Core usr/share/eigen3/cmake/Eigen3Config.cmake \
            usr/include/nlohmann/json.hpp usr/share/cmake/nlohmann_json/nlohmann_jsonConfig.cmake \
            usr/include/CLI/CLI.hpp usr/share/cmake/CLI11/CLI11Config.cmake; do
  [ -e "$DIR/$need" ] || { echo "gpu-deps: $need missing after staging" >&2; exit 1; }
done
{
  echo "staged $(date -u +%Y-%m-%dT%H:%M:%SZ) from:"
  dpkg-query -W -f='  ${Package} ${Version}\n' libeigen3-dev nlohmann-json3-dev libbenchmark-dev "libbenchmark1*" libcli11-dev 2>/dev/null
} > "$DIR/STAGED"
echo "gpu-deps: $(du -sh "$DIR" | cut -f1) in $DIR ($(find "$DIR" -type f | wc -l) files)"
echo "gpu-deps: device tool: carry [\"$DIR\"], command \"bash scripts/gpu-check.sh\" (docs/cuda.md)"
