// LoRA adapter files as Hugging Face PEFT writes them: <dir>/adapter_model.safetensors (keys
// base_model.model.<module path>.lora_A.weight / .lora_B.weight) and <dir>/adapter_config.json.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "finetune/lora.hpp"

namespace xg::finetune {

struct AdapterInfo {
  LoRAConfig config;                    // r, lora_alpha, lora_dropout, target_modules, use_rslora
  // PEFT's per-module r and lora_alpha by module name (the fused modules' under hf_gpt2 and
  // hf_phi3; other namings refuse them) and fan_in_fan_out (true for GPT-2's Conv1D).
  std::map<std::string, int64_t> rank_pattern;
  std::map<std::string, double> alpha_pattern;
  bool fan_in_fan_out = false;
  std::string base_model_name_or_path;  // as written in the config ("" when null)
  std::vector<std::string> modules;     // the module paths that got an adapter (load_adapter)
};

// PEFT's tensor name of a module's A or B: "base_model.model.<path>.lora_A.weight".
std::string peft_key(const std::string& module_path, char which /* 'A' or 'B' */);

// Writes the adapters of `model` into `dir` (created if needed): adapter_model.safetensors and
// adapter_config.json (PEFT's keys, sorted, indent 2). `config` must describe the adapters
// (same r, alpha, dropout, use_rslora, and its targets select exactly the adapted modules).
// Both files are staged and renamed into place; on any error nothing is written (a folder
// this call created is removed again) and the xg::Error names the reason. `naming` names the
// modules (lora.hpp's linear_modules): "hf_llama" for a model read by nn::load_hf, so that the
// keys and target_modules are PEFT's for that Hugging Face model
// (base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight, ["q_proj", "v_proj"]).
//
// "hf_gpt2" and "hf_phi3" write PEFT's one LoRA per fused Linear (GPT-2's c_attn, Phi-3's
// qkv_proj and gate_up_proj) from xgrad's adapters on its parts, exactly: A = cat(A_1 .. A_k)
// [k r, in], B = blockdiag(B_1 .. B_k) [out, k r] (a part without an adapter gets zero blocks),
// so B A = cat(B_1 A_1 .. B_k A_k); rank_pattern gives the fused module k r and alpha_pattern k
// alpha (rsLoRA: sqrt(k) alpha), keeping the scaling. The other Linears keep r and alpha under
// the scheme's names; target_modules lists the full module paths. `config.targets` is read under
// `naming` as inject_lora reads it (lora.hpp: c_attn, qkv_proj, q, ...).
void save_adapter(const nn::Module& model, const std::string& dir, const LoRAConfig& config,
                  const std::string& base_model_name_or_path = "", const std::string& naming = "xgrad");

// Reads and validates <dir>/adapter_config.json (errors name the file and the field).
AdapterInfo read_adapter_config(const std::string& dir);

// Reads <dir>'s config and weights, checks that every key is a LoRA weight of a Linear in
// `model` with the right shape and that the adapted modules are exactly those target_modules
// selects, then injects adapters (freezing the model) and loads A and B. Errors name the file
// and the key or module; the model is unchanged when it throws. Keys and target_modules are read
// under `naming`, as save_adapter writes them. AdapterInfo::modules are paths under `naming`.
// "hf_gpt2" / "hf_phi3": a PEFT adapter of a GPT-2 or Phi-3 model; the LoRA of a fused module
// (r' from rank_pattern, alpha' from alpha_pattern) becomes one adapter per part sharing A,
// each with B's rows of its part (rank r', alpha'), which is the same delta. An adapter whose
// keys name xgrad's Linears (layers.0.attention.w_q: what xg-finetune wrote for these bases
// before it wrote PEFT's fused modules) is read under "xgrad".
AdapterInfo load_adapter(nn::Module& model, const std::string& dir, const std::string& naming = "xgrad");

}  // namespace xg::finetune
