// libFuzzer target: chat templates (text/chat_template.hpp, the Jinja subset of text/jinja.hpp).
// The first byte picks what the rest is:
//   0: a template's source, rendered over a short conversation (with and without the generation
//      prompt) and split as SFT splits it
//   1: a tokenizer_config.json, whose chat template and special tokens are then rendered
//   2: the messages (a JSON list) rendered by a ChatML template: roles out of order, content
//      missing or not a string, huge turns
// A template is untrusted input (a downloaded model carries it): any of them must end within the
// engine's work budget and memory bound, with at most an xg::Error (libFuzzer's -timeout and
// -rss_limit_mb catch the rest).
#include <nlohmann/json.hpp>

#include "fuzz/fuzz_util.hpp"
#include "text/chat_template.hpp"

namespace {

const char* kChatMl =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

const std::vector<xg::text::ChatMessage> kConversation = {
    {"system", "Be brief."}, {"user", "Is apple a word?"}, {"assistant", "yes"}};

void render_all(const xg::text::ChatTemplate& t) {
  t.render(kConversation, false);
  t.render_prompt({kConversation[0], kConversation[1]});
  t.render_split(kConversation);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string body = xg::fuzz::as_string(data + 1, size - 1);
  return xg::fuzz::expect_only_xg_errors([&] {
    switch (data[0] % 3) {
      case 0:
        render_all(xg::text::ChatTemplate(body, "<s>", "</s>"));
        break;
      case 1: {
        const nlohmann::ordered_json config = nlohmann::ordered_json::parse(body, nullptr, false);
        if (config.is_discarded()) return;  // not JSON: the JSON reader's own fuzzers cover it
        render_all(xg::text::ChatTemplate::from_tokenizer_config(config, "tokenizer_config.json"));
        break;
      }
      default: {
        const nlohmann::ordered_json messages = nlohmann::ordered_json::parse(body, nullptr, false);
        if (messages.is_discarded()) return;
        const xg::text::ChatTemplate t(kChatMl);
        t.render(messages, true);
        t.render(messages, false);
      }
    }
  });
}
