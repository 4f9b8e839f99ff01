#!/usr/bin/env bash
# Installs every Debian package xgrad needs to build, test and benchmark. Idempotent:
# it runs `apt-get update` and `apt-get install` only when something is missing.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config
  ninja-build                     # the build scripts' generator: keeps both cores busy across targets
  libopenblas-openmp-dev          # OpenBLAS built on libgomp: BLAS and our loops share threads
  libdnnl-dev                     # oneDNN: float32 gemm by CPU features where OpenBLAS has only generic kernels
  ocl-icd-opencl-dev              # OpenCL headers + loader: Debian's dnnl-config.cmake requires them (its GPU runtime
                                  # is OpenCL); libdnnl-dev only Recommends it, and we install without recommends
  libxtensor-dev                  # xtensor: autograd/xarray.hpp's bridge, cold paths such as nn/init.cpp
  libxtensor-blas-dev             # xtensor-blas: the QR of nn::init::orthogonal_ (build time only)
  libxsimd-dev                    # xsimd: SIMD batches (exp, sqrt) in the fused row kernels and AdamW
  libboost-program-options-dev nlohmann-json3-dev
  libpcre2-dev                    # PCRE2: the split regexes of tokenizer.json pre-tokenizers (Unicode classes, lookahead)
  libicu-dev                      # ICU: Unicode NFC, the normalizer of Qwen2/3 tokenizer.json files
  zlib1g-dev                      # CRC32s of safetensors data; finetune/data: R's compressed lazy-load database (janeaustenr)
  libgtest-dev libgmock-dev libbenchmark-dev
  gnuplot-nox                     # experiments/: PNG and SVG plots (optional at run time)
  libopenmpi-dev openmpi-bin      # data-parallel xg-train / xg-finetune under mpirun (optional at build time)
)
# `scripts/setup.sh --fixtures` also installs PyTorch, needed only to regenerate
# tests/fixtures and to run bench/compare beside xgrad (never at build or test time), and
# Jinja2, needed only to regenerate tests/fixtures/jinja_corpus.json (gen_jinja_corpus.py).
if [[ "${1:-}" == "--fixtures" ]]; then PACKAGES+=(python3-torch python3-numpy python3-jinja2); fi
# `scripts/setup.sh --sanitize`: clang with libFuzzer and the sanitizer runtimes, and LLVM's
# OpenMP for clang, and xz for the fuzzers' regression corpora (scripts/sanitize.sh).
# Also python3 for .ci/run's attack battery and bit-flip campaign (scripts/*.py, stdlib only).
if [[ "${1:-}" == "--sanitize" ]]; then PACKAGES+=(clang libclang-rt-14-dev libomp-dev xz-utils python3); fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]})); then
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all packages present"
fi
