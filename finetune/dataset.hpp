// Datasets for the finetune stages: a byte-level text corpus for pre-training, JSONL readers
// for SFT/DPO/GRPO rows, and the collation of SFT and DPO rows into padded id batches.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "autograd/random.hpp"
#include "autograd/tensor.hpp"
#include "finetune/tokenizer.hpp"

namespace xg::finetune {

// Next-token pairs: y[b, t] = x[b, t + 1] of the same text window. Both int64 [B, T].
struct LmBatch {
  Tensor x, y;
};

// A text file as byte tokens (no BOS/EOS: the corpus is one continuous stream).
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
// "path:line: ..." naming what was expected; an unreadable or empty file is an error.
std::vector<SftExample> read_sft_jsonl(const std::string& path);
std::vector<DpoExample> read_dpo_jsonl(const std::string& path);
std::vector<GrpoExample> read_grpo_jsonl(const std::string& path);

// The prompt template every stage uses: BOS, the prompt's bytes, then "\n". The response
// follows it and ends with EOS. Generation (GRPO) starts from exactly these ids.
std::vector<int64_t> encode_prompt(const ByteTokenizer& tok, const std::string& prompt);

// Padded ids for causal-LM training on responses, shaped for losses::sft_loss and
// losses::sequence_logprobs.
struct SftBatch {
  Tensor input_ids;       // [B, T] int64, right-padded with PAD
  Tensor labels;          // [B, T] int64: input_ids with the prompt part and padding set to -100
  Tensor prompt_lengths;  // [B] int64: tokens of the prompt part (BOS + prompt + "\n") kept
  Tensor attention_mask;  // [B, T] int64: 1 = real token, 0 = padding
};
// T is the longest row after truncation. Truncation to max_len (>= 2): the prompt keeps its
// first min(len, max_len - 1) tokens, then the response keeps its first tokens up to
// max_len in total (a cut response loses its EOS). So every row has a response token.
// sft_loss(logits, batch.labels, batch.prompt_lengths, batch.attention_mask) trains on the
// response and EOS; losses::shift_labels(batch.labels) are the targets of logits[:, t].
SftBatch collate_sft(const ByteTokenizer& tok, const std::vector<SftExample>& rows, int64_t max_len);

// Chosen and rejected sequences in one batch: rows 0..B-1 are prompt + chosen, rows
// B..2B-1 the same prompts + rejected (narrow(…, 0, 0, B) / narrow(…, 0, B, B) split them),
// padded to one T, truncated as collate_sft does.
SftBatch collate_dpo(const ByteTokenizer& tok, const std::vector<DpoExample>& rows, int64_t max_len);

}  // namespace xg::finetune
