// xgrad_lora_bench: times LoRA SFT steps of a Hugging Face-shaped model with random weights
// (SmolLM2-135M's config.json by default) and prints one JSON object; bench/lora_compare runs
// it beside bench/torch_lora.py, which computes the same step in PyTorch.
#include <omp.h>

#include <chrono>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "finetune/lora.hpp"
#include "finetune/objectives.hpp"
#include "nn/hf.hpp"
#include "nn/weight_dtype.hpp"
#include "step_util.hpp"
#include "tools/cli/flags.hpp"
#include "tools/cli/output.hpp"
#include "tools/cli/run_main.hpp"
#include "tools/cli/threads.hpp"
#include "xgrad.hpp"

namespace {

using json = nlohmann::ordered_json;
namespace po = boost::program_options;
namespace ft = xg::finetune;

// HuggingFaceTB/SmolLM2-135M's config.json (the keys that shape the model; its
// transformers-only keys such as pretraining_tp 1 and use_cache change nothing here).
// bench/torch_lora.py holds the same dictionary.
constexpr const char* kSmolLM2Config = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama",
  "hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
  "num_attention_heads": 9, "num_key_value_heads": 3, "vocab_size": 49152,
  "hidden_act": "silu", "rms_norm_eps": 1e-05, "rope_theta": 100000, "rope_scaling": null,
  "max_position_embeddings": 8192, "tie_word_embeddings": true, "attention_bias": false,
  "bos_token_id": 0, "eos_token_id": 0, "torch_dtype": "bfloat16"
})";

constexpr double kInitStd = 0.041666666666666664;  // SmolLM2's initializer_range

struct Options {
  std::string hf_config;  // empty: SmolLM2-135M's
  int64_t seq = 512, batch = 4, warmup = 1, steps = 3, prompt = 128, r = 16;
  double alpha = 32;
  std::string targets = "q_proj,v_proj";
  bool checkpointing = false, bf16 = false;
  std::string base_dtype = "f32";  // how the frozen matrices are stored (nn/weight_dtype.hpp)
  uint64_t seed = 0;
};

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw xg::cli::UsageError("--hf-config: cannot read '" + path + "'");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Per step B rows of T + 1 uniform token ids (inputs and labels are the same rows: sft_loss
// shifts them); the first `prompt` tokens of each row are the prompt, masked from the loss as
// xg-finetune's SFT masks a chat's prompt.
std::vector<xg::Tensor> make_rows(const Options& o, int64_t vocab, int64_t count) {
  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<int64_t> id(0, vocab - 1);
  std::vector<xg::Tensor> rows;
  for (int64_t s = 0; s < count; ++s) {
    std::vector<int64_t> v(static_cast<std::size_t>(o.batch * o.seq));
    for (int64_t& x : v) x = id(rng);
    rows.push_back(xg::from_vector(v, {o.batch, o.seq}));
  }
  return rows;
}

json run(const Options& o) {
  const std::string text = o.hf_config.empty() ? kSmolLM2Config : read_text(o.hf_config);
  const xg::nn::HFConfig hf = xg::nn::HFConfig::from_json(text, o.hf_config.empty() ? "SmolLM2-135M config" : o.hf_config);
  xg::manual_seed(o.seed);
  xg::nn::DecoderLM model(hf.lm);
  // transformers' LlamaPreTrainedModel._init_weights: every matrix N(0, initializer_range),
  // SmolLM2's 0.0417 (the modules' own init would give the tied head logits of std ~24).
  for (auto& [name, p] : model.named_parameters())
    if (p.dim() == 2) xg::nn::init::normal_(p, 0, kInitStd);
  const xg::nn::WeightDtype stored = xg::nn::parse_weight_dtype(o.base_dtype, "--base-dtype");
  if (stored != xg::nn::WeightDtype::F32) xg::nn::store_weights_in(model, xg::nn::weight_dtype_tensor(stored));
  ft::LoRAConfig lc;
  lc.r = o.r;
  lc.alpha = o.alpha;
  lc.targets = o.targets;
  lc.validate("xgrad_lora_bench");
  xg::Generator gen(o.seed + 1);
  const std::vector<std::string> adapted = ft::inject_lora(model, lc, gen, "hf_llama");
  model.set_gradient_checkpointing(o.checkpointing);
  model.train();
  const std::vector<xg::Tensor> trainable = ft::lora_parameters(model);
  int64_t n_train = 0;
  for (const xg::Tensor& p : trainable) n_train += p.numel();
  xg::optim::AdamWOptions ao;
  ao.lr = 2e-4;
  ao.weight_decay = 0;  // PEFT recipes train LoRA without decay
  xg::optim::AdamW opt(trainable, ao);
  const int64_t vocab = hf.lm.vocab_size;
  const std::vector<xg::Tensor> rows = make_rows(o, vocab, o.warmup + o.steps);
  const xg::Tensor prompt = xg::full({o.batch}, static_cast<double>(o.prompt), xg::kInt64);

  std::vector<double> secs;
  double first_loss = 0, last_loss = 0;
  // Buffers of 128 KB and more (allocated_bytes()): what is live before a step (the weights,
  // the rows) and the most a step's graph keeps beyond that for its backward.
  const double setup_peak_rss = xg::bench::peak_rss_mb();
  // The steps' own peak: buffers the setup freed are let go and the high-water mark restarts.
  xg::empty_cache();
  const bool steps_peak = xg::bench::reset_peak_rss();
  const std::size_t live_before = xg::allocated_bytes();
  std::size_t kept_for_backward = 0;
  for (int64_t s = 0; s < o.warmup + o.steps; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    opt.zero_grad();
    const xg::Tensor& ids = rows[static_cast<std::size_t>(s)];
    xg::Tensor loss;
    {
      std::optional<xg::autocast> bf16;
      if (o.bf16) bf16.emplace();
      loss = xg::finetune::sft_model_loss(model, ids, xg::Tensor(), ids, prompt);  // as xg-finetune's SFT
      kept_for_backward = std::max(kept_for_backward, xg::allocated_bytes() - live_before);
      loss.backward();
    }
    opt.step();
    last_loss = loss.item();
    const double dt = xg::bench::seconds_since(t0);
    if (s == 0) first_loss = last_loss;
    if (s >= o.warmup) secs.push_back(dt);
  }
  const double sec = xg::bench::median(secs);
  json j;
  j["impl"] = "xgrad";
  j["model"] = o.hf_config.empty() ? "SmolLM2-135M shape" : o.hf_config;
  j["hidden"] = hf.lm.block.d_model;
  j["n_layers"] = hf.lm.n_layers;
  j["vocab"] = vocab;
  j["seq_len"] = o.seq;
  j["batch"] = o.batch;
  j["prompt_tokens"] = o.prompt;
  j["lora_r"] = o.r;
  j["lora_alpha"] = o.alpha;
  j["lora_targets"] = o.targets;
  j["lora_modules"] = adapted.size();
  j["params"] = model.num_parameters();
  j["trainable"] = n_train;
  j["gradient_checkpointing"] = o.checkpointing;
  j["base_dtype"] = o.base_dtype;
  j["bf16"] = o.bf16;
  j["gemm_bf16"] = xg::bf16_gemm_description();
  j["warmup"] = o.warmup;
  j["steps"] = o.steps;
  j["ms_per_step"] = sec * 1e3;
  j["ms_per_step_min"] = *std::min_element(secs.begin(), secs.end()) * 1e3;
  j["ms_per_step_max"] = *std::max_element(secs.begin(), secs.end()) * 1e3;
  j["tokens_per_s"] = static_cast<double>(o.batch * o.seq) / sec;
  // The whole process's, as torch_lora.py's (getrusage's mark restarts with reset_peak_rss()).
  j["peak_rss_mb"] = std::max(setup_peak_rss, xg::bench::peak_rss_mb());
  j["setup_peak_rss_mb"] = setup_peak_rss;
  if (steps_peak) j["steps_peak_rss_mb"] = xg::bench::peak_rss_since_reset_mb();
  j["live_before_steps_mb"] = static_cast<double>(live_before) / (1 << 20);
  j["kept_for_backward_mb"] = static_cast<double>(kept_for_backward) / (1 << 20);
  j["threads"] = omp_get_max_threads();
  j["gemm"] = xg::gemm_backend_description();
  j["thread_policy"] = xg::threads_description();
  j["settings"] = xg::cli::settings_json();
  j["loss_first"] = first_loss;
  j["loss_last"] = last_loss;
  j["seed"] = o.seed;
  return j;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  po::options_description opts = xg::cli::flag_group("options");
  // clang-format off
  opts.add_options()
    ("help", "show this help")
    ("hf-config", po::value(&o.hf_config), "a Hugging Face config.json (default: SmolLM2-135M's)")
    ("seq-len", po::value(&o.seq)->default_value(o.seq), "tokens per row")
    ("batch", po::value(&o.batch)->default_value(o.batch), "rows per step")
    ("prompt", po::value(&o.prompt)->default_value(o.prompt), "prompt tokens of each row (masked from the loss)")
    ("r", po::value(&o.r)->default_value(o.r), "LoRA rank")
    ("alpha", po::value(&o.alpha)->default_value(o.alpha), "lora_alpha")
    ("targets", po::value(&o.targets)->default_value(o.targets), "LoRA target modules")
    ("gradient-checkpointing", po::bool_switch(&o.checkpointing), "recompute each block in backward")
    ("base-dtype", po::value(&o.base_dtype)->default_value(o.base_dtype), "the frozen matrices: f32 | bf16 | f16 | q8_0 | q4_0")
    ("bf16", po::bool_switch(&o.bf16), "mixed precision (xg::autocast) around forward and backward")
    ("warmup", po::value(&o.warmup)->default_value(o.warmup), "untimed steps first")
    ("steps", po::value(&o.steps)->default_value(o.steps), "timed steps")
    ("seed", po::value(&o.seed)->default_value(o.seed), "seeds the weights, the adapters and the token rows");
  // clang-format on
  const std::string usage =
      "usage: xgrad_lora_bench [--hf-config config.json] [--seq-len 512] [--batch 4] [--steps 3] ...\n"
      "Times LoRA SFT steps (r 16 on q_proj, v_proj; AdamW on the adapters) of a random-weight model of a\n"
      "Hugging Face config (SmolLM2-135M's by default) and prints one JSON object.";
  int threads = 0;
  opts.add(xg::cli::threads_flag(threads));
  return xg::cli::run_main(
      "xgrad_lora_bench",
      [&] {
        po::variables_map vm;
        if (xg::cli::parse(argc, argv, opts, vm, usage)) return 0;
        xg::cli::apply_threads(threads);
        xg::cli::require(o.seq > 1 && o.batch > 0, "--seq-len must be > 1 and --batch > 0");
        xg::cli::require(o.prompt >= 0 && o.prompt < o.seq - 1, "--prompt must be in [0, --seq-len - 1)");
        xg::cli::require(o.warmup >= 0 && o.steps > 0, "--warmup must be >= 0 and --steps > 0");
        return -1;
      },
      [&] {
        std::cout << run(o).dump() << std::endl;
        return 0;
      });
}
