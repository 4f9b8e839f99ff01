#!/usr/bin/env bash
# Folds what the fuzzers found into their committed regression corpora: for each target, the
# inputs of build-asan/fuzz-corpus/<name>/ (grown by scripts/sanitize.sh) and of the current
# fuzz/regression/<name>.tar.xz are minimised with libFuzzer's -merge=1 (an input is kept only
# if it adds coverage), and the result replaces fuzz/regression/<name>.tar.xz. Run after
# `bash scripts/sanitize.sh 300` or so; commit the archives it changed.
# Usage: bash scripts/fuzz_regression.sh [NAME...]   (default: every target)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=build-asan
names=("$@")
if ((${#names[@]} == 0)); then
  for target in fuzz/corpus/*/; do names+=("$(basename "$target")"); done
fi
mkdir -p fuzz/regression
for name in "${names[@]}"; do
  fuzzer="$BUILD/fuzz/fuzz_$name"
  [[ -x "$fuzzer" ]] || { echo "fuzz_regression: $fuzzer not built (run scripts/sanitize.sh first)" >&2; exit 1; }
  work=$(mktemp -d)
  mkdir -p "$work/in" "$work/out"
  [[ -d "$BUILD/fuzz-corpus/$name" ]] && cp -r "$BUILD/fuzz-corpus/$name/." "$work/in/"
  [[ -f "fuzz/regression/$name.tar.xz" ]] && tar -xJf "fuzz/regression/$name.tar.xz" -C "$work/in"
  ASAN_OPTIONS=detect_leaks=0 "$fuzzer" -merge=1 -timeout=10 -rss_limit_mb=2048 "$work/out" "$work/in" > "$work/merge.log" 2>&1 ||
    { tail -20 "$work/merge.log"; echo "fuzz_regression: merging fuzz_$name failed" >&2; exit 1; }
  # Sorted names and fixed metadata: the same inputs give the same archive.
  (cd "$work/out" && find . -type f | LC_ALL=C sort | tar --owner=0 --group=0 --numeric-owner --mtime=@0 -cf - -T - | xz -9e -T1) \
    > "fuzz/regression/$name.tar.xz"
  echo "fuzz_regression: $name: $(ls "$work/out" | wc -l) inputs, $(stat -c %s "fuzz/regression/$name.tar.xz") bytes"
  rm -rf "$work"
done
