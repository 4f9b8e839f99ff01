// libFuzzer target: chat-template variables (--template-var NAME=VALUE, VALUE any JSON) as
// xg-finetune takes them: parsed by cli::parse_assignments, checked by check_variables, then
// passed to every rendering SFT and GRPO make. The first byte picks the template (% 4: Qwen3,
// which reads enable_thinking and tools; Qwen2.5; Llama 3; the input's own); the rest is
// NUL-separated: for the input's own template, its source first, then the NAME=VALUE items.
// Deeply nested values, huge strings and loops over them must end within the engine's budget.
#include <fstream>
#include <sstream>

#include "fuzz/fuzz_util.hpp"
#include "text/chat_template.hpp"
#include "tools/cli/flags.hpp"

namespace {

xg::text::ChatTemplate fixture(const std::string& name, const std::string& bos, const std::string& eos) {
  std::ifstream in(std::string(XGRAD_SOURCE_DIR) + "/tests/fixtures/chat_templates/" + name, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return xg::text::ChatTemplate(s.str(), bos, eos);
}

std::vector<std::string> split_nul(const std::string& s) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= s.size(); ++i)
    if (i == s.size() || s[i] == '\0') {
      out.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  static const xg::text::ChatTemplate qwen3 = fixture("qwen3.jinja", "", "<|im_end|>");
  static const xg::text::ChatTemplate qwen = fixture("qwen2_5.jinja", "", "<|im_end|>");
  static const xg::text::ChatTemplate llama3 = fixture("llama3.jinja", "<|begin_of_text|>", "<|eot_id|>");
  std::vector<std::string> items = split_nul(xg::fuzz::as_string(data + 1, size - 1));
  return xg::fuzz::expect_one_line_xg_errors([&] {
    std::unique_ptr<xg::text::ChatTemplate> own;
    const xg::text::ChatTemplate* t = nullptr;
    switch (data[0] % 4) {
      case 0: t = &qwen3; break;
      case 1: t = &qwen; break;
      case 2: t = &llama3; break;
      default:
        own = std::make_unique<xg::text::ChatTemplate>(items.front(), "<s>", "</s>");
        items.erase(items.begin());
        t = own.get();
    }
    if (!items.empty() && items.back().empty()) items.pop_back();
    nlohmann::ordered_json vars;
    try {
      vars = xg::cli::parse_assignments("template-var", items);
    } catch (const xg::cli::UsageError&) {  // no NAME=, a name given twice: the flag's usage error
      return;
    }
    t->check_variables(vars, "--template-var");
    const nlohmann::ordered_json messages = nlohmann::ordered_json::parse(
        R"([{"role":"system","content":"Be brief."},{"role":"user","content":"Is apple a word?"},)"
        R"({"role":"assistant","content":"yes"}])");
    t->render(messages, false, vars);
    t->assistant_spans(messages, vars);
    t->render_split(messages, 2, vars);
  });
}
