// libFuzzer target: xg-generate's --prompts file (read_prompts_jsonl: text prompts and `messages`
// conversations), then each prompt's ids as xg-generate makes them (RowFormat::prompt_ids, a
// conversation rendered with the generation prompt). The first byte picks the chat template
// (% 3: Qwen2.5, Llama 3, none); the rest is the JSONL file. Errors must be one short line.
#include "finetune/dataset.hpp"
#include "fuzz/fuzz_util.hpp"
#include "text/byte_tokenizer.hpp"
#include "text/chat_template.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  static const xg::text::ByteTokenizer bytes;
  static const xg::text::ChatTemplate qwen(xg::fuzz::chat_template_fixture("qwen2_5.jinja"), "", "<|im_end|>");
  static const xg::text::ChatTemplate llama3(xg::fuzz::chat_template_fixture("llama3.jinja"), "<|begin_of_text|>",
                                             "<|eot_id|>");
  xg::finetune::RowFormat format;
  format.tokenizer = &bytes;
  format.chat_template = data[0] % 3 == 0 ? &qwen : data[0] % 3 == 1 ? &llama3 : nullptr;
  return xg::fuzz::expect_one_line_xg_errors([&] {
    const std::string path = xg::fuzz::scratch_file("prompts.jsonl", xg::fuzz::as_string(data + 1, size - 1));
    for (const xg::finetune::PromptRow& p : xg::finetune::read_prompts_jsonl(path)) {
      if (p.messages.is_null()) {
        format.prompt_ids(p.text);
        continue;
      }
      xg::finetune::GrpoExample row;
      row.prompt_messages = p.messages;
      format.prompt_ids(row);
    }
  });
}
