// libFuzzer target: model config.json (LMConfig::from_json) and PEFT's adapter_config.json
// (the first byte picks which).
#include "finetune/peft.hpp"
#include "fuzz/fuzz_util.hpp"
#include "nn/decoder.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string text = xg::fuzz::as_string(data + 1, size - 1);
  return xg::fuzz::expect_only_xg_errors([&] {
    if (data[0] % 2 == 0) {
      const xg::nn::LMConfig c = xg::nn::LMConfig::from_json(text, "config.json");
      if (xg::nn::LMConfig::from_json(c.to_json()).to_json() != c.to_json()) __builtin_trap();  // round trip
    } else {
      xg::fuzz::scratch_file("adapter_config.json", text);
      xg::finetune::read_adapter_config(xg::fuzz::scratch_dir().string());
    }
  });
}
