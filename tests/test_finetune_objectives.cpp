// finetune/grpo_objective.cpp's verifiable reward (the objectives' training runs are tested
// end to end in test_finetune_xg_finetune.cpp).
#include <gtest/gtest.h>

#include "finetune/objectives.hpp"
#include "tests/torch_fixture.hpp"

using xg::finetune::grpo_reward;

TEST(FinetuneObjectives, GrpoRewardJudgesTheFirstLine) {
  const std::vector<std::string> answers = {"unhappy", "sad"};
  EXPECT_EQ(grpo_reward("exact", "unhappy", answers), 1.0);
  EXPECT_EQ(grpo_reward("exact", "  sad \n and then more", answers), 1.0);
  EXPECT_EQ(grpo_reward("exact", "unhappily", answers), 0.0);
  EXPECT_EQ(grpo_reward("exact", "", answers), 0.0);
  EXPECT_EQ(grpo_reward("exact", "more\nunhappy", answers), 0.0);  // only the first line counts
  EXPECT_DOUBLE_EQ(grpo_reward("prefix", "unhapy", answers), 0.5 * 5 / 7);     // common prefix "unhap"
  EXPECT_DOUBLE_EQ(grpo_reward("prefix", "unhappy person", answers), 0.5 * 7 / 14);  // long lines pay
  EXPECT_DOUBLE_EQ(grpo_reward("prefix", "sa", answers), 0.5 * 2 / 3);
  EXPECT_EQ(grpo_reward("prefix", "glad", answers), 0.0);
  EXPECT_EQ(grpo_reward("prefix", "", answers), 0.0);
  EXPECT_EQ(grpo_reward("prefix", "sad", answers), 1.0);
  EXPECT_XG_ERROR(grpo_reward("bleu", "sad", answers), "--reward: expected exact or prefix, got 'bleu'");
}

TEST(FinetuneObjectives, GrpoLossTypeByTrlsNames) {
  using xg::losses::GrpoLossType;
  EXPECT_EQ(xg::finetune::grpo_loss_type("grpo"), GrpoLossType::Grpo);
  EXPECT_EQ(xg::finetune::grpo_loss_type("bnpo"), GrpoLossType::Bnpo);
  EXPECT_EQ(xg::finetune::grpo_loss_type("dr_grpo"), GrpoLossType::DrGrpo);
  EXPECT_XG_ERROR(xg::finetune::grpo_loss_type("dapo"), "--loss-type: expected grpo, bnpo or dr_grpo, got 'dapo'");
}
