// Small pieces the objectives share (internal to finetune/*_objective.cpp).
#pragma once

#include <vector>

#include "autograd/graph.hpp"
#include "autograd/random.hpp"
#include "finetune/lora.hpp"
#include "nn/decoder.hpp"

namespace xg::finetune {

// `batch` rows drawn uniformly with replacement; only the generator decides, so a resumed
// run draws the same rows.
template <class Row>
std::vector<Row> draw_rows(const std::vector<Row>& rows, int64_t batch, Generator& rng) {
  std::vector<Row> out;
  out.reserve(static_cast<std::size_t>(batch));
  for (int64_t i = 0; i < batch; ++i) out.push_back(rows[rng.next_u64() % rows.size()]);
  return out;
}

// The first `n` rows (all when there are fewer).
template <class Row>
std::vector<Row> head(const std::vector<Row>& rows, int64_t n) {
  return std::vector<Row>(rows.begin(), rows.begin() + std::min<std::ptrdiff_t>(n, static_cast<std::ptrdiff_t>(rows.size())));
}

// f(reference policy) without a graph: `reference` when given (a frozen copy of the base), else
// `model` with its LoRA adapters disabled.
template <class F>
Tensor reference_pass(const nn::DecoderLM& model, const nn::DecoderLM* reference, F f) {
  NoGradGuard no_grad;
  if (reference) return f(*reference);
  DisableAdapters off(model);
  return f(model);
}

// A reference policy there is: a frozen copy, or adapters to disable. `who`: "DPO", "GRPO".
inline void check_reference(const nn::DecoderLM& model, const nn::DecoderLM* reference, const char* who) {
  check(reference != nullptr || !lora_adapters(model).empty(), who,
        ": the model has no LoRA adapters (the reference is the model without them) and no reference model was given");
}

}  // namespace xg::finetune
