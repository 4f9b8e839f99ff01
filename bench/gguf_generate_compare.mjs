// llama.cpp's side of bench/gguf_generate_compare.sh: prompt processing (one batch of P tokens)
// and token-by-token generation (N greedy tokens after it) of a GGUF file, in tokens/s, on T
// threads, through node-llama-cpp. Prints one JSON line.
//   node gguf_generate_compare.mjs NODE_MODULES MODEL.gguf P N THREADS REPEATS
import path from "node:path";
import {performance} from "node:perf_hooks";

const [modules, modelPath, P, N, threads, repeats] = process.argv.slice(2);
const {getLlama, LlamaLogLevel} = await import(path.resolve(modules, "node-llama-cpp/dist/index.js"));
const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath});
const ctx = await model.createContext({contextSize: Math.min(model.trainContextSize, +P + +N + 8), threads: +threads,
                                       batchSize: +P, flashAttention: false, experimentalKvCacheKeyType: "F32",
                                       experimentalKvCacheValueType: "F32"});
const seq = ctx.getSequence();
const prompt = Array.from({length: +P}, (_, i) => 32 + (i * 7) % 90);
let best_pp = Infinity, best_tg = Infinity;
for (let r = 0; r < +repeats; ++r) {
  await seq.clearHistory();
  let t0 = performance.now();
  const items = prompt.map((t, i) => i + 1 < prompt.length ? t : [t, {generateNext: {logits: {filter: {tokens: [], includeTop: 1}}}}]);
  let res = await seq.controlledEvaluate(items);
  best_pp = Math.min(best_pp, (performance.now() - t0) / 1000);
  let next = res[res.length - 1].next.logits.keys().next().value;
  t0 = performance.now();
  for (let k = 0; k < +N; ++k) {
    res = await seq.controlledEvaluate([[next, {generateNext: {logits: {filter: {tokens: [], includeTop: 1}}}}]]);
    next = res[0].next.logits.keys().next().value;
  }
  best_tg = Math.min(best_tg, (performance.now() - t0) / 1000);
}
console.log(JSON.stringify({runtime: "llama.cpp (node-llama-cpp 3.22.1)", threads: +threads, prompt_tokens: +P,
                            new_tokens: +N, pp_tokens_per_s: +P / best_pp, tg_tokens_per_s: +N / best_tg}));
