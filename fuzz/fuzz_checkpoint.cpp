// libFuzzer target: load_checkpoint (safetensors plus the checkpoint's metadata rules).
#include "finetune/checkpoint.hpp"
#include "fuzz/fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  return xg::fuzz::expect_only_xg_errors([&] {
    xg::finetune::load_checkpoint(xg::fuzz::scratch_file("checkpoint.safetensors", xg::fuzz::as_string(data, size)));
  });
}
