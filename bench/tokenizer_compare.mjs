// Encode throughput on the whole of Persuasion, one thread: xgrad's tokenizer.json tokenizers
// (bench/bench_tokenizer.cpp, in xgrad_bench) beside Hugging Face's tokenizers (Rust, for Node:
// @anush008/tokenizers), run alternately, ROUNDS times each; prints the medians and the ratio.
//   node bench/tokenizer_compare.mjs XGRAD_BENCH REFERENCE_NODE_MODULES [ROUNDS]
// (bench/tokenizer_compare.sh installs the reference tools and passes these.)
process.env.RAYON_NUM_THREADS = "1";  // before the Rust library starts its pool
process.env.TOKENIZERS_PARALLELISM = "false";
import fs from "node:fs";
import path from "node:path";
import { spawnSync } from "node:child_process";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

const [bench, modules, roundsArg] = process.argv.slice(2);
if (!bench || !modules) {
  console.error("usage: node tokenizer_compare.mjs XGRAD_BENCH REFERENCE_NODE_MODULES [ROUNDS]");
  process.exit(2);
}
const ROUNDS = Number(roundsArg || 5);
const SECONDS = 2;  // of each measurement
const NAMES = ["llama2", "llama3", "qwen3"];
const DIR = path.join(path.dirname(fileURLToPath(import.meta.url)), "..", "tests", "fixtures", "tokenizers");
const { Tokenizer } = createRequire(path.join(path.resolve(modules), "x.js"))("@anush008/tokenizers");
const text = fs.readFileSync(path.join(DIR, "texts", "persuasion.txt"), "utf8");
const bytes = Buffer.byteLength(text);
const reference = Object.fromEntries(NAMES.map((n) => [n, Tokenizer.fromFile(path.join(DIR, n, "tokenizer.json"))]));

async function referenceRun(name) {
  const tk = reference[name];
  let tokens = (await tk.encode(text, null, { addSpecialTokens: false })).getIds().length;  // warm-up
  let n = 0;
  const t0 = process.hrtime.bigint();
  let elapsed = 0;
  while (elapsed < SECONDS) {
    tokens = (await tk.encode(text, null, { addSpecialTokens: false })).getIds().length;
    ++n;
    elapsed = Number(process.hrtime.bigint() - t0) / 1e9;
  }
  return { mbps: (n * bytes) / elapsed / 1e6, tps: (n * tokens) / elapsed };
}

function xgradRun() {
  const r = spawnSync(bench, ["--benchmark_filter=TokenizerEncodePersuasion", "--benchmark_format=json",
                              `--benchmark_min_time=${SECONDS}`], { encoding: "utf8", maxBuffer: 1 << 26 });
  if (r.status !== 0) throw new Error(`${bench} failed: ${r.stderr}`);
  const out = {};
  for (const b of JSON.parse(r.stdout).benchmarks) {
    const name = NAMES.find((n) => b.name.includes(`/${n}/`));
    out[name] = { mbps: b.bytes_per_second / 1e6, tps: b.tokens_per_second };
  }
  return out;
}

const median = (v) => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)];
const runs = { xgrad: [], hf: [] };
for (let round = 0; round < ROUNDS; ++round) {
  runs.xgrad.push(xgradRun());
  const hf = {};
  for (const n of NAMES) hf[n] = await referenceRun(n);
  runs.hf.push(hf);
  process.stderr.write(`round ${round + 1}/${ROUNDS} done\n`);
}
console.log(`Persuasion, ${bytes} bytes, one thread, median of ${ROUNDS} alternating runs of ${SECONDS} s`);
console.log("| tokenizer | xgrad MB/s | HF tokenizers MB/s | xgrad tokens/s | HF tokens/s | xgrad / HF |");
console.log("| --- | ---: | ---: | ---: | ---: | ---: |");
for (const n of NAMES) {
  const x = median(runs.xgrad.map((r) => r[n].mbps)), h = median(runs.hf.map((r) => r[n].mbps));
  const xt = median(runs.xgrad.map((r) => r[n].tps)), ht = median(runs.hf.map((r) => r[n].tps));
  console.log(`| ${n} | ${x.toFixed(2)} | ${h.toFixed(2)} | ${(xt / 1e6).toFixed(2)}M | ${(ht / 1e6).toFixed(2)}M | ${(x / h).toFixed(2)}x |`);
}
