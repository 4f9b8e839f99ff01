// libFuzzer target: TRL's dataset rows as xg-finetune reads them and turns them into ids: the JSONL
// through read_sft_jsonl / read_dpo_jsonl / read_grpo_jsonl, then each row's tokens and loss mask
// (RowFormat::tokens: assistant spans, prompt/completion splits) with a real chat template.
// The first byte picks the reader (% 3), the template ((/ 3) % 3: Qwen2.5, Llama 3, none) and
// completion-only loss (/ 9 % 2); the rest is the JSONL file.
#include "finetune/dataset.hpp"
#include "fuzz/fuzz_util.hpp"
#include "text/byte_tokenizer.hpp"
#include "text/chat_template.hpp"

namespace {

const xg::text::ChatTemplate& qwen() {
  static const xg::text::ChatTemplate t(xg::fuzz::chat_template_fixture("qwen2_5.jinja"), "", "<|im_end|>");
  return t;
}
const xg::text::ChatTemplate& llama3() {
  static const xg::text::ChatTemplate t(xg::fuzz::chat_template_fixture("llama3.jinja"), "<|begin_of_text|>", "<|eot_id|>");
  return t;
}

// Each row's ids and mask, as collate_sft computes them; an error in one row ends the file.
void tokens_of(const xg::finetune::RowFormat& format, const xg::finetune::SftExample& row) {
  const auto [ids, mask] = format.tokens(row);
  if (ids.size() != mask.size()) __builtin_trap();  // every id has a mask bit
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  static const xg::text::ByteTokenizer bytes;
  xg::finetune::RowFormat format;
  format.tokenizer = &bytes;
  const int which = (data[0] / 3) % 3;
  format.chat_template = which == 0 ? &qwen() : which == 1 ? &llama3() : nullptr;
  format.completion_only = (data[0] / 9) % 2 == 0;
  return xg::fuzz::expect_one_line_xg_errors([&] {
    const std::string path = xg::fuzz::scratch_file("rows.jsonl", xg::fuzz::as_string(data + 1, size - 1));
    switch (data[0] % 3) {
      case 0:
        for (const auto& row : xg::finetune::read_sft_jsonl(path)) tokens_of(format, row);
        break;
      case 1:
        for (const auto& row : xg::finetune::read_dpo_jsonl(path)) {
          tokens_of(format, xg::finetune::chosen_row(row));
          tokens_of(format, xg::finetune::rejected_row(row));
        }
        break;
      default:
        for (const auto& row : xg::finetune::read_grpo_jsonl(path)) format.prompt_ids(row);
    }
  });
}
