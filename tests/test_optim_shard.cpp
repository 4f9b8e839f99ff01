// optim/shard.hpp and sharded optimizer state (ZeRO stages 1 and 2) in one process: the partition
// tiles the parameters with chunk-aligned cuts, and N sharded AdamWs, each stepping its slice, and
// the sharded gradient clipping give bitwise the weights, state and norm of one unsharded AdamW,
// reading full gradients or (stage 2) each rank's gradient slices alone.
#include <gtest/gtest.h>

#include <cstring>

#include "autograd/random.hpp"
#include "autograd/tensor.hpp"
#include "optim/adam.hpp"
#include "optim/clip.hpp"
#include "optim/detail/parallel.hpp"
#include "optim/shard.hpp"

namespace optim_shard_test {

using xg::Tensor;
using xg::optim::Partition;
using xg::optim::Shard;
constexpr int64_t kChunk = xg::optim::detail::kChunk;

// Sizes with parameters several chunks long, so that cuts fall inside them.
const std::vector<int64_t> kSizes = {3 * kChunk + 100, 7, 2 * kChunk, 500, kChunk + 1};

TEST(Partition, SlicesTileEveryParameterInRankOrderWithChunkAlignedCuts) {
  for (int ranks : {1, 2, 3, 5}) {
    const Partition part(kSizes, ranks);
    int64_t total = 0, owned = 0;
    for (std::size_t k = 0; k < kSizes.size(); ++k) {
      int64_t next = 0;  // rank r's slice starts where rank r-1's ended
      for (int r = 0; r < ranks; ++r) {
        const Shard s = part.slice(r, k);
        if (s.size() == 0) continue;
        EXPECT_EQ(s.begin, next) << "ranks " << ranks << " rank " << r << " param " << k;
        EXPECT_EQ(s.begin % kChunk, 0) << "a cut inside a chunk";
        next = s.end;
      }
      EXPECT_EQ(next, kSizes[k]) << "ranks " << ranks << " param " << k;
      total += kSizes[k];
    }
    for (int r = 0; r < ranks; ++r) owned += part.owned(r);
    EXPECT_EQ(owned, total);
    // Even to within a chunk either side.
    for (int r = 0; r < ranks; ++r) EXPECT_LE(std::abs(part.owned(r) - total / ranks), 2 * kChunk) << ranks;
  }
}

TEST(Partition, CutsInsideAParameterAndLeavesRanksEmptyWhenThereIsTooLittle) {
  const Partition three(kSizes, 3);  // an even third, 32970, is 202 past parameter 0's second chunk
  EXPECT_EQ(three.slice(0, 0).end, 2 * kChunk);
  EXPECT_EQ(three.slice(1, 0).begin, 2 * kChunk);
  EXPECT_EQ(three.slice(1, 0).end, kSizes[0]);
  const Partition many({10, 20}, 4);  // one chunk of parameters each: only whole parameters
  int nonempty = 0;
  for (int r = 0; r < 4; ++r) nonempty += many.owned(r) > 0;
  EXPECT_EQ(nonempty, 2);
  EXPECT_EQ(many.owned(0) + many.owned(1) + many.owned(2) + many.owned(3), 30);
  EXPECT_THROW(Partition({10}, 0), xg::Error);
}

std::vector<Tensor> make_params(uint64_t seed) {
  xg::manual_seed(seed);
  std::vector<Tensor> ps;
  for (int64_t n : kSizes) ps.push_back(xg::randn({n}).requires_grad_());
  return ps;
}

std::vector<Tensor> clones(const std::vector<Tensor>& ps) {
  std::vector<Tensor> out;
  for (const Tensor& p : ps) out.push_back(p.detach().clone().requires_grad_());
  return out;
}

void set_grads(const std::vector<Tensor>& ps, const std::vector<Tensor>& gs) {
  for (std::size_t k = 0; k < ps.size(); ++k) Tensor(ps[k]).set_grad(gs[k].clone());
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() && a.dtype() == b.dtype() &&
         std::memcmp(a.raw_data(), b.raw_data(), static_cast<std::size_t>(a.numel()) * xg::itemsize(a.dtype())) == 0;
}

// Copies rank r's slices of `from` into `into`: what the all-gather does.
void take_slices(const Partition& part, int r, const std::vector<Tensor>& from, const std::vector<Tensor>& into) {
  for (std::size_t k = 0; k < from.size(); ++k) {
    const Shard s = part.slice(r, k);
    std::memcpy(static_cast<float*>(into[k].raw_data()) + s.begin, static_cast<const float*>(from[k].raw_data()) + s.begin,
                static_cast<std::size_t>(s.size()) * sizeof(float));
  }
}

// Rank r's slices of the gradients `gs`, each a tensor of its own: what stage 2 keeps.
std::vector<Tensor> grad_slices(const Partition& part, int r, const std::vector<Tensor>& gs) {
  std::vector<Tensor> out;
  for (std::size_t k = 0; k < gs.size(); ++k) {
    const Shard s = part.slice(r, k);
    Tensor g = xg::empty({s.size()});
    std::memcpy(g.raw_data(), gs[k].data<float>() + s.begin, static_cast<std::size_t>(s.size()) * sizeof(float));
    out.push_back(g);
  }
  return out;
}

// Stage 1 reads each rank's slice from full gradients, stage 2 from the slices alone (no .grad).
TEST(ShardedAdamW, RanksSteppingTheirSlicesGiveOneAdamWsWeightsAndState) {
  xg::optim::AdamWOptions o;
  o.lr = 1e-2;
  o.weight_decay = 0.1;
  const std::vector<Tensor> start = make_params(1);
  for (const auto& [stage, ranks] : {std::pair{1, 2}, std::pair{1, 3}, std::pair{2, 2}, std::pair{2, 3}}) {
    const Partition part(kSizes, ranks);
    std::vector<Tensor> whole = clones(start);
    xg::optim::AdamW one(whole, o);
    std::vector<std::vector<Tensor>> mine;
    std::vector<std::unique_ptr<xg::optim::AdamW>> opts;
    for (int r = 0; r < ranks; ++r) {
      mine.push_back(clones(start));
      opts.push_back(std::make_unique<xg::optim::AdamW>(mine.back(), o));
      opts.back()->shard(part.slices(r));
    }
    for (int step = 0; step < 4; ++step) {
      xg::manual_seed(100 + static_cast<uint64_t>(step));
      std::vector<Tensor> gs;
      for (int64_t n : kSizes) gs.push_back(xg::randn({n}));
      set_grads(whole, gs);
      one.step();
      for (int r = 0; r < ranks; ++r) {
        if (stage == 1) set_grads(mine[r], gs);
        else opts[r]->set_grad_slices(grad_slices(part, r, gs));
        opts[r]->step();
        opts[r]->zero_grad();
      }
      for (int r = 0; r < ranks; ++r)  // the all-gather
        for (int q = 0; q < ranks; ++q) take_slices(part, q, mine[q], mine[r]);
    }
    for (int r = 0; r < ranks; ++r)
      for (std::size_t k = 0; k < kSizes.size(); ++k)
        EXPECT_TRUE(same_bytes(mine[r][k], whole[k])) << "stage " << stage << " ranks " << ranks << " rank " << r << " param " << k;
    // Each holds its share of the moments, together all of them.
    int64_t bytes = 0;
    for (int r = 0; r < ranks; ++r) {
      EXPECT_EQ(opts[r]->state_bytes(), 2 * part.owned(r) * 4);
      bytes += opts[r]->state_bytes();
    }
    EXPECT_EQ(bytes, one.state_bytes());
    // Rank r's exp_avg of parameter 0 is that slice of the whole one.
    const Shard s = part.slice(ranks - 1, 0);
    if (s.size() > 0) {
      const Tensor m = opts[ranks - 1]->state(0)->buffers.at("exp_avg");
      EXPECT_EQ(m.numel(), s.size());
      EXPECT_EQ(0, std::memcmp(m.raw_data(), one.state(0)->buffers.at("exp_avg").data<float>() + s.begin,
                               static_cast<std::size_t>(s.size()) * sizeof(float)));
    }
  }
}

TEST(ShardedAdamW, AFullStateDictLoadsIntoASlice) {
  const std::vector<Tensor> start = make_params(2);
  std::vector<Tensor> whole = clones(start);
  xg::optim::AdamW one(whole);
  xg::manual_seed(5);
  std::vector<Tensor> gs;
  for (int64_t n : kSizes) gs.push_back(xg::randn({n}));
  set_grads(whole, gs);
  one.step();
  const Partition part(kSizes, 3);
  std::vector<Tensor> mine = clones(whole);
  xg::optim::AdamW sharded(mine);
  sharded.shard(part.slices(1));
  sharded.load_state_dict(one.state_dict());
  const Shard s = part.slice(1, 2);
  ASSERT_GT(s.size(), 0);
  const Tensor v = sharded.state(2)->buffers.at("exp_avg_sq");
  EXPECT_EQ(v.numel(), s.size());
  EXPECT_EQ(0, std::memcmp(v.raw_data(), one.state(2)->buffers.at("exp_avg_sq").data<float>() + s.begin,
                           static_cast<std::size_t>(s.size()) * sizeof(float)));
  EXPECT_EQ(sharded.state(2)->step, 1);
  // Sharding an SGD is refused by name.
  xg::optim::SGD sgd(clones(start), xg::optim::SGDOptions{0.1});
  try {
    sgd.shard(part.slices(0));
    ADD_FAILURE() << "no error";
  } catch (const xg::Error& e) {
    EXPECT_NE(std::string(e.what()).find("SGD: cannot shard its state"), std::string::npos) << e.what();
  }
}

// Stage 1 clips each rank's slices of full gradients, stage 2 the slices alone (no .grad).
TEST(ShardedClip, SlicesAndASumOfChunkNormsGiveOneProcesssNormAndClippedGradients) {
  const std::vector<Tensor> ps = make_params(3);
  xg::manual_seed(9);
  std::vector<Tensor> gs;
  for (int64_t n : kSizes) gs.push_back(xg::randn({n}));
  set_grads(ps, gs);
  const double norm = xg::optim::clip_grad_norm_(ps, 0.5);
  ASSERT_GT(norm, 0.5);  // it clips
  for (const auto& [stage, ranks] : {std::pair{1, 2}, std::pair{1, 3}, std::pair{2, 2}, std::pair{2, 3}}) {
    const Partition part(kSizes, ranks);
    // Rank r's clip: the norm, and its clipped slice of each gradient in `clipped`.
    auto clip_rank = [&, stage = stage](int r, const xg::optim::SumOverRanks& sum, std::vector<Tensor>* clipped) {
      const std::vector<Tensor> mine = clones(ps);
      const std::vector<Tensor> slices = grad_slices(part, r, gs);
      if (stage == 2) {
        const double n = xg::optim::clip_grad_norm_(mine, part.slices(r), slices, sum, 0.5);
        if (clipped) *clipped = slices;
        return n;
      }
      set_grads(mine, gs);
      const double n = xg::optim::clip_grad_norm_(mine, part.slices(r), sum, 0.5);
      if (clipped) *clipped = grad_slices(part, r, [&] {
        std::vector<Tensor> g;
        for (const Tensor& p : mine) g.push_back(p.grad());
        return g;
      }());
      return n;
    };
    // First each rank's chunk norms, then their sum handed to every rank (the all-reduce).
    std::vector<double> summed;
    for (int r = 0; r < ranks; ++r)
      clip_rank(r,
                [&](std::vector<double>& x) {
                  if (summed.empty()) summed.assign(x.size(), 0.0);
                  for (std::size_t i = 0; i < x.size(); ++i) summed[i] += x[i];
                },
                nullptr);
    for (int r = 0; r < ranks; ++r) {
      std::vector<Tensor> clipped;
      EXPECT_EQ(clip_rank(r, [&](std::vector<double>& x) { x = summed; }, &clipped), norm)
          << "stage " << stage << " ranks " << ranks << " rank " << r;
      for (std::size_t k = 0; k < kSizes.size(); ++k) {
        const Shard s = part.slice(r, k);
        EXPECT_EQ(0, std::memcmp(clipped[k].raw_data(), ps[k].grad().data<float>() + s.begin,
                                 static_cast<std::size_t>(s.size()) * sizeof(float)))
            << "stage " << stage << " ranks " << ranks << " rank " << r << " param " << k;
      }
    }
  }
}

TEST(ShardedAdamW, AGradientSliceOfTheWrongSizeIsRefusedByParameter) {
  const std::vector<Tensor> start = make_params(4);
  const Partition part(kSizes, 3);
  xg::optim::AdamW opt(clones(start));
  opt.shard(part.slices(0));
  std::vector<Tensor> slices = grad_slices(part, 0, start);
  slices[0] = xg::empty({3});
  try {
    opt.set_grad_slices(slices);
    ADD_FAILURE() << "no error";
  } catch (const xg::Error& e) {
    EXPECT_NE(std::string(e.what()).find("AdamW.set_grad_slices: the slice of parameter 0 holds 3 float32 elements, its shard "),
              std::string::npos)
        << e.what();
  }
}

}  // namespace optim_shard_test
