// ZeRO stages 1 and 2 (--zero 1, --zero 2) under mpirun: 1, 2 and 3 ranks, each holding AdamW's
// state for its slice (and under stage 2 only that slice's gradient), end with bitwise the
// weights and checkpoint of one process without it (gradient clipping on), with accumulation
// bitwise those of plain data parallelism, resume under another rank count and stage, and report
// each rank's share of the state and of the gradients. Gradient sums overlapped with backward
// (distributed/grad_sum.cpp) are bitwise those made after it, with and without ZeRO.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "io/safetensors.hpp"
#include "tests/cli_run.hpp"
#include "tests/mpi_test_util.hpp"
#include "tests/tiny_base.hpp"

#ifdef XGRAD_MPIEXEC

namespace distributed_zero_test {

namespace fs = std::filesystem;
using xg::test::CliRun;
using xg::test::log_records;
using xg::test::mpirun;
using xg::test::same_bytes;
using xg::test::shell;
using xg::test::train_losses;

const std::string kTools = XGRAD_TOOL_DIR;

// A model whose larger matrices (96 x 384) span several of the optimizer's chunks, so that the
// cuts between ranks fall inside them; dropout on, and a --clip every step exceeds.
std::string zero_flags(const fs::path& d, const std::string& out, int steps = 6) {
  return kTools + "/xg-train --data " + (d / "train.txt").string() + " --out " +
         (d / out).string() +
         " --d-model 96 --layers 2 --heads 2 --seq-len 32 --batch 2 --dropout 0.1 --lr 3e-3 --warmup 2 --clip 0.05"
         " --schedule constant --eval-every 0 --checkpoint-every 3 --sample-tokens 0 --log-every 1 --seed 11 --steps " +
         std::to_string(steps);
}

// Whether two checkpoints hold the same tensors, bit for bit, and the same metadata but for
// `global_rng`: the default generator as rank 0 left it after its own micro-batches (each
// micro-batch seeds it afresh, so a resumed run does not depend on it).
bool same_checkpoint(const fs::path& a, const fs::path& b) {
  std::map<std::string, std::string> ma, mb;
  const xg::TensorMap ta = xg::io::load_safetensors(a.string(), &ma), tb = xg::io::load_safetensors(b.string(), &mb);
  ma.erase("global_rng");
  mb.erase("global_rng");
  EXPECT_EQ(ma, mb) << a << " vs " << b;
  bool same = ta.size() == tb.size() && ma == mb;
  for (const auto& [name, t] : ta) {
    auto it = tb.find(name);
    const bool equal = it != tb.end() && it->second.dtype() == t.dtype() && it->second.shape() == t.shape() &&
                       std::memcmp(t.raw_data(), it->second.raw_data(), t.numel() * xg::itemsize(t.dtype())) == 0;
    EXPECT_TRUE(equal) << name << " differs between " << a << " and " << b;
    same = same && equal;
  }
  return same;
}

// `command` at one thread per process, alone (ranks 0) or under mpirun.
CliRun launch(int ranks, const std::string& command) {
  return shell("OMP_NUM_THREADS=1 " + (ranks > 0 ? mpirun(ranks) : std::string()) + command);
}

// The trained parameters, from summary.json.
int64_t parameters(const fs::path& run) {
  return nlohmann::json::parse(xg::test::slurp((run / "summary.json").string()))["parameters"].get<int64_t>();
}

TEST(DistributedZero, OneTwoAndThreeRanksGiveOneProcesssWeightsAndCheckpointBitwise) {
  const fs::path d = xg::test::fresh_test_dir();
  xg::test::write_fox_text(d / "train.txt");
  for (int ranks : {1, 2, 3}) {
    const std::string one = "one" + std::to_string(ranks), zero = "zero" + std::to_string(ranks);
    CliRun a = launch(0, zero_flags(d, one) + " --grad-accum " + std::to_string(ranks));
    ASSERT_EQ(a.status, 0) << a.err;
    CliRun b = launch(ranks, zero_flags(d, zero) + " --grad-accum 1 --zero 1");
    ASSERT_EQ(b.status, 0) << b.err << b.out;
    const auto la = train_losses(d / one / "log.jsonl"), lb = train_losses(d / zero / "log.jsonl");
    ASSERT_EQ(la.size(), 6u);
    EXPECT_EQ(la, lb) << ranks << " ranks";
    for (const auto& rec : log_records(d / zero / "log.jsonl", "train"))  // every step clipped
      EXPECT_GT(rec["grad_norm"].get<double>(), 0.05) << rec.dump();
    EXPECT_TRUE(same_bytes(d / one / "model.safetensors", d / zero / "model.safetensors")) << ranks << " ranks";
    EXPECT_TRUE(same_checkpoint(d / one / "checkpoint.safetensors", d / zero / "checkpoint.safetensors")) << ranks;
    // Each rank holds the moments of its slice: together AdamW's two float32 moments of every
    // parameter, each rank within two chunks (2 x 16384 elements x 8 bytes) of an even share.
    const auto state = log_records(d / zero / "log.jsonl", "optimizer_state");
    ASSERT_EQ(state.size(), 1u) << ranks << " ranks";
    const double whole = 8.0 * static_cast<double>(parameters(d / zero));
    double sum = 0;
    for (int r = 0; r < ranks; ++r) {
      const double bytes = state[0]["rank" + std::to_string(r) + "_bytes"].get<double>();
      EXPECT_GT(bytes, 0) << "rank " << r;
      EXPECT_LE(std::abs(bytes - whole / ranks), 2 * 16384 * 8.0) << "rank " << r << " of " << ranks;
      sum += bytes;
    }
    EXPECT_EQ(sum, whole) << ranks << " ranks";
    EXPECT_NE(b.out.find("ZeRO stage 1: optimizer state per rank"), std::string::npos) << b.out;
  }
}

TEST(DistributedZero, WithAccumulationItIsPlainDataParallelismBitwise) {
  const fs::path d = xg::test::fresh_test_dir();
  xg::test::write_fox_text(d / "train.txt");
  CliRun plain = launch(2, zero_flags(d, "plain") + " --grad-accum 2");
  ASSERT_EQ(plain.status, 0) << plain.err;
  CliRun zero = launch(2, zero_flags(d, "zero") + " --grad-accum 2 --zero 1");
  ASSERT_EQ(zero.status, 0) << zero.err;
  EXPECT_EQ(train_losses(d / "plain" / "log.jsonl"), train_losses(d / "zero" / "log.jsonl"));
  EXPECT_TRUE(same_bytes(d / "plain" / "model.safetensors", d / "zero" / "model.safetensors"));
  EXPECT_TRUE(same_bytes(d / "plain" / "checkpoint.safetensors", d / "zero" / "checkpoint.safetensors"));
}

TEST(DistributedZero, ACheckpointResumesUnderAnotherRankCount) {
  const fs::path d = xg::test::fresh_test_dir();
  xg::test::write_fox_text(d / "train.txt");
  // 1 -> 2 ranks (2 micro-batches a step) and 3 -> 1 (3 a step): bitwise an uninterrupted run.
  const std::string resume = " --resume --allow-change steps";
  for (const auto& [before, after, micro] : {std::tuple{1, 2, 2}, std::tuple{3, 1, 3}}) {
    const std::string tag = std::to_string(before) + "to" + std::to_string(after);
    auto layout = [&, micro = micro](int ranks) {
      return " --zero 1 --grad-accum " + std::to_string(micro / ranks);
    };
    CliRun full = launch(0, zero_flags(d, "full" + tag) + " --grad-accum " + std::to_string(micro));
    ASSERT_EQ(full.status, 0) << full.err;
    CliRun first = launch(before, zero_flags(d, "split" + tag, 3) + layout(before));
    ASSERT_EQ(first.status, 0) << first.err;
    CliRun rest = launch(after, zero_flags(d, "split" + tag) + layout(after) + resume);
    ASSERT_EQ(rest.status, 0) << rest.err;
    EXPECT_TRUE(same_bytes(d / ("split" + tag) / "model.safetensors", d / ("full" + tag) / "model.safetensors")) << tag;
  }
  // 2 -> 3 ranks with 6 micro-batches a step: each rank adds up its own 3 (then 2) before the
  // ranks are summed, so the sums group differently from one uninterrupted layout: equal to
  // float rounding (as plain data parallelism under another ranks x grad-accum).
  CliRun full = launch(3, zero_flags(d, "full2to3") + " --zero 1 --grad-accum 2");
  ASSERT_EQ(full.status, 0) << full.err;
  CliRun first = launch(2, zero_flags(d, "split2to3", 3) + " --zero 1 --grad-accum 3");
  ASSERT_EQ(first.status, 0) << first.err;
  CliRun rest = launch(3, zero_flags(d, "split2to3") + " --zero 1 --grad-accum 2" + resume);
  ASSERT_EQ(rest.status, 0) << rest.err;
  EXPECT_LE(xg::test::max_weight_diff(d / "split2to3" / "model.safetensors", d / "full2to3" / "model.safetensors"), 1e-6);
  // --zero may change on resume: the checkpoint is the same file either way.
  CliRun plain = launch(0, zero_flags(d, "split2to3", 8) + " --grad-accum 6 --zero 0" + resume);
  EXPECT_EQ(plain.status, 0) << plain.err;
}

TEST(DistributedZero, FullFinetuneOnTwoRanksMatchesOneProcess) {
  // xg-finetune --full (DPO, against a frozen reference on each rank) shares the loop and flag,
  // at stages 1 and 2.
  const fs::path d = xg::test::fresh_test_dir();
  const fs::path base = xg::test::tiny_base(d);
  {
    std::ofstream dpo(d / "dpo.jsonl");
    for (const char* w : {"apple", "river", "stone", "cloud", "glass", "tiger"})
      dpo << nlohmann::json{{"prompt", std::string("Is ") + w + " a word?"}, {"chosen", "yes"}, {"rejected", "no"}}.dump()
          << "\n";
  }
  const std::string flags = kTools + "/xg-finetune --full --objective dpo --base " + base.string() + " --data " +
                            (d / "dpo.jsonl").string() + " --steps 4 --warmup 1 --lr 1e-3 --batch 2 --clip 0.01 --out ";
  CliRun one = launch(0, flags + (d / "one").string() + " --grad-accum 2");
  ASSERT_EQ(one.status, 0) << one.err;
  for (const std::string stage : {"1", "2"}) {
    const std::string two = "two" + stage;
    CliRun r = launch(2, flags + (d / two).string() + " --grad-accum 1 --zero " + stage);
    ASSERT_EQ(r.status, 0) << r.err << r.out;
    EXPECT_EQ(train_losses(d / "one" / "log.jsonl"), train_losses(d / two / "log.jsonl")) << stage;
    EXPECT_TRUE(same_bytes(d / "one" / "model" / "model.safetensors", d / two / "model" / "model.safetensors")) << stage;
    EXPECT_EQ(log_records(d / two / "log.jsonl", "optimizer_state").size(), 1u);
    for (const auto& rec : log_records(d / two / "log.jsonl", "train"))  // clipped
      EXPECT_GT(rec["grad_norm"].get<double>(), 0.01) << rec.dump();
  }
}

TEST(DistributedZero, OverlappedGradientSumsAreBitwiseThoseAfterBackward) {
  const fs::path d = xg::test::fresh_test_dir();
  xg::test::write_fox_text(d / "train.txt");
  // Buckets of 48 KB: about twenty of them, sent in turn while backward still runs.
  const std::string small = " --grad-accum 1 --bucket-mb 0.046875";
  for (int ranks : {2, 3}) {
    const std::string r = std::to_string(ranks);
    CliRun one = launch(0, zero_flags(d, "one" + r) + " --grad-accum " + r);
    ASSERT_EQ(one.status, 0) << one.err;
    for (const std::string zero : {"0", "1"}) {
      const std::string after = "after" + r + "z" + zero, overlapped = "overlapped" + r + "z" + zero;
      CliRun a = launch(ranks, zero_flags(d, after) + small + " --zero " + zero + " --overlap-grad-sum 0");
      ASSERT_EQ(a.status, 0) << a.err;
      CliRun b = launch(ranks, zero_flags(d, overlapped) + small + " --zero " + zero + " --overlap-grad-sum 1");
      ASSERT_EQ(b.status, 0) << b.err;
      const auto la = train_losses(d / after / "log.jsonl"), lb = train_losses(d / overlapped / "log.jsonl");
      ASSERT_EQ(la.size(), 6u);
      EXPECT_EQ(la, lb) << ranks << " ranks, --zero " << zero;
      EXPECT_EQ(la, train_losses(d / ("one" + r) / "log.jsonl")) << ranks << " ranks, --zero " << zero;
      EXPECT_TRUE(same_bytes(d / after / "model.safetensors", d / overlapped / "model.safetensors")) << ranks;
      EXPECT_TRUE(same_bytes(d / after / "model.safetensors", d / ("one" + r) / "model.safetensors")) << ranks;
      EXPECT_TRUE(same_checkpoint(d / after / "checkpoint.safetensors", d / overlapped / "checkpoint.safetensors"));
      for (const auto& rec : log_records(d / overlapped / "log.jsonl", "train"))  // the wait is logged
        EXPECT_GE(rec.at("comm_wait_s").get<double>(), 0.0) << rec.dump();
    }
  }
}

// Stage 2 at 1, 2 and 3 ranks, gradient sums during backward (in buckets of 48 KB, about twenty)
// or after it: with one micro-batch per rank bitwise one process with them all, with two per
// rank bitwise stage 1 (itself bitwise plain data parallelism) at that layout; the checkpoints alike.
TEST(DistributedZero, StageTwoGivesOneProcesssAndStageOnesWeightsBitwise) {
  const fs::path d = xg::test::fresh_test_dir();
  xg::test::write_fox_text(d / "train.txt");
  const std::string small = " --bucket-mb 0.046875";
  for (int ranks : {1, 2, 3}) {
    const std::string r = std::to_string(ranks);
    CliRun one = launch(0, zero_flags(d, "one" + r) + " --grad-accum " + r);
    ASSERT_EQ(one.status, 0) << one.err;
    CliRun stage1 = launch(ranks, zero_flags(d, "stage1_" + r) + small + " --grad-accum 2 --zero 1");
    ASSERT_EQ(stage1.status, 0) << stage1.err;
    for (const std::string overlap : {"0", "1"}) {
      for (const std::string accum : {"1", "2"}) {
        const std::string out = "z2_" + r + "_" + overlap + accum, ref = accum == "1" ? "one" + r : "stage1_" + r;
        CliRun z = launch(ranks, zero_flags(d, out) + small + " --zero 2 --overlap-grad-sum " + overlap +
                                     " --grad-accum " + accum);
        ASSERT_EQ(z.status, 0) << z.err << z.out;
        const std::string what = r + " ranks, --overlap-grad-sum " + overlap + ", --grad-accum " + accum;
        const auto losses = train_losses(d / out / "log.jsonl");
        ASSERT_EQ(losses.size(), 6u) << what;
        EXPECT_EQ(losses, train_losses(d / ref / "log.jsonl")) << what;
        for (const auto& rec : log_records(d / out / "log.jsonl", "train"))  // every step clipped
          EXPECT_GT(rec["grad_norm"].get<double>(), 0.05) << rec.dump();
        EXPECT_TRUE(same_bytes(d / out / "model.safetensors", d / ref / "model.safetensors")) << what;
        EXPECT_TRUE(same_checkpoint(d / out / "checkpoint.safetensors", d / ref / "checkpoint.safetensors")) << what;
        EXPECT_NE(z.out.find("ZeRO stage 2: optimizer state per rank"), std::string::npos) << z.out;
      }
    }
  }
}

// The bytes of gradient tensors each rank holds at the optimizer step (the log's
// optimizer_state record): stage 1 all of them on every rank; stage 2 a 1/N share each, within
// two of the optimizer's chunks (2 x 16384 float32 elements) of an even one, together exactly
// one copy.
TEST(DistributedZero, StageTwoHoldsOneNthOfTheGradientsAtTheStep) {
  const fs::path d = xg::test::fresh_test_dir();
  xg::test::write_fox_text(d / "train.txt");
  for (int ranks : {2, 3}) {
    for (int stage : {1, 2}) {
      const std::string out = "s" + std::to_string(stage) + "_" + std::to_string(ranks);
      CliRun z = launch(ranks, zero_flags(d, out, 2) + " --grad-accum 1 --zero " + std::to_string(stage));
      ASSERT_EQ(z.status, 0) << z.err;
      const auto state = log_records(d / out / "log.jsonl", "optimizer_state");
      ASSERT_EQ(state.size(), 1u) << out;
      const double whole = 4.0 * static_cast<double>(parameters(d / out));
      double sum = 0;
      for (int r = 0; r < ranks; ++r) {
        const double bytes = state[0].at("rank" + std::to_string(r) + "_grad_bytes").get<double>();
        if (stage == 1) {
          EXPECT_EQ(bytes, whole) << "rank " << r << " of " << ranks;
        } else {
          EXPECT_LE(std::abs(bytes - whole / ranks), 2 * 16384 * 4.0) << "rank " << r << " of " << ranks;
        }
        sum += bytes;
      }
      if (stage == 2) {
        EXPECT_EQ(sum, whole) << ranks << " ranks";
      }
      EXPECT_NE(z.out.find("; gradients at the step "), std::string::npos) << z.out;
    }
  }
}

// A stage 2 checkpoint resumes under another rank count and another stage (2 ranks -> one
// process without ZeRO; one process -> 3 ranks at stage 1), bitwise an uninterrupted run.
TEST(DistributedZero, AStageTwoCheckpointResumesUnderAnotherRankCountAndStage) {
  const fs::path d = xg::test::fresh_test_dir();
  xg::test::write_fox_text(d / "train.txt");
  const std::string resume = " --resume --allow-change steps";
  for (const auto& [before, after, micro, stage] : {std::tuple{2, 0, 2, 0}, std::tuple{0, 3, 3, 1}}) {
    const std::string tag = std::to_string(before) + "to" + std::to_string(after);
    auto layout = [&, micro = micro](int ranks) { return " --grad-accum " + std::to_string(micro / std::max(ranks, 1)); };
    CliRun full = launch(0, zero_flags(d, "full" + tag) + layout(0));
    ASSERT_EQ(full.status, 0) << full.err;
    CliRun first = launch(before, zero_flags(d, "split" + tag, 3) + layout(before) + " --zero 2");
    ASSERT_EQ(first.status, 0) << first.err;
    CliRun rest = launch(after, zero_flags(d, "split" + tag) + layout(after) + " --zero " + std::to_string(stage) + resume);
    ASSERT_EQ(rest.status, 0) << rest.err;
    EXPECT_TRUE(same_bytes(d / ("split" + tag) / "model.safetensors", d / ("full" + tag) / "model.safetensors")) << tag;
  }
}

TEST(DistributedZero, ABadZeroStageIsAUsageError) {
  const fs::path d = xg::test::fresh_test_dir();
  xg::test::write_fox_text(d / "train.txt");
  CliRun r = launch(0, zero_flags(d, "bad") + " --zero 3");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--zero must be 0, 1 or 2"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(d / "bad" / "checkpoint.safetensors"));
}

TEST(DistributedZero, ABadBucketSizeIsAUsageError) {
  const fs::path d = xg::test::fresh_test_dir();
  xg::test::write_fox_text(d / "train.txt");
  for (const char* mb : {"0", "-1"}) {
    CliRun r = launch(0, zero_flags(d, "bad") + " --bucket-mb " + mb);
    EXPECT_EQ(r.status, 2) << mb;
    EXPECT_NE(r.err.find(std::string("--bucket-mb must be in (0, 1048576], got ") + mb), std::string::npos) << r.err;
  }
  CliRun r = launch(0, zero_flags(d, "bad") + " --bucket-mb nan");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--bucket-mb: expected a finite number, got 'nan'"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(d / "bad" / "checkpoint.safetensors"));
}

}  // namespace distributed_zero_test

#endif  // XGRAD_MPIEXEC
