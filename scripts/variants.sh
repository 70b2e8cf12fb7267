#!/usr/bin/env bash
# The built-in variants' names, one per line, from their one list
# (include/normlab/train/variant_names.hpp, NORMLAB_BUILTIN_VARIANTS: "  X(name, ...").
set -euo pipefail
cd "$(dirname "$0")/.."
sed -n 's/^  X(\([a-z0-9_]*\),.*/\1/p' include/normlab/train/variant_names.hpp
