// The JSONL readers of SFT, DPO and GRPO rows in the formats TRL reads, and of xg-generate's
// prompts (nlohmann-json, errors "path:line: ..."): the format told by the first row, every
// conversation checked, and the prompt of implicit-prompt preference rows extracted.
#include <algorithm>

#include "autograd/error.hpp"
#include "finetune/dataset.hpp"
#include "finetune/detail/quoted.hpp"
#include "finetune/detail/read_all.hpp"

namespace xg::finetune {

namespace {

using ojson = nlohmann::ordered_json;

std::string string_field(const ojson& row, const char* key, const std::string& where) {
  auto it = row.find(key);
  if (it == row.end()) throw Error(str_cat(where, ": missing field \"", key, "\" (expected a string)"));
  if (!it->is_string())
    throw Error(str_cat(where, ": field \"", key, "\" must be a string, got ", it->type_name()));
  return it->get<std::string>();
}

// A format: its name (as the startup line and errors say it), whether a row has its fields,
// and how a row of it becomes a Row.
template <class Row>
struct Format {
  const char* name;
  bool (*fits)(const ojson& row);
  Row (*make)(const ojson& row, const std::string& where);
};

// Calls f(row, "path:line", line) for each non-blank line of `path`, which must hold a JSON object.
template <class F>
void for_each_object(const std::string& path, F f) {
  const std::string text = read_all(path);
  std::size_t start = 0;
  int64_t line_no = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    ++line_no;
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = str_cat(path, ":", line_no);
    ojson row;
    try {
      row = ojson::parse(line);
    } catch (const ojson::exception& e) {  // parse_error, or out_of_range for a number like 1e999
      throw Error(str_cat(where, ": invalid JSON (", e.what(), ")"));
    }
    if (!row.is_object()) throw Error(str_cat(where, ": expected a JSON object, got ", row.type_name()));
    f(row, where, line_no);
  }
}

// Calls the first row's format's make(row, "path:line") for each row.
// A later row that fits another format is refused as such; one that fits none is read as the
// first row's format, whose reader names the field it lacks.
template <class Row>
std::vector<Row> read_jsonl(const std::string& path, std::vector<int64_t>* lines, std::string* format_name,
                            const std::vector<Format<Row>>& formats, const char* objective) {
  std::vector<Row> rows;
  const Format<Row>* format = nullptr;
  int64_t first_line = 0;
  for_each_object(path, [&](const ojson& row, const std::string& where, int64_t line_no) {
    const Format<Row>* fits = nullptr;
    for (const Format<Row>& f : formats)
      if (f.fits(row)) {
        fits = &f;
        break;
      }
    if (!format) {
      if (!fits) {
        std::string all;
        for (const Format<Row>& f : formats) all += str_cat(all.empty() ? "" : ", ", f.name);
        throw Error(str_cat(where, ": the row fits none of the ", objective, " formats (", all, ")"));
      }
      format = fits;
      first_line = line_no;
    } else if (fits && fits != format) {
      throw Error(str_cat(where, ": a ", fits->name, " row, but the file's first row (line ", first_line, ") is ",
                          format->name, " (every row must be of one format)"));
    }
    rows.push_back(format->make(row, where));
    if (lines) lines->push_back(line_no);
  });
  if (rows.empty()) throw Error(str_cat(path, ": no rows (the file is empty)"));
  if (format_name) *format_name = format->name;
  return rows;
}

bool has(const ojson& row, const char* key) { return row.contains(key); }
bool is_list(const ojson& row, const char* key) { return row.contains(key) && row[key].is_array(); }

// ---- conversations -------------------------------------------------------------------------

// Where a conversation's message is, for errors: "messages[2]", "prompt[0]".
struct Msg {
  const ojson* m;
  std::string at;
};

// The messages of field `key`: a non-empty list of {"role": known, "content": string}.
std::vector<Msg> message_list(const ojson& row, const char* key, const std::string& where) {
  auto it = row.find(key);
  if (it == row.end()) throw Error(str_cat(where, ": missing field \"", key, "\" (expected a list of messages)"));
  if (!it->is_array()) throw Error(str_cat(where, ": field \"", key, "\" must be a list of messages, got ", it->type_name()));
  if (it->empty()) throw Error(str_cat(where, ": field \"", key, "\" is an empty conversation"));
  std::vector<Msg> out;
  for (std::size_t i = 0; i < it->size(); ++i) {
    const ojson& m = (*it)[i];
    const std::string at = str_cat(key, "[", i, "]");
    if (!m.is_object()) throw Error(str_cat(where, ": ", at, " must be a message object, got ", m.type_name()));
    auto role = m.find("role"), content = m.find("content");
    if (role == m.end() || !role->is_string()) throw Error(str_cat(where, ": ", at, " has no \"role\" string"));
    const std::string r = role->get<std::string>();
    if (r != "system" && r != "user" && r != "assistant" && r != "tool")
      throw Error(str_cat(where, ": ", at, " has role ", quoted(r), " (expected system, user, assistant or tool)"));
    if (content == m.end()) throw Error(str_cat(where, ": ", at, " (", r, ") has no \"content\""));
    if (!content->is_string())
      throw Error(str_cat(where, ": ", at, " (", r, "): \"content\" must be a string, got ", content->type_name()));
    out.push_back({&m, at});
  }
  return out;
}

std::string role_of(const Msg& m) { return (*m.m)["role"].get<std::string>(); }

// The order chat templates expect: system only first; then a user's; an assistant's after a
// user's or a tool's; a tool's after an assistant's or a tool's; never two user messages in a row.
void check_order(const std::vector<Msg>& msgs, const std::string& where) {
  std::string prev;
  for (std::size_t i = 0; i < msgs.size(); ++i) {
    const std::string r = role_of(msgs[i]);
    const char* rule = nullptr;
    if (r == "system" && i != 0) rule = "a system message may only come first";
    else if (r == "user" && prev == "user") rule = "two user messages in a row";
    else if (r == "assistant" && prev != "user" && prev != "tool") rule = "an assistant message must follow a user or tool message";
    else if (r == "tool" && prev != "assistant" && prev != "tool") rule = "a tool message must follow an assistant or tool message";
    if (rule) throw Error(str_cat(where, ": ", msgs[i].at, " (", r, ") is out of order: ", rule));
    prev = r;
  }
}

ojson to_json(const std::vector<Msg>& msgs) {
  ojson out = ojson::array();
  for (const Msg& m : msgs) out.push_back(*m.m);
  return out;
}

std::vector<Msg> joined(std::vector<Msg> a, const std::vector<Msg>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// A prompt ends with a user or tool message: the turn the model answers.
void check_prompt_end(const std::vector<Msg>& prompt, const std::string& where) {
  const std::string last = role_of(prompt.back());
  if (last != "user" && last != "tool")
    throw Error(str_cat(where, ": ", prompt.back().at, " (", last, "): a prompt must end with a user or tool message"));
}

// A prompt and its completion: the prompt ends with a user or tool message, the completion
// starts with the assistant's, and the whole is in order.
void check_prompt_completion(const std::vector<Msg>& prompt, const std::vector<Msg>& completion, const std::string& where) {
  check_prompt_end(prompt, where);
  if (role_of(completion.front()) != "assistant")
    throw Error(str_cat(where, ": ", completion.front().at, " (", role_of(completion.front()),
                        "): a completion must start with an assistant message"));
  check_order(joined(prompt, completion), where);
}

// ---- SFT -------------------------------------------------------------------------------------

SftExample messages_row(const ojson& row, const std::string& where) {
  const std::vector<Msg> msgs = message_list(row, "messages", where);
  check_order(msgs, where);
  if (std::none_of(msgs.begin(), msgs.end(), [](const Msg& m) { return role_of(m) == "assistant"; }))
    throw Error(str_cat(where, ": the conversation has no assistant message to train on"));
  SftExample r;
  r.style = RowStyle::Conversation;
  r.messages = to_json(msgs);
  return r;
}

SftExample text_row(const ojson& row, const std::string& where) {
  SftExample r{"", string_field(row, "text", where)};
  r.style = RowStyle::Raw;
  return r;
}

SftExample prompt_completion_row(const ojson& row, const std::string& where) {
  SftExample r{string_field(row, "prompt", where), string_field(row, "completion", where)};
  r.style = RowStyle::Raw;
  return r;
}

SftExample conv_prompt_completion_row(const ojson& row, const std::string& where) {
  const std::vector<Msg> prompt = message_list(row, "prompt", where), completion = message_list(row, "completion", where);
  check_prompt_completion(prompt, completion, where);
  SftExample r;
  r.style = RowStyle::Conversation;
  r.messages = to_json(joined(prompt, completion));
  r.prompt_messages = static_cast<int64_t>(prompt.size());
  return r;
}

SftExample prompt_response_row(const ojson& row, const std::string& where) {
  return SftExample{string_field(row, "prompt", where), string_field(row, "response", where)};
}

// ---- DPO -------------------------------------------------------------------------------------

DpoExample preference_row(const ojson& row, const std::string& where) {
  return DpoExample{string_field(row, "prompt", where), string_field(row, "chosen", where),
                    string_field(row, "rejected", where)};
}

// A conversational preference row, each answer checked to follow the prompt.
DpoExample conv_pair(const std::vector<Msg>& prompt, const std::vector<Msg>& chosen, const std::vector<Msg>& rejected,
                     const std::string& where) {
  check_prompt_completion(prompt, chosen, where);
  check_prompt_completion(prompt, rejected, where);
  DpoExample r;
  r.style = RowStyle::Conversation;
  r.prompt_messages = to_json(prompt);
  r.chosen_messages = to_json(chosen);
  r.rejected_messages = to_json(rejected);
  return r;
}

DpoExample conv_preference_row(const ojson& row, const std::string& where) {
  return conv_pair(message_list(row, "prompt", where), message_list(row, "chosen", where),
                   message_list(row, "rejected", where), where);
}

// TRL's extract_prompt on strings: their common start, less a space that ends it (the space
// stays with the answers); never inside a UTF-8 character.
DpoExample implicit_preference_row(const ojson& row, const std::string& where) {
  const std::string chosen = string_field(row, "chosen", where), rejected = string_field(row, "rejected", where);
  std::size_t k = 0;
  while (k < chosen.size() && k < rejected.size() && chosen[k] == rejected[k]) ++k;
  if (k == chosen.size() || k == rejected.size())
    throw Error(str_cat(where, ": \"chosen\" and \"rejected\" must differ after their common start (the implicit "
                        "prompt), but one is a start of the other"));
  while (k > 0 && (static_cast<unsigned char>(chosen[k]) & 0xC0) == 0x80) --k;
  if (k > 0 && chosen[k - 1] == ' ') --k;
  DpoExample r{chosen.substr(0, k), chosen.substr(k), rejected.substr(k)};
  r.style = RowStyle::Raw;
  return r;
}

// TRL's extract_prompt on conversations: the messages both start with.
DpoExample conv_implicit_preference_row(const ojson& row, const std::string& where) {
  const std::vector<Msg> chosen = message_list(row, "chosen", where), rejected = message_list(row, "rejected", where);
  std::size_t k = 0;
  while (k < chosen.size() && k < rejected.size() && *chosen[k].m == *rejected[k].m) ++k;
  if (k == 0) throw Error(str_cat(where, ": \"chosen\" and \"rejected\" share no first message (the implicit prompt)"));
  if (k == chosen.size() || k == rejected.size())
    throw Error(str_cat(where, ": \"chosen\" and \"rejected\" must differ after the messages they share (the implicit prompt)"));
  const std::vector<Msg> prompt(chosen.begin(), chosen.begin() + static_cast<std::ptrdiff_t>(k));
  const std::vector<Msg> c(chosen.begin() + static_cast<std::ptrdiff_t>(k), chosen.end()),
      r(rejected.begin() + static_cast<std::ptrdiff_t>(k), rejected.end());
  return conv_pair(prompt, c, r, where);
}

}  // namespace

std::vector<SftExample> read_sft_jsonl(const std::string& path, std::vector<int64_t>* lines, std::string* format) {
  static const std::vector<Format<SftExample>> formats = {
      {"{messages}", [](const ojson& r) { return has(r, "messages"); }, messages_row},
      {"{text}", [](const ojson& r) { return has(r, "text"); }, text_row},
      {"conversational {prompt, completion}",
       [](const ojson& r) { return is_list(r, "prompt") && has(r, "completion"); }, conv_prompt_completion_row},
      {"{prompt, completion}", [](const ojson& r) { return has(r, "prompt") && has(r, "completion"); },
       prompt_completion_row},
      {"{prompt, response}", [](const ojson& r) { return has(r, "prompt") && has(r, "response"); }, prompt_response_row},
  };
  return read_jsonl(path, lines, format, formats, "SFT");
}

std::vector<DpoExample> read_dpo_jsonl(const std::string& path, std::vector<int64_t>* lines, std::string* format) {
  static const std::vector<Format<DpoExample>> formats = {
      {"conversational {prompt, chosen, rejected}",
       [](const ojson& r) { return has(r, "prompt") && is_list(r, "chosen") && has(r, "rejected"); }, conv_preference_row},
      {"{prompt, chosen, rejected}", [](const ojson& r) { return has(r, "prompt") && has(r, "chosen") && has(r, "rejected"); },
       preference_row},
      {"conversational {chosen, rejected} (implicit prompt)",
       [](const ojson& r) { return is_list(r, "chosen") && has(r, "rejected"); }, conv_implicit_preference_row},
      {"{chosen, rejected} (implicit prompt)", [](const ojson& r) { return has(r, "chosen") && has(r, "rejected"); },
       implicit_preference_row},
  };
  return read_jsonl(path, lines, format, formats, "DPO");
}

std::vector<GrpoExample> read_grpo_jsonl(const std::string& path, std::vector<int64_t>* lines, std::string* format) {
  // The answers of a row: a non-empty list of strings.
  static const auto answers_of = [](const ojson& r, const std::string& w) {
    std::vector<std::string> out;
    auto it = r.find("answers");
    if (it == r.end()) throw Error(str_cat(w, ": missing field \"answers\" (expected a list of strings)"));
    if (!it->is_array() || it->empty())
      throw Error(str_cat(w, ": field \"answers\" must be a non-empty list of strings, got ",
                          it->is_array() ? "an empty list" : it->type_name()));
    for (std::size_t i = 0; i < it->size(); ++i) {
      if (!(*it)[i].is_string()) throw Error(str_cat(w, ": answers[", i, "] must be a string, got ", (*it)[i].type_name()));
      out.push_back((*it)[i].get<std::string>());
    }
    return out;
  };
  static const std::vector<Format<GrpoExample>> formats = {
      {"conversational {prompt, answers}", [](const ojson& r) { return is_list(r, "prompt") && has(r, "answers"); },
       [](const ojson& r, const std::string& w) {
         const std::vector<Msg> prompt = message_list(r, "prompt", w);
         check_order(prompt, w);
         check_prompt_end(prompt, w);
         GrpoExample ex("", answers_of(r, w));
         ex.prompt_messages = to_json(prompt);
         ex.row = r;
         ex.where = w;
         return ex;
       }},
      {"{prompt, answers}", [](const ojson& r) { return has(r, "prompt") && has(r, "answers"); },
       [](const ojson& r, const std::string& w) {
         GrpoExample ex(string_field(r, "prompt", w), answers_of(r, w));
         ex.row = r;
         ex.where = w;
         return ex;
       }},
  };
  return read_jsonl(path, lines, format, formats, "GRPO");
}

std::vector<PromptRow> read_prompts_jsonl(const std::string& path) {
  std::vector<PromptRow> prompts;
  for_each_object(path, [&](const ojson& row, const std::string& where, int64_t) {
    const char* key = row.contains("messages") ? "messages" : "prompt";
    auto it = row.find(key);
    if (it == row.end())
      throw Error(str_cat(where, ": expected a \"prompt\" (a string or a list of messages) or \"messages\""));
    if (it->is_string() && key[0] == 'p') {
      prompts.push_back({it->get<std::string>(), nullptr, where});
      return;
    }
    if (!it->is_array() && key[0] == 'p')
      throw Error(str_cat(where, ": field \"prompt\" must be a string or a list of messages, got ", it->type_name()));
    const std::vector<Msg> msgs = message_list(row, key, where);
    check_order(msgs, where);
    check_prompt_end(msgs, where);
    prompts.push_back({"", to_json(msgs), where});
  });
  if (prompts.empty()) throw Error(str_cat(path, ": holds no prompt"));
  return prompts;
}

SftExample chosen_row(const DpoExample& r) {
  SftExample s{r.prompt, r.chosen};
  s.style = r.style;
  if (r.style == RowStyle::Conversation) {
    s.messages = r.prompt_messages;
    for (const auto& m : r.chosen_messages) s.messages.push_back(m);
    s.prompt_messages = static_cast<int64_t>(r.prompt_messages.size());
  }
  return s;
}

SftExample rejected_row(const DpoExample& r) {
  DpoExample swapped = r;
  std::swap(swapped.chosen, swapped.rejected);
  std::swap(swapped.chosen_messages, swapped.rejected_messages);
  return chosen_row(swapped);
}

}  // namespace xg::finetune
