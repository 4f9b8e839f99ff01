// Tests for finetune/packing: the best-fit-decreasing layout (labels, positions, spans), and
// that a packed batch gives the padded batch's SFT loss and gradients and DPO's per-sequence
// log-probs (float64), so packing changes the shapes and not the objective.
#include <gtest/gtest.h>

#include <vector>

#include "finetune/dataset.hpp"
#include "finetune/packing.hpp"
#include "losses/logprobs.hpp"
#include "losses/sft.hpp"
#include "nn/decoder.hpp"
#include "tests/lora_test_util.hpp"
#include "tests/torch_fixture.hpp"

using namespace xg;
using namespace xg::finetune;

// A named namespace: the unity build compiles this file with test_finetune_dataset.cpp, which
// defines the same helpers in its anonymous one.
namespace packing_test {

constexpr int64_t P = ByteTokenizer::kPad, BOS = ByteTokenizer::kBos, EOS = ByteTokenizer::kEos, M = -100;

std::vector<int64_t> ints(const Tensor& t) {
  std::vector<int64_t> v;
  for (double d : t.to_vector()) v.push_back(static_cast<int64_t>(d));
  return v;
}

// A LLaMA-style model (made float64 by randomize64) over the byte tokenizer's 259 ids, positions up to 32.
nn::LMConfig byte_config() {
  nn::LMConfig c = test::tiny_llama();
  c.vocab_size = 259;
  c.block.max_seq_len = 32;
  return c;
}


TEST(FinetunePacking, BestFitDecreasingLayout) {
  ByteTokenizer tok;
  const RowFormat format{&tok, nullptr, ""};
  // 8, 7, 5 and 6 tokens (BOS, "a", "\n", the response, EOS) into rows of 12: 8 opens row 0
  // (room 4), 7 row 1 (room 5), 6 row 2 (room 6), and 5 fits row 1 best.
  const std::vector<PackedRow> rows = pack_sft(format, {{"a", "bcde"}, {"a", "bcd"}, {"a", "b"}, {"a", "bc"}}, 12);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].spans, (std::vector<std::array<int64_t, 2>>{{0, 8}}));
  EXPECT_EQ(rows[1].spans, (std::vector<std::array<int64_t, 2>>{{0, 7}, {7, 5}}));
  EXPECT_EQ(rows[2].spans, (std::vector<std::array<int64_t, 2>>{{0, 6}}));
  EXPECT_EQ(rows[1].ids, (std::vector<int64_t>{BOS, 'a', '\n', 'b', 'c', 'd', EOS, BOS, 'a', '\n', 'b', EOS}));
  EXPECT_EQ(rows[1].labels, (std::vector<int64_t>{M, M, M, 'b', 'c', 'd', EOS, M, M, M, 'b', EOS}));
  EXPECT_EQ(rows[1].position_ids, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 0, 1, 2, 3, 4}));
  EXPECT_EQ(rows[0].ids, (std::vector<int64_t>{BOS, 'a', '\n', 'b', 'c', 'd', 'e', EOS, P, P, P, P}));
  EXPECT_EQ(rows[0].labels, (std::vector<int64_t>{M, M, M, 'b', 'c', 'd', 'e', EOS, M, M, M, M}));
  EXPECT_EQ(rows[0].position_ids, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3}));

  const PackedBatch b = collate_packed(rows);
  EXPECT_EQ(b.input_ids.shape(), (Shape{3, 12}));
  EXPECT_EQ(b.spans, (std::vector<std::array<int64_t, 3>>{{0, 0, 8}, {1, 0, 7}, {1, 7, 5}, {2, 0, 6}}));
  EXPECT_EQ(b.real_tokens, 26);
  EXPECT_EQ(ints(b.labels), [&] {
    std::vector<int64_t> v;
    for (const PackedRow& r : rows) v.insert(v.end(), r.labels.begin(), r.labels.end());
    return v;
  }());
}

TEST(FinetunePacking, DpoPairsShareARowAndAreCutToHalfOfIt) {
  ByteTokenizer tok;
  const RowFormat format{&tok, nullptr, ""};
  // Each sequence cut to 12 / 2 = 6 tokens: the prompt keeps BOS, "a", "\n", the response 3.
  const std::vector<PackedRow> rows = pack_dpo(format, {{"a", "bcdefg", "x"}}, 12);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].spans, (std::vector<std::array<int64_t, 2>>{{0, 6}, {6, 5}}));
  EXPECT_EQ(rows[0].ids, (std::vector<int64_t>{BOS, 'a', '\n', 'b', 'c', 'd', BOS, 'a', '\n', 'x', EOS, P}));
  EXPECT_EQ(rows[0].labels, (std::vector<int64_t>{M, M, M, 'b', 'c', 'd', M, M, M, 'x', EOS, M}));
}

TEST(FinetunePacking, BadInputIsRefused) {
  ByteTokenizer tok;
  const RowFormat format{&tok, nullptr, ""};
  EXPECT_XG_ERROR(pack_sft(format, {}, 8), "pack_sft: no rows to pack");
  EXPECT_XG_ERROR(pack_sft(format, {{"a", "b"}}, 1), "pack_sft: row_len 1 must be >= 2");
  EXPECT_XG_ERROR(pack_dpo(format, {{"a", "b", "c"}}, 3), "pack_dpo: row_len 3 must be >= 4");
  std::vector<PackedRow> rows = pack_sft(format, {{"a", "b"}}, 8);
  rows.push_back(pack_sft(format, {{"a", "b"}}, 6)[0]);
  EXPECT_XG_ERROR(collate_packed(rows), "collate_packed: row 1 has 6 tokens, row 0 has 8");
}

// The packed SFT loss is the padded batch's (the mean over the same response tokens), and so
// are its gradients: a sequence sees only itself.
TEST(FinetunePacking, SftLossAndGradientsEqualThePaddedBatches) {
  ByteTokenizer tok;
  const RowFormat format{&tok, nullptr, ""};
  const std::vector<SftExample> ex = {{"ab", "cdef"}, {"x", "yz"}, {"hello", "w"}, {"q", "rstu"}, {"m", "n"}};
  nn::DecoderLM lm(byte_config());
  test::randomize64(lm, 41);
  const PackedBatch pb = collate_packed(pack_sft(format, ex, 16));
  ASSERT_GT(pb.spans.size(), pb.input_ids.size(0)) << "the test needs rows holding several sequences";
  Tensor packed = losses::sft_loss(lm.forward_packed(pb.input_ids, pb.position_ids), pb.labels,
                                   zeros({pb.input_ids.size(0)}, kInt64));
  packed.backward();
  const Tensor g_packed = lm.tok_embeddings()->weight().grad().clone();
  lm.zero_grad();
  const SftBatch sb = collate_sft(format, ex, 16);
  Tensor padded = losses::sft_loss(lm(sb.input_ids), sb.input_ids, sb.prompt_lengths, sb.attention_mask);
  padded.backward();
  EXPECT_NEAR(packed.item(), padded.item(), 1e-12);
  EXPECT_TRUE(test::tensors_close(g_packed, lm.tok_embeddings()->weight().grad(), 1e-10, 1e-12));
}

// DPO's summed response log-probs per sequence from a packed batch are sequence_logprobs of
// the padded chosen and rejected rows.
TEST(FinetunePacking, DpoSpanSumsEqualThePaddedRowsLogprobs) {
  ByteTokenizer tok;
  const RowFormat format{&tok, nullptr, ""};
  const std::vector<DpoExample> ex = {{"ab", "cd", "e"}, {"x", "y", "zz"}, {"p", "qr", "s"}};
  nn::DecoderLM lm(byte_config());
  test::randomize64(lm, 42);
  // Pairs of 13, 11 and 11 tokens into rows of 32: the first two share row 0, so the spans
  // run in the rows' order (no sequence is longer than 16, so none is cut).
  const PackedBatch pb = collate_packed(pack_dpo(format, ex, 32));
  ASSERT_EQ(pb.spans, (std::vector<std::array<int64_t, 3>>{{0, 0, 7}, {0, 7, 6}, {0, 13, 5}, {0, 18, 6}, {1, 0, 6},
                                                            {1, 6, 5}}));
  const Tensor sums = span_logprob_sums(
      losses::token_logprobs(lm.forward_packed(pb.input_ids, pb.position_ids), losses::shift_labels(pb.labels)), pb);
  const SftBatch sb = collate_dpo(format, ex, 16);  // rows 0..2 chosen, 3..5 rejected
  const std::vector<double> got = sums.to_vector(),
                            want = losses::sequence_logprobs(lm(sb.input_ids), losses::shift_labels(sb.labels)).to_vector();
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_NEAR(got[2 * i], want[i], 1e-10) << "pair " << i << " chosen";
    EXPECT_NEAR(got[2 * i + 1], want[3 + i], 1e-10) << "pair " << i << " rejected";
  }
}

}  // namespace packing_test
