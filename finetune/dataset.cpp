// TextDataset (byte tokens of a file, random and sequential windows), the row formats (plain,
// raw text or chat template: which ids a row has and which of them are trained on) and SFT/DPO
// collation. The JSONL readers are in jsonl_rows.cpp.
#include "finetune/dataset.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <tuple>

#include "autograd/error.hpp"
#include "finetune/detail/read_all.hpp"
#include "finetune/detail/seq.hpp"
#include "io/read_file.hpp"
#include "text/chat_template.hpp"

namespace xg::finetune {

namespace {

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
      if (s.train[t]) labels[i] = s.ids[t];
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

std::string read_all(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw Error(str_cat(path, ": is a folder, expected a file"));
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(str_cat(path, ": cannot open file"));
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) throw Error(str_cat(path, ": read error"));
  return s;
}

Seq make_seq(const RowFormat& format, const SftExample& row, int64_t max_len) {
  Seq s;
  std::tie(s.ids, s.train) = format.tokens(row);
  const int64_t n = static_cast<int64_t>(s.ids.size());
  int64_t lead = 0;  // ids before the first trained one
  while (lead < n && !s.train[static_cast<std::size_t>(lead)]) ++lead;
  s.prompt_len = std::min<int64_t>(lead, max_len - 1);
  const int64_t keep = std::min<int64_t>(n - lead, max_len - s.prompt_len);
  s.ids.erase(s.ids.begin() + s.prompt_len, s.ids.begin() + lead);
  s.train.erase(s.train.begin() + s.prompt_len, s.train.begin() + lead);
  s.ids.resize(static_cast<std::size_t>(s.prompt_len + keep));
  s.train.resize(s.ids.size());
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
  return tok().encode(chat_template->render_prompt(user_turn(system, prompt), template_vars), /*add_special_tokens=*/false);
}

std::vector<int64_t> RowFormat::prompt_ids(const GrpoExample& row) const {
  if (row.prompt_messages.is_null()) return prompt_ids(row.prompt);
  check(chat_template != nullptr, "conversational rows are rendered by a chat template, and there is none (the ",
        "base carries none, or --chat-template none): give --chat-template FILE");
  return tok().encode(chat_template->render(row.prompt_messages, true, template_vars), /*add_special_tokens=*/false);
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
  const text::ChatSplit split = chat_template->render_split(text::messages_json(messages), messages.size() - 1, template_vars);
  return {t.encode(split.prompt, false), t.encode(split.completion, false)};
}

std::pair<std::vector<int64_t>, std::vector<uint8_t>> RowFormat::tokens(const SftExample& row) const {
  const text::Tokenizer& t = tok();
  std::vector<int64_t> ids;
  std::vector<uint8_t> train;
  auto add = [&](const std::vector<int64_t>& part, bool trained) {
    ids.insert(ids.end(), part.begin(), part.end());
    train.insert(train.end(), part.size(), trained || !completion_only);
  };
  // Rendered text: tokenized whole, as TRL tokenizes it; the tokens that overlap a trained
  // byte range [cuts[2j], cuts[2j + 1]) are trained (transformers' char_to_token). Where a cut
  // falls is found by tokenizing the text before it: the ids the whole text starts with lie
  // before the cut, and when that text tokenizes otherwise, the next id straddles the cut
  // (Mistral's " Hi" is one token "▁Hi" across the end of "[/INST]").
  auto add_text = [&](const std::string& text, const std::vector<std::size_t>& cuts) {
    const std::vector<int64_t> all = t.encode(text, false);
    auto before = [&](std::size_t cut) -> std::pair<std::size_t, bool> {
      if (cut == 0) return {0, false};
      if (cut >= text.size()) return {all.size(), false};
      const std::vector<int64_t> head = t.encode(text.substr(0, cut), false);
      std::size_t k = 0;
      while (k < head.size() && k < all.size() && head[k] == all[k]) ++k;
      return {k, k < head.size()};
    };
    std::vector<uint8_t> trained(all.size(), 0);
    for (std::size_t i = 0; i + 1 < cuts.size(); i += 2) {
      const std::size_t first = before(cuts[i]).first;
      const auto [end, straddles] = before(cuts[i + 1]);
      for (std::size_t k = first; k < std::min(all.size(), end + (straddles ? 1 : 0)); ++k) trained[k] = 1;
    }
    ids.insert(ids.end(), all.begin(), all.end());
    for (uint8_t v : trained) train.push_back(v || !completion_only);
  };
  switch (row.style) {
    case RowStyle::Plain: {
      const auto [p, r] = row_ids(row.prompt, row.response);
      add(p, false);
      add(r, true);
      break;
    }
    case RowStyle::Raw: {
      // TRL's standard rows: the text as it is, the tokenizer's special tokens of a single
      // text around it (BOS), and EOS after the completion; a text row is all completion.
      check(t.eos_id() >= 0, "text and prompt/completion rows end with EOS, but the tokenizer has no EOS token ",
            "(give tokenizer_config.json an eos_token)");
      if (row.prompt.empty()) {
        add(t.encode(row.response, true), true);
      } else {
        add(t.encode(row.prompt, true), false);
        add(t.encode(row.response, false), true);
      }
      add({t.eos_id()}, true);
      break;
    }
    case RowStyle::Conversation: {
      check(chat_template != nullptr, "conversational rows are rendered by a chat template, and there is none (the ",
            "base carries none, or --chat-template none): give --chat-template FILE");
      if (row.prompt_messages >= 0) {
        const text::ChatSplit split =
            chat_template->render_split(row.messages, static_cast<std::size_t>(row.prompt_messages), template_vars);
        add_text(split.prompt + split.completion, {split.prompt.size(), split.prompt.size() + split.completion.size()});
      } else {
        std::vector<std::size_t> cuts;
        for (const text::ChatTemplate::Span& sp : chat_template->assistant_spans(row.messages, template_vars)) {
          cuts.push_back(sp.begin);
          cuts.push_back(sp.end);
        }
        add_text(chat_template->render(row.messages, false, template_vars), cuts);
      }
      break;
    }
  }
  return {ids, train};
}

int64_t RowFormat::pad_id() const {
  const text::Tokenizer& t = tok();
  return t.pad_id() >= 0 ? t.pad_id() : t.eos_id() >= 0 ? t.eos_id() : 0;
}

std::unique_ptr<text::ChatTemplate> chat_template_for(const io::ModelSource& base, const std::string& mode,
                                                      const text::Tokenizer* tok) {
  if (mode == "none") return nullptr;
  if (mode == "auto") return text::load_chat_template(base);
  // A file: FILE, or FILE:NAME for a named template of a tokenizer_config.json's list.
  std::string path = mode, name = "default";
  std::error_code ec;
  const std::size_t colon = mode.rfind(':');
  if (!std::filesystem::exists(path, ec) && colon != std::string::npos && colon > 0) {
    path = mode.substr(0, colon);
    name = mode.substr(colon + 1);
  }
  check(std::filesystem::exists(path, ec), "--chat-template: expected auto, none or a template file (a Jinja file or a ",
        "tokenizer_config.json), got '", mode, "' (no such file)");
  // The special tokens the template may print: the base's tokenizer_config.json's, else its
  // tokenizer's BOS and EOS.
  text::jinja::Dict special;
  if (!base.tokenizer_config_file.empty()) {
    const std::string& cfg = base.tokenizer_config_file;
    try {
      special = text::special_tokens_of(nlohmann::ordered_json::parse(io::read_file(cfg, "--chat-template")), cfg);
    } catch (const nlohmann::ordered_json::exception& e) {
      throw Error(str_cat(cfg, ": invalid JSON (", e.what(), ")"));
    }
  }
  if (tok) {
    if (!special.find("bos_token") && tok->bos_id() >= 0) special.set("bos_token", tok->id_to_token(tok->bos_id()));
    if (!special.find("eos_token") && tok->eos_id() >= 0) special.set("eos_token", tok->id_to_token(tok->eos_id()));
  }
  return std::make_unique<text::ChatTemplate>(text::ChatTemplate::from_file(path, special, name));
}

// ---- collation ---------------------------------------------------------------------------

SftBatch collate_sft(const RowFormat& format, const std::vector<SftExample>& rows, int64_t max_len) {
  check_collate("collate_sft", rows.size(), max_len);
  std::vector<Seq> seqs;
  for (const auto& r : rows) seqs.push_back(make_seq(format, r, max_len));
  return pad(format, seqs);
}

SftBatch collate_sft(const text::Tokenizer& tok, const std::vector<SftExample>& rows, int64_t max_len) {
  return collate_sft(RowFormat{&tok, nullptr, ""}, rows, max_len);
}

SftBatch collate_dpo(const RowFormat& format, const std::vector<DpoExample>& rows, int64_t max_len) {
  check_collate("collate_dpo", rows.size(), max_len);
  std::vector<Seq> seqs;
  for (const auto& r : rows) seqs.push_back(make_seq(format, chosen_row(r), max_len));
  for (const auto& r : rows) seqs.push_back(make_seq(format, rejected_row(r), max_len));
  return pad(format, seqs);
}

SftBatch collate_dpo(const text::Tokenizer& tok, const std::vector<DpoExample>& rows, int64_t max_len) {
  return collate_dpo(RowFormat{&tok, nullptr, ""}, rows, max_len);
}

}  // namespace xg::finetune
