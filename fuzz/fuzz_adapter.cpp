// libFuzzer target: adapter loading (load_adapter) into a fixed tiny base. The first byte picks
// which file of the adapter folder the rest of the input is: 0 adapter_config.json (beside a valid
// adapter_model.safetensors), 1 adapter_model.safetensors (beside a valid config); the valid
// ones are the seeds' (fuzz/make_corpus.py). Each input loads into a fresh base.
#include "finetune/peft.hpp"
#include "fuzz/fuzz_util.hpp"
#include "nn/decoder.hpp"

namespace {

// The base of the seeds: vocab 16, one LLaMA block of width 8 (2 heads, 1 KV head), 8 positions.
xg::nn::LMConfig base_config() {
  xg::nn::LMConfig c;
  c.vocab_size = 16;
  c.n_layers = 1;
  c.block = xg::nn::BlockConfig::llama(8, 2, 1);
  c.block.max_seq_len = 8;
  return c;
}

const char* const kValidConfig =
    R"({"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": 4, "lora_alpha": 8, "lora_dropout": 0.0,)"
    R"( "target_modules": ["w_q", "w_v"], "bias": "none", "use_rslora": false, "fan_in_fan_out": false})";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string body = xg::fuzz::as_string(data + 1, size - 1);
  return xg::fuzz::expect_only_xg_errors([&] {
    if (data[0] % 2 == 0) {
      xg::fuzz::scratch_file("adapter_config.json", body);
      // The weights the seed config describes: zeros of PEFT's shapes.
      xg::io::save_safetensors((xg::fuzz::scratch_dir() / "adapter_model.safetensors").string(),
                           {{"base_model.model.layers.0.attention.w_q.lora_A.weight", xg::zeros({4, 8})},
                            {"base_model.model.layers.0.attention.w_q.lora_B.weight", xg::zeros({8, 4})},
                            {"base_model.model.layers.0.attention.w_v.lora_A.weight", xg::zeros({4, 8})},
                            {"base_model.model.layers.0.attention.w_v.lora_B.weight", xg::zeros({4, 4})}});
    } else {
      xg::fuzz::scratch_file("adapter_config.json", kValidConfig);
      xg::fuzz::scratch_file("adapter_model.safetensors", body);
    }
    xg::nn::DecoderLM model(base_config());
    xg::finetune::load_adapter(model, xg::fuzz::scratch_dir().string());
    model(xg::zeros({1, 2}, xg::kInt64));  // the adapted model runs
  });
}
