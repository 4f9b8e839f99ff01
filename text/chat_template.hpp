// Chat templates from a model's tokenizer_config.json, rendered as transformers'
// apply_chat_template(messages, tokenize=False) renders them (Jinja2 with trim_blocks and
// lstrip_blocks), and the prompt/completion split the SFT, DPO and GRPO data paths need.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/model_source.hpp"
#include "text/jinja.hpp"

namespace xg::text {

struct ChatMessage {
  std::string role, content;
};

// A conversation that ends with the assistant's message, cut where the assistant's turn
// starts: prompt + completion is the whole rendering, and the loss mask covers completion.
struct ChatSplit {
  std::string prompt;      // the conversation before the last message, with the generation prompt
  std::string completion;  // what the template adds for the last (assistant) message
};

class ChatTemplate {
 public:
  // A template source with the special tokens it may print ({{ bos_token }}); an empty
  // token is left undefined, as transformers leaves a token the tokenizer does not have.
  explicit ChatTemplate(const std::string& source, std::string bos_token = "", std::string eos_token = "");

  // From a tokenizer_config.json (a file, or the folder holding it): "chat_template" is a
  // string, or a list of {"name", "template"} from which `name` is picked; bos_token and
  // eos_token (strings or AddedToken objects) and the other special tokens become variables.
  // A config without a chat template, or with one the subset cannot parse, is an error
  // naming the file.
  static ChatTemplate from_tokenizer_config(const std::string& path, const std::string& name = "default");
  static ChatTemplate from_tokenizer_config(const nlohmann::ordered_json& config, const std::string& origin,
                                            const std::string& name = "default");
  // Whether the config has a chat template (for --chat-template auto).
  static bool has_chat_template(const nlohmann::ordered_json& config);
  // A template named by a file: a tokenizer_config.json (a file ending in .json: its
  // "chat_template", the one called `name` in a list), else a Jinja source file, given
  // `special_tokens` (bos_token, eos_token, ...) as its variables. An unreadable file, a
  // config without a template or a template the interpreter cannot parse is an error naming
  // the file.
  static ChatTemplate from_file(const std::string& path, const jinja::Dict& special_tokens,
                                const std::string& name = "default");

  // apply_chat_template(messages, add_generation_prompt, **extra): messages are
  // {"role", "content", ...} objects (content a string or a list of {"type": "text",
  // "text"} parts, as the template expects); extra adds variables such as "tools" or
  // "enable_thinking". tools and documents are none unless extra sets them.
  std::string render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                     const nlohmann::ordered_json& extra = nlohmann::ordered_json::object()) const;
  std::string render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                     const nlohmann::ordered_json& extra = nlohmann::ordered_json::object()) const;

  // The prompt a model generates from (GRPO): render(messages, add_generation_prompt=true).
  std::string render_prompt(const std::vector<ChatMessage>& messages,
                            const nlohmann::ordered_json& extra = nlohmann::ordered_json::object()) const;
  // SFT and DPO: messages end with the assistant's reply. prompt is render_prompt of the
  // messages before it, completion the rest of render(messages, false). A template whose
  // full rendering does not start with that prompt (one that rewrites earlier turns once a
  // reply follows) is an error saying where they part.
  ChatSplit render_split(const std::vector<ChatMessage>& messages,
                         const nlohmann::ordered_json& extra = nlohmann::ordered_json::object()) const;
  // The same for JSON messages whose first `prompt_messages` are the prompt and the rest the
  // completion (TRL's conversational prompt/completion rows; a completion may hold several).
  ChatSplit render_split(const nlohmann::ordered_json& messages, std::size_t prompt_messages,
                         const nlohmann::ordered_json& extra = nlohmann::ordered_json::object()) const;

  // Where every assistant message's content and its end of turn lie in render(messages,
  // false): byte ranges [begin, end), in order, one per assistant message (TRL's
  // assistant_only_loss); for a template with {% generation %} blocks, the text they print. How they are found is said in chat_template.cpp; a template that
  // hides or rewrites an assistant's content so that it cannot be found is an error naming
  // the message.
  struct Span {
    std::size_t begin = 0, end = 0;
  };
  std::vector<Span> assistant_spans(const nlohmann::ordered_json& messages,
                                    const nlohmann::ordered_json& extra = nlohmann::ordered_json::object()) const;

  // The variable names the template reads (jinja::Template::names_read).
  std::vector<std::string> names_read() const { return template_.names_read(); }
  // An xg::Error naming the first of `vars` (a JSON object) the template never reads, and
  // `what` ("--template-var") as where it came from.
  void check_variables(const nlohmann::ordered_json& vars, const std::string& what) const;

  const std::string& source() const { return source_; }
  // The special-token variables the template sees (bos_token, eos_token, ...).
  const jinja::Dict& special_tokens() const { return special_tokens_; }

 private:
  ChatTemplate(const std::string& source, jinja::Dict special_tokens);
  // render, with the byte ranges of the {% generation %} blocks' output when `generation` is set.
  std::string render_with(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                          const nlohmann::ordered_json& extra,
                          std::vector<std::pair<std::size_t, std::size_t>>* generation) const;
  std::string source_;
  jinja::Template template_;
  jinja::Dict special_tokens_;
};

// The special tokens transformers passes to a template: each of bos_token, eos_token,
// unk_token, sep_token, pad_token, cls_token, mask_token a tokenizer_config.json sets (a string
// or an AddedToken object's content); `origin` names the file in errors.
jinja::Dict special_tokens_of(const nlohmann::ordered_json& config, const std::string& origin);

// Messages as JSON objects {"role", "content"}.
nlohmann::ordered_json messages_json(const std::vector<ChatMessage>& messages);

// The chat template a model carries, or null when it has none: a Hugging Face folder's
// chat_template.jinja, else tokenizer_config.json's "chat_template" (with its special tokens);
// a GGUF's tokenizer.chat_template, with the file's BOS and EOS tokens; an xgrad folder has none.
std::unique_ptr<ChatTemplate> load_chat_template(const io::ModelSource& source);

}  // namespace xg::text
