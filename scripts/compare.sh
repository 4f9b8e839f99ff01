#!/usr/bin/env bash
# The side-by-side benchmark against PyTorch in one command: installs what is missing (PyTorch
# from Debian's python3-torch included), builds xgrad_step_bench and runs bench/compare, which
# times whole training steps of the reference LLaMA-style byte LM (tiny, small, medium) in xgrad
# and PyTorch alternately and prints the tables (bench/README.md). Arguments go to
# bench/compare, e.g.
#   bash scripts/compare.sh --configs tiny --pairs 1 --steps 3 --warmup 1   # a smoke run
# Run it on an idle machine: the full run takes about 6 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --fixtures
# A new build folder is generated for Ninja (setup.sh installs it): it compiles every target's
# files as soon as a core is free, where Make builds a library's only after the libraries it
# uses. A folder configured before keeps its own generator.
export CMAKE_GENERATOR="${CMAKE_GENERATOR:-Ninja}"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j "$(nproc)" --target xgrad_step_bench
exec python3 bench/compare --build build "$@"
