// Encode throughput of the tokenizer.json tokenizers (text/hf_tokenizer.hpp) on the whole of
// Persuasion, one thread: MB/s of text and tokens/s. bench/tokenizer_compare.mjs runs these
// beside Hugging Face's tokenizers (Rust, for Node) on the same files.
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "bench/bench_util.hpp"
#include "text/hf_tokenizer.hpp"

namespace {

// tests/fixtures/tokenizers, found from this source file's path.
const std::string kBenchTokenizerDir =
    (std::filesystem::path(__FILE__).parent_path().parent_path() / "tests" / "fixtures" / "tokenizers").string();

const std::string& persuasion() {
  static const std::string text = [] {
    std::ifstream f(kBenchTokenizerDir + "/texts/persuasion.txt", std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }();
  return text;
}

void BM_TokenizerEncodePersuasion(benchmark::State& state, const std::string& name) {
  static std::map<std::string, std::unique_ptr<xg::text::HfTokenizer>> loaded;
  auto& tok = loaded[name];
  if (!tok) tok = xg::text::HfTokenizer::from_folder(kBenchTokenizerDir + "/" + name);
  const std::string& text = persuasion();
  int64_t tokens = 0;
  for (auto _ : state) {
    std::vector<int64_t> ids = tok->encode(text, false);
    tokens += static_cast<int64_t>(ids.size());
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(text.size()));
  state.counters["tokens_per_second"] = benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsRate);
}
BENCHMARK_CAPTURE(BM_TokenizerEncodePersuasion, llama2, std::string("llama2"))->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_TokenizerEncodePersuasion, llama3, std::string("llama3"))->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_TokenizerEncodePersuasion, qwen3, std::string("qwen3"))->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace
