#!/usr/bin/env bash
# Installs what is missing, builds xgrad, and runs the main demo.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j "$(nproc)" --target train_mlp
./build/examples/train_mlp
