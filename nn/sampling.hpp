// Choosing the next token from a row of logits: a repetition penalty, then greedy, or
// temperature, top-k, top-p (nucleus) and min-p filtering and a draw from the renormalised
// distribution, in the order Hugging Face's generate() applies its logits processors.
#pragma once

#include <vector>

#include "autograd/random.hpp"
#include "autograd/tensor.hpp"

namespace xg::nn {

// The smallest temperature other than 0 (greedy). NOTE: below it logits / temperature leave
// float range (1e-320 turns every logit into +-Inf and the softmax into NaN); any temperature
// this small already puts all the mass on the maximum, so greedy is what such a user means.
constexpr double kMinTemperature = 1e-6;

struct SamplingOptions {
  double temperature = 1.0;  // 0 = greedy (argmax), else >= kMinTemperature
  int64_t top_k = 0;         // 0 = no top-k filter
  double top_p = 1.0;        // 1 = no nucleus filter
  // Keep the tokens at least min_p times as likely as the most likely one (after top-k and
  // top-p; Nguyen et al. 2024, "Turning Up the Heat: Min-p Sampling", transformers'
  // MinPLogitsWarper, llama.cpp's min_p). 0 = off.
  double min_p = 0.0;
  // CTRL's repetition penalty (Keskar et al. 2019, transformers' RepetitionPenaltyLogitsProcessor):
  // the logit of every token already in the context (prompt and generated so far) is divided
  // by it when positive and multiplied by it when negative, before any other step, greedy
  // included. 1 = off; > 1 discourages repeats.
  double repetition_penalty = 1.0;
};

// logits: [V] (any float dtype) -> the chosen token id; context: the ids the repetition
// penalty applies to. Logits holding NaN or Inf (a model with non-finite weights) are an
// error: no token can be drawn from them.
int64_t sample_token(const Tensor& logits, const SamplingOptions& opts, Generator& gen,
                     const std::vector<int64_t>& context = {});

// The probabilities sample_token draws from (zeros where filtered), as float64 [V]. For tests.
Tensor sampling_probs(const Tensor& logits, const SamplingOptions& opts, const std::vector<int64_t>& context = {});

}  // namespace xg::nn
