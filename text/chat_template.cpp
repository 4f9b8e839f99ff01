// Chat templates: reading tokenizer_config.json, the variables transformers passes to the
// template, and the prompt/completion split.
#include "text/chat_template.hpp"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>
#include <sys/stat.h>

#include "autograd/error.hpp"
#include "io/read_file.hpp"

namespace xg::text {
namespace {


jinja::TemplateOptions chat_options() {
  jinja::TemplateOptions o;
  o.name = "chat template";
  return o;
}

// A special token of tokenizer_config.json: a string, or an AddedToken object's content.
std::string token_text(const nlohmann::ordered_json& config, const char* key, const std::string& origin) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    return (*it)["content"].get<std::string>();
  throw Error(str_cat(origin, ": ", key, " must be a string or an object with \"content\", got ", it->dump()));
}

std::string quoted(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

// The special tokens transformers passes to the template: each one the config sets.
jinja::Dict special_tokens_of(const nlohmann::ordered_json& config, const std::string& origin) {
  jinja::Dict d;
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
    std::string t = token_text(config, key, origin);
    if (!t.empty()) d.set(key, jinja::Value(t));
  }
  return d;
}

ChatTemplate::ChatTemplate(const std::string& source, jinja::Dict special_tokens)
    : source_(source), template_(source, chat_options()), special_tokens_(std::move(special_tokens)) {}

ChatTemplate::ChatTemplate(const std::string& source, std::string bos_token, std::string eos_token)
    : ChatTemplate(source, [&] {
        jinja::Dict d;
        if (!bos_token.empty()) d.set("bos_token", jinja::Value(bos_token));
        if (!eos_token.empty()) d.set("eos_token", jinja::Value(eos_token));
        return d;
      }()) {}

bool ChatTemplate::has_chat_template(const nlohmann::ordered_json& config) {
  auto it = config.find("chat_template");
  return it != config.end() && ((it->is_string() && !it->get<std::string>().empty()) || (it->is_array() && !it->empty()));
}

ChatTemplate ChatTemplate::from_tokenizer_config(const nlohmann::ordered_json& config, const std::string& origin,
                                                 const std::string& name) {
  if (!config.is_object()) throw Error(origin + ": expected a JSON object");
  auto it = config.find("chat_template");
  if (it == config.end() || it->is_null())
    throw Error(origin + ": no \"chat_template\" (the model has no chat template; use --chat-template none)");
  std::string source;
  if (it->is_string()) {
    source = it->get<std::string>();
  } else if (it->is_array()) {
    std::vector<std::string> names;
    for (const auto& entry : *it) {
      if (!entry.is_object() || !entry.contains("name") || !entry.contains("template") || !entry["name"].is_string() ||
          !entry["template"].is_string())
        throw Error(origin + ": chat_template list entries must be {\"name\": string, \"template\": string}");
      names.push_back(entry["name"].get<std::string>());
      if (names.back() == name) source = entry["template"].get<std::string>();
    }
    if (source.empty()) {
      std::string all;
      for (const auto& n : names) all += (all.empty() ? "" : ", ") + n;
      throw Error(str_cat(origin, ": no chat template named '", name, "' (it has ", all, ")"));
    }
  } else {
    throw Error(origin + ": chat_template must be a string or a list of named templates");
  }
  try {
    return ChatTemplate(source, special_tokens_of(config, origin));
  } catch (const Error& e) {
    throw Error(origin + ": " + e.what());
  }
}

ChatTemplate ChatTemplate::from_tokenizer_config(const std::string& path, const std::string& name) {
  struct stat st{};
  std::string file = path;
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) file = path + "/tokenizer_config.json";
  std::ifstream in(file, std::ios::binary);
  if (!in) throw Error("cannot read " + file);
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::ordered_json config;
  try {
    config = nlohmann::ordered_json::parse(ss.str());
  } catch (const nlohmann::json::exception& e) {
    throw Error(str_cat(file, ": not valid JSON (", e.what(), ")"));
  }
  return from_tokenizer_config(config, file, name);
}

std::string ChatTemplate::render_with(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                      const nlohmann::ordered_json& extra,
                                      std::vector<std::pair<std::size_t, std::size_t>>* generation) const {
  if (!messages.is_array()) throw Error("chat template: messages must be a JSON array");
  if (!extra.is_object()) throw Error("chat template: the extra variables must be a JSON object");
  jinja::Dict context;
  context.set("messages", jinja::from_json(messages));
  context.set("tools", jinja::Value::none());
  context.set("documents", jinja::Value::none());
  context.set("add_generation_prompt", jinja::Value(add_generation_prompt));
  for (const auto& [k, v] : special_tokens_.items) context.set(k, v);
  for (const auto& [k, v] : extra.items()) context.set(k, jinja::from_json(v));
  return template_.render(context, generation);
}

std::string ChatTemplate::render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                 const nlohmann::ordered_json& extra) const {
  return render_with(messages, add_generation_prompt, extra, nullptr);
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                 const nlohmann::ordered_json& extra) const {
  return render(messages_json(messages), add_generation_prompt, extra);
}

std::string ChatTemplate::render_prompt(const std::vector<ChatMessage>& messages,
                                        const nlohmann::ordered_json& extra) const {
  return render(messages, true, extra);
}

ChatSplit ChatTemplate::render_split(const std::vector<ChatMessage>& messages,
                                     const nlohmann::ordered_json& extra) const {
  if (messages.empty() || messages.back().role != "assistant")
    throw Error("chat template: render_split needs messages that end with an assistant message");
  return render_split(messages_json(messages), messages.size() - 1, extra);
}

ChatSplit ChatTemplate::render_split(const nlohmann::ordered_json& messages, std::size_t prompt_messages,
                                     const nlohmann::ordered_json& extra) const {
  if (!messages.is_array() || prompt_messages >= messages.size())
    throw Error("chat template: render_split needs a completion after the prompt's messages");
  nlohmann::ordered_json before = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < prompt_messages; ++i) before.push_back(messages[i]);
  std::string prompt = render(before, true, extra);
  std::string full = render(messages, false, extra);
  if (full.compare(0, prompt.size(), prompt) != 0) {
    size_t k = 0;
    while (k < prompt.size() && k < full.size() && prompt[k] == full[k]) ++k;
    throw Error(str_cat("chat template: the conversation with the reply does not start with the prompt rendered "
                        "without it (they differ from byte ", k, ": prompt has ",
                        quoted(prompt.substr(k, 40)), ", the whole conversation ",
                        quoted(full.substr(k, 40)), ")"));
  }
  return {prompt, full.substr(prompt.size())};
}

// How the assistant spans are found. A template with {% generation %} blocks (TRL's training
// templates) says it: the spans are the text those blocks print, as transformers'
// return_assistant_tokens_mask takes them. Otherwise (no real model's template has them), for
// assistant message i:
//  - its content: the conversation is rendered again with that content replaced by a marker.
//    Where that rendering departs from the real one (at the latest where the marker starts)
//    and where they meet again (at the earliest where it ends) bound what the content
//    changed, as the template printed it (Gemma and Llama 3 trim it; Qwen3 moves a "<think>"
//    part of it into a block of its own). Rendering the whole conversation, not prefixes of
//    it, handles templates whose earlier turns depend on later ones (Qwen3 prints an empty
//    <think></think> block only in the last assistant turn, Mistral v0.3 moves the system
//    message into the last user turn).
//  - its start: the end of the generation prompt, render(messages[:i], add_generation_prompt),
//    when the rendering starts with it, so what a model generates after that prompt is
//    trained (Qwen3's <think> block, Mistral's space before the reply); else the content's start.
//  - its end of turn: what the template prints after the content both here and when the
//    conversation ends with this message (found the same way): their common start, up to
//    its last '>' or newline. After a
//    middle turn that is the end-of-turn token (<|eot_id|>, <|im_end|>\n, </s>,
//    <end_of_turn>\n, <|end|>\n); after the last turn, everything the template prints to the
//    end (Phi-3's <|endoftext|> too).
std::vector<ChatTemplate::Span> ChatTemplate::assistant_spans(const nlohmann::ordered_json& messages,
                                                              const nlohmann::ordered_json& extra) const {
  if (!messages.is_array()) throw Error("chat template: messages must be a JSON array");
  if (template_.has_generation()) {  // the template says which text is the assistant's
    std::vector<std::pair<std::size_t, std::size_t>> blocks;
    render_with(messages, false, extra, &blocks);
    std::vector<Span> spans;
    for (const auto& [b, e] : blocks) spans.push_back({b, e});
    return spans;
  }
  static const std::string kMarker = "XgradAssistantContentMarkerQz";
  // [begin, end) of message i's content in the rendering `real` of `msgs`.
  auto content_bounds = [&](const nlohmann::ordered_json& msgs, std::size_t i, const std::string& real) {
    nlohmann::ordered_json marked = msgs;
    marked[i]["content"] = kMarker;
    const std::string r = render(marked, false, extra);
    const std::size_t at = r.find(kMarker);
    if (at == std::string::npos || r.find(kMarker, at + 1) != std::string::npos)
      throw Error(str_cat("chat template: cannot find where message ", i,
                          " (assistant) is printed: the template does not print its content once as given"));
    std::size_t head = 0, tail = 0;
    while (head < at && head < real.size() && real[head] == r[head]) ++head;
    const std::size_t after = r.size() - at - kMarker.size();
    while (tail < after && tail < real.size() - head && real[real.size() - 1 - tail] == r[r.size() - 1 - tail]) ++tail;
    return std::make_pair(head, real.size() - tail);
  };
  const std::string full = render(messages, false, extra);
  std::vector<Span> spans;
  for (std::size_t i = 0; i < messages.size(); ++i) {
    if (!messages[i].is_object() || messages[i].value("role", "") != "assistant") continue;
    auto [begin, end] = content_bounds(messages, i, full);
    nlohmann::ordered_json head = nlohmann::ordered_json::array();
    for (std::size_t j = 0; j < i; ++j) head.push_back(messages[j]);
    const std::string prompt = render(head, true, extra);
    if (prompt.size() <= begin && full.compare(0, prompt.size(), prompt) == 0) begin = prompt.size();
    std::size_t eot = full.size() - end;  // the last message: all the rest
    if (i + 1 < messages.size()) {
      head.push_back(messages[i]);
      const std::string cut = render(head, false, extra);
      const std::size_t cut_end = content_bounds(head, i, cut).second;
      std::size_t common = 0;
      while (end + common < full.size() && cut_end + common < cut.size() && full[end + common] == cut[cut_end + common])
        ++common;
      // Cut back to its last '>' or newline: special tokens end in '>', and the next turn and
      // the end of a conversation may start alike (Phi-3's <|user|> and <|endoftext|> share "<|").
      eot = 0;
      for (std::size_t k = 0; k < common; ++k)
        if (full[end + k] == '>' || full[end + k] == '\n') eot = k + 1;
    }
    // Whole UTF-8 characters: a bound where two renderings part may fall inside one.
    while (begin > 0 && (static_cast<unsigned char>(full[begin]) & 0xC0) == 0x80) --begin;
    std::size_t stop = end + eot;
    while (stop < full.size() && (static_cast<unsigned char>(full[stop]) & 0xC0) == 0x80) ++stop;
    if (!spans.empty() && begin < spans.back().end)
      throw Error(str_cat("chat template: message ", i, " (assistant) is printed inside the previous assistant turn"));
    spans.push_back({begin, stop});
  }
  return spans;
}

void ChatTemplate::check_variables(const nlohmann::ordered_json& vars, const std::string& what) const {
  const std::vector<std::string> read = names_read();
  for (const auto& [name, value] : vars.items())
    if (!std::binary_search(read.begin(), read.end(), name)) {
      // The name comes from the command line: one that is not a short identifier is quoted as
      // JSON and cut, so that a newline or a megabyte in it leaves the error one short line.
      const bool plain = !name.empty() && name.size() <= 64 && !std::isdigit(static_cast<unsigned char>(name[0])) &&
                         std::all_of(name.begin(), name.end(), [](char c) { return c == '_' || std::isalnum(static_cast<unsigned char>(c)); });
      const std::string shown =
          plain ? name : nlohmann::json(name.substr(0, 40)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
                             (name.size() > 40 ? "..." : "");
      throw Error(str_cat(what, " ", shown, ": the chat template never reads a variable ",
                          plain ? "'" + name + "'" : shown));
    }
}

ChatTemplate ChatTemplate::from_file(const std::string& path, const jinja::Dict& special_tokens,
                                     const std::string& name) {
  const std::string text = io::read_file(path, "chat template");
  const bool config = path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0;
  if (!config) {
    try {
      return ChatTemplate(text, special_tokens);
    } catch (const Error& e) {
      throw Error(path + ": " + e.what());
    }
  }
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(str_cat(path, ": not valid JSON (", e.what(), ")"));
  }
  ChatTemplate t = from_tokenizer_config(j, path, name);
  for (const auto& [k, v] : special_tokens.items)  // the tokenizer's tokens where the config names none
    if (!t.special_tokens_.find(k)) t.special_tokens_.set(k, v);
  return t;
}

nlohmann::ordered_json messages_json(const std::vector<ChatMessage>& messages) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const ChatMessage& m : messages) out.push_back({{"role", m.role}, {"content", m.content}});
  return out;
}

std::unique_ptr<ChatTemplate> load_chat_template(const io::ModelSource& source) {
  if (source.format == io::ModelFormat::Gguf) {  // tokenizer.chat_template, with the file's BOS and EOS tokens
    const io::GgufReader& f = *source.gguf;
    if (!f.has("tokenizer.chat_template")) return nullptr;
    const io::GgufValue& tokens = f.at("tokenizer.ggml.tokens");
    const auto token = [&](const char* key) -> std::string {
      if (!f.has(key)) return "";
      const int64_t id = f.get_int(key);
      check(id >= 0 && static_cast<std::size_t>(id) < tokens.strings.size(), source.path, ": ", key, " ", id,
            " is no token");
      return tokens.strings[static_cast<std::size_t>(id)];
    };
    return std::make_unique<ChatTemplate>(f.get_string("tokenizer.chat_template"), token("tokenizer.ggml.bos_token_id"),
                                          token("tokenizer.ggml.eos_token_id"));
  }
  if (source.tokenizer_config_file.empty()) return nullptr;
  const std::string& path = source.tokenizer_config_file;
  nlohmann::ordered_json config;
  try {
    config = nlohmann::ordered_json::parse(io::read_file(path, "load_chat_template"));
  } catch (const nlohmann::ordered_json::exception& e) {
    throw Error(str_cat(path, ": invalid JSON (", e.what(), ")"));
  }
  check(config.is_object(), path, ": expected a JSON object");
  // NOTE: newer transformers save the template beside the config, in chat_template.jinja, and
  // read that file in preference to the config's key.
  if (!source.chat_template_file.empty())
    config["chat_template"] = io::read_file(source.chat_template_file, "load_chat_template");
  if (!ChatTemplate::has_chat_template(config)) return nullptr;
  return std::make_unique<ChatTemplate>(ChatTemplate::from_tokenizer_config(config, path));
}

}  // namespace xg::text
