// libFuzzer target: the SFT, DPO and GRPO JSONL readers (the first byte picks the reader).
#include "finetune/dataset.hpp"
#include "fuzz/fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  return xg::fuzz::expect_only_xg_errors([&] {
    const std::string path = xg::fuzz::scratch_file("rows.jsonl", xg::fuzz::as_string(data + 1, size - 1));
    switch (data[0] % 3) {
      case 0: xg::finetune::read_sft_jsonl(path); break;
      case 1: xg::finetune::read_dpo_jsonl(path); break;
      default: xg::finetune::read_grpo_jsonl(path); break;
    }
  });
}
