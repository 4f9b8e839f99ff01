// The real chat templates of Llama 3, Qwen2.5, Qwen3, Mistral v0.3, Gemma, Phi-3 and SmolLM2
// (tests/fixtures/chat_templates/) on multi-turn conversations: xgrad renders what Jinja2
// rendered as transformers sets it up (tests/fixtures/chat_spans.json, gen_chat_spans.py),
// finds the assistant spans the fixture marks (ChatTemplate::assistant_spans), and the SFT loss
// mask of a {messages} row trains on exactly those characters, token by token, with the byte
// tokenizer and with the Qwen3 and Llama 3 tokenizers; the names a template reads.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <map>
#include <set>

#include "autograd/error.hpp"
#include "finetune/dataset.hpp"
#include "text/byte_tokenizer.hpp"
#include "text/chat_template.hpp"
#include "text/tokenizer.hpp"
#include "torch_fixture.hpp"

namespace chat_spans_test {

using nlohmann::ordered_json;
using xg::text::ChatTemplate;

const ordered_json& fixture() {
  static const ordered_json f = [] {
    std::ifstream in(std::string(XGRAD_FIXTURE_DIR) + "/chat_spans.json");
    return ordered_json::parse(in);
  }();
  return f;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

ChatTemplate real_template(const std::string& name) {
  const std::string dir = std::string(XGRAD_FIXTURE_DIR) + "/chat_templates/";
  const ordered_json meta = ordered_json::parse(slurp(dir + "templates.json"))[name];
  return ChatTemplate(slurp(dir + name + ".jinja"), meta.value("bos_token", ""), meta.value("eos_token", ""));
}

// 1 for each byte of `text` inside one of the fixture's spans.
std::vector<uint8_t> char_mask(const ordered_json& c) {
  std::vector<uint8_t> m(c["text"].get<std::string>().size(), 0);
  for (const auto& s : c["spans"])
    for (std::size_t i = s[0].get<std::size_t>(); i < s[1].get<std::size_t>(); ++i) m[i] = 1;
  return m;
}

xg::finetune::SftExample messages_row(const ordered_json& messages) {
  xg::finetune::SftExample r;
  r.style = xg::finetune::RowStyle::Conversation;
  r.messages = messages;
  return r;
}

TEST(TextChatSpans, RealTemplatesRenderAsJinja2AndFindTheMarkedAssistantSpans) {
  const ordered_json& f = fixture();
  ASSERT_GE(f["cases"].size(), 39u);
  std::set<std::string> templates;
  for (const auto& c : f["cases"]) {
    const std::string name = c["template"].get<std::string>(), where = name + "/" + c["case"].get<std::string>();
    templates.insert(name);
    const ChatTemplate t = real_template(name);
    ordered_json before = c["messages"];
    before.erase(before.size() - 1);
    EXPECT_EQ(t.render(c["messages"], false, c["vars"]), c["text"].get<std::string>()) << where;
    EXPECT_EQ(t.render(before, true, c["vars"]), c["prompt"].get<std::string>()) << where;
    const std::vector<ChatTemplate::Span> spans = t.assistant_spans(c["messages"], c["vars"]);
    ASSERT_EQ(spans.size(), c["spans"].size()) << where;
    for (std::size_t i = 0; i < spans.size(); ++i) {
      EXPECT_EQ(spans[i].begin, c["spans"][i][0].get<std::size_t>()) << where << " span " << i;
      EXPECT_EQ(spans[i].end, c["spans"][i][1].get<std::size_t>()) << where << " span " << i;
    }
  }
  EXPECT_EQ(templates.size(), 8u);  // the seven real ones, and SmolLM2's with {% generation %} blocks
}

TEST(TextChatSpans, ByteTokensOfAMessagesRowAreTrainedExactlyOnTheMarkedCharacters) {
  const xg::finetune::ByteTokenizer bytes;
  for (const auto& c : fixture()["cases"]) {
    const std::string where = c["template"].get<std::string>() + "/" + c["case"].get<std::string>();
    const ChatTemplate t = real_template(c["template"]);
    xg::finetune::RowFormat format{&bytes, &t, ""};
    format.template_vars = c["vars"];
    const auto [ids, train] = format.tokens(messages_row(c["messages"]));
    const std::string text = c["text"];
    ASSERT_EQ(ids.size(), text.size()) << where;
    for (std::size_t i = 0; i < ids.size(); ++i) ASSERT_EQ(ids[i], static_cast<unsigned char>(text[i])) << where;
    EXPECT_EQ(train, char_mask(c)) << where;
    // --completion-only false: every token.
    format.completion_only = false;
    EXPECT_EQ(format.tokens(messages_row(c["messages"])).second, std::vector<uint8_t>(ids.size(), 1)) << where;
  }
}

TEST(TextChatSpans, HfTokensAreTrainedWhereTheirCharactersAre) {
  // Qwen3's tokenizer for the ChatML templates, Llama 3's for Llama 3's: each token's
  // characters (by decoding the ids before it) are all in a span or all outside, and it is
  // trained exactly when they are in one.
  const std::string dir = std::string(XGRAD_FIXTURE_DIR) + "/tokenizers/";
  const std::map<std::string, std::string> tokenizer_of = {
      {"qwen2_5", "qwen3"}, {"qwen3", "qwen3"}, {"smollm2", "qwen3"}, {"smollm2_generation", "qwen3"}, {"llama3", "llama3"}};
  // Each tokenizer is loaded once: a load of Qwen3's (151,643 entries and their merges) costs
  // more than the checks of a case.
  std::map<std::string, std::unique_ptr<xg::text::Tokenizer>> loaded;
  int checked = 0;
  for (const auto& c : fixture()["cases"]) {
    auto it = tokenizer_of.find(c["template"]);
    // Decoding a prefix that ends inside a character gives U+FFFD, so the characters of a
    // token are found this way in ASCII text only (the byte tokenizer's test has the rest).
    if (it == tokenizer_of.end() || c["case"] == "unicode") continue;
    const std::string where = c["template"].get<std::string>() + "/" + c["case"].get<std::string>();
    std::unique_ptr<xg::text::Tokenizer>& tok = loaded[it->second];
    if (!tok) tok = xg::text::load_tokenizer(dir + it->second);
    const ChatTemplate t = real_template(c["template"]);
    xg::finetune::RowFormat format{tok.get(), &t, ""};
    format.template_vars = c["vars"];
    const auto [ids, train] = format.tokens(messages_row(c["messages"]));
    const std::string text = c["text"];
    EXPECT_EQ(ids, tok->encode(text, false)) << where;  // the whole rendering, tokenized at once
    const std::vector<uint8_t> chars = char_mask(c);
    std::size_t at = 0;
    for (std::size_t k = 0; k < ids.size(); ++k) {
      const std::size_t next = tok->decode(std::vector<int64_t>(ids.begin(), ids.begin() + k + 1), false).size();
      ASSERT_LT(at, next) << where << " token " << k;
      const bool first = chars[at];
      for (std::size_t i = at; i < next; ++i) ASSERT_EQ(chars[i], first) << where << ": token " << k << " straddles a span edge";
      EXPECT_EQ(train[k], first) << where << ": token " << k << " '" << text.substr(at, next - at) << "'";
      at = next;
    }
    EXPECT_EQ(at, text.size()) << where;
    ++checked;
  }
  EXPECT_GE(checked, 15);
}

TEST(TextChatSpans, ATokenAcrossASpansEdgeIsTrained) {
  // Byte-level BPE keeps a space with the word after it: " yes" is one token, though the space
  // ends the generation prompt "assistant: " and "yes" is the reply. Tokenized whole, as TRL
  // does, it overlaps the reply, so it is trained (transformers' char_to_token).
  const auto tok = xg::text::load_tokenizer(std::string(XGRAD_FIXTURE_DIR) + "/tokenizers/qwen3");
  ASSERT_EQ(tok->encode(" yes", false).size(), 1u);
  const ChatTemplate t("{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}{% if add_generation_prompt %}assistant: {% endif %}");
  const xg::finetune::RowFormat format{tok.get(), &t, ""};
  const auto [ids, train] = format.tokens(messages_row(ordered_json::parse(
      R"([{"role": "user", "content": "ok?"}, {"role": "assistant", "content": "yes"}])")));
  std::vector<int64_t> trained;
  for (std::size_t k = 0; k < ids.size(); ++k)
    if (train[k]) trained.push_back(ids[k]);
  EXPECT_EQ(tok->decode(trained, false), " yes\n");
  EXPECT_EQ(ids, tok->encode("user: ok?\nassistant: yes\n", false));
  EXPECT_EQ(t.assistant_spans(ordered_json::parse(R"([{"role": "user", "content": "ok?"}, {"role": "assistant", "content": "yes"}])"))[0].begin,
            std::string("user: ok?\nassistant: ").size());
}

TEST(TextChatSpans, NamesReadAreTheVariablesATemplateUses) {
  const ChatTemplate qwen3 = real_template("qwen3");
  const std::vector<std::string> names = qwen3.names_read();
  for (const char* n : {"messages", "tools", "add_generation_prompt", "enable_thinking"})
    EXPECT_TRUE(std::binary_search(names.begin(), names.end(), n)) << n;
  EXPECT_NO_THROW(qwen3.check_variables({{"enable_thinking", false}}, "--template-var"));
  EXPECT_XG_ERROR(qwen3.check_variables({{"enable_thinking", false}, {"enable_thinkin", true}}, "--template-var"),
                  "--template-var enable_thinkin: the chat template never reads a variable 'enable_thinkin'");
  // Llama 3's template reads no tools.
  EXPECT_XG_ERROR(real_template("llama3").check_variables({{"tools", ordered_json::array()}}, "--template-var"),
                  "--template-var tools: the chat template never reads a variable 'tools'");
}

TEST(TextChatSpans, AContentTheTemplateDoesNotPrintIsAnError) {
  const ChatTemplate hides("{% for m in messages %}{{ m.role }}{% if m.role != 'assistant' %}:{{ m.content }}{% endif %}\n{% endfor %}");
  EXPECT_XG_ERROR(hides.assistant_spans(ordered_json::parse(R"([{"role":"user","content":"q"},{"role":"assistant","content":"a"}])")),
                  "chat template: cannot find where message 1 (assistant) is printed");
}

}  // namespace chat_spans_test

namespace template_var_name_test {

// A --template-var name comes from the command line: one holding a newline or a megabyte is
// quoted (JSON) and cut in the error, which stays one short line.
TEST(TextChatSpans, AnUnreadVariableWithAStrangeNameIsNamedOnOneShortLine) {
  const xg::text::ChatTemplate t("{{ messages | length }}");
  for (const std::string& name : {std::string("a\nb"), std::string(100000, 'x')}) {
    try {
      t.check_variables({{name, 1}}, "--template-var");
      FAIL() << "accepted";
    } catch (const xg::Error& e) {
      const std::string m = e.what();
      EXPECT_EQ(m.find('\n'), std::string::npos) << m.substr(0, 200);
      EXPECT_LT(m.size(), 200u);
      EXPECT_EQ(m.rfind("--template-var ", 0), 0u) << m.substr(0, 200);
    }
  }
  EXPECT_XG_ERROR(t.check_variables({{"a\nb", 1}}, "--template-var"),
                  "--template-var \"a\\nb\": the chat template never reads a variable \"a\\nb\"");
}

}  // namespace template_var_name_test
