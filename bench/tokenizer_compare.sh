#!/usr/bin/env bash
# The tokenizer throughput comparison (bench/tokenizer_compare.mjs): installs the pinned reference
# tools (scripts/reference_tools.sh), builds xgrad_bench, and runs both alternately.
#   bash bench/tokenizer_compare.sh [BUILD_DIR] [ROUNDS]    (defaults: build, 5)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${1:-build}"
bash scripts/reference_tools.sh
cmake --build "$BUILD" --target xgrad_bench -j 2 >/dev/null
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'); load: $(uptime | sed 's/.*load average: //')"
node bench/tokenizer_compare.mjs "$BUILD/bench/xgrad_bench" build/reference-tools/node_modules "${2:-5}"
echo "load after: $(uptime | sed 's/.*load average: //')"
