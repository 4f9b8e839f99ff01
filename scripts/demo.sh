#!/usr/bin/env bash
# Installs what is missing, builds xgrad, and runs the main demo: the Pre-Norm vs Post-Norm
# gradient study (8 layers of Linear + ReLU sublayers at d_model 4, started from PyTorch's
# seed-42 tensors, so the layer-1 gradients equal PyTorch's; the depth sweep; and the
# Xiong et al. encoder-decoder profile at init; about 65 s of CPU), writing CSV/JSON and plots
# to out/prenorm.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# A new build folder is generated for Ninja (setup.sh installs it): it compiles every target's
# files as soon as a core is free, where Make builds a library's only after the libraries it
# uses. A folder configured before keeps its own generator.
export CMAKE_GENERATOR="${CMAKE_GENERATOR:-Ninja}"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j "$(nproc)" --target prenorm_vs_postnorm
./build/experiments/prenorm_vs_postnorm --sweep --xiong --out out/prenorm
