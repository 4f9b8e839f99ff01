#!/usr/bin/env bash
# Installs what is missing, builds xgrad and its tests, and runs the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# A new build folder is generated for Ninja (setup.sh installs it): it compiles every target's
# files as soon as a core is free, where Make builds a library's only after the libraries it
# uses. A folder configured before keeps its own generator.
export CMAKE_GENERATOR="${CMAKE_GENERATOR:-Ninja}"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j "$(nproc)"
ctest --test-dir build --output-on-failure -j "$(nproc)"
