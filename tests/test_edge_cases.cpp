// Numeric edge cases of a whole model and its losses: sequence length 1, batch 1,
// the first and last token ids, empty prompts, all-masked batches and extreme logits. Each
// test states the behaviour (finite, or PyTorch's documented NaN) and asserts it.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "autograd/elementwise.hpp"
#include "autograd/graph.hpp"
#include "autograd/reduce.hpp"
#include "autograd/softmax.hpp"
#include "finetune/dataset.hpp"
#include "losses/losses.hpp"
#include "tests/lora_test_util.hpp"
#include "tests/torch_fixture.hpp"

using namespace xg;

namespace {

bool all_grads_finite(const nn::Module& m) {
  for (const auto& [name, p] : m.named_parameters())
    if (!p.grad().defined() || !isfinite_all(p.grad())) return false;
  return true;
}

}  // namespace

TEST(EdgeCases, SequenceLengthOneBatchOneTrains) {
  manual_seed(5);
  nn::DecoderLM model(test::tiny_llama());
  const Tensor ids = from_vector(std::vector<int64_t>{3}, {1, 1});
  const Tensor logits = model(ids);
  EXPECT_EQ(logits.shape(), (Shape{1, 1, 11}));
  Tensor loss = losses::cross_entropy(logits.reshape({1, 11}), from_vector(std::vector<int64_t>{4}, {1}));
  loss.backward();
  EXPECT_TRUE(std::isfinite(loss.item()));
  EXPECT_TRUE(all_grads_finite(model));
}

TEST(EdgeCases, FirstAndLastTokenIdsWorkAndOneMoreIsAnError) {
  manual_seed(5);
  nn::DecoderLM model(test::tiny_llama());
  EXPECT_TRUE(isfinite_all(model(from_vector(std::vector<int64_t>{0, 10, 0, 10}, {2, 2}))));
  EXPECT_XG_ERROR(model(from_vector(std::vector<int64_t>{0, 11}, {1, 2})),
                  "token id 11 at [0,1] is out of range [0, 11) (tokens [1,2])");
  EXPECT_XG_ERROR(model(from_vector(std::vector<int64_t>{-1, 0}, {1, 2})),
                  "token id -1 at [0,0] is out of range [0, 11) (tokens [1,2])");
}

TEST(EdgeCases, EmptyPromptIsBosAndNewlineButGenerateNeedsAToken) {
  const finetune::ByteTokenizer tok;
  EXPECT_EQ(finetune::encode_prompt(tok, ""), (std::vector<int64_t>{tok.bos_id(), '\n'}));
  manual_seed(5);
  nn::DecoderLM model(test::tiny_llama());
  EXPECT_XG_ERROR(model.generate(zeros({1, 0}, kInt64), 3),
                  "::generate: expected a prompt int64 [B, T0] with B, T0 >= 1, got int64 [1,0]");
}

TEST(EdgeCases, AllMaskedBatchFollowsPyTorch) {
  // PyTorch: mean over zero targets is NaN (0/0) with a zero gradient; sum is 0. The
  // trainers never see it from collate_sft/collate_dpo (every row keeps a response token)
  // and stop or skip on a NaN loss (--on-nan).
  Tensor logits = randn({2, 3, 5}).requires_grad_();
  const Tensor targets = full({2, 3}, -100.0, kInt64);
  Tensor mean_loss = losses::cross_entropy(logits.reshape({6, 5}), targets.reshape({6}));
  EXPECT_TRUE(std::isnan(mean_loss.item()));
  mean_loss.backward();
  EXPECT_EQ(sum(abs(logits.grad())).item(), 0.0);
  EXPECT_EQ(losses::cross_entropy(logits.reshape({6, 5}), targets.reshape({6}), -100, losses::Reduction::Sum).item(), 0.0);
}

TEST(EdgeCases, ExtremeFiniteLogitsGiveFiniteLossAndGradients) {
  const float big = std::numeric_limits<float>::max() / 4;  // 8.5e37: x - max stays finite
  Tensor logits = tensor({big, -big, 0.0, big, 1.0, -big}).reshape({2, 3}).requires_grad_();
  Tensor loss = losses::cross_entropy(logits, from_vector(std::vector<int64_t>{1, 0}, {2}));
  loss.backward();
  EXPECT_TRUE(std::isfinite(loss.item()));
  EXPECT_GT(loss.item(), 1e37);  // log-probability of -2*big for the first row's target
  EXPECT_TRUE(isfinite_all(logits.grad()));
  // A fully masked (-inf) row but one entry: softmax puts all the mass there.
  Tensor p = softmax(tensor({-INFINITY, 2.0, -INFINITY}), -1);
  EXPECT_EQ(p.to_vector(), (std::vector<double>{0, 1, 0}));
}
