// attach_dpo / dpo_eval: Direct Preference Optimization against the adapter-disabled model (or a
// frozen copy of the base).
#include <memory>
#include "autograd/error.hpp"
#include "autograd/graph.hpp"
#include "autograd/reduce.hpp"
#include "autograd/shape.hpp"
#include "finetune/lora.hpp"
#include "finetune/detail/objective_util.hpp"
#include "finetune/objectives.hpp"
#include "finetune/packing.hpp"
#include "losses/losses.hpp"

namespace xg::finetune {

namespace {

// Summed response log-probs of each row of a collate_dpo batch: [2B] (chosen rows, then rejected).
Tensor response_logps(const nn::DecoderLM& model, const SftBatch& b) {
  const Tensor targets = losses::shift_labels(b.labels);
  return sum(model_token_logprobs(model, b.input_ids, Tensor(), targets), {-1});
}


// Summed response log-probs of each sequence of a packed batch: [2P] (pair i's chosen at 2i,
// rejected at 2i + 1).
Tensor packed_logps(const nn::DecoderLM& model, const PackedBatch& b) {
  return span_logprob_sums(model_token_logprobs(model, b.input_ids, b.position_ids, losses::shift_labels(b.labels)), b);
}


// [2P] -> [P]: the chosen (part 0) or rejected (part 1) log-probs of each pair.
Tensor pairs_part(const Tensor& t, int64_t part) {
  const int64_t P = t.size(0) / 2;
  return reshape(narrow(reshape(t, {P, 2}), 1, part, 1), {P});
}

Tensor first_half(const Tensor& t) { return narrow(t, 0, 0, t.shape()[0] / 2); }
Tensor second_half(const Tensor& t) { return narrow(t, 0, t.shape()[0] / 2, t.shape()[0] / 2); }

// Response tokens (with EOS) per row, to compare log-probs of responses of different lengths.
std::vector<double> response_lengths(const SftBatch& b) {
  Tensor t = losses::shift_labels(b.labels);
  const int64_t B = t.shape()[0], T = t.shape()[1];
  std::vector<double> n(static_cast<std::size_t>(B), 0);
  for (int64_t i = 0; i < B; ++i)
    for (int64_t j = 0; j < T; ++j) n[i] += t.data<int64_t>()[i * T + j] != -100;
  return n;
}

}  // namespace

Metrics dpo_eval(const nn::DecoderLM& model, const std::vector<DpoExample>& rows, const DpoTask& task) {
  check(!rows.empty(), "dpo_eval: no rows");
  NoGradGuard no_grad;
  double loss = 0, pref = 0, reward_acc = 0, margin = 0;
  for (std::size_t i = 0; i < rows.size(); i += static_cast<std::size_t>(task.batch)) {
    std::vector<DpoExample> chunk(rows.begin() + static_cast<std::ptrdiff_t>(i),
                                  rows.begin() + static_cast<std::ptrdiff_t>(std::min(rows.size(), i + task.batch)));
    const SftBatch b = collate_dpo(task.format, chunk, task.max_len);
    const Tensor pol = response_logps(model, b);
    const Tensor ref = reference_pass(model, task.reference, [&](const nn::DecoderLM& m) { return response_logps(m, b); });
    const double n = static_cast<double>(chunk.size());
    losses::DpoOutput o = losses::dpo_loss(first_half(pol), second_half(pol), first_half(ref), second_half(ref),
                                           task.beta, task.label_smoothing, task.loss_type);
    loss += o.loss.item() * n;
    reward_acc += o.reward_accuracy.item() * n;
    margin += o.reward_margin.item() * n;
    const std::vector<double> len = response_lengths(b);
    const int64_t B = static_cast<int64_t>(chunk.size());
    Tensor p = pol.to(kFloat64);
    for (int64_t r = 0; r < B; ++r)
      pref += p.data<double>()[r] / len[r] > p.data<double>()[B + r] / len[B + r];
  }
  const double n = static_cast<double>(rows.size());
  return {{"loss", loss / n}, {"pref_accuracy", pref / n}, {"reward_accuracy", reward_acc / n}, {"reward_margin", margin / n}};
}

void attach_dpo(TrainLoop& loop, nn::DecoderLM& model, const DpoTask& task) {
  check(task.train && !task.train->empty(), "DPO: no training rows");
  check(task.batch > 0 && task.max_len >= 2 && task.beta > 0, "DPO: batch must be positive, max_len >= 2, beta > 0");
  check_reference(model, task.reference, "DPO");
  auto result = [task](const Tensor& chosen, const Tensor& rejected, const Tensor& ref_chosen,
                       const Tensor& ref_rejected, int64_t tokens) {
    losses::DpoOutput o =
        losses::dpo_loss(chosen, rejected, ref_chosen, ref_rejected, task.beta, task.label_smoothing, task.loss_type);
    Metrics m = {{"rewards/chosen", mean(o.chosen_rewards).item()},
                 {"rewards/rejected", mean(o.rejected_rewards).item()},
                 {"rewards/margins", o.reward_margin.item()},
                 {"rewards/accuracies", o.reward_accuracy.item()}};
    return MicroResult{o.loss, tokens, m};
  };
  if (task.packing) {
    auto packed = std::make_shared<const std::vector<PackedRow>>(pack_dpo(task.format, *task.train, task.max_len));
    loop.micro_step = [&model, packed, result, task](int64_t, int64_t, Generator& rng) {
      const PackedBatch b = collate_packed(draw_rows(*packed, task.batch, rng));
      const Tensor ref = reference_pass(model, task.reference, [&](const nn::DecoderLM& m) { return packed_logps(m, b); });
      const Tensor pol = packed_logps(model, b);
      return result(pairs_part(pol, 0), pairs_part(pol, 1), pairs_part(ref, 0), pairs_part(ref, 1), b.real_tokens);
    };
  } else {
    loop.micro_step = [&model, result, task](int64_t, int64_t, Generator& rng) {
      const SftBatch b = collate_dpo(task.format, draw_rows(*task.train, task.batch, rng), task.max_len);
      const Tensor ref = reference_pass(model, task.reference, [&](const nn::DecoderLM& m) { return response_logps(m, b); });
      const Tensor pol = response_logps(model, b);
      return result(first_half(pol), second_half(pol), first_half(ref), second_half(ref),
                    b.attention_mask.to(kFloat64).sum().item<int64_t>());
    };
  }
  if (task.heldout && !task.heldout->empty())
    loop.evaluate = [&model, rows = head(*task.heldout, task.eval_rows), task](int64_t) {
      return dpo_eval(model, rows, task);
    };
}

}  // namespace xg::finetune
