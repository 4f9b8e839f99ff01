#!/usr/bin/env bash
# The suite as a CPU without AVX-512 or bf16 instructions runs it. xgrad's own kernels are
# chosen when it is compiled (-march=native), and most CPUs CI lands on have AVX-512 and
# AVX512-BF16, where the normal build never reaches their portable code: the q8_0/q4_0 and GGUF
# block widening, the attention and register tiles, the elementwise ops' SSE2 code, float16
# conversions without F16C. This builds CMakePresets.json's "portable" preset (build-portable/:
# Release, XGRAD_NATIVE off, so the x86-64 baseline) and runs the whole suite there with oneDNN
# held to its AVX2 kernels (ONEDNN_MAX_CPU_ISA=AVX2), where it has no bf16 matmul: bf16
# products take the widened float32 path, as on an AVX2 laptop. The kernels that ran are
# printed first. CI runs it after scripts/test.sh; about 7 minutes on 2 cores.
# Usage: bash scripts/portable.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=build-portable
bash scripts/setup.sh
# A new build folder is generated for Ninja (setup.sh installs it): it compiles every target's
# files as soon as a core is free, where Make builds a library's only after the libraries it
# uses. A folder configured before keeps its own generator.
export CMAKE_GENERATOR="${CMAKE_GENERATOR:-Ninja}"
mkdir -p "$BUILD"
cmake --preset portable > "$BUILD/configure.log"
start=$SECONDS
cmake --build "$BUILD" -j "$(nproc)"
echo "portable: the build took $((SECONDS - start)) s"
export ONEDNN_MAX_CPU_ISA=AVX2
# What xg-train's --help says of its products and its own kernels under these settings: the
# kernels the suite runs.
"$BUILD/bin/xg-train" --help | sed -n '/^float32 matrix products:/,/^threads:/p' | sed '$d'
ctest --test-dir "$BUILD" --output-on-failure -j "$(nproc)"
