// TextDataset (byte tokens of a file, random and sequential windows), the JSONL readers
// (nlohmann-json, errors "path:line: ..."), the row formats (plain or chat template) and SFT/DPO
// collation.
#include "finetune/dataset.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <tuple>

#include "autograd/error.hpp"
#include "finetune/detail/seq.hpp"
#include "text/chat_template.hpp"

namespace xg::finetune {

namespace {

using json = nlohmann::json;

std::string read_all(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw Error(str_cat(path, ": is a folder, expected a file"));
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(str_cat(path, ": cannot open file"));
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) throw Error(str_cat(path, ": read error"));
  return s;
}

const char* json_type(const json& v) { return v.type_name(); }

std::string string_field(const json& row, const char* key, const std::string& where) {
  auto it = row.find(key);
  if (it == row.end()) throw Error(str_cat(where, ": missing field \"", key, "\" (expected a string)"));
  if (!it->is_string())
    throw Error(str_cat(where, ": field \"", key, "\" must be a string, got ", json_type(*it)));
  return it->get<std::string>();
}

// Calls make(row, "path:line") for each non-blank line's JSON object.
template <class Row, class Make>
std::vector<Row> read_jsonl(const std::string& path, std::vector<int64_t>* lines, Make make) {
  const std::string text = read_all(path);
  std::vector<Row> rows;
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
    json row;
    try {
      row = json::parse(line);
    } catch (const json::exception& e) {  // parse_error, or out_of_range for a number like 1e999
      throw Error(str_cat(where, ": invalid JSON (", e.what(), ")"));
    }
    if (!row.is_object()) throw Error(str_cat(where, ": expected a JSON object, got ", json_type(row)));
    rows.push_back(make(row, where));
    if (lines) lines->push_back(line_no);
  }
  if (rows.empty()) throw Error(str_cat(path, ": no rows (the file is empty)"));
  return rows;
}

Tensor int_tensor(const std::vector<int64_t>& v, const Shape& shape) { return from_vector(v, shape); }

SftBatch pad(const RowFormat& format, const std::vector<Seq>& seqs) {
  const int64_t B = static_cast<int64_t>(seqs.size());
  int64_t T = 0;
  for (const Seq& s : seqs) T = std::max<int64_t>(T, static_cast<int64_t>(s.ids.size()));
  std::vector<int64_t> ids(static_cast<std::size_t>(B * T), format.pad_id()), labels(ids.size(), -100),
      mask(ids.size(), 0), plen(static_cast<std::size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    const Seq& s = seqs[static_cast<std::size_t>(b)];
    plen[static_cast<std::size_t>(b)] = s.prompt_len;
    for (std::size_t t = 0; t < s.ids.size(); ++t) {
      const std::size_t i = static_cast<std::size_t>(b * T) + t;
      ids[i] = s.ids[t];
      mask[i] = 1;
      if (static_cast<int64_t>(t) >= s.prompt_len) labels[i] = s.ids[t];
    }
  }
  return {int_tensor(ids, {B, T}), int_tensor(labels, {B, T}), int_tensor(plen, {B}), int_tensor(mask, {B, T})};
}

// [system], user = prompt: the conversation of a row before the assistant's reply.
std::vector<text::ChatMessage> user_turn(const std::string& system, const std::string& prompt) {
  std::vector<text::ChatMessage> m;
  if (!system.empty()) m.push_back({"system", system});
  m.push_back({"user", prompt});
  return m;
}

void check_collate(const char* fn, std::size_t rows, int64_t max_len) {
  check(rows > 0, fn, ": no rows to collate");
  check(max_len >= 2, fn, ": max_len ", max_len, " must be >= 2 (a prompt token and a response token)");
}

}  // namespace

Seq make_seq(const RowFormat& format, const std::string& prompt, const std::string& response, int64_t max_len) {
  Seq s;
  std::vector<int64_t> resp;
  std::tie(s.ids, resp) = format.row_ids(prompt, response);
  s.prompt_len = std::min<int64_t>(static_cast<int64_t>(s.ids.size()), max_len - 1);
  s.ids.resize(static_cast<std::size_t>(s.prompt_len));
  const int64_t keep = std::min<int64_t>(static_cast<int64_t>(resp.size()), max_len - s.prompt_len);
  s.ids.insert(s.ids.end(), resp.begin(), resp.begin() + keep);
  return s;
}

// ---- TextDataset -------------------------------------------------------------------------

TextDataset::TextDataset(const std::string& path) : path_(path), bytes_(read_all(path)) {
  if (bytes_.empty()) throw Error(str_cat(path, ": empty text file"));
}

void TextDataset::check_sizes(const char* fn, int64_t batch, int64_t seq_len) const {
  check(batch > 0 && seq_len > 0, "TextDataset::", fn, ": batch ", batch, " and seq_len ", seq_len,
        " must be positive");
  check(size() >= seq_len + 1, path_, ": ", size(), " tokens, too short for seq_len ", seq_len, " (needs ",
        seq_len + 1, ")");
}

LmBatch TextDataset::random_batch(Generator& gen, int64_t batch, int64_t seq_len) const {
  check_sizes("random_batch", batch, seq_len);
  const int64_t starts = size() - seq_len;  // start offsets 0 .. size - seq_len - 1
  std::vector<int64_t> x(static_cast<std::size_t>(batch * seq_len)), y(x.size());
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t s = std::min<int64_t>(static_cast<int64_t>(gen.uniform() * static_cast<double>(starts)), starts - 1);
    for (int64_t t = 0; t < seq_len; ++t) {
      x[static_cast<std::size_t>(b * seq_len + t)] = static_cast<unsigned char>(bytes_[static_cast<std::size_t>(s + t)]);
      y[static_cast<std::size_t>(b * seq_len + t)] = static_cast<unsigned char>(bytes_[static_cast<std::size_t>(s + t + 1)]);
    }
  }
  return {from_vector(x, {batch, seq_len}), from_vector(y, {batch, seq_len})};
}

int64_t TextDataset::num_batches(int64_t batch, int64_t seq_len) const {
  check_sizes("num_batches", batch, seq_len);
  const int64_t windows = (size() - 1) / seq_len;
  return (windows + batch - 1) / batch;
}

LmBatch TextDataset::batch_at(int64_t index, int64_t batch, int64_t seq_len) const {
  const int64_t n = num_batches(batch, seq_len);
  check(index >= 0 && index < n, "TextDataset::batch_at: index ", index, " out of range [0, ", n, ") for ", path_);
  const int64_t windows = (size() - 1) / seq_len;
  const int64_t B = std::min(batch, windows - index * batch);
  std::vector<int64_t> x(static_cast<std::size_t>(B * seq_len)), y(x.size());
  for (int64_t b = 0; b < B; ++b) {
    const int64_t s = (index * batch + b) * seq_len;
    for (int64_t t = 0; t < seq_len; ++t) {
      x[static_cast<std::size_t>(b * seq_len + t)] = static_cast<unsigned char>(bytes_[static_cast<std::size_t>(s + t)]);
      y[static_cast<std::size_t>(b * seq_len + t)] = static_cast<unsigned char>(bytes_[static_cast<std::size_t>(s + t + 1)]);
    }
  }
  return {from_vector(x, {B, seq_len}), from_vector(y, {B, seq_len})};
}

// ---- JSONL -------------------------------------------------------------------------------

std::vector<SftExample> read_sft_jsonl(const std::string& path, std::vector<int64_t>* lines) {
  return read_jsonl<SftExample>(path, lines, [](const json& r, const std::string& w) {
    return SftExample{string_field(r, "prompt", w), string_field(r, "response", w)};
  });
}

std::vector<DpoExample> read_dpo_jsonl(const std::string& path, std::vector<int64_t>* lines) {
  return read_jsonl<DpoExample>(path, lines, [](const json& r, const std::string& w) {
    return DpoExample{string_field(r, "prompt", w), string_field(r, "chosen", w), string_field(r, "rejected", w)};
  });
}

std::vector<GrpoExample> read_grpo_jsonl(const std::string& path, std::vector<int64_t>* lines) {
  return read_jsonl<GrpoExample>(path, lines, [](const json& r, const std::string& w) {
    GrpoExample ex{string_field(r, "prompt", w), {}};
    auto it = r.find("answers");
    if (it == r.end()) throw Error(str_cat(w, ": missing field \"answers\" (expected a list of strings)"));
    if (!it->is_array() || it->empty())
      throw Error(str_cat(w, ": field \"answers\" must be a non-empty list of strings, got ",
                          it->is_array() ? "an empty list" : json_type(*it)));
    for (std::size_t i = 0; i < it->size(); ++i) {
      if (!(*it)[i].is_string())
        throw Error(str_cat(w, ": answers[", i, "] must be a string, got ", json_type((*it)[i])));
      ex.answers.push_back((*it)[i].get<std::string>());
    }
    return ex;
  });
}

// ---- the plain format ---------------------------------------------------------------------

std::vector<int64_t> encode_prompt(const text::Tokenizer& tok, const std::string& prompt) {
  return tok.encode(prompt + "\n", /*add_special_tokens=*/true);
}

// ---- row formats -------------------------------------------------------------------------

const text::Tokenizer& RowFormat::tok() const {
  static const ByteTokenizer bytes;
  return tokenizer ? *tokenizer : bytes;
}

std::vector<int64_t> RowFormat::prompt_ids(const std::string& prompt) const {
  if (!chat_template) return encode_prompt(tok(), prompt);
  return tok().encode(chat_template->render_prompt(user_turn(system, prompt)), /*add_special_tokens=*/false);
}

std::pair<std::vector<int64_t>, std::vector<int64_t>> RowFormat::row_ids(const std::string& prompt,
                                                                         const std::string& response) const {
  const text::Tokenizer& t = tok();
  if (!chat_template) {
    check(t.eos_id() >= 0, "the plain prompt format ends each response with EOS, but the tokenizer has no EOS token ",
          "(give tokenizer_config.json an eos_token, or use a chat template)");
    std::vector<int64_t> response_ids = t.encode(response, /*add_special_tokens=*/false);
    response_ids.push_back(t.eos_id());
    return {encode_prompt(t, prompt), response_ids};
  }
  std::vector<text::ChatMessage> messages = user_turn(system, prompt);
  messages.push_back({"assistant", response});
  const text::ChatSplit split = chat_template->render_split(messages);
  return {t.encode(split.prompt, false), t.encode(split.completion, false)};
}

int64_t RowFormat::pad_id() const {
  const text::Tokenizer& t = tok();
  return t.pad_id() >= 0 ? t.pad_id() : t.eos_id() >= 0 ? t.eos_id() : 0;
}

std::unique_ptr<text::ChatTemplate> chat_template_for(const io::ModelSource& base, const std::string& mode) {
  check(mode == "auto" || mode == "none", "--chat-template: expected auto or none, got '", mode, "'");
  return mode == "none" ? nullptr : text::load_chat_template(base);
}

// ---- collation ---------------------------------------------------------------------------

SftBatch collate_sft(const RowFormat& format, const std::vector<SftExample>& rows, int64_t max_len) {
  check_collate("collate_sft", rows.size(), max_len);
  std::vector<Seq> seqs;
  for (const auto& r : rows) seqs.push_back(make_seq(format, r.prompt, r.response, max_len));
  return pad(format, seqs);
}

SftBatch collate_sft(const text::Tokenizer& tok, const std::vector<SftExample>& rows, int64_t max_len) {
  return collate_sft(RowFormat{&tok, nullptr, ""}, rows, max_len);
}

SftBatch collate_dpo(const RowFormat& format, const std::vector<DpoExample>& rows, int64_t max_len) {
  check_collate("collate_dpo", rows.size(), max_len);
  std::vector<Seq> seqs;
  for (const auto& r : rows) seqs.push_back(make_seq(format, r.prompt, r.chosen, max_len));
  for (const auto& r : rows) seqs.push_back(make_seq(format, r.prompt, r.rejected, max_len));
  return pad(format, seqs);
}

SftBatch collate_dpo(const text::Tokenizer& tok, const std::vector<DpoExample>& rows, int64_t max_len) {
  return collate_dpo(RowFormat{&tok, nullptr, ""}, rows, max_len);
}

}  // namespace xg::finetune
