#!/usr/bin/env bash
# Builds xgrad, its tests and the libFuzzer targets with clang under AddressSanitizer +
# UndefinedBehaviorSanitizer (build-asan/), runs the sanitizer test subset, then each fuzzer
# for FUZZ_SECONDS (default 30) from the committed seed corpus. Fails on any sanitizer
# report, crash, leak, timeout or test failure. Usage: bash scripts/sanitize.sh [FUZZ_SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZ_SECONDS="${1:-30}"
BUILD=build-asan
bash scripts/setup.sh --sanitize

cmake -S . -B "$BUILD" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O1" \
  -DXGRAD_SANITIZE=ON -DXGRAD_FUZZ=ON -DXGRAD_BUILD_BENCH=OFF -DXGRAD_MPI=OFF > "$BUILD.configure.log"
FUZZERS=()
for target in fuzz/corpus/*/; do FUZZERS+=("fuzz_$(basename "$target")"); done
# The test binary (and the executables its CLI tests run) and the fuzzers; not the
# benchmarks, the example program or the install check.
cmake --build "$BUILD" -j "$(nproc)" --target xgrad_tests "${FUZZERS[@]}"

# The whole GoogleTest suite under ASan+UBSan (the CLI tests run the sanitized executables).
# Left out: install_consumer (it installs and builds a separate project) and
# example_train_mlp (not built here); both run in the normal build.
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ctest --test-dir "$BUILD" --output-on-failure -j "$(nproc)" -E '^(install_consumer|example_train_mlp)$'

# Each fuzzer from a scratch copy of its seed corpus (new inputs stay out of the repository).
for target in fuzz/corpus/*/; do
  name=$(basename "$target")
  corpus="$BUILD/fuzz-corpus/$name"
  mkdir -p "$corpus"
  cp -n "$target"* "$corpus"/
  log="$BUILD/fuzz_$name.log"
  if ! "$BUILD/fuzz/fuzz_$name" "$corpus" -max_total_time="$FUZZ_SECONDS" -timeout=10 -rss_limit_mb=2048 \
       -print_final_stats=1 > "$log" 2>&1; then
    tail -40 "$log"
    echo "sanitize: fuzz_$name failed (log: $log; the crashing input is in the working folder)"
    exit 1
  fi
  echo "sanitize: fuzz_$name: $(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$') executions in ${FUZZ_SECONDS} s, no crash"
done
