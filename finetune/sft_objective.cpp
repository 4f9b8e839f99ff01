// attach_sft / sft_eval: supervised finetuning on any SFT row format (dataset.hpp).
#include <memory>

#include "autograd/error.hpp"
#include "autograd/graph.hpp"
#include "finetune/detail/objective_util.hpp"
#include "finetune/objectives.hpp"
#include "finetune/packing.hpp"
#include "losses/losses.hpp"

namespace xg::finetune {

namespace {

// Targets that are not -100.
int64_t target_count(const Tensor& targets) {
  const int64_t* p = targets.data<int64_t>();
  int64_t n = 0;
  for (int64_t i = 0; i < targets.numel(); ++i) n += p[i] != -100;
  return n;
}

// The loss of a padded batch: on its labels (the trained tokens of every row: the response, or
// every assistant turn), no prompt length beyond them.
Tensor batch_loss(const nn::DecoderLM& model, const SftBatch& b) {
  return sft_model_loss(model, b.input_ids, Tensor(), b.labels, zeros({b.labels.size(0)}, kInt64), b.attention_mask);
}

// Tokens the loss trains on: the shifted, masked labels that are not -100.
int64_t target_count(const SftBatch& b) {
  return target_count(losses::sft_labels(b.labels, zeros({b.labels.size(0)}, kInt64), b.attention_mask));
}

}  // namespace

Metrics sft_eval(const nn::DecoderLM& model, const std::vector<SftExample>& rows, int64_t batch, int64_t max_len,
                 const RowFormat& format) {
  check(!rows.empty(), "sft_eval: no rows");
  NoGradGuard no_grad;
  double sum = 0;
  int64_t tokens = 0;
  for (std::size_t i = 0; i < rows.size(); i += static_cast<std::size_t>(batch)) {
    std::vector<SftExample> chunk(rows.begin() + static_cast<std::ptrdiff_t>(i),
                                  rows.begin() + static_cast<std::ptrdiff_t>(std::min(rows.size(), i + batch)));
    SftBatch b = collate_sft(format, chunk, max_len);
    const int64_t n = target_count(b);
    sum += batch_loss(model, b).item() * static_cast<double>(n);
    tokens += n;
  }
  const double loss = sum / static_cast<double>(tokens);
  return {{"loss", loss}, {"tokens", static_cast<double>(tokens)}};
}

Tensor sft_model_loss(const nn::DecoderLM& model, const Tensor& tokens, const Tensor& position_ids, const Tensor& labels,
                      const Tensor& prompt_lengths, const Tensor& padding_mask) {
  const Tensor head = model.plain_head_weight();
  if (head.defined())
    return losses::sft_loss_from_hidden(model.hidden(tokens, position_ids), head, labels, prompt_lengths, padding_mask);
  const Tensor logits = position_ids.defined() ? model.forward_packed(tokens, position_ids) : model(tokens);
  return losses::sft_loss(logits, labels, prompt_lengths, padding_mask);
}

Tensor model_token_logprobs(const nn::DecoderLM& model, const Tensor& tokens, const Tensor& position_ids,
                            const Tensor& targets) {
  const Tensor head = model.plain_head_weight();
  if (head.defined()) return losses::linear_token_logprobs(model.hidden(tokens, position_ids), head, targets);
  return losses::token_logprobs(position_ids.defined() ? model.forward_packed(tokens, position_ids) : model(tokens), targets);
}

void attach_sft(TrainLoop& loop, nn::DecoderLM& model, const SftTask& task) {
  check(task.train && !task.train->empty(), "SFT: no training rows");
  check(task.batch > 0 && task.max_len >= 2, "SFT: batch must be positive and max_len >= 2");
  if (task.packing) {
    auto packed = std::make_shared<const std::vector<PackedRow>>(pack_sft(task.format, *task.train, task.max_len));
    loop.micro_step = [&model, packed, task](int64_t, int64_t, Generator& rng) {
      const PackedBatch b = collate_packed(draw_rows(*packed, task.batch, rng));
      const Tensor no_prompt = zeros({b.labels.size(0)}, kInt64);  // the labels mask prompts already
      Tensor loss = sft_model_loss(model, b.input_ids, b.position_ids, b.labels, no_prompt);
      return MicroResult{loss, target_count(losses::shift_labels(b.labels)), {}};
    };
  } else {
    loop.micro_step = [&model, task](int64_t, int64_t, Generator& rng) {
      SftBatch b = collate_sft(task.format, draw_rows(*task.train, task.batch, rng), task.max_len);
      Tensor loss = batch_loss(model, b);
      return MicroResult{loss, target_count(b), {}};
    };
  }
  if (task.heldout && !task.heldout->empty()) {
    loop.evaluate = [&model, rows = head(*task.heldout, task.eval_rows), task](int64_t) { return sft_eval(model, rows, task.batch, task.max_len, task.format); };
  }
}

}  // namespace xg::finetune
