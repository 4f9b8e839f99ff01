// xg-generate: samples from a base model (a Hugging Face folder, an xg-train or an xg-finetune
// --merge folder, or a GGUF file), optionally with LoRA adapters (xg-finetune's output, or any PEFT folder of
// matching shapes), tokenizing with the folder's tokenizer; prints text, or token ids (--ids).
#include <cstdio>
#include <iostream>

#include "finetune/base_model.hpp"
#include "finetune/dataset.hpp"
#include "finetune/lora.hpp"
#include "finetune/peft.hpp"
#include "nn/decoder.hpp"
#include "nn/sampling.hpp"
#include "text/chat_template.hpp"
#include "text/tokenizer.hpp"
#include "tools/cli/flags.hpp"
#include "tools/cli/run_main.hpp"
#include "tools/cli/threads.hpp"

using namespace xg;
namespace ft = xg::finetune;
namespace cli = xg::cli;
namespace po = boost::program_options;

int main(int argc, char** argv) {
  std::string base, prompt, adapter, format = "auto", chat_template = "auto", system, dtype = "auto";
  double adapter_scale = 1.0;
  int64_t max_new = 200, samples = 1;
  bool print_ids = false, print_timings = false;
  nn::GenerateOptions g;
  g.temperature = 0.8;
  po::options_description opts = cli::flag_group("xg-generate options");
  // clang-format off
  opts.add_options()
    ("help", "show this help")
    ("base", po::value(&base)->required(),
     "model: a Hugging Face folder (config.json, safetensors, tokenizer.json), an xgrad one, or a .gguf file")
    ("prompt", po::value(&prompt)->default_value(""), "text to continue (raw) or instruction (instruct)")
    ("format", po::value(&format)->default_value(format),
     "raw: the tokenizer's BOS + prompt, continued; instruct: the format xg-finetune trains on, the chat "
     "template's (see --chat-template) or BOS + prompt + newline (auto: instruct with --adapter or on a folder "
     "xg-finetune --merge wrote, else raw)")
    ("chat-template", po::value(&chat_template)->default_value(chat_template),
     "instruct format: auto uses the folder's chat template (tokenizer_config.json) when it has one; none: BOS + prompt + newline")
    ("system", po::value(&system), "instruct format with a chat template: a system message before the prompt")
    ("dtype", po::value(&dtype)->default_value(dtype),
     "how the model's matrices are stored: auto (as the file stores them: a Q8_0 GGUF's q8_0, a bf16 folder's bf16, "
     "F16 and F32 as float32) | f32 | bf16 | q8_0; products with bf16 matrices round the other operand to bf16, "
     "q8_0 ones widen a tile of the weight at a time (exact); norms, KV cache and sampling stay float32")
    ("max-new-tokens", po::value(&max_new)->default_value(max_new), "tokens to generate at most (stops at EOS)")
    ("adapter", po::value(&adapter), "LoRA adapter folder (adapter_config.json + adapter_model.safetensors)")
    ("adapter-scale", po::value(&adapter_scale)->default_value(adapter_scale), "multiplier of the adapters' output")
    ("temperature", po::value(&g.temperature)->default_value(g.temperature), "0 = greedy")
    ("top-k", po::value(&g.top_k)->default_value(g.top_k), "keep the k most likely tokens (0 = off)")
    ("top-p", po::value(&g.top_p)->default_value(g.top_p), "nucleus sampling mass (1 = off)")
    ("samples", po::value(&samples)->default_value(samples), "independent samples to print")
    ("seed", po::value(&g.seed)->default_value(g.seed), "seed of the sampling")
    ("ids", po::bool_switch(&print_ids),
     "print the generated token ids (space-separated, EOS included when reached), one line per sample, instead of text")
    ("timings", po::bool_switch(&print_timings),
     "print to stderr where the time went, as llama.cpp does: the prompt's prefill and the token-by-token decode "
     "(tokens/s), and the sampling; model loading excluded");
  // clang-format on
  int threads = 0;
  opts.add(cli::threads_flag(threads));
  po::variables_map vm;
  return cli::run_main(
      "xg-generate",
      [&] {
        if (cli::parse(argc, argv, opts, vm, "usage: xg-generate --base DIR [--prompt TEXT] [--adapter DIR] [options]"))
          return 0;
        cli::apply_threads(threads);
        if (format == "auto") format = adapter.empty() && !ft::is_finetuned_folder(base) ? "raw" : "instruct";
        cli::choice<int>("format", format, {{"raw", 0}, {"instruct", 1}});
        cli::choice<int>("chat-template", chat_template, {{"auto", 0}, {"none", 1}});
        cli::choice<int>("dtype", dtype, {{"auto", 0}, {"f32", 1}, {"bf16", 2}, {"q8_0", 3}});
        cli::require(system.empty() || (format == "instruct" && chat_template == "auto"),
                     "--system needs the instruct format with a chat template (--chat-template auto)");
        cli::require(max_new >= 1 && samples >= 1, "--max-new-tokens and --samples must be positive");
        cli::require(g.temperature == 0 || g.temperature >= nn::kMinTemperature,
                     str_cat("--temperature must be 0 (greedy) or at least ", nn::kMinTemperature, ", got ", g.temperature));
        cli::require(g.top_k >= 0, "--top-k must be >= 0");
        cli::require(g.top_p > 0 && g.top_p <= 1, "--top-p must be in (0, 1]");
        cli::require(vm["adapter-scale"].defaulted() || !adapter.empty(), "--adapter-scale needs --adapter");
        return -1;
      },
      [&] {
        nn::LoadOptions load;
        load.weights = nn::parse_weight_dtype(dtype, "--dtype");
        ft::BaseModel loaded = ft::load_base(base, "xg-generate", load);
        std::shared_ptr<nn::DecoderLM> model = loaded.model;
        const std::unique_ptr<text::Tokenizer>& tok = loaded.tokenizer;
        if (!adapter.empty()) {
          ft::load_adapter(*model, adapter, loaded.naming);
          if (adapter_scale != 1.0) ft::set_adapter_scale(*model, adapter_scale);
        }
        model->eval();
        const std::unique_ptr<text::ChatTemplate> chat =
            format == "instruct" ? ft::chat_template_for(loaded.source, chat_template) : nullptr;
        check(system.empty() || chat != nullptr, "xg-generate: --system: ", base,
              " has no chat template (tokenizer_config.json has no chat_template)");
        const ft::RowFormat row_format{tok.get(), chat.get(), system};
        const std::vector<int64_t> ids = format == "instruct" ? row_format.prompt_ids(prompt) : tok->encode(prompt, true);
        check(!ids.empty(), "xg-generate: the prompt is empty and the tokenizer of ", base,
              " adds no BOS token to start from (give --prompt)");
        const int64_t T0 = static_cast<int64_t>(ids.size());
        g.eos_id = tok->eos_id();
        int64_t room = max_new;
        if (model->max_seq_len() >= 0) room = std::min(room, model->max_seq_len() - T0);
        check(room > 0, "xg-generate: the prompt (", T0, " tokens) fills the model's ", model->max_seq_len(), " positions");
        // Each sample's KV cache over its whole length and the prompt's logits.
        const double per_sample = static_cast<double>(T0 + room) * static_cast<double>(model->kv_cache_bytes_per_token(4)) +
                                  static_cast<double>(T0) * static_cast<double>(model->config().vocab_size) * 4;
        cli::require_memory(static_cast<double>(samples) * per_sample,
                            str_cat("--samples ", samples, " of ", T0 + room, " tokens"));
        std::vector<int64_t> rows;
        for (int64_t s = 0; s < samples; ++s) rows.insert(rows.end(), ids.begin(), ids.end());
        nn::GenerateTimings timings;
        Tensor out = model->generate(from_vector(rows, {samples, T0}), room, g, &timings);
        if (print_timings) {
          auto rate = [](int64_t tokens, double s) { return s > 0 ? static_cast<double>(tokens) / s : 0.0; };
          std::fprintf(stderr,
                       "xg-generate: timings: prefill %lld tokens in %.3f ms (%.1f tokens/s); decode %lld tokens in "
                       "%.3f ms (%.1f tokens/s); sampling %.3f ms\n",
                       static_cast<long long>(timings.prompt_tokens), 1e3 * timings.prefill_seconds,
                       rate(timings.prompt_tokens, timings.prefill_seconds), static_cast<long long>(timings.decode_tokens),
                       1e3 * timings.decode_seconds, rate(timings.decode_tokens, timings.decode_seconds),
                       1e3 * timings.sample_seconds);
        }
        const int64_t T = out.shape()[1];
        for (int64_t s = 0; s < samples; ++s) {
          std::vector<int64_t> gen;
          bool stopped = false;
          for (int64_t t = T0; t < T && !stopped; ++t) {
            const int64_t id = out.data<int64_t>()[s * T + t];
            stopped = id == tok->eos_id();
            if (!stopped || print_ids) gen.push_back(id);
          }
          if (print_ids) {
            std::string line;
            for (int64_t id : gen) line += (line.empty() ? "" : " ") + std::to_string(id);
            std::cout << line << "\n";
            continue;
          }
          if (samples > 1) std::cout << "--- sample " << s + 1 << "\n";
          // raw: the prompt's ids decoded with the continuation, so that a decoder that drops the
          // first token's leading space (SentencePiece's) sees the text whole.
          if (format == "raw") gen.insert(gen.begin(), ids.begin(), ids.end());
          std::cout << tok->decode(gen, /*skip_special_tokens=*/true) << "\n";
        }
        return 0;
      });
}
