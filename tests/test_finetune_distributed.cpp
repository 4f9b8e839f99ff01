// distributed/distributed.cpp and data parallelism in TrainLoop: in one process the collectives
// are no-ops; under `mpirun -np 2`, xg-train and xg-finetune give the loss trajectory and
// weights of one process with the same global batch (bitwise at equal thread counts), a
// checkpoint resumes under another ranks x grad-accum layout, a bad input fails the job, and a
// killed rank or one rank's NaN ends every rank alike.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "autograd/tensor.hpp"
#include "distributed/distributed.hpp"
#include "finetune/train_loop.hpp"
#include "io/safetensors.hpp"
#include "tests/cli_run.hpp"
#include "tests/mpi_test_util.hpp"
#include "tests/tiny_base.hpp"

namespace fs = std::filesystem;
namespace ft = xg::finetune;
using nlohmann::json;
using xg::test::CliRun;
using xg::test::slurp;

TEST(World, OneProcessIsAWorldOfOne) {
  EXPECT_EQ(ft::world().rank(), 0);
  EXPECT_EQ(ft::world().size(), 1);
  EXPECT_TRUE(ft::world().is_main());
  EXPECT_EQ(ft::world().first_rank_with(true), 0);
  EXPECT_EQ(ft::world().first_rank_with(false), -1);
  EXPECT_EQ(ft::world().broadcast("as is", 0), "as is");
  std::vector<double> x{1.5, -2};
  ft::world().allreduce_sum(x);
  EXPECT_EQ(x, (std::vector<double>{1.5, -2}));
  xg::Tensor p = xg::ones({3}).requires_grad_();
  p.set_grad(xg::full({3}, 2.0));
  ft::world().allreduce_grads({p});
  EXPECT_EQ(p.grad().data<float>()[2], 2.0f);
  // ZeRO's collectives: one rank owns everything, and the gathered state is a copy.
  const xg::optim::Partition all({3}, 1);
  ft::world().reduce_scatter_grads({p}, all);
  ft::world().allgather_params({p}, all);
  EXPECT_EQ(p.grad().data<float>()[2], 2.0f);
  EXPECT_EQ(p.data<float>()[2], 1.0f);
  const xg::Tensor gathered = ft::world().gather_to_main(p.grad());
  EXPECT_NE(gathered.raw_data(), p.grad().raw_data());
  EXPECT_EQ(gathered.data<float>()[1], 2.0f);
  // ZeRO stage 2: the one rank's slice is the whole gradient, flat, and .grad is dropped.
  const void* storage = p.grad().raw_data();
  std::vector<xg::Tensor> slices;
  ft::world().reduce_scatter_grads({p}, all, 1 << 20, &slices);
  ASSERT_EQ(slices.size(), 1u);
  EXPECT_EQ(slices[0].shape(), (xg::Shape{3}));
  EXPECT_EQ(slices[0].raw_data(), storage);
  EXPECT_FALSE(p.grad().defined());
}

TEST(Distributed, MicroSeedsDifferPerStepMicroBatchAndStream) {
  std::set<uint64_t> seen;
  for (int64_t step = 0; step < 20; ++step)
    for (int64_t micro = 0; micro < 8; ++micro)
      for (uint64_t stream = 0; stream < 2; ++stream) seen.insert(ft::micro_seed(7, step, micro, stream));
  EXPECT_EQ(seen.size(), 20u * 8 * 2);
  EXPECT_EQ(ft::micro_seed(7, 3, 1, 0), ft::micro_seed(7, 3, 1, 0));
  EXPECT_NE(ft::micro_seed(7, 3, 1, 0), ft::micro_seed(8, 3, 1, 0));
}

#ifdef XGRAD_MPIEXEC

namespace {

const std::string kTools = XGRAD_TOOL_DIR;
using xg::test::max_weight_diff;
using xg::test::mpirun;
using xg::test::same_bytes;
using xg::test::shell;
using xg::test::train_losses;
using xg::test::write_fox_text;

// The tiny model of the test, dropout on (its masks must match too).
std::string train_flags(const fs::path& d, const std::string& out, int steps = 10) {
  return kTools + "/xg-train --data " + (d / "train.txt").string() + " --out " + (d / out).string() +
         " --d-model 32 --layers 2 --heads 2 --seq-len 32 --batch 4 --dropout 0.1 --lr 3e-3 --warmup 2"
         " --eval-every 0 --checkpoint-every 5 --sample-tokens 0 --log-every 1 --seed 11 --steps " +
         std::to_string(steps);
}

int count_of(const std::string& text, const std::string& piece) {
  int n = 0;
  for (std::size_t at = text.find(piece); at != std::string::npos; at = text.find(piece, at + 1)) ++n;
  return n;
}

}  // namespace

TEST(DistributedMpi, TwoRanksTrainBitwiseLikeOneProcessWithTheSameGlobalBatch) {
  const fs::path d = xg::test::fresh_test_dir();
  write_fox_text(d / "train.txt");
  // One thread per process on both sides: the kernels' reductions then run in the same order.
  CliRun one = shell("OMP_NUM_THREADS=1 " + train_flags(d, "one") + " --grad-accum 2");
  ASSERT_EQ(one.status, 0) << one.err;
  CliRun two = shell("OMP_NUM_THREADS=1 " + mpirun(2) + train_flags(d, "two") + " --grad-accum 1");
  ASSERT_EQ(two.status, 0) << two.err << two.out;
  const auto l1 = train_losses(d / "one" / "log.jsonl"), l2 = train_losses(d / "two" / "log.jsonl");
  ASSERT_EQ(l1.size(), 10u);
  EXPECT_EQ(l1, l2);  // rank 0 alone logs: ten records, not twenty
  EXPECT_LT(l1.back().second, l1.front().second);
  EXPECT_TRUE(same_bytes(d / "one" / "model.safetensors", d / "two" / "model.safetensors"));
  EXPECT_EQ(xg::test::count_lines(two.out), xg::test::count_lines(one.out)) << two.out;  // printed once
  EXPECT_NE(two.out.find("2 ranks x 1 micro-batches of 4 per step"), std::string::npos) << two.out;
}

TEST(DistributedMpi, RanksTimesGradAccumEqualsOneProcessWithinFloatRounding) {
  const fs::path d = xg::test::fresh_test_dir();
  write_fox_text(d / "train.txt");
  // Default threads: 2 in the one process, 1 per rank; 2 ranks x 2 micro-batches = 4.
  CliRun one = shell(train_flags(d, "one") + " --grad-accum 4");
  ASSERT_EQ(one.status, 0) << one.err;
  CliRun two = shell(mpirun(2) + train_flags(d, "two") + " --grad-accum 2");
  ASSERT_EQ(two.status, 0) << two.err << two.out;
  const auto l1 = train_losses(d / "one" / "log.jsonl"), l2 = train_losses(d / "two" / "log.jsonl");
  ASSERT_EQ(l1.size(), 10u);
  ASSERT_EQ(l2.size(), 10u);
  for (std::size_t i = 0; i < l1.size(); ++i) EXPECT_NEAR(l1[i].second, l2[i].second, 1e-6) << "step " << l1[i].first;
  EXPECT_LE(max_weight_diff(d / "one" / "model.safetensors", d / "two" / "model.safetensors"), 1e-6);
}

TEST(DistributedMpi, ACheckpointResumesUnderAnotherLayout) {
  const fs::path d = xg::test::fresh_test_dir();
  write_fox_text(d / "train.txt");
  const std::string constant = " --schedule constant --grad-accum ";
  CliRun full = shell("OMP_NUM_THREADS=1 " + train_flags(d, "full") + constant + "2");
  ASSERT_EQ(full.status, 0) << full.err;
  // 5 steps on 2 ranks, then the other 5 in one process with 2 micro-batches per step.
  CliRun first = shell("OMP_NUM_THREADS=1 " + mpirun(2) + train_flags(d, "split", 5) + constant + "1");
  ASSERT_EQ(first.status, 0) << first.err;
  // (The run is extended from 5 to 10 steps: --allow-change steps; the layout may change freely.)
  CliRun rest = shell("OMP_NUM_THREADS=1 " + train_flags(d, "split") + constant + "2 --resume --allow-change steps");
  ASSERT_EQ(rest.status, 0) << rest.err;
  EXPECT_TRUE(same_bytes(d / "split" / "model.safetensors", d / "full" / "model.safetensors"));
  // A different global batch is another run: refused, naming it.
  CliRun other = shell(train_flags(d, "split", 12) + constant + "1 --resume --allow-change steps");
  EXPECT_EQ(other.status, 1);
  EXPECT_NE(other.err.find("different micro_batches_per_step (checkpoint: '2', now: '1')"), std::string::npos) << other.err;
}

TEST(DistributedMpi, FinetuneSftAndGrpoMatchOneProcess) {
  const fs::path d = xg::test::fresh_test_dir();
  const fs::path base = xg::test::tiny_base(d);
  {
    std::ofstream sft(d / "sft.jsonl"), grpo(d / "grpo.jsonl");
    for (const char* w : {"apple", "river", "stone", "cloud", "glass", "tiger"}) {
      sft << json{{"prompt", std::string("Is ") + w + " a word?"}, {"response", "yes"}}.dump() << "\n";
      grpo << json{{"prompt", std::string("Say ") + w + ":"}, {"answers", {w}}}.dump() << "\n";
    }
  }
  for (const std::string objective : {"sft", "grpo"}) {
    const std::string flags = kTools + "/xg-finetune --base " + base.string() + " --objective " + objective +
                              " --data " + (d / (objective + ".jsonl")).string() +
                              " --steps 4 --warmup 1 --lr 1e-2 --batch 2 --lora-r 4 --group-size 4 --max-new-tokens 6 --out ";
    CliRun one = shell("OMP_NUM_THREADS=1 " + flags + (d / (objective + "_one")).string() + " --grad-accum 2");
    ASSERT_EQ(one.status, 0) << one.err;
    CliRun two = shell("OMP_NUM_THREADS=1 " + mpirun(2) + flags + (d / (objective + "_two")).string() + " --grad-accum 1");
    ASSERT_EQ(two.status, 0) << two.err << two.out;
    EXPECT_EQ(train_losses(d / (objective + "_one") / "log.jsonl"), train_losses(d / (objective + "_two") / "log.jsonl"))
        << objective;
    EXPECT_TRUE(same_bytes(d / (objective + "_one") / "adapter_model.safetensors",
                           d / (objective + "_two") / "adapter_model.safetensors"))
        << objective;
  }
}

TEST(DistributedMpi, FullDpoMatchesOneProcess) {
  // Every weight trains, against a frozen reference copy on each rank.
  const fs::path d = xg::test::fresh_test_dir();
  const fs::path base = xg::test::tiny_base(d);
  {
    std::ofstream dpo(d / "dpo.jsonl");
    for (const char* w : {"apple", "river", "stone", "cloud", "glass", "tiger"})
      dpo << json{{"prompt", std::string("Is ") + w + " a word?"}, {"chosen", "yes"}, {"rejected", "no"}}.dump() << "\n";
  }
  const std::string flags = kTools + "/xg-finetune --full --objective dpo --base " + base.string() + " --data " +
                            (d / "dpo.jsonl").string() + " --steps 4 --warmup 1 --lr 1e-3 --batch 2 --out ";
  CliRun one = shell("OMP_NUM_THREADS=1 " + flags + (d / "one").string() + " --grad-accum 2");
  ASSERT_EQ(one.status, 0) << one.err;
  CliRun two = shell("OMP_NUM_THREADS=1 " + mpirun(2) + flags + (d / "two").string() + " --grad-accum 1");
  ASSERT_EQ(two.status, 0) << two.err << two.out;
  EXPECT_EQ(train_losses(d / "one" / "log.jsonl"), train_losses(d / "two" / "log.jsonl"));
  EXPECT_TRUE(same_bytes(d / "one" / "model" / "model.safetensors", d / "two" / "model" / "model.safetensors"));
  EXPECT_FALSE(same_bytes(base / "model.safetensors", d / "one" / "model" / "model.safetensors"));
}

TEST(DistributedMpi, AKilledRankEndsTheJobAndTheLastCheckpointResumes) {
  const fs::path d = xg::test::fresh_test_dir();
  write_fox_text(d / "train.txt");
  const std::string layout = " --schedule constant --grad-accum 1";
  CliRun full = shell("OMP_NUM_THREADS=1 " + mpirun(2) + train_flags(d, "full") + layout);
  ASSERT_EQ(full.status, 0) << full.err;
  for (int victim : {1, 0}) {
    // The victim dies in step 8, after its backward, while the other rank waits in the gradient
    // sum; the checkpoint of step 5 is the last one. A hang would end at the timeout (status 124).
    const std::string out = "killed" + std::to_string(victim);
    CliRun r = shell("XGRAD_FAULT_KILL_RANK=" + std::to_string(victim) + ":8 OMP_NUM_THREADS=1 timeout -k 10 300 " +
                     mpirun(2) + train_flags(d, out) + layout);
    EXPECT_NE(r.status, 0) << r.err;
    EXPECT_NE(r.status, 124) << "the job hung until the timeout: " << r.err;
    EXPECT_NE(r.err.find("rank " + std::to_string(victim)), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("signal 9"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(d / out / "model.safetensors"));
    std::map<std::string, std::string> meta;
    xg::io::load_safetensors((d / out / "checkpoint.safetensors").string(), &meta);
    EXPECT_EQ(meta["step"], "5") << victim;
    const auto losses = train_losses(d / out / "log.jsonl");
    ASSERT_FALSE(losses.empty());
    EXPECT_EQ(losses.back().first, 7) << "the log stops at the last step every rank finished";
    // The same command with --resume ends the run bitwise as if nothing had happened (how the
    // gradient sums travel may change on resume: the same bits).
    CliRun rest = shell("OMP_NUM_THREADS=1 " + mpirun(2) + train_flags(d, out) + layout +
                        " --resume --overlap-grad-sum 0 --bucket-mb 1");
    ASSERT_EQ(rest.status, 0) << rest.err;
    EXPECT_TRUE(same_bytes(d / out / "model.safetensors", d / "full" / "model.safetensors")) << victim;
  }
}

// A NaN on one rank while the other's gradient buckets are in flight (--overlap-grad-sum, small
// buckets), through XGRAD_FAULT_NAN_RANK: rank 1's loss is NaN, so it skips its backward and
// goes straight to the sums the other rank has started. Every rank takes the same decision:
// --on-nan stop ends the job with the step, the rank and the kept checkpoint, no hang and no
// half-written file; --on-nan skip skips that step on every rank, so the weights are bitwise
// those of one process that skips it (also for a NaN gradient under a finite loss on rank 0,
// which reaches every rank through the sums), at ZeRO stages 0 and 2.
TEST(DistributedMpi, ANaNOnOneRankWhileBucketsAreInFlightEndsEveryRankAlike) {
  const fs::path d = xg::test::fresh_test_dir();
  write_fox_text(d / "train.txt");
  const std::string layout = " --schedule constant --overlap-grad-sum 1 --bucket-mb 0.01";
  for (const std::string zero : {"0", "2"}) {
    const std::string out = "stop" + zero;
    CliRun r = shell("XGRAD_FAULT_NAN_RANK=1:7 OMP_NUM_THREADS=1 timeout -k 10 300 " + mpirun(2) + train_flags(d, out) +
                     layout + " --grad-accum 1 --zero " + zero);
    EXPECT_NE(r.status, 0) << r.err;
    EXPECT_NE(r.status, 124) << "the job hung until the timeout: " << r.err;
    // Every rank stops on the decision they agreed on; the job says so once, from rank 0 (the
    // same line from each rank used to race: the first rank to abort could cut the other's off).
    EXPECT_NE(r.err.find("xg-train: step 7: the loss is "), std::string::npos) << r.err;
    EXPECT_EQ(count_of(r.err, "step 7: the loss is "), 1) << r.err;
    EXPECT_NE(r.err.find(" (micro-batch 2 of 2) (on rank 1); stopped (--on-nan stop); the checkpoint of step 5 is kept"),
              std::string::npos)
        << r.err;
    std::map<std::string, std::string> meta;
    xg::io::load_safetensors((d / out / "checkpoint.safetensors").string(), &meta);
    EXPECT_EQ(meta["step"], "5") << zero;
    EXPECT_FALSE(fs::exists(d / out / "model.safetensors"));
    for (const auto& entry : fs::directory_iterator(d / out))
      EXPECT_EQ(entry.path().filename().string().find(".tmp"), std::string::npos) << entry.path();
    EXPECT_EQ(train_losses(d / out / "log.jsonl").back().first, 6) << zero;

    const std::string skip = " --on-nan skip --max-skipped 0.5";
    for (const std::string fault : {"3", "4:grad"}) {
      const std::string tag = zero + "_" + fault.substr(0, 1);
      CliRun one = shell("XGRAD_FAULT_NAN_RANK=0:" + fault + " OMP_NUM_THREADS=1 " + train_flags(d, "one" + tag, 6) +
                         layout + skip + " --grad-accum 2");
      ASSERT_EQ(one.status, 0) << one.err;
      CliRun two = shell("XGRAD_FAULT_NAN_RANK=" + std::string(fault == "3" ? "1:" : "0:") + fault +
                         " OMP_NUM_THREADS=1 timeout -k 10 300 " + mpirun(2) + train_flags(d, "two" + tag, 6) + layout +
                         skip + " --grad-accum 1 --zero " + zero);
      ASSERT_EQ(two.status, 0) << two.err;
      const auto skips = xg::test::log_records(d / ("two" + tag) / "log.jsonl", "skip");
      ASSERT_EQ(skips.size(), 1u) << tag;
      EXPECT_EQ(skips[0]["step"], std::stoi(fault)) << tag;
      EXPECT_EQ(train_losses(d / ("one" + tag) / "log.jsonl"), train_losses(d / ("two" + tag) / "log.jsonl")) << tag;
      EXPECT_TRUE(same_bytes(d / ("one" + tag) / "model.safetensors", d / ("two" + tag) / "model.safetensors")) << tag;
    }
  }
}

TEST(DistributedMpi, ABadInputFailsTheWholeJobWithOneClearError) {
  const fs::path d = xg::test::fresh_test_dir();
  CliRun r = shell(mpirun(2) + kTools + "/xg-train --data " + (d / "missing.txt").string() + " --out " +
                   (d / "out").string() + " --steps 2 --warmup 0");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("missing.txt"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(d / "out" / "checkpoint.safetensors"));
}

#endif  // XGRAD_MPIEXEC
