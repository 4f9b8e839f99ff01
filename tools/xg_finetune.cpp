// xg-finetune: LoRA-finetunes a base model (a Hugging Face folder, an xg-train output folder or
// a GGUF file) with SFT, DPO, GRPO, RLOO or PPO, tokenizing with the base's tokenizer and formatting rows
// with its chat template. Writes <out>/adapter_model.safetensors + adapter_config.json (Hugging Face PEFT's
// format, under the base's module names), checkpoint.safetensors (--resume), log.jsonl,
// args.json, summary.json and, with --merge, <out>/merged/ (the base with the adapters folded
// in: an HF folder with the base's tokenizer files for an HF base, else an xgrad folder) or,
// for a GGUF base, <out>/merged.gguf (with the base's tokenizer metadata). With --full every
// weight trains (no adapters) and the model is written to <out>/model/ as the base's folder kind.
// PPO also writes its value head, <out>/value_head.safetensors.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <optional>
#include <set>

#include "autograd/gemm_backend.hpp"
#include "autograd/memory.hpp"
#include "distributed/distributed.hpp"
#include "finetune/base_model.hpp"
#include "finetune/dataset.hpp"
#include "finetune/gguf_export.hpp"
#include "finetune/lora.hpp"
#include "finetune/objectives.hpp"
#include "finetune/packing.hpp"
#include "finetune/peft.hpp"
#include "finetune/reward_process.hpp"
#include "finetune/rewards.hpp"
#include "finetune/world.hpp"
#include "io/atomic_file.hpp"
#include "io/read_file.hpp"
#include "io/safetensors.hpp"
#include "losses/losses.hpp"
#include "nn/decoder.hpp"
#include "nn/hf.hpp"
#include "nn/init.hpp"
#include "text/chat_template.hpp"
#include "text/tokenizer.hpp"
#include "tools/cli/flags.hpp"
#include "tools/cli/loop_flags.hpp"
#include "tools/cli/output.hpp"
#include "tools/cli/run_dir.hpp"
#include "tools/cli/run_main.hpp"
#include "tools/cli/threads.hpp"

using namespace xg;
namespace ft = xg::finetune;
namespace cli = xg::cli;
namespace po = boost::program_options;
using nlohmann::json;

namespace {

constexpr const char* kProg = "xg-finetune";
constexpr double kMaxEpochs = 1e6;

// DPO's and GRPO's defaults where they differ from SFT's (those are the flags' own defaults).
// GRPO's step is --grad-accum prompts of --group-size completions: one prompt's eight
// completions made a gradient too noisy to follow on the walk-through's task (held-out sampled
// reward flat or falling at lr 1e-3 to 3e-3), eight prompts a step raised it (README).
struct ObjectiveDefaults {
  double lr;
  int64_t steps, warmup, batch, grad_accum;
};
constexpr ObjectiveDefaults kDpoDefaults{1e-3, 600, 20, 8, 1};
constexpr ObjectiveDefaults kGrpoDefaults{1e-3, 100, 5, 1, 8};
// PPO's step is one minibatch update: a rollout of --batch x --grad-accum x --num-mini-batches
// prompts trains --ppo-epochs x --num-mini-batches steps (finetune/README.md measured these).
constexpr ObjectiveDefaults kPpoDefaults{1e-3, 100, 4, 8, 1};

// --dpo-loss: TRL's loss_type names.
losses::DpoLossType parse_dpo_loss(const std::string& text) {
  return cli::choice<losses::DpoLossType>("dpo-loss", text,
                                          {{"sigmoid", losses::DpoLossType::Sigmoid}, {"ipo", losses::DpoLossType::Ipo},
                                           {"hinge", losses::DpoLossType::Hinge}, {"robust", losses::DpoLossType::Robust}});
}

struct Flags {
  std::string base, data, eval_data, objective = "sft", chat_template = "auto", system, base_dtype = "auto";
  std::string grpo_loss_type = "grpo", dpo_loss = "sigmoid";
  std::vector<std::string> template_vars;
  std::vector<std::string> rewards{"exact"};
  std::string format_regex = ft::kDefaultFormatRegex;
  std::string reward_cmd;
  double reward_timeout = 30;
  std::optional<double> reward_cmd_weight;  // --reward cmd[:W]
  bool completion_only = true;
  ft::LoRAConfig lora;
  double epochs = 0, beta = -1, label_smoothing = 0;
  int64_t batch = 8, max_len = 128, eval_rows = 256;
  ft::GrpoTask grpo;
  ft::PpoTask ppo;
  bool merge = false, packing = false;
  bool full = false;  // every weight trains (no LoRA)
  ft::LoopOptions loop;
  cli::RunDirOptions run_dir;
};

// `plain` (a model without adapters) written to `dir` as the base is stored: an HF folder
// (float32, the base's tokenizer files and config ids) for an HF base, a GGUF file (F32, the
// base's tokenizer metadata) for a GGUF base, else an xgrad folder; the folders get
// kFinetunedMarker.
void write_like_base(const nn::DecoderLM& plain, const std::string& dir, const io::ModelSource& base,
                     const std::string& objective) {
  const bool gguf = base.format == io::ModelFormat::Gguf;
  if (gguf) {
    ft::save_gguf_model(plain, base, dir);
  } else if (base.format == io::ModelFormat::HuggingFace) {
    nn::SaveHFOptions options;
    options.source = base.path;
    nn::save_hf(plain, dir, options);
  } else {
    nn::save_pretrained(plain, dir);
  }
  if (!gguf) cli::write_text(dir + "/" + ft::kFinetunedMarker, json{{"format", "instruct"}, {"objective", objective}}.dump(2) + "\n");
}

// The base with the adapters folded into its weights, written to `dir` (write_like_base).
void write_merged(nn::DecoderLM& model, const std::string& dir, const io::ModelSource& base,
                  const std::string& objective) {
  // A base stored in bf16, q8_0 or q4_0 (--base-dtype) is widened first: the merged weights are
  // float32, base plus delta, not rounded again. The run's training is over by now.
  if (model.widen_embeddings()) nn::store_weights_in(model, kFloat32);
  ft::merge(model);
  std::unique_ptr<nn::DecoderLM> made;
  {
    nn::init::SkipInitGuard skip;  // its every parameter is loaded (strict) from the merged model
    made = std::make_unique<nn::DecoderLM>(model.config());
  }
  nn::DecoderLM& plain = *made;
  TensorMap state;
  for (const auto& [name, t] : model.state_dict())
    if (name.find(".lora_") == std::string::npos) state.emplace(name, t);
  plain.load_state_dict(state, true);
  write_like_base(plain, dir, base, objective);
  ft::unmerge(model);
}

// What `write` writes as `dir` (the merged or fully trained model; with a GGUF base the file
// <dir>.gguf), written into <that>.tmp.<pid> and renamed: a failed or killed write leaves no
// partial folder or file (the next start removes the temporary of a dead process).
void write_renamed(std::string dir, const io::ModelSource& base, const std::function<void(const std::string&)>& write) {
  namespace fs = std::filesystem;
  if (base.format == io::ModelFormat::Gguf) dir += ".gguf";
  const std::string tmp = str_cat(dir, ".tmp.", ::getpid());
  fs::remove_all(tmp);
  try {
    write(tmp);
    fs::remove_all(dir);
    fs::rename(tmp, dir);
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
}

// The model a folder's config.json describes, read without its weights: --full's memory check
// comes before the weights are loaded.
nn::LMConfig folder_config(const io::ModelSource& source) {
  const std::string text = io::read_file(source.config_file, kProg);
  return source.format == io::ModelFormat::HuggingFace ? nn::HFConfig::from_json(text, source.config_file).lm
                                                       : nn::LMConfig::from_json(text, source.config_file);
}

// The stored dtypes of a base other than F32 ("BF16", "F16"), for the startup line.
std::string narrow_dtypes(const io::ModelSource& source) {
  std::set<std::string> kinds;
  for (const auto& [name, dtype] : source.dtypes)
    if (dtype != "F32") kinds.insert(dtype);
  std::string out;
  for (const std::string& k : kinds) out += (out.empty() ? "" : ", ") + k;
  return out;
}

// PPO's flags, checked before anything loads. A rollout lives in memory only, so a run
// resumes at a step that starts one: --steps, --checkpoint-every and (with early stopping)
// --eval-every are multiples of the steps a rollout trains; when not given they are rounded up to one.
void validate_ppo(Flags& f, ft::LoopOptions& o, po::variables_map& vm) {
  const ft::PpoTask& p = f.ppo;
  cli::require(p.gamma >= 0 && p.gamma <= 1, str_cat("--gamma must be in [0, 1], got ", p.gamma));
  cli::require(p.lam >= 0 && p.lam <= 1, str_cat("--lam must be in [0, 1], got ", p.lam));
  cli::require(p.kl_coef >= 0 && std::isfinite(p.kl_coef), str_cat("--kl-coef must be >= 0, got ", p.kl_coef));
  cli::require(p.vf_coef >= 0 && std::isfinite(p.vf_coef), str_cat("--vf-coef must be >= 0, got ", p.vf_coef));
  cli::require(p.clip_value > 0, str_cat("--cliprange-value must be > 0, got ", p.clip_value));
  cli::require(f.grpo.clip_eps > 0, str_cat("--clip-eps must be > 0, got ", f.grpo.clip_eps));
  cli::require(p.ppo_epochs >= 1 && p.ppo_epochs <= 1000, str_cat("--ppo-epochs must be in [1, 1000], got ", p.ppo_epochs));
  cli::require(p.num_mini_batches >= 1 && p.num_mini_batches <= 1000,
               str_cat("--num-mini-batches must be in [1, 1000], got ", p.num_mini_batches));
  cli::require(f.grpo.max_new_tokens >= 1, "--max-new-tokens must be positive");
  cli::require(f.grpo.temperature >= nn::kMinTemperature,
               str_cat("--temperature must be at least ", nn::kMinTemperature, " (PPO samples), got ", f.grpo.temperature));
  cli::require(ft::world().size() == 1, str_cat("--objective ppo runs in one process (its rollout is not shared between "
                                                "ranks), not under mpirun with ", ft::world().size(), " ranks"));
  const int64_t cycle = p.ppo_epochs * p.num_mini_batches;
  const auto multiple = [&](const char* flag, int64_t& value) {
    if (value <= 0 || value % cycle == 0) return;
    cli::require(vm[flag].defaulted(), str_cat("--", flag, " ", value, " must be a multiple of --ppo-epochs x ",
                                               "--num-mini-batches = ", cycle, " (the steps one rollout trains; a run ",
                                               "resumes only where a rollout starts)"));
    value = (value / cycle + 1) * cycle;
    vm.at(flag).value() = value;
  };
  multiple("steps", o.steps);
  multiple("checkpoint-every", o.checkpoint_every);
  if (o.early_stopping_patience > 0) multiple("eval-every", o.eval_every);
}

}  // namespace

int main(int argc, char** argv) {
  distributed::Session mpi(&argc, &argv);  // data parallel under mpirun (rank 0 writes)
  Flags f;
  ft::LoopOptions& o = f.loop;
  // The defaults are README's walk-through ("Pre-train, then finetune with LoRA"): SFT's here,
  // DPO's and GRPO's set by kObjectiveDefaults when --lr, --steps or --warmup are not given.
  f.lora.r = 16;
  f.lora.alpha = 32;
  f.lora.dropout = 0.05;
  f.lora.targets = "q,k,v,o,gate,up,down";
  f.batch = 16;
  o.lr = 3e-3;
  o.warmup = ft::kAutoWarmup;  // min(30, steps / 10)
  o.max_auto_warmup = 30;
  o.steps = 600;
  o.weight_decay = 0;
  o.eval_every = 100;
  o.checkpoint_every = 100;
  o.eval_at_start = true;
  po::options_description opts = cli::flag_group("xg-finetune options");
  const std::string objective_help = str_cat(
      "sft | dpo | grpo | rloo (GRPO's sampling and rewards, REINFORCE leave-one-out advantages with the KL in the "
      "reward) | ppo (GRPO's rows and rewards, one completion per prompt, a value head, GAE; TRL's PPOTrainer). The "
      "defaults shown are SFT's; unless given, dpo uses --lr ", kDpoDefaults.lr, " --steps ",
      kDpoDefaults.steps, " --warmup ", kDpoDefaults.warmup, " --batch ", kDpoDefaults.batch, ", grpo --lr ",
      kGrpoDefaults.lr, " --steps ", kGrpoDefaults.steps, " --warmup ", kGrpoDefaults.warmup, " --grad-accum ",
      kGrpoDefaults.grad_accum, " (prompts per step), ppo --lr ", kPpoDefaults.lr, " --steps ", kPpoDefaults.steps,
      " --warmup ", kPpoDefaults.warmup, " --batch ", kPpoDefaults.batch, " --lora-dropout 0 (TRL disables dropout)");
  // clang-format off
  opts.add_options()
    ("help", "show this help")
    ("base", po::value(&f.base)->required(),
     "base model: a Hugging Face folder (config.json, safetensors, tokenizer.json), xg-train's folder, or a .gguf file")
    ("data", po::value(&f.data)->required(),
     "training JSONL in TRL's formats, told by the first row: sft {messages} | {text} | {prompt, completion} (strings "
     "or message lists) | {prompt, response}; dpo {prompt, chosen, rejected} (strings or message lists) | {chosen, "
     "rejected} (implicit prompt); grpo {prompt, answers} (prompt a string or a message list)")
    ("eval-data", po::value(&f.eval_data), "held-out JSONL of the same kind")
    ("early-stopping-patience", po::value(&o.early_stopping_patience)->default_value(o.early_stopping_patience),
     "stop after N evaluations in a row without a better --metric-for-best (transformers' EarlyStoppingCallback); "
     "the adapter written (and merged) is then the best one evaluated (load_best_model_at_end), kept meanwhile in "
     "<out>/best.safetensors. Needs --eval-data (0 = off)")
    ("metric-for-best", po::value(&o.best_metric),
     "the evaluation metric early stopping watches (default: loss for sft and dpo, reward for grpo, rloo and "
     "ppo); lower is better for a name ending in loss, higher otherwise")
    ("early-stopping-threshold", po::value(&o.early_stopping_threshold)->default_value(o.early_stopping_threshold),
     "how much an evaluation must beat the best by to count as better")
    ("objective", po::value(&f.objective)->default_value(f.objective), objective_help.c_str())
    ("chat-template", po::value(&f.chat_template)->default_value(f.chat_template),
     "auto: the base's chat template (tokenizer_config.json), when it has one; none: prompt/response rows as BOS + "
     "prompt + newline, then the response and EOS; FILE: a Jinja file or a tokenizer_config.json (FILE:NAME picks "
     "a named template of its list). Conversational rows need a template; prompt/response rows become a "
     "user/assistant turn in it")
    ("template-var", po::value(&f.template_vars)->composing(),
     "NAME=VALUE, repeatable: a variable every rendering of the chat template gets, VALUE as JSON or else a "
     "string (enable_thinking=false, 'tools=[...]'); a name the template never reads is an error")
    ("completion-only", po::value(&f.completion_only)->default_value(f.completion_only),
     "true: the loss on the completion only (the response; every assistant turn of a {messages} row: its content "
     "and end-of-turn); false: on every token of a row (TRL's completion_only_loss=False)")
    ("system", po::value(&f.system), "with a chat template: a system message before every prompt of prompt/response rows")
    ("out", po::value(&o.out_dir)->required(), "output folder (adapter, checkpoint, logs)")
    ("lora-r", po::value(&f.lora.r)->default_value(f.lora.r), "LoRA rank")
    ("lora-alpha", po::value(&f.lora.alpha)->default_value(f.lora.alpha), "LoRA alpha (scaling alpha / r)")
    ("lora-dropout", po::value(&f.lora.dropout)->default_value(f.lora.dropout), "dropout on the adapter input")
    ("lora-targets", po::value(&f.lora.targets)->default_value(f.lora.targets),
     "comma list of q,k,v,o,gate,up,down or module names (an HF base: q_proj ... down_proj, PEFT's module names "
     "and paths; GPT-2: c_attn, c_proj, c_fc; Phi-3: qkv_proj, gate_up_proj, each for all its parts), or a regex "
     "over PEFT's module paths")
    ("use-rslora", po::bool_switch(&f.lora.use_rslora), "scale by alpha / sqrt(r) (rsLoRA)")
    ("epochs", po::value(&f.epochs), "instead of --steps: passes over the training rows")
    ("batch", po::value(&f.batch)->default_value(f.batch),
     "rows per micro-batch (sft, dpo); grpo: one prompt each; ppo: prompts, one completion each")
    ("max-len", po::value(&f.max_len)->default_value(f.max_len), "tokens per row (prompt + response), longer rows truncated")
    ("packing", po::bool_switch(&f.packing),
     "sft, dpo: the training rows are packed once into rows of exactly --max-len tokens, each sequence attending "
     "to itself only (TRL's packing, padding-free), and --batch counts packed rows: every step has one shape, so "
     "its memory is the same at every step. DPO: a pair shares a row, each sequence cut to --max-len / 2")
    ("beta", po::value(&f.beta), "DPO beta (default 0.1) / GRPO KL coefficient (default 0.04)")
    ("label-smoothing", po::value(&f.label_smoothing)->default_value(f.label_smoothing), "DPO label smoothing")
    ("dpo-loss", po::value(&f.dpo_loss)->default_value(f.dpo_loss),
     "DPO's loss of the margin z, as TRL's loss_type: sigmoid (the paper's; cDPO with --label-smoothing) | ipo "
     "((z - 1/(2 beta))^2, Azar et al. 2023) | hinge (relu(1 - beta z), SLiC) | robust (rDPO, Chowdhury et al. "
     "2024; --label-smoothing below 0.5)")
    ("clip-eps", po::value(&f.grpo.clip_eps)->default_value(f.grpo.clip_eps),
     "GRPO and PPO ratio clip epsilon (TRL's cliprange)")
    ("kl-coef", po::value(&f.ppo.kl_coef)->default_value(f.ppo.kl_coef),
     "PPO: the per-token KL penalty's coefficient (k1 = log pi - log pi_ref, paid in the reward)")
    ("gamma", po::value(&f.ppo.gamma)->default_value(f.ppo.gamma), "PPO: GAE discount, in [0, 1]")
    ("lam", po::value(&f.ppo.lam)->default_value(f.ppo.lam), "PPO: GAE lambda, in [0, 1]")
    ("ppo-epochs", po::value(&f.ppo.ppo_epochs)->default_value(f.ppo.ppo_epochs),
     "PPO: passes over each rollout (TRL's num_ppo_epochs); a rollout trains --ppo-epochs x --num-mini-batches steps")
    ("num-mini-batches", po::value(&f.ppo.num_mini_batches)->default_value(f.ppo.num_mini_batches),
     "PPO: optimizer steps per pass over a rollout of --batch x --grad-accum x --num-mini-batches prompts")
    ("vf-coef", po::value(&f.ppo.vf_coef)->default_value(f.ppo.vf_coef), "PPO: the value loss's weight in the loss")
    ("cliprange-value", po::value(&f.ppo.clip_value)->default_value(f.ppo.clip_value),
     "PPO: how far a value prediction may move from the rollout's before its loss is clipped")
    ("group-size", po::value(&f.grpo.group_size)->default_value(f.grpo.group_size), "GRPO completions per prompt")
    ("dynamic-sampling", po::value(&f.grpo.dynamic_sampling)->default_value(f.grpo.dynamic_sampling),
     "GRPO and RLOO: draw another prompt, up to N times, for a group whose rewards are all equal (it has no "
     "advantage to learn from; DAPO's dynamic sampling, Yu et al. 2025); 0: off, as TRL")
    ("reward", po::value(&f.rewards)->composing()->default_value(f.rewards, "exact"),
     "GRPO, RLOO and PPO reward NAME[:WEIGHT], repeatable, the weighted rewards summed (TRL's reward_funcs and "
     "reward_weights): "
     "exact (the completion's first line is an answer) | prefix (exact, or partial credit for a common start) | "
     "format (--format-regex matches at the completion's start) | numeric (its \\boxed{} content, else its last "
     "number, equals an answer's) | cmd (the program of --reward-cmd)")
    ("reward-cmd", po::value(&f.reward_cmd),
     "GRPO, RLOO and PPO reward program, run once for the whole run with /bin/sh -c: it reads one JSON line per completion "
     "(the data row's fields with \"completion\" set) and answers one number per line. Alone, it is the reward; "
     "with other --reward names add cmd[:WEIGHT] to them. A hang past --reward-timeout, a crash or an answer "
     "that is not a finite number stops the run with an error naming the row (checkpoints kept)")
    ("reward-timeout", po::value(&f.reward_timeout)->default_value(f.reward_timeout),
     "seconds the --reward-cmd program may take for one answer")
    ("format-regex", po::value(&f.format_regex)->default_value(f.format_regex),
     "the pattern of --reward format (PCRE2; the default is Open R1's <think>, then <answer>)")
    ("loss-type", po::value(&f.grpo_loss_type)->default_value(f.grpo_loss_type),
     "GRPO token averaging, TRL's names: grpo (per completion, then over the group) | bnpo (over the group's "
     "tokens) | dr_grpo (the group's token sum / (group size x --max-new-tokens): no length bias)")
    ("max-new-tokens", po::value(&f.grpo.max_new_tokens)->default_value(f.grpo.max_new_tokens), "GRPO and PPO completion length")
    ("temperature", po::value(&f.grpo.temperature)->default_value(f.grpo.temperature), "GRPO and PPO sampling temperature")
    ("eval-rows", po::value(&f.eval_rows)->default_value(f.eval_rows), "held-out rows per evaluation")
    ("merge", po::bool_switch(&f.merge), "also write <out>/merged: the base with the adapters merged in")
    ("full", po::bool_switch(&f.full),
     "train every weight (no LoRA adapters; float32 weights, gradients and AdamW's two moments, 16 bytes a "
     "parameter, plus a frozen copy of the base as the reference of dpo, of grpo with --beta and of ppo with "
     "--kl-coef above 0); writes "
     "<out>/model, a folder of the base's kind (an HF folder with float32 weights and the base's tokenizer "
     "files). A Hugging Face or xgrad folder only; not with --merge, --lora-* or --base-dtype bf16|f16|q8_0|q4_0")
    ("base-dtype", po::value(&f.base_dtype)->default_value(f.base_dtype),
     "how the frozen base's matrices are stored: auto (as the file stores them: a bf16 folder bf16, a float16 folder "
     "or a GGUF's F16 f16, a Q8_0 or Q4_0 "
     "GGUF q8_0 or q4_0, a GGUF's k-quants (Q2_K ... Q6_K), Q4_1/Q5_0/Q5_1 and IQ4_NL/IQ4_XS likewise) | f32 | bf16 (products on the bf16 kernels) | f16 (IEEE halves, widened a tile at a time) | q8_0 | q4_0 (llama.cpp's 8-bit or 4-bit "
     "blocks, widened a tile at a time in each product); norms, biases, activations and the adapters stay float32");
  // clang-format on
  opts.add(cli::loop_flags(o, "seed of the adapters' init, the data order, dropout and sampling"));
  opts.add(cli::run_dir_flags(f.run_dir));
  int threads = 0;
  opts.add(cli::threads_flag(threads));
  po::variables_map vm;
  nlohmann::ordered_json template_vars;  // --template-var, parsed
  return cli::run_main(
      kProg,
      [&] {
        if (cli::parse(argc, argv, opts, vm, "usage: xg-finetune --base DIR --data FILE --out DIR [options]")) return 0;
        cli::apply_threads(threads);
        cli::choice<int>("objective", f.objective, {{"sft", 0}, {"dpo", 1}, {"grpo", 2}, {"rloo", 3}, {"ppo", 4}});
        // RLOO samples, scores, evaluates and checkpoints as GRPO does: only its advantages and
        // loss differ (GrpoTask::rloo), so from here on it runs as grpo.
        if (f.objective == "rloo") {
          f.objective = "grpo";
          f.grpo.rloo = true;
        }
        cli::require(f.objective == "grpo" || vm["dynamic-sampling"].defaulted(),
                     "--dynamic-sampling is for --objective grpo and rloo");
        cli::require(f.grpo.dynamic_sampling >= 0,
                     str_cat("--dynamic-sampling must be >= 0, got ", f.grpo.dynamic_sampling));
        try {  // a bad name, weight or pattern is a usage error, found now
          if (!f.reward_cmd.empty() && vm["reward"].defaulted()) f.rewards = {"cmd"};
          for (const std::string& spec : f.rewards) {
            if (spec.substr(0, spec.find(':')) != "cmd") {
              f.grpo.rewards.push_back(ft::parse_reward(spec, f.format_regex));
              continue;
            }
            // The program starts with the run; its name and weight are checked now.
            cli::require(!f.reward_cmd.empty(), "--reward cmd needs --reward-cmd (the program that scores)");
            const std::string w = spec.size() > 3 ? spec.substr(4) : "1";
            char* end = nullptr;
            f.reward_cmd_weight = std::strtod(w.c_str(), &end);
            cli::require(spec.size() == 3 || (spec[3] == ':' && !w.empty() && end == w.c_str() + w.size() &&
                                              std::isfinite(*f.reward_cmd_weight)),
                         "--reward " + spec + ": expected cmd or cmd:WEIGHT with a finite number for WEIGHT");
          }
          cli::require(f.reward_cmd.empty() || f.reward_cmd_weight.has_value(),
                       "--reward-cmd: add cmd[:WEIGHT] to the --reward names it is summed with");
          cli::require(f.reward_cmd.empty() || f.objective == "grpo" || f.objective == "ppo",
                       "--reward-cmd is for --objective grpo, rloo or ppo");
          if (!f.reward_cmd.empty()) ft::check_reward_command(f.reward_cmd);  // a program that cannot run, before the model loads
          cli::require(f.reward_timeout > 0 && std::isfinite(f.reward_timeout),
                       str_cat("--reward-timeout must be positive, got ", f.reward_timeout));
        } catch (const Error& e) {
          throw cli::UsageError(e.what());
        }
        cli::choice<int>("loss-type", f.grpo_loss_type, {{"grpo", 0}, {"bnpo", 1}, {"dr_grpo", 2}});
        const losses::DpoLossType dpo_loss = parse_dpo_loss(f.dpo_loss);
        cli::require(vm["dpo-loss"].defaulted() || f.objective == "dpo", "--dpo-loss is for --objective dpo");
        cli::require(dpo_loss != losses::DpoLossType::Robust || f.label_smoothing < 0.5,
                     "--dpo-loss robust needs --label-smoothing below 0.5 (it divides by 1 - 2 x label smoothing)");
        if (f.chat_template != "auto" && f.chat_template != "none") {  // a file, or FILE:NAME
          std::error_code ec;
          const std::size_t colon = f.chat_template.rfind(':');
          cli::require(std::filesystem::exists(f.chat_template, ec) ||
                           (colon != std::string::npos && colon > 0 &&
                            std::filesystem::exists(f.chat_template.substr(0, colon), ec)),
                       "--chat-template: expected auto, none or a template file (a Jinja file or a tokenizer_config.json), "
                       "got '" + f.chat_template + "' (no such file)");
        }
        template_vars = cli::parse_assignments("template-var", f.template_vars);
        cli::require(template_vars.empty() || f.chat_template != "none", "--template-var needs a chat template (not --chat-template none)");
        cli::choice<int>("base-dtype", f.base_dtype, {{"auto", 0}, {"f32", 1}, {"bf16", 2}, {"f16", 5}, {"q8_0", 3}, {"q4_0", 4}});
        cli::require(f.system.empty() || f.chat_template != "none", "--system needs a chat template (--chat-template auto)");
        cli::require(f.batch >= 1 && f.max_len >= 2 && f.eval_rows >= 1,
                     "--batch and --eval-rows must be positive and --max-len at least 2");
        // NOTE: the bound only keeps the step count computed from it far inside int64; a real
        // run is never near it.
        cli::require(f.epochs >= 0 && f.epochs <= kMaxEpochs,
                     str_cat("--epochs must be in [0, ", kMaxEpochs, "] (0 = use --steps), got ", f.epochs));
        // cDPO's label smoothing is the chance that a preference label is flipped: above 0.5 the
        // data would say the opposite of itself.
        cli::require(f.label_smoothing >= 0 && f.label_smoothing <= 0.5,
                     str_cat("--label-smoothing must be in [0, 0.5], got ", f.label_smoothing));
        // DPO and GRPO move a model SFT already shaped: smaller steps, fewer of them. A GRPO step
        // is --grad-accum prompts of --group-size sampled completions, so it costs far more
        // than an SFT step. (README's walk-through measured these.)
        const bool ppo = f.objective == "ppo";
        const auto by_objective = [&](const char* flag, auto& value, auto dpo, auto grpo, auto ppo_value) {
          if (!vm[flag].defaulted() || f.objective == "sft") return;
          value = f.objective == "dpo" ? dpo : ppo ? ppo_value : grpo;
          vm.at(flag).value() = value;  // args.json records the value the run uses
        };
        by_objective("lr", o.lr, kDpoDefaults.lr, kGrpoDefaults.lr, kPpoDefaults.lr);
        by_objective("steps", o.steps, kDpoDefaults.steps, kGrpoDefaults.steps, kPpoDefaults.steps);
        by_objective("warmup", o.warmup, kDpoDefaults.warmup, kGrpoDefaults.warmup, kPpoDefaults.warmup);
        by_objective("batch", f.batch, kDpoDefaults.batch, f.batch, kPpoDefaults.batch);
        by_objective("grad-accum", o.grad_accum, kDpoDefaults.grad_accum, kGrpoDefaults.grad_accum, kPpoDefaults.grad_accum);
        by_objective("lora-dropout", f.lora.dropout, f.lora.dropout, f.lora.dropout, 0.0);
        for (const char* flag : {"kl-coef", "gamma", "lam", "ppo-epochs", "num-mini-batches", "vf-coef", "cliprange-value"})
          cli::require(ppo || vm[flag].defaulted(), str_cat("--", flag, " is for --objective ppo"));
        if (ppo) {
          cli::require(!vm.count("beta"), "--beta is for dpo and grpo: PPO's KL coefficient is --kl-coef");
          for (const char* flag : {"group-size", "loss-type"})
            cli::require(vm[flag].defaulted(), str_cat("--", flag, " is for --objective grpo and rloo"));
          cli::require(!f.packing, "--packing is for sft and dpo (PPO's completions are sampled, not packed)");
          validate_ppo(f, o, vm);
        }
        if (!vm.count("beta")) f.beta = f.objective == "grpo" || ppo ? 0.04 : 0.1;
        cli::require(f.beta > 0 || (f.objective == "grpo" && f.beta == 0),
                     str_cat("--beta must be > 0 (>= 0 for grpo), got ", f.beta));
        if (f.objective == "grpo") {
          cli::require(f.grpo.group_size >= 2, "--group-size: GRPO needs at least 2 completions per prompt");
          cli::require(f.grpo.max_new_tokens >= 1, "--max-new-tokens must be positive");
          cli::require(f.grpo.temperature >= nn::kMinTemperature,
                       str_cat("--temperature must be at least ", nn::kMinTemperature, " (GRPO samples), got ", f.grpo.temperature));
          cli::require(f.grpo.clip_eps > 0, "--clip-eps must be > 0");
          cli::require(!f.packing, "--packing is for sft and dpo (GRPO's completions are sampled, not packed)");
        }
        cli::require(o.early_stopping_patience >= 0, "--early-stopping-patience must be >= 0");
        cli::require(o.early_stopping_patience == 0 || !f.eval_data.empty(),
                     "--early-stopping-patience needs --eval-data (the evaluations it watches)");
        cli::require(o.best_metric.empty() || o.early_stopping_patience > 0, "--metric-for-best needs --early-stopping-patience");
        if (o.early_stopping_patience > 0 && o.best_metric.empty())
          o.best_metric = f.objective == "grpo" || ppo ? "reward" : "loss";
        cli::require(!f.packing || f.objective != "dpo" || f.max_len >= 4,
                     str_cat("--packing with dpo needs --max-len of at least 4 (two sequences a row), got ", f.max_len));
        try {
          f.lora.validate(kProg);
        } catch (const Error& e) {
          throw cli::UsageError(e.what());
        }
        if (f.full) {
          cli::require(f.base_dtype == "auto" || f.base_dtype == "f32",
                       "--full trains every weight in float32: --base-dtype " + f.base_dtype +
                           (f.base_dtype == "q8_0"   ? " stores frozen 8-bit blocks, which cannot train"
                            : f.base_dtype == "q4_0" ? " stores frozen 4-bit blocks, which cannot train"
                            : f.base_dtype == "f16"  ? " stores frozen float16 matrices, which cannot train"
                                                   : " would store them in bf16 (--bf16 runs the products in bf16 on "
                                                     "float32 weights)"));
          cli::require(!f.merge, "--merge is for LoRA adapters: --full writes the whole model into <out>/model");
          for (const char* flag : {"lora-r", "lora-alpha", "lora-dropout", "lora-targets", "use-rslora"})
            cli::require(vm[flag].defaulted(), str_cat("--", flag, " is for LoRA adapters, not --full"));
        }
        cli::validate_loop(o, kProg);
        return -1;
      },
      [&] {
        // Everything that can be wrong with the inputs is found before anything is written.
        std::vector<ft::SftExample> sft_train, sft_eval;
        std::vector<ft::DpoExample> dpo_train, dpo_eval;
        std::vector<ft::GrpoExample> grpo_train, grpo_eval;
        std::vector<int64_t> train_lines, eval_lines;  // each row's line in its file
        std::string data_format = "{prompt, answers}", eval_format;  // the format the first row told
        int64_t rows = 0;
        if (f.objective == "sft") {
          sft_train = ft::read_sft_jsonl(f.data, &train_lines, &data_format);
          if (!f.eval_data.empty()) sft_eval = ft::read_sft_jsonl(f.eval_data, &eval_lines, &eval_format);
          rows = static_cast<int64_t>(sft_train.size());
        } else if (f.objective == "dpo") {
          dpo_train = ft::read_dpo_jsonl(f.data, &train_lines, &data_format);
          if (!f.eval_data.empty()) dpo_eval = ft::read_dpo_jsonl(f.eval_data, &eval_lines, &eval_format);
          rows = static_cast<int64_t>(dpo_train.size());
        } else {
          grpo_train = ft::read_grpo_jsonl(f.data, &train_lines, &data_format);
          if (!f.eval_data.empty()) grpo_eval = ft::read_grpo_jsonl(f.eval_data, &eval_lines, &eval_format);
          rows = static_cast<int64_t>(grpo_train.size());
        }
        if (f.epochs > 0 && !f.packing) {
          // PPO: a rollout of --batch x --grad-accum x --num-mini-batches prompts per
          // --ppo-epochs x --num-mini-batches steps, so whole rollouts.
          const int64_t ppo_cycle = f.ppo.ppo_epochs * f.ppo.num_mini_batches;
          const double per_step =
              f.objective == "ppo"
                  ? static_cast<double>(f.batch * o.grad_accum * f.ppo.num_mini_batches) / static_cast<double>(ppo_cycle)
                  : static_cast<double>((f.objective == "grpo" ? 1 : f.batch) * o.grad_accum * ft::world().size());
          double steps = std::ceil(f.epochs * static_cast<double>(rows) / per_step);
          if (f.objective == "ppo") steps = std::ceil(steps / static_cast<double>(ppo_cycle)) * static_cast<double>(ppo_cycle);
          cli::require(steps <= 1e12, str_cat("--epochs ", f.epochs, " over ", rows, " rows is ", steps, " steps"));
          o.steps = std::max<int64_t>(1, static_cast<int64_t>(steps));
          cli::validate_loop(o, kProg);  // an explicit --warmup longer than the epochs' steps
        }
        // An HF base: its tokenizer.json and PEFT's names for its modules. An xgrad base: the
        // byte tokenizer and xgrad's names.
        // One micro-batch's activations beside the model, and what asks for them: --batch rows of
        // --max-len (cut to the model's positions; DPO: chosen and rejected, and the reference), or
        // a GRPO group of completions.
        auto step_activations = [&](const nn::LMConfig& lm) -> std::pair<double, std::string> {
          const int64_t positions = lm.block.position == nn::PositionKind::None ? -1 : lm.block.max_seq_len;
          if (f.objective == "grpo" || f.objective == "ppo") {  // a GRPO group, or a PPO micro-batch of completions
            const bool ppo = f.objective == "ppo";
            const int64_t completions = ppo ? f.batch : f.grpo.group_size;
            const int64_t longest = std::min(f.max_len, positions < 0 ? f.max_len : positions) + f.grpo.max_new_tokens;
            return {nn::activation_bytes(lm, completions, positions < 0 ? longest : std::min(positions, longest)),
                    str_cat(ppo ? "--batch " : "--group-size ", completions, " completions of up to --max-new-tokens ",
                            f.grpo.max_new_tokens)};
          }
          const int64_t len = positions < 0 ? f.max_len : std::min(f.max_len, positions);
          return {nn::activation_bytes(lm, (f.objective == "dpo" ? (f.packing ? 2 : 3) : 1) * f.batch, len),
                  str_cat("--batch ", f.batch, f.packing ? " packed" : "", " rows of --max-len ", len)};
        };
        const io::ModelSource source = io::ModelSource::open(f.base, kProg);
        // --full: the float32 weights, their gradients and AdamW's two moments (16 bytes a
        // parameter), and for DPO and GRPO's KL a frozen copy of the base as the reference
        // (TRL's ref_model), checked from config.json before the weights are read.
        const bool needs_reference = f.full && (f.objective == "dpo" || (f.objective == "grpo" && f.beta > 0) ||
                                                (f.objective == "ppo" && f.ppo.kl_coef > 0));
        double full_weights = 0;
        if (f.full) {
          check(source.format != io::ModelFormat::Gguf, kProg, ": --full: ", f.base,
                " is a GGUF file; --full trains a Hugging Face or xgrad folder (a GGUF's tensors may be quantized, and "
                "no float32 GGUF is written back)");
          const nn::LMConfig lm = folder_config(source);
          full_weights = nn::model_bytes(lm);
          const auto [activations, what] = step_activations(lm);
          cli::require_memory((needs_reference ? 5 : 4) * full_weights + activations,
                              str_cat("--full (float32 weights, their gradients and AdamW's two moments",
                                      needs_reference ? ", and a frozen copy of the base as the reference" : "",
                                      ") with ", what));
        }
        nn::LoadOptions load;
        load.weights = f.full ? nn::WeightDtype::F32 : nn::parse_weight_dtype(f.base_dtype, "--base-dtype");
        ft::BaseModel base = ft::load_base(source, kProg, load);
        const bool hf = base.hf();
        const std::string& naming = base.naming;
        std::shared_ptr<nn::DecoderLM> model = base.model;
        const std::unique_ptr<text::Tokenizer>& tok = base.tokenizer;
        const std::unique_ptr<text::ChatTemplate> chat = ft::chat_template_for(base.source, f.chat_template, tok.get());
        check(f.system.empty() || chat != nullptr, kProg, ": --system: ", f.base,
              " has no chat template (tokenizer_config.json has no chat_template)");
        check(template_vars.empty() || chat != nullptr, kProg, ": --template-var: ", f.base,
              " has no chat template (give --chat-template FILE)");
        if (chat) chat->check_variables(template_vars, "--template-var");
        const ft::RowFormat format{tok.get(), chat.get(), f.system, template_vars, f.completion_only};
        // Rows are truncated to --max-len, which the model's positions bound (in tokens of its tokenizer).
        const int64_t positions = model->max_seq_len();
        if (positions >= 0 && f.max_len > positions) f.max_len = positions;
        // Each row's length in tokens once: a row the model can never see whole (a GRPO prompt that
        // leaves no room for a completion) is refused now, naming its line, rather than at whichever
        // step draws it; rows longer than --max-len are counted and said, since they are cut.
        auto check_rows = [&](const std::string& path, const std::vector<int64_t>& lines, auto length, const char* what,
                              bool cut) {
          int64_t longer = 0;
          for (std::size_t i = 0; i < lines.size(); ++i) {
            int64_t n = 0;
            try {  // a row the template refuses (raise_exception) or that has no template to render it
              n = length(i);
            } catch (const Error& e) {
              throw Error(str_cat(path, ":", lines[i], ": ", e.what()));
            }
            check(positions < 0 || n <= positions, path, ":", lines[i], ": ", what, " is ", n, " tokens, more than the ",
                  positions, " positions of ", f.base, " (shorten it or leave it out)");
            longer += n > f.max_len;
          }
          if (cut && longer > 0 && ft::world().is_main())
            std::printf("%s: %lld of %zu rows of %s are longer than --max-len %lld tokens and are cut to it (a cut "
                        "response loses its EOS)\n",
                        kProg, static_cast<long long>(longer), lines.size(), path.c_str(), static_cast<long long>(f.max_len));
        };
        auto sft_len = [&](const ft::SftExample& r) { return static_cast<int64_t>(format.tokens(r).first.size()); };
        if (f.objective == "sft") {
          check_rows(f.data, train_lines, [&](std::size_t i) { return sft_len(sft_train[i]); }, "the row", true);
          check_rows(f.eval_data, eval_lines, [&](std::size_t i) { return sft_len(sft_eval[i]); }, "the row", true);
        } else if (f.objective == "dpo") {
          auto dpo_len = [&](const ft::DpoExample& r) {
            return std::max(sft_len(ft::chosen_row(r)), sft_len(ft::rejected_row(r)));
          };
          check_rows(f.data, train_lines, [&](std::size_t i) { return dpo_len(dpo_train[i]); }, "the row", true);
          check_rows(f.eval_data, eval_lines, [&](std::size_t i) { return dpo_len(dpo_eval[i]); }, "the row", true);
        } else {
          // + 1: the completion needs a position too. GRPO's prompts are never cut (--max-len does not apply).
          auto grpo_len = [&](const ft::GrpoExample& r) { return static_cast<int64_t>(format.prompt_ids(r).size()) + 1; };
          // Every prompt is rendered once now, so a row the template refuses names its line.
          check_rows(f.data, train_lines, [&](std::size_t i) { return grpo_len(grpo_train[i]); },
                     "the prompt (with one completion token)", false);
          check_rows(f.eval_data, eval_lines, [&](std::size_t i) { return grpo_len(grpo_eval[i]); },
                     "the prompt (with one completion token)", false);
        }
        // The default names every projection kind: a model without some (GPT-2 has no gate) gets those it has.
        if (!f.full && vm["lora-targets"].defaulted()) f.lora.targets = ft::targets_present(*model, f.lora.targets, naming);
        if (!f.full) {
          // The adapters, their gradients and AdamW's two moments, float32, beside one micro-batch's activations.
          double adapters = 0;
          const auto linears = ft::linear_modules(*model, naming);
          const std::vector<std::string> targeted = ft::match_targets(*model, f.lora.targets, "--lora-targets", naming);
          for (const auto& [path, lin] : linears)
            if (std::find(targeted.begin(), targeted.end(), path) != targeted.end())
              adapters += 16.0 * static_cast<double>(f.lora.r) * static_cast<double>(lin->in_features() + lin->out_features());
          cli::require_memory(adapters, str_cat("--lora-r ", f.lora.r, " on ", targeted.size(), " modules"));
          const auto [activations, what] = step_activations(model->config());
          cli::require_memory(adapters + activations, what);
        }
        // Packed, a step draws --batch packed rows: --epochs counts passes over those.
        if (f.packing) {
          const int64_t packed = static_cast<int64_t>(f.objective == "sft" ? ft::pack_sft(format, sft_train, f.max_len).size()
                                                                            : ft::pack_dpo(format, dpo_train, f.max_len).size());
          if (ft::world().is_main())
            std::printf("%s: --packing: %lld rows packed into %lld rows of %lld tokens\n", kProg,
                        static_cast<long long>(rows), static_cast<long long>(packed), static_cast<long long>(f.max_len));
          if (f.epochs > 0) {
            const double steps = std::ceil(f.epochs * static_cast<double>(packed) /
                                           static_cast<double>(f.batch * o.grad_accum * ft::world().size()));
            cli::require(steps <= 1e12, str_cat("--epochs ", f.epochs, " over ", packed, " packed rows is ", steps, " steps"));
            o.steps = std::max<int64_t>(1, static_cast<int64_t>(steps));
            cli::validate_loop(o, kProg);
          }
        }
        std::vector<std::string> adapted;
        if (f.full) {
          model->requires_grad_(true);
        } else {
          Generator lora_gen(o.seed);
          adapted = ft::inject_lora(*model, f.lora, lora_gen, naming);
        }
        // The reference of --full's DPO and GRPO: the base as loaded, frozen, in eval mode (no dropout).
        std::shared_ptr<nn::DecoderLM> reference;
        if (needs_reference) {
          reference = nn::load_model(base.source, load);
          reference->requires_grad_(false);
          reference->eval();
        }

        const bool main_rank = ft::world().is_main();
        // What the base and the data hold, not where they lie: a run (or its inputs) may move.
        const std::string base_checksum = cli::model_checksum(f.base), data_checksum = cli::input_checksum(f.data);
        std::unique_ptr<cli::RunDir> run_dir;
        if (main_rank) {
          run_dir = std::make_unique<cli::RunDir>(
              kProg, o.out_dir, o.resume, f.run_dir,
              std::vector<std::pair<std::string, std::string>>{{"base", f.base}, {"data", f.data}, {"eval-data", f.eval_data}});
          json inputs = {{"base", base_checksum}, {"data", data_checksum}};
          if (!f.eval_data.empty()) inputs["eval-data"] = cli::input_checksum(f.eval_data);
          run_dir->record_args({{"program", kProg}, {"flags", cli::flags_json(vm)}, {"inputs", inputs}, {"steps", o.steps},
                                {"git_revision", cli::git_revision()}, {"gemm", gemm_backend_description()},
                                {"settings", cli::settings_json()}, {"ranks", ft::world().size()}});
        }
        nn::NamedTensors trainable = f.full ? model->named_parameters() : ft::named_lora_parameters(*model);
        // PPO's value head trains beside the policy (its own generator: the adapters' init is unchanged).
        std::unique_ptr<ft::ValueHead> value_head;
        if (f.objective == "ppo") {
          Generator head_gen(o.seed ^ 0x56A1E5EEDull);
          value_head = std::make_unique<ft::ValueHead>(model->config().block.d_model, head_gen);
          for (auto& named : value_head->named_trainable()) trainable.push_back(named);
        }
        int64_t n_train = 0;
        for (const auto& [name, p] : trainable) n_train += p.numel();
        if (main_rank && f.full)
          std::printf("%s: %s on %lld rows, %lld steps; full finetune: all %lld parameters train; weights, gradients and "
                      "AdamW's two moments (float32) %s%s, one micro-batch's activations about %s\n",
                      kProg, f.grpo.rloo ? "rloo" : f.objective.c_str(), static_cast<long long>(rows), static_cast<long long>(o.steps),
                      static_cast<long long>(n_train), byte_size(16.0 * static_cast<double>(n_train)).c_str(),
                      needs_reference ? str_cat(", the reference copy ", byte_size(4.0 * static_cast<double>(n_train))).c_str() : "",
                      byte_size(step_activations(model->config()).first).c_str());
        else if (main_rank)
          std::printf("%s: %s on %lld rows, %lld steps; LoRA r=%lld alpha=%g on %zu modules: %lld trainable of %lld parameters\n",
                      kProg, f.grpo.rloo ? "rloo" : f.objective.c_str(), static_cast<long long>(rows), static_cast<long long>(o.steps),
                      static_cast<long long>(f.lora.r), f.lora.alpha, adapted.size(), static_cast<long long>(n_train),
                      static_cast<long long>(model->num_parameters()));
        if (main_rank)
          std::printf("%s: %s base, %s tokenizer (%lld ids), %s format, rows of up to %lld tokens\n", kProg,
                      hf ? "Hugging Face" : "xgrad", hf ? "its" : "the byte", static_cast<long long>(tok->vocab_size()),
                      chat ? "chat template" : "plain", static_cast<long long>(f.max_len));
        if (main_rank)
          std::printf("%s: %s rows (format told by the first row of %s)%s%s\n", kProg, data_format.c_str(), f.data.c_str(),
                      eval_format.empty() || eval_format == data_format ? "" : str_cat("; held-out: ", eval_format).c_str(),
                      f.completion_only ? "" : "; the loss on every token (--completion-only false)");
        const std::string stored = narrow_dtypes(base.source);
        if (main_rank && f.full)
          std::printf("%s: --full: parameters %s%s\n", kProg, nn::weights_summary(*model).c_str(),
                      stored.empty() ? "" : str_cat("; ", f.base, " stores ", stored, ": the weights train in float32").c_str());
        else if (main_rank)
          std::printf("%s: --base-dtype %s: parameters %s\n", kProg, f.base_dtype.c_str(), nn::weights_summary(*model).c_str());

        ft::TrainLoop loop(kProg, *model, trainable, o);
        loop.run_identity["base"] = base_checksum;
        loop.run_identity["objective"] = f.grpo.rloo ? "rloo" : f.objective;
        loop.run_identity["format"] = chat ? "chat template, system: " + f.system : std::string("plain");
        // Said only when not the defaults, so a run of prompt/response rows resumes from a
        // checkpoint written before the other formats were read.
        if (data_format != "{prompt, response}" && data_format != "{prompt, chosen, rejected}" &&
            data_format != "{prompt, answers}")
          loop.run_identity["rows"] = data_format;
        if (!template_vars.empty()) loop.run_identity["template_vars"] = template_vars.dump();
        if (!f.completion_only) loop.run_identity["completion_only"] = "false";
        if ((f.objective == "grpo" || f.objective == "ppo") && f.rewards != std::vector<std::string>{"exact"}) {
          std::string names;
          for (const std::string& r : f.rewards) names += (names.empty() ? "" : ",") + r;
          loop.run_identity["rewards"] = names + (vm["format-regex"].defaulted() ? "" : " format " + f.format_regex) +
                                         (f.reward_cmd.empty() ? "" : " cmd " + f.reward_cmd);
        }
        loop.run_identity["data"] = data_checksum;
        if (f.full)
          loop.run_identity["full"] = "every weight";
        else
          loop.run_identity["lora"] = str_cat("r=", f.lora.r, " alpha=", f.lora.alpha, " dropout=", f.lora.dropout,
                                              " targets=", f.lora.targets, " rslora=", f.lora.use_rslora);
        if (f.objective == "sft") {
          ft::attach_sft(loop, *model,
                         {&sft_train, sft_eval.empty() ? nullptr : &sft_eval, f.batch, f.max_len, f.eval_rows, format, f.packing});
        } else if (f.objective == "dpo") {
          ft::DpoTask task{&dpo_train, dpo_eval.empty() ? nullptr : &dpo_eval, f.batch, f.max_len, f.eval_rows, f.beta,
                           f.label_smoothing, format, f.packing};
          task.loss_type = parse_dpo_loss(f.dpo_loss);
          task.reference = reference.get();
          ft::attach_dpo(loop, *model, task);
        } else if (f.objective == "ppo") {
          ft::PpoTask& task = f.ppo;
          task.rewards = f.grpo.rewards;
          if (f.reward_cmd_weight)
            task.rewards.push_back(ft::command_reward(f.reward_cmd, f.reward_timeout, *f.reward_cmd_weight));
          task.train = &grpo_train;
          task.heldout = grpo_eval.empty() ? nullptr : &grpo_eval;
          task.batch = f.batch;
          task.grad_accum = o.grad_accum;
          task.max_new_tokens = f.grpo.max_new_tokens;
          task.eval_rows = f.eval_rows;
          task.temperature = f.grpo.temperature;
          task.clip_eps = f.grpo.clip_eps;
          task.format = format;
          task.reference = reference.get();
          ft::attach_ppo(loop, *model, *value_head, task);
        } else {
          if (f.reward_cmd_weight)
            f.grpo.rewards.push_back(ft::command_reward(f.reward_cmd, f.reward_timeout, *f.reward_cmd_weight));
          f.grpo.format = format;
          f.grpo.train = &grpo_train;
          f.grpo.heldout = grpo_eval.empty() ? nullptr : &grpo_eval;
          f.grpo.beta = f.beta;
          f.grpo.loss_type = ft::grpo_loss_type(f.grpo_loss_type);
          f.grpo.eval_rows = f.eval_rows;
          f.grpo.reference = reference.get();
          ft::attach_grpo(loop, *model, f.grpo);
        }
        // The best adapter (or --full model) so far, kept beside the checkpoint (atomically) so that a resumed run has it.
        const std::string best_path = o.out_dir + "/best.safetensors";
        if (o.early_stopping_patience > 0)
          loop.on_best = [&](int64_t, double) {
            TensorMap t;
            for (const auto& [name, p] : trainable) t.emplace(name, p);
            io::save_safetensors(best_path, t);
          };
        const ft::Metrics last = loop.run();
        if (!main_rank) return 0;
        if (o.early_stopping_patience > 0 && loop.best_step() >= 0) {
          // load_best_model_at_end: the adapter (model) written is the best evaluated.
          const TensorMap best = io::load_safetensors(best_path);
          for (const auto& [name, p] : trainable) {
            auto it = best.find(name);
            check(it != best.end() && it->second.shape() == p.shape(), kProg, ": ", best_path, " lacks '", name,
                  "' or holds another shape: the best ", f.full ? "model" : "adapter", " cannot be restored");
            p.copy_(it->second);
          }
          std::printf("%s: %s; the %s written is the best evaluated: step %lld, %s %.6g\n", kProg,
                      loop.stopped_early_at() >= 0 ? str_cat("stopped early at step ", loop.stopped_early_at()).c_str()
                                                   : "ran every step",
                      f.full ? "model" : "adapter", static_cast<long long>(loop.best_step()), o.best_metric.c_str(), loop.best_value());
        }
        json summary = {{"objective", f.grpo.rloo ? "rloo" : f.objective}, {"steps", o.steps}, {"trainable_parameters", n_train}};
        if (f.full) {
          write_renamed(o.out_dir + "/model", base.source,
                        [&](const std::string& dir) { write_like_base(*model, dir, base.source, f.objective); });
          summary["full"] = true;
        } else {
          ft::save_adapter(*model, o.out_dir, f.lora, f.base, naming);
          if (f.merge)
            write_renamed(o.out_dir + "/merged", base.source,
                          [&](const std::string& dir) { write_merged(*model, dir, base.source, f.objective); });
          summary["adapted_modules"] = adapted;
        }
        if (value_head) {
          value_head->save(o.out_dir);
          summary["value_head"] = ft::kValueHeadFile;
        }
        for (const auto& [k, v] : last) summary["final_" + k] = v;
        io::write_file_atomic(o.out_dir + "/summary.json", summary.dump(2) + "\n", kProg);
        if (f.full)
          std::printf("%s: wrote %s/model/ (%s, float32)\n", kProg, o.out_dir.c_str(),
                      base.hf() ? "a Hugging Face folder with the base's tokenizer files" : "an xgrad folder");
        else
          std::printf("%s: wrote %s/{adapter_model.safetensors,adapter_config.json}%s\n", kProg, o.out_dir.c_str(),
                      f.merge ? (base.gguf() ? " and merged.gguf" : " and merged/") : "");
        return 0;
      });
}
