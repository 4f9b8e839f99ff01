#!/usr/bin/env bash
# xg-generate beside llama.cpp on the same F32 model: prompt processing and token-by-token
# (KV-cached) generation in tokens/s, on 1 and 2 threads. The model is the
# one xg-train makes with BENCH_TRAIN_FLAGS (default: the byte-level reference model's shape,
# briefly trained); it is exported with xg-export --dtype f32 and both runtimes read that file.
#   bash bench/gguf_generate_compare.sh            (needs build/bin and Node; installs the tools)
# Env: P (prompt tokens, 256), N (new tokens, 128), REPEATS (best of, 3), THREADS ("1 2"),
# BASE (an existing model folder or .gguf to use instead of training one), DTYPE (the export's
# type: f32, f16, bf16, q8_0 or q4_0, default f32; xg-generate computes on it as stored, --dtype
# auto), GGUF (a GGUF file both read as it is, no export: e.g. one llama.cpp quantized to Q4_K_M).
# Both sides time the same two phases inside the process, model loading excluded: xg-generate's
# --timings (the prefill forward of the P-token prompt; then N - 1 one-token forwards against
# the KV cache, sampling excluded as llama.cpp's eval time excludes it), and node-llama-cpp's
# evaluation of the P-token batch and of N single tokens. Best of REPEATS runs each.
# Results: a JSON line per runtime and thread count on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
P=${P:-256} N=${N:-128} REPEATS=${REPEATS:-3} THREADS=${THREADS:-"1 2"} DTYPE=${DTYPE:-f32}
BIN=build/bin
bash scripts/reference_tools.sh >&2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [[ -n "${GGUF:-}" ]]; then
  BASE=$GGUF DTYPE=$(basename "$GGUF" .gguf)
elif [[ -z "${BASE:-}" ]]; then
  head -c 300000 tests/fixtures/tokenizers/texts/persuasion.txt > "$tmp/train.txt"
  "$BIN/xg-train" --data "$tmp/train.txt" --out "$tmp/model" ${BENCH_TRAIN_FLAGS:---d-model 256 --layers 4 --heads 8 --kv-heads 4 --ffn swiglu --norm rmsnorm --pos rope --max-seq-len 1024 --seq-len 128 --steps 20 --warmup 2} > /dev/null
  BASE="$tmp/model"
fi
if [[ -z "${GGUF:-}" ]]; then
  GGUF="$tmp/model.gguf"
  "$BIN/xg-export" --base "$BASE" --to gguf --dtype "$DTYPE" --out "$GGUF" >&2
fi
prompt=$(head -c "$P" tests/fixtures/tokenizers/texts/glosses.txt | tr -d "'\n")
# One xg-generate run with --timings -> "prompt_tokens prefill_tokens/s decode_tokens/s" from its stderr line.
rates() {
  "$BIN/xg-generate" --base "$GGUF" --format raw --temperature 0 --timings "$@" 2>&1 > /dev/null |
    sed -n 's/.*prefill \([0-9]*\) tokens in .* (\([0-9.]*\) tokens\/s); decode \([0-9]*\) tokens in .* (\([0-9.]*\) tokens\/s).*/\1 \2 \4/p'
}
for t in $THREADS; do
  pp=0 tg=0 np=0
  for _ in $(seq "$REPEATS"); do
    read -r np a b < <(rates --threads "$t" --prompt "$prompt" --max-new-tokens "$N")
    pp=$(python3 -c "print(max($pp, $a))") tg=$(python3 -c "print(max($tg, $b))")
  done
  python3 -c "import json; print(json.dumps({'runtime': 'xgrad xg-generate', 'dtype': '$DTYPE', 'threads': $t, 'prompt_tokens': $np, 'new_tokens': $N,
    'pp_tokens_per_s': $pp, 'tg_tokens_per_s': $tg}))"
  node bench/gguf_generate_compare.mjs build/reference-tools/node_modules "$GGUF" "$P" "$N" "$t" "$REPEATS"
done
