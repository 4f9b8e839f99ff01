// Datasets for the finetune stages: a byte-level text corpus for pre-training, JSONL readers
// for SFT/DPO/GRPO rows, how a row becomes token ids (the plain format or a chat template, by
// any text::Tokenizer), and the collation of SFT and DPO rows into padded id batches.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

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

// How a row's text becomes one sequence (RowFormat::tokens).
enum class RowStyle {
  Plain,         // xgrad's prompt/response rows: a user/assistant turn in the chat template when there
                 // is one, else the plain format (encode_prompt, the response, EOS)
  Raw,           // TRL's standard rows (text; prompt/completion strings; implicit-prompt preference
                 // strings): the text as it is, the tokenizer's BOS before it and EOS after it
  Conversation,  // TRL's conversational rows: messages rendered by the chat template
};

// An SFT row. {prompt, response} is xgrad's own prompt/response row.
struct SftExample {
  SftExample() = default;
  SftExample(std::string p, std::string r) : prompt(std::move(p)), response(std::move(r)) {}
  std::string prompt, response;  // Plain; Raw: the prompt ("" for a text row) and the completion
  RowStyle style = RowStyle::Plain;
  nlohmann::ordered_json messages;  // Conversation: the whole conversation
  // Conversation: -1 for a `messages` row (the loss on every assistant turn: its content and
  // end-of-turn), else how many of `messages` are the prompt (the loss on what follows it).
  int64_t prompt_messages = -1;
};
// A preference row; {prompt, chosen, rejected} is xgrad's own. Implicit-prompt rows arrive
// with their prompt already extracted (read_dpo_jsonl).
struct DpoExample {
  DpoExample() = default;
  DpoExample(std::string p, std::string c, std::string r) : prompt(std::move(p)), chosen(std::move(c)), rejected(std::move(r)) {}
  std::string prompt, chosen, rejected;  // Plain, Raw
  RowStyle style = RowStyle::Plain;
  nlohmann::ordered_json prompt_messages, chosen_messages, rejected_messages;  // Conversation
};
// A preference row's two sequences as SFT rows: prompt + chosen, prompt + rejected.
SftExample chosen_row(const DpoExample& r);
SftExample rejected_row(const DpoExample& r);
// A GRPO row: a prompt to sample completions of, and the answers its rewards check them against.
struct GrpoExample {
  GrpoExample() = default;
  GrpoExample(std::string p, std::vector<std::string> a) : prompt(std::move(p)), answers(std::move(a)) {}
  std::string prompt;
  std::vector<std::string> answers;
  nlohmann::ordered_json prompt_messages;  // a conversational prompt (TRL's), rendered with the generation prompt; else null
  nlohmann::ordered_json row;              // the JSONL row as read (what a reward program is sent); null if made in code
  std::string where;                       // "file:line" of the row ("" if made in code)
};

// JSONL, one object per line (blank lines are skipped), in the formats TRL reads, told apart
// by the first row's fields (`format`, optional, receives its name for the startup line):
//   SFT:  {"messages": [{"role", "content"}, ...]}            conversational language modelling
//         {"text": "..."}                                      language modelling (raw text)
//         {"prompt": "...", "completion": "..."}               raw prompt/completion
//         {"prompt": [messages], "completion": [messages]}     conversational prompt/completion
//         {"prompt": "...", "response": "..."}                 xgrad's own (RowStyle::Plain)
//   DPO:  {"prompt", "chosen", "rejected"} as strings (xgrad's own) or message lists, or
//         {"chosen", "rejected"} alone (implicit prompt: their common start, as TRL's
//         extract_prompt takes it: whole messages, or characters with a space left to the answers)
//   GRPO: {"prompt": "..." or [messages], "answers": ["...", ...]}
// Every row must be of the first row's format. Conversations hold objects with a "role"
// (system, user, assistant, tool) and a string "content"; a system message only first, the
// first other a user's, an assistant's after a user's or a tool's, a tool's after an
// assistant's or a tool's, no two user messages in a row; a `messages` row holds an
// assistant message, a prompt ends with a user or tool message and a completion starts with
// an assistant's. Errors are xg::Error "path:line: ..." naming what was wrong; an unreadable
// or empty file, or a folder, is an error. `lines` (optional) receives each row's line number.
std::vector<SftExample> read_sft_jsonl(const std::string& path, std::vector<int64_t>* lines = nullptr,
                                       std::string* format = nullptr);
std::vector<DpoExample> read_dpo_jsonl(const std::string& path, std::vector<int64_t>* lines = nullptr,
                                       std::string* format = nullptr);
std::vector<GrpoExample> read_grpo_jsonl(const std::string& path, std::vector<int64_t>* lines = nullptr,
                                         std::string* format = nullptr);

// A prompt of xg-generate's --prompts file: text to continue, or a conversation to continue as
// the assistant (rendered by the chat template with the generation prompt).
struct PromptRow {
  std::string text;                  // a text prompt ("" for a conversation)
  nlohmann::ordered_json messages;   // a conversation; null for a text prompt
  std::string where;                 // "file:line"
};
// One JSON object per line (blank lines skipped) with "prompt": a string or a list of messages
// (TRL's conversational prompt), or "messages": a conversation to continue; rows of either
// kind may mix. A conversation is checked as a GRPO row's conversational prompt is (known
// roles, string content, in the order above) and must end with a user or tool message, the
// turn the model answers. Errors are xg::Error "path:line: ..."; a file without a prompt is one.
std::vector<PromptRow> read_prompts_jsonl(const std::string& path);

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
// tokenized without adding them again. TRL's formats: see RowStyle and tokens().
struct RowFormat {
  const text::Tokenizer* tokenizer = nullptr;
  const text::ChatTemplate* chat_template = nullptr;  // null: the plain format
  std::string system;                                 // with a chat template: a system message first ("" = none)
  // Variables every rendering of the template gets (--template-var: enable_thinking, tools).
  nlohmann::ordered_json template_vars = nlohmann::ordered_json::object();
  // false: the loss on every token of a row (TRL's completion_only_loss=False), not only on
  // the completion or the assistant turns.
  bool completion_only = true;

  const text::Tokenizer& tok() const;
  // The ids a model generates from (GRPO, xg-generate's instruct format).
  std::vector<int64_t> prompt_ids(const std::string& prompt) const;
  // A GRPO row's: its conversational prompt rendered with the generation prompt (an error
  // without a chat template), else prompt_ids(row.prompt).
  std::vector<int64_t> prompt_ids(const GrpoExample& row) const;
  // The prompt's ids and the response's (what the loss trains on), prompt first.
  std::pair<std::vector<int64_t>, std::vector<int64_t>> row_ids(const std::string& prompt,
                                                                const std::string& response) const;
  // Any row's ids and which of them the loss trains on (1), before truncation. Plain and raw
  // rows: the prompt and the completion tokenized apart. Conversational rows: the rendering
  // tokenized whole, as TRL does, the tokens overlapping a trained part of it trained (the
  // assistant spans of ChatTemplate::assistant_spans for `messages` rows; what follows the
  // prompt's generation prompt for prompt/completion rows). A conversational row without a
  // chat template is an error.
  std::pair<std::vector<int64_t>, std::vector<uint8_t>> tokens(const SftExample& row) const;
  // The id padding uses: the tokenizer's PAD, else its EOS, else 0 (padding is masked).
  int64_t pad_id() const;
};

// The chat template --chat-template selects for a base: "auto" the one the model carries
// (text::load_chat_template: null for an xgrad folder or a base model without one), "none"
// never, anything else a file (ChatTemplate::from_file: a Jinja file or a tokenizer_config.json,
// "FILE:NAME" for a named template of its list when FILE:NAME is no file itself) whose special
// tokens are the base's (its tokenizer_config.json's, else `tok`'s BOS and EOS). A file that is
// missing, or a template the interpreter cannot parse, is an xg::Error naming the flag or the file.
std::unique_ptr<text::ChatTemplate> chat_template_for(const io::ModelSource& base, const std::string& mode,
                                                      const text::Tokenizer* tok = nullptr);

// Padded ids for causal-LM training on responses, shaped for losses::sft_loss and
// losses::sequence_logprobs.
struct SftBatch {
  Tensor input_ids;       // [B, T] int64, right-padded with PAD
  Tensor labels;          // [B, T] int64: input_ids with what is not trained on (prompt, user turns) and padding set to -100
  Tensor prompt_lengths;  // [B] int64: the leading tokens not trained on (BOS + prompt + "\n", or the rendered prompt) kept
  Tensor attention_mask;  // [B, T] int64: 1 = real token, 0 = padding
};
// T is the longest row after truncation. Truncation to max_len (>= 2): the leading tokens not
// trained on (the prompt) keep their first min(len, max_len - 1), then the rest keeps its first
// tokens up to max_len in total (a cut response loses its EOS). So every row has a trained token.
// sft_loss(logits, batch.labels, zeros, batch.attention_mask) trains on the response and EOS
// (on prompt/response rows, sft_loss(logits, batch.input_ids, batch.prompt_lengths, mask) does
// too); losses::shift_labels(batch.labels) are the targets of logits[:, t].
SftBatch collate_sft(const RowFormat& format, const std::vector<SftExample>& rows, int64_t max_len);
SftBatch collate_sft(const text::Tokenizer& tok, const std::vector<SftExample>& rows, int64_t max_len);  // plain format

// Chosen and rejected sequences in one batch: rows 0..B-1 are prompt + chosen, rows
// B..2B-1 the same prompts + rejected (narrow(…, 0, 0, B) / narrow(…, 0, B, B) split them),
// padded to one T, truncated as collate_sft does.
SftBatch collate_dpo(const RowFormat& format, const std::vector<DpoExample>& rows, int64_t max_len);
SftBatch collate_dpo(const text::Tokenizer& tok, const std::vector<DpoExample>& rows, int64_t max_len);  // plain format

}  // namespace xg::finetune
