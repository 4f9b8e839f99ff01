// LoRA adapter files as Hugging Face PEFT writes them: <dir>/adapter_model.safetensors (keys
// base_model.model.<module path>.lora_A.weight / .lora_B.weight) and <dir>/adapter_config.json.
#pragma once

#include <string>
#include <vector>

#include "finetune/lora.hpp"

namespace xg::finetune {

struct AdapterInfo {
  LoRAConfig config;                    // r, lora_alpha, lora_dropout, target_modules, use_rslora
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
void save_adapter(const nn::Module& model, const std::string& dir, const LoRAConfig& config,
                  const std::string& base_model_name_or_path = "", const std::string& naming = "xgrad");

// Reads and validates <dir>/adapter_config.json (errors name the file and the field).
AdapterInfo read_adapter_config(const std::string& dir);

// Reads <dir>'s config and weights, checks that every key is a LoRA weight of a Linear in
// `model` with the right shape and that the adapted modules are exactly those target_modules
// selects, then injects adapters (freezing the model) and loads A and B. Errors name the file
// and the key or module; the model is unchanged when it throws. Keys and target_modules are read
// under `naming`, as save_adapter writes them. AdapterInfo::modules are paths under `naming`.
AdapterInfo load_adapter(nn::Module& model, const std::string& dir, const std::string& naming = "xgrad");

}  // namespace xg::finetune
