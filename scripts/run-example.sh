#!/usr/bin/env bash
# The main job until the ablation driver lands: trains GPT and nGPT on a
# generated language and prints both losses falling toward the entropy floor.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j 2 --target train_tiny
./build/examples/train_tiny "$@"
