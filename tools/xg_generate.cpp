// xg-generate: samples from a base model (a Hugging Face folder, an xg-train or an xg-finetune
// --merge folder, or a GGUF file), optionally with LoRA adapters (xg-finetune's output, or any PEFT folder of
// matching shapes), tokenizing with the folder's tokenizer; prints text as it comes, or token ids
// (--ids); --prompts runs a file of prompts in batches and prints one JSON line per completion.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "finetune/base_model.hpp"
#include "finetune/dataset.hpp"
#include "finetune/lora.hpp"
#include "finetune/peft.hpp"
#include "nn/decoder.hpp"
#include "nn/sampling.hpp"
#include "text/chat_template.hpp"
#include "text/text_stream.hpp"
#include "text/tokenizer.hpp"
#include "tools/cli/flags.hpp"
#include "tools/cli/run_main.hpp"
#include "tools/cli/threads.hpp"

using namespace xg;
namespace ft = xg::finetune;
namespace cli = xg::cli;
namespace po = boost::program_options;
using json = nlohmann::json;

namespace {

// How a row ended: its eos token, a stop string, or --max-new-tokens (or the model's positions).
const char* end_reason(const text::TextStream& s, bool eos) { return s.stopped() ? "stop" : eos ? "eos" : "length"; }

}  // namespace

int main(int argc, char** argv) {
  std::string base, prompt, prompts_file, adapter, format = "auto", chat_template = "auto", system, dtype = "auto";
  std::vector<std::string> stops, template_var_items;
  nlohmann::ordered_json template_vars = nlohmann::ordered_json::object();
  double adapter_scale = 1.0;
  int64_t max_new = 200, samples = 1, batch = 8;
  bool print_ids = false, print_timings = false, no_stream = false;
  nn::GenerateOptions g;
  g.temperature = 0.8;
  po::options_description opts = cli::flag_group("xg-generate options");
  // clang-format off
  opts.add_options()
    ("help", "show this help")
    ("base", po::value(&base)->required(),
     "model: a Hugging Face folder (config.json, safetensors, tokenizer.json), an xgrad one, or a .gguf file")
    ("prompt", po::value(&prompt)->default_value(""), "text to continue (raw) or instruction (instruct)")
    ("prompts", po::value(&prompts_file),
     "a JSONL file of prompts, one {\"prompt\": TEXT} per line, instead of --prompt: prompts of the same length in "
     "tokens run together in batches of --batch rows; prints one JSON line per completion, in the file's order "
     "(prompt index, sample, prompt, completion, how it ended: eos, stop or length)")
    ("batch", po::value(&batch)->default_value(batch), "--prompts: rows per batch (prompts x samples)")
    ("format", po::value(&format)->default_value(format),
     "raw: the tokenizer's BOS + prompt, continued; instruct: the format xg-finetune trains on, the chat "
     "template's (see --chat-template) or BOS + prompt + newline (auto: instruct with --adapter or on a folder "
     "xg-finetune --merge wrote, else raw)")
    ("chat-template", po::value(&chat_template)->default_value(chat_template),
     "instruct format: auto uses the folder's chat template (tokenizer_config.json) when it has one; none: BOS + prompt + "
     "newline; or a template FILE (a Jinja file or a tokenizer_config.json, FILE:NAME for a named one), as "
     "xg-finetune --chat-template takes it")
    ("template-var", po::value(&template_var_items)->composing(),
     "NAME=VALUE passed to the chat template (repeatable; VALUE as JSON, a bare word as a string): "
     "enable_thinking=false, tools=[...]; a name the template does not read is an error")
    ("system", po::value(&system), "instruct format with a chat template: a system message before the prompt")
    ("dtype", po::value(&dtype)->default_value(dtype),
     "how the model's matrices are stored: auto (as the file stores them: a Q8_0 or Q4_0 GGUF's q8_0 or q4_0, a bf16 "
     "folder's bf16, a float16 folder's or a GGUF's F16 f16, F32 as float32, a GGUF's k-quants (Q2_K ... Q6_K), "
     "Q4_1/Q5_0/Q5_1 and IQ4_NL/IQ4_XS likewise) | f32 | bf16 | f16 | q8_0 | q4_0; products with bf16 matrices round "
     "the other operand to bf16, f16, q8_0 and q4_0 ones widen a tile of the weight at a time (exact); norms, KV cache "
     "and sampling "
     "stay float32")
    ("max-new-tokens", po::value(&max_new)->default_value(max_new), "tokens to generate at most (stops at EOS)")
    ("adapter", po::value(&adapter), "LoRA adapter folder (adapter_config.json + adapter_model.safetensors)")
    ("adapter-scale", po::value(&adapter_scale)->default_value(adapter_scale), "multiplier of the adapters' output")
    ("temperature", po::value(&g.temperature)->default_value(g.temperature), "0 = greedy")
    ("top-k", po::value(&g.top_k)->default_value(g.top_k), "keep the k most likely tokens (0 = off)")
    ("top-p", po::value(&g.top_p)->default_value(g.top_p), "nucleus sampling mass (1 = off)")
    ("min-p", po::value(&g.min_p)->default_value(g.min_p),
     "keep the tokens at least this times as likely as the most likely one, after top-k and top-p (0 = off; "
     "as transformers' min_p and llama.cpp's --min-p)")
    ("repetition-penalty", po::value(&g.repetition_penalty)->default_value(g.repetition_penalty),
     "CTRL's penalty on every token already in the prompt or the output: its logit divided by it if positive, "
     "multiplied if negative, greedy included (1 = off; transformers' repetition_penalty)")
    ("stop", po::value(&stops)->composing(),
     "end a sample where its text contains this string (repeatable); the text printed stops before it, --ids keep "
     "the token that completed it")
    ("no-stream", po::bool_switch(&no_stream),
     "print a single sample's text once it is complete instead of as the tokens come")
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
        // A template named on the command line (a file, or variables for it) means the instruct format.
        const bool template_asked = (chat_template != "auto" && chat_template != "none") || !template_var_items.empty();
        if (format == "auto")
          format = adapter.empty() && !ft::is_finetuned_folder(base) && !template_asked ? "raw" : "instruct";
        cli::choice<int>("format", format, {{"raw", 0}, {"instruct", 1}});
        if (chat_template != "auto" && chat_template != "none") {  // a file, or FILE:NAME
          std::error_code ec;
          const std::size_t colon = chat_template.rfind(':');
          cli::require(std::filesystem::exists(chat_template, ec) ||
                           (colon != std::string::npos && colon > 0 && std::filesystem::exists(chat_template.substr(0, colon), ec)),
                       "--chat-template: expected auto, none or a template file, got '" + chat_template + "' (no such file)");
        }
        template_vars = cli::parse_assignments("template-var", template_var_items);
        cli::require(template_vars.empty() || (format == "instruct" && chat_template != "none"),
                     "--template-var needs the instruct format with a chat template");
        cli::choice<int>("dtype", dtype, {{"auto", 0}, {"f32", 1}, {"bf16", 2}, {"f16", 5}, {"q8_0", 3}, {"q4_0", 4}});
        cli::require(system.empty() || (format == "instruct" && chat_template != "none"),
                     "--system needs the instruct format with a chat template (--chat-template auto)");
        cli::require(max_new >= 1 && samples >= 1, "--max-new-tokens and --samples must be positive");
        cli::require(g.temperature == 0 || g.temperature >= nn::kMinTemperature,
                     str_cat("--temperature must be 0 (greedy) or at least ", nn::kMinTemperature, ", got ", g.temperature));
        cli::require(g.top_k >= 0, "--top-k must be >= 0");
        cli::require(g.top_p > 0 && g.top_p <= 1, "--top-p must be in (0, 1]");
        cli::require(g.min_p >= 0 && g.min_p <= 1, str_cat("--min-p must be in [0, 1], got ", g.min_p));
        cli::require(g.repetition_penalty > 0 && std::isfinite(g.repetition_penalty),
                     str_cat("--repetition-penalty must be positive, got ", g.repetition_penalty));
        for (const std::string& s : stops) cli::require(!s.empty(), "--stop: a stop string is empty");
        cli::require(prompts_file.empty() || vm["prompt"].defaulted(), "--prompts and --prompt exclude each other");
        cli::require(batch >= 1, "--batch must be positive");
        cli::require(vm["batch"].defaulted() || !prompts_file.empty(), "--batch needs --prompts");
        cli::require(vm["adapter-scale"].defaulted() || !adapter.empty(), "--adapter-scale needs --adapter");
        return -1;
      },
      [&] {
        // The prompts are read and checked before the model loads.
        const std::vector<ft::PromptRow> prompts = prompts_file.empty()
                                                       ? std::vector<ft::PromptRow>{{prompt, nullptr, "--prompt"}}
                                                       : ft::read_prompts_jsonl(prompts_file);
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
            format == "instruct" ? ft::chat_template_for(loaded.source, chat_template, tok.get()) : nullptr;
        if (chat) chat->check_variables(template_vars, "--template-var");
        check(template_vars.empty() || chat != nullptr, "xg-generate: --template-var: ", base, " has no chat template");
        check(system.empty() || chat != nullptr, "xg-generate: --system: ", base,
              " has no chat template (tokenizer_config.json has no chat_template)");
        const ft::RowFormat row_format{tok.get(), chat.get(), system, template_vars};
        auto encode = [&](const std::string& text) {
          return format == "instruct" ? row_format.prompt_ids(text) : tok->encode(text, true);
        };
        std::vector<std::vector<int64_t>> prompt_ids;
        for (std::size_t i = 0; i < prompts.size(); ++i) {
          if (prompts[i].messages.is_null()) {
            prompt_ids.push_back(encode(prompts[i].text));
          } else {  // a conversation: continued as the assistant, in the chat template's format
            check(chat != nullptr, "xg-generate: ", prompts[i].where, ": a conversation needs the instruct format with a chat template");
            ft::GrpoExample ex;
            ex.prompt_messages = prompts[i].messages;
            try {
              prompt_ids.push_back(row_format.prompt_ids(ex));
            } catch (const Error& e) {
              throw Error(str_cat(prompts[i].where, ": ", e.what()));
            }
          }
          check(!prompt_ids.back().empty(), "xg-generate: ", prompts_file.empty() ? "the prompt" : prompts[i].where,
                " is empty and the tokenizer of ", base, " adds no BOS token to start from (give a prompt)");
        }
        g.eos_id = tok->eos_id();
        // Prompts of one length run together (generate takes rows of equal length), in batches of
        // at most --batch rows; a single --prompt is one batch of --samples rows.
        std::map<std::size_t, std::vector<std::size_t>> by_length;
        for (std::size_t i = 0; i < prompt_ids.size(); ++i) by_length[prompt_ids[i].size()].push_back(i);
        const int64_t per_batch = prompts_file.empty() ? samples : std::max<int64_t>(1, batch / samples);
        const bool stream = prompts_file.empty() && samples == 1 && !print_ids && !no_stream;
        nn::GenerateTimings total;
        std::vector<std::vector<std::string>> lines(prompts.size());  // --prompts: printed in the file's order at the end
        for (const auto& [T0u, members] : by_length) {
          const int64_t T0 = static_cast<int64_t>(T0u);
          int64_t room = max_new;
          if (model->max_seq_len() >= 0) room = std::min(room, model->max_seq_len() - T0);
          check(room > 0, "xg-generate: the prompt (", T0, " tokens) fills the model's ", model->max_seq_len(), " positions");
          for (std::size_t first = 0; first < members.size(); first += static_cast<std::size_t>(per_batch)) {
            const std::vector<std::size_t> part(members.begin() + static_cast<std::ptrdiff_t>(first),
                                                members.begin() + static_cast<std::ptrdiff_t>(std::min(members.size(), first + per_batch)));
            const int64_t rows_n = static_cast<int64_t>(part.size()) * samples;
            // Each row's KV cache over its whole length and the prompt's logits.
            const double per_row = static_cast<double>(T0 + room) * static_cast<double>(model->kv_cache_bytes_per_token(4)) +
                                   static_cast<double>(T0) * static_cast<double>(model->config().vocab_size) * 4;
            cli::require_memory(static_cast<double>(rows_n) * per_row,
                                prompts_file.empty() ? str_cat("--samples ", samples, " of ", T0 + room, " tokens")
                                                     : str_cat("--batch of ", rows_n, " rows of ", T0 + room, " tokens"));
            std::vector<int64_t> rows;
            std::vector<text::TextStream> streams;
            for (std::size_t i : part)
              for (int64_t s = 0; s < samples; ++s) {
                rows.insert(rows.end(), prompt_ids[i].begin(), prompt_ids[i].end());
                // raw: the prompt's ids are decoded with the continuation, so that a decoder that
                // drops the first token's leading space (SentencePiece's) sees the text whole.
                streams.emplace_back(*tok, format == "raw" ? prompt_ids[i] : std::vector<int64_t>{}, stops);
              }
            if (stream && format == "raw") std::cout << tok->decode(prompt_ids[part[0]], true) << std::flush;
            g.on_token = [&](int64_t row, int64_t id) {
              const bool stop = streams[row].push(id);
              if (stream) std::cout << streams[row].take_ready() << std::flush;
              return stop;
            };
            nn::GenerateTimings timings;
            const Tensor out = model->generate(from_vector(rows, {rows_n, T0}), room, g, &timings);
            total.prompt_tokens += timings.prompt_tokens;
            total.prefill_seconds += timings.prefill_seconds;
            total.decode_tokens += timings.decode_tokens;
            total.decode_seconds += timings.decode_seconds;
            total.sample_seconds += timings.sample_seconds;
            const int64_t T = out.shape()[1];
            for (int64_t r = 0; r < rows_n; ++r) {
              text::TextStream& st = streams[r];
              const int64_t n = static_cast<int64_t>(st.tokens().size());
              const bool eos = !st.stopped() && T0 + n < T && out.data<int64_t>()[r * T + T0 + n] == tok->eos_id();
              std::vector<int64_t> ids = st.tokens();
              if (eos) ids.push_back(tok->eos_id());
              std::string id_line;
              for (int64_t id : ids) id_line += (id_line.empty() ? "" : " ") + std::to_string(id);
              const std::size_t which = part[static_cast<std::size_t>(r / samples)];
              if (!prompts_file.empty()) {
                json line = {{"index", which}, {"sample", r % samples}, {"prompt", prompts[which].messages.is_null() ? json(prompts[which].text) : json(prompts[which].messages)},
                             {"completion", st.text()}, {"end", end_reason(st, eos)}};
                if (print_ids) line["ids"] = ids;
                lines[which].push_back(line.dump(-1, ' ', false, json::error_handler_t::replace));
              } else if (print_ids) {
                std::cout << id_line << "\n";
              } else if (stream) {
                std::cout << st.take_rest() << "\n";
              } else {
                if (samples > 1) std::cout << "--- sample " << r + 1 << "\n";
                std::cout << (format == "raw" ? tok->decode(prompt_ids[which], true) : "") << st.text() << "\n";
              }
            }
          }
        }
        for (const auto& per_prompt : lines)
          for (const std::string& line : per_prompt) std::cout << line << "\n";
        if (print_timings) {
          auto rate = [](int64_t tokens, double s) { return s > 0 ? static_cast<double>(tokens) / s : 0.0; };
          std::fprintf(stderr,
                       "xg-generate: timings: prefill %lld tokens in %.3f ms (%.1f tokens/s); decode %lld tokens in "
                       "%.3f ms (%.1f tokens/s); sampling %.3f ms\n",
                       static_cast<long long>(total.prompt_tokens), 1e3 * total.prefill_seconds,
                       rate(total.prompt_tokens, total.prefill_seconds), static_cast<long long>(total.decode_tokens),
                       1e3 * total.decode_seconds, rate(total.decode_tokens, total.decode_seconds),
                       1e3 * total.sample_seconds);
        }
        return 0;
      });
}
