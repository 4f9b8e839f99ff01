#!/usr/bin/env bash
# xg-generate beside llama.cpp on the same F32 model: prompt processing and token-by-token
# (KV-cached) generation in tokens/s, on 1 and 2 threads. The model is the
# one xg-train makes with BENCH_TRAIN_FLAGS (default: the byte-level reference model's shape,
# briefly trained); it is exported with xg-export --dtype f32 and both runtimes read that file.
#   bash bench/gguf_generate_compare.sh            (needs build/bin and Node; installs the tools)
# Env: P (prompt tokens, 256), N (new tokens, 128), REPEATS (best of, 3), THREADS ("1 2"),
# BASE (an existing model folder or .gguf to use instead of training one).
# xgrad's times are wall-clock runs of xg-generate (process start and model load cancel out:
# prompt processing is the run with a P-token prompt and 1 new token minus the run with a
# 1-token prompt and 1 new token; generation is the run with N new tokens minus the run with 1,
# over N - 1). Results: a JSON line per runtime and thread count on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
P=${P:-256} N=${N:-128} REPEATS=${REPEATS:-3} THREADS=${THREADS:-"1 2"}
BIN=build/bin
bash scripts/reference_tools.sh >&2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [[ -z "${BASE:-}" ]]; then
  head -c 300000 tests/fixtures/tokenizers/texts/persuasion.txt > "$tmp/train.txt"
  "$BIN/xg-train" --data "$tmp/train.txt" --out "$tmp/model" ${BENCH_TRAIN_FLAGS:---d-model 256 --layers 4 --heads 8 --kv-heads 4 --ffn swiglu --norm rmsnorm --pos rope --max-seq-len 1024 --seq-len 128 --steps 20 --warmup 2} > /dev/null
  BASE="$tmp/model"
fi
GGUF="$tmp/model.gguf"
"$BIN/xg-export" --base "$BASE" --to gguf --dtype f32 --out "$GGUF" >&2
prompt=$(head -c "$P" tests/fixtures/tokenizers/texts/glosses.txt | tr -d "'\n")
now() { date +%s.%N; }
best() {  # best wall time of REPEATS runs of xg-generate with the given flags
  local b=1e9 t0 t1
  for _ in $(seq "$REPEATS"); do
    t0=$(now); "$BIN/xg-generate" --base "$GGUF" --format raw --temperature 0 "$@" > /dev/null; t1=$(now)
    b=$(python3 -c "print(min($b, $t1 - $t0))")
  done
  echo "$b"
}
for t in $THREADS; do
  one=$(best --threads "$t" --prompt "a" --max-new-tokens 1)
  pp=$(best --threads "$t" --prompt "$prompt" --max-new-tokens 1)
  tg=$(best --threads "$t" --prompt "a" --max-new-tokens "$N")
  python3 -c "import json; print(json.dumps({'runtime': 'xgrad xg-generate', 'threads': $t, 'prompt_tokens': $P, 'new_tokens': $N,
    'pp_tokens_per_s': $P / ($pp - $one) if $pp - $one > 0.02 else None,
    'pp_note': 'prompt time %.1f ms: below the 20 ms this run-difference method resolves' % (1e3 * ($pp - $one)) if $pp - $one <= 0.02 else '',
    'tg_tokens_per_s': ($N - 1) / max(1e-9, $tg - $one)}))"
  node bench/gguf_generate_compare.mjs build/reference-tools/node_modules "$GGUF" "$P" "$N" "$t" "$REPEATS"
done
