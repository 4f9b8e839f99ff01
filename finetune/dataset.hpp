// Datasets for the finetune stages: a byte-level text corpus for pre-training, JSONL readers
// for SFT/DPO/GRPO rows, how a row becomes token ids (the plain format or a chat template, by
// any text::Tokenizer), and the collation of SFT and DPO rows into padded id batches.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "autograd/random.hpp"
#include "autograd/tensor.hpp"
#include "finetune/tokenizer.hpp"
#include "text/tokenizer.hpp"

namespace xg::text {
class ChatTemplate;  // text/chat_template.hpp
}  // namespace xg::text

namespace xg::finetune {

// Next-token pairs: y[b, t] = x[b, t + 1] of the same text window. Both int64 [B, T].
struct LmBatch {
  Tensor x, y;
};

// A text file as byte tokens (no BOS/EOS: the corpus is one continuous stream). A folder, an
// unreadable or an empty file is an xg::Error naming it.
class TextDataset {
 public:
  explicit TextDataset(const std::string& path);
  const std::string& path() const { return path_; }
  int64_t size() const { return static_cast<int64_t>(bytes_.size()); }  // tokens
  const std::string& text() const { return bytes_; }  // the file's bytes

  // `batch` windows of seq_len + 1 tokens starting at uniform random offsets.
  LmBatch random_batch(Generator& gen, int64_t batch, int64_t seq_len) const;
  // Evaluation: the text cut into consecutive, non-overlapping windows (window w starts at
  // w * seq_len); batch `index` holds windows index * batch ... The last batch may have fewer
  // rows. num_batches covers every window.
  int64_t num_batches(int64_t batch, int64_t seq_len) const;
  LmBatch batch_at(int64_t index, int64_t batch, int64_t seq_len) const;

 private:
  void check_sizes(const char* fn, int64_t batch, int64_t seq_len) const;
  std::string path_;
  std::string bytes_;
};

struct SftExample { std::string prompt, response; };
struct DpoExample { std::string prompt, chosen, rejected; };
struct GrpoExample { std::string prompt; std::vector<std::string> answers; };

// JSONL, one object per line (blank lines are skipped). Errors are xg::Error
// "path:line: ..." naming what was expected; an unreadable or empty file, or a folder, is an
// error. `lines` (optional) receives each row's line number, for later errors about a row.
std::vector<SftExample> read_sft_jsonl(const std::string& path, std::vector<int64_t>* lines = nullptr);
std::vector<DpoExample> read_dpo_jsonl(const std::string& path, std::vector<int64_t>* lines = nullptr);
std::vector<GrpoExample> read_grpo_jsonl(const std::string& path, std::vector<int64_t>* lines = nullptr);

// The plain prompt format every stage uses without a chat template: the tokenizer's special
// tokens of a single text around prompt + "\n" (the byte tokenizer: BOS, the prompt's bytes,
// "\n"; Llama-3: <|begin_of_text|> first; Qwen: nothing added). The response follows, tokenized
// on its own, and ends with EOS. Generation (GRPO) starts from exactly these ids.
std::vector<int64_t> encode_prompt(const text::Tokenizer& tok, const std::string& prompt);

// How rows become ids: a tokenizer (null: the byte tokenizer) and either the plain format
// (encode_prompt, then the response and EOS) or a chat template: the conversation [system],
// user = prompt, assistant = response, rendered by ChatTemplate::render_split (the loss covers
// what the template adds for the assistant's turn, its end-of-turn token included) and, for
// generation, render_prompt. Rendered text holds the template's special tokens, so it is
// tokenized without adding them again.
struct RowFormat {
  const text::Tokenizer* tokenizer = nullptr;
  const text::ChatTemplate* chat_template = nullptr;  // null: the plain format
  std::string system;                                 // with a chat template: a system message first ("" = none)

  const text::Tokenizer& tok() const;
  // The ids a model generates from (GRPO, xg-generate's instruct format).
  std::vector<int64_t> prompt_ids(const std::string& prompt) const;
  // The prompt's ids and the response's (what the loss trains on), prompt first.
  std::pair<std::vector<int64_t>, std::vector<int64_t>> row_ids(const std::string& prompt,
                                                                const std::string& response) const;
  // The id padding uses: the tokenizer's PAD, else its EOS, else 0 (padding is masked).
  int64_t pad_id() const;
};

// The chat template --chat-template selects for a base: "auto" the one the model carries
// (text::load_chat_template: null for an xgrad folder or a base model without one), "none"
// never. Another mode, or a template the interpreter cannot parse, is an xg::Error naming the
// flag or the file.
std::unique_ptr<text::ChatTemplate> chat_template_for(const io::ModelSource& base, const std::string& mode);

// Padded ids for causal-LM training on responses, shaped for losses::sft_loss and
// losses::sequence_logprobs.
struct SftBatch {
  Tensor input_ids;       // [B, T] int64, right-padded with PAD
  Tensor labels;          // [B, T] int64: input_ids with the prompt part and padding set to -100
  Tensor prompt_lengths;  // [B] int64: tokens of the prompt part (BOS + prompt + "\n", or the rendered prompt) kept
  Tensor attention_mask;  // [B, T] int64: 1 = real token, 0 = padding
};
// T is the longest row after truncation. Truncation to max_len (>= 2): the prompt keeps its
// first min(len, max_len - 1) tokens, then the response keeps its first tokens up to
// max_len in total (a cut response loses its EOS). So every row has a response token.
// sft_loss(logits, batch.labels, batch.prompt_lengths, batch.attention_mask) trains on the
// response and EOS; losses::shift_labels(batch.labels) are the targets of logits[:, t].
SftBatch collate_sft(const RowFormat& format, const std::vector<SftExample>& rows, int64_t max_len);
SftBatch collate_sft(const text::Tokenizer& tok, const std::vector<SftExample>& rows, int64_t max_len);  // plain format

// Chosen and rejected sequences in one batch: rows 0..B-1 are prompt + chosen, rows
// B..2B-1 the same prompts + rejected (narrow(…, 0, 0, B) / narrow(…, 0, B, B) split them),
// padded to one T, truncated as collate_sft does.
SftBatch collate_dpo(const RowFormat& format, const std::vector<DpoExample>& rows, int64_t max_len);
SftBatch collate_dpo(const text::Tokenizer& tok, const std::vector<DpoExample>& rows, int64_t max_len);  // plain format

}  // namespace xg::finetune
