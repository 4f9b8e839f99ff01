// experiments/study.cpp: the Pre-Norm vs Post-Norm study against PyTorch's run of the same
// nets (tests/fixtures/gen_prenorm.py: 8 layers of relu(Linear(4, 4)), each with its own
// LayerNorm, from torch.manual_seed(42)), the init files, the sweep and the Transformer-block
// profile.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>

#include "experiments/study.hpp"
#include "torch_fixture.hpp"

namespace ex = xg::experiments;

namespace {

const std::string kFixture = std::string(XGRAD_FIXTURE_DIR) + "/prenorm.safetensors";

void expect_rel_near(double got, double want, double rel, const std::string& what) {
  EXPECT_LE(std::abs(got - want), rel * std::abs(want)) << what << ": got " << got << ", PyTorch " << want;
}

// Loads the fixture through the code path of `--init` and compares every gradient norm.
void expect_matches_pytorch(const ex::StudyConfig& c, const std::string& prefix) {
  ex::Init init = ex::load_init(kFixture, c, prefix);
  ex::StudyResult r = ex::run_study(c, init);
  const xg::TensorMap& fx = xg::test::fixture("prenorm");
  auto post = fx.at(prefix + "grad_post").to_vector();
  auto pre = fx.at(prefix + "grad_pre").to_vector();
  ASSERT_EQ(r.grad_post.size(), post.size());
  ASSERT_EQ(r.grad_pre.size(), pre.size());
  for (std::size_t i = 0; i < post.size(); ++i) {
    expect_rel_near(r.grad_post[i], post[i], 1e-5, prefix + "post layer " + std::to_string(i + 1));
    expect_rel_near(r.grad_pre[i], pre[i], 1e-5, prefix + "pre layer " + std::to_string(i + 1));
  }
  expect_rel_near(r.loss_post, fx.at(prefix + "loss_post").item(), 1e-5, "loss_post");
  expect_rel_near(r.loss_pre, fx.at(prefix + "loss_pre").item(), 1e-5, "loss_pre");
  expect_rel_near(r.ratio_layer1(), pre[0] / post[0], 2e-5, "layer-1 ratio");
}

std::string temp_path(const std::string& name) {
  return std::string(XGRAD_BINARY_DIR) + "/test_experiments_" + name;
}

}  // namespace

TEST(ExperimentsStudy, DefaultNetsMatchPyTorch) {
  ex::StudyConfig c;  // the defaults: 8 layers, d_model 4, batch 2, LayerNorm, relu(Linear), seed 42
  expect_matches_pytorch(c, "");
}

TEST(ExperimentsStudy, DeeperWiderMatchesPyTorch) {
  ex::StudyConfig c;
  c.layers = 16;
  c.d_model = 8;
  expect_matches_pytorch(c, "deep16.");
}

TEST(ExperimentsStudy, RelativeToTopLayer) {
  ex::StudyConfig c;
  ex::StudyResult r = ex::run_study(c, ex::load_init(kFixture, c));
  auto rp = r.rel_post(), rq = r.rel_pre();
  ASSERT_EQ(rp.size(), 8u);
  EXPECT_DOUBLE_EQ(rp.back(), 1.0);
  EXPECT_DOUBLE_EQ(rq.back(), 1.0);
  EXPECT_NEAR(rp[0], r.grad_post[0] / r.grad_post[7], 1e-12);
  EXPECT_NEAR(rq[2], r.grad_pre[2] / r.grad_pre[7], 1e-12);
}

TEST(ExperimentsStudy, SaveInitRoundTrips) {
  ex::StudyConfig c;
  c.layers = 5;
  c.d_model = 6;
  c.final_norm = true;
  ex::Init a = ex::make_init(c);
  EXPECT_EQ(a.params.count("final_norm.weight"), 1u);
  EXPECT_EQ(a.params.count("layers.4.weight"), 1u);
  const std::string path = temp_path("init.safetensors");
  ex::save_init(path, a);
  ex::Init b = ex::load_init(path, c);
  std::remove(path.c_str());
  ex::StudyResult ra = ex::run_study(c, a), rb = ex::run_study(c, b);
  EXPECT_EQ(ra.grad_post, rb.grad_post);
  EXPECT_EQ(ra.grad_pre, rb.grad_pre);
  // The same seed draws the same init; another seed another one.
  ex::StudyResult rc = ex::run_study(c, ex::make_init(c));
  EXPECT_EQ(ra.grad_pre, rc.grad_pre);
  c.seed = 43;
  ex::StudyResult rd = ex::run_study(c, ex::make_init(c));
  EXPECT_NE(ra.grad_pre[0], rd.grad_pre[0]);
}

TEST(ExperimentsStudy, FinalNormChangesOnlyThePreNormNet) {
  ex::StudyConfig c;
  ex::Init init = ex::load_init(kFixture, c);
  ex::StudyResult plain = ex::run_study(c, init);
  c.final_norm = true;
  init.params["final_norm.weight"] = xg::ones({4});
  init.params["final_norm.bias"] = xg::zeros({4});
  ex::StudyResult fin = ex::run_study(c, init);
  EXPECT_EQ(plain.grad_post, fin.grad_post);
  EXPECT_DOUBLE_EQ(plain.loss_post, fin.loss_post);
  EXPECT_NE(plain.loss_pre, fin.loss_pre);
}

TEST(ExperimentsStudy, EverySublayerAndNormRuns) {
  for (auto sub : {ex::Sublayer::Linear, ex::Sublayer::FFN, ex::Sublayer::Attention, ex::Sublayer::Block})
    for (auto norm : {xg::nn::NormKind::LayerNorm, xg::nn::NormKind::RMSNorm}) {
      ex::StudyConfig c;
      c.layers = 3;
      c.d_model = 8;
      c.n_heads = 2;
      c.sublayer = sub;
      c.norm = norm;
      c.final_norm = true;
      ex::Init init = ex::make_init(c);
      ex::StudyResult r = ex::run_study(c, init);
      const std::string what = std::string(ex::sublayer_name(sub)) + "/" + xg::nn::norm_kind_name(norm);
      ASSERT_EQ(r.grad_post.size(), 3u) << what;
      for (int i = 0; i < 3; ++i) {
        EXPECT_TRUE(std::isfinite(r.grad_post[i]) && r.grad_post[i] > 0) << what << " post layer " << i;
        EXPECT_TRUE(std::isfinite(r.grad_pre[i]) && r.grad_pre[i] > 0) << what << " pre layer " << i;
      }
      EXPECT_NE(r.grad_post[0], r.grad_pre[0]) << what;
      EXPECT_EQ(init.params.count("final_norm.bias"), norm == xg::nn::NormKind::RMSNorm ? 0u : 1u) << what;
    }
}

TEST(ExperimentsStudy, LayerGradNormIsTheNormOfTheWeightMatrices) {
  ex::StudyConfig c;
  c.layers = 2;
  c.d_model = 4;
  c.sublayer = ex::Sublayer::FFN;
  ex::Init init = ex::make_init(c);
  ex::DeepNet net(c, xg::nn::NormPosition::Pre);
  net.load_state_dict(init.params);
  xg::Tensor d = net.forward(init.x) - init.target;
  xg::mean(d * d).backward();
  double s = 0;
  for (const auto& [name, p] : net.named_parameters())
    if (name == "layers.1.fc1.weight" || name == "layers.1.fc2.weight")
      for (double v : p.grad().to_vector()) s += v * v;
  EXPECT_NEAR(net.layer_grad_norm(1), std::sqrt(s), 1e-12);
  EXPECT_GT(s, 0);
}

TEST(ExperimentsStudy, Quartiles) {
  ex::Quartiles q = ex::quartiles({4, 1, 3, 2});  // numpy.percentile([1,2,3,4], [25,50,75])
  EXPECT_DOUBLE_EQ(q.q1, 1.75);
  EXPECT_DOUBLE_EQ(q.median, 2.5);
  EXPECT_DOUBLE_EQ(q.q3, 3.25);
  ex::Quartiles one = ex::quartiles({7});
  EXPECT_DOUBLE_EQ(one.q1, 7);
  EXPECT_DOUBLE_EQ(one.q3, 7);
  EXPECT_XG_ERROR(ex::quartiles({}), "no values");
}

TEST(ExperimentsStudy, SweepSummarisesSeeds) {
  ex::StudyConfig base;
  auto points = ex::run_sweep(base, {3, 6}, {4}, 2);
  ASSERT_EQ(points.size(), 2u);
  EXPECT_EQ(points[1].depth, 6);
  EXPECT_EQ(points[1].rel_post_median.size(), 6u);
  EXPECT_DOUBLE_EQ(points[1].rel_pre_median.back(), 1.0);
  // With two seeds the median is their mean.
  ex::StudyConfig c = base;
  c.layers = 6;
  std::vector<double> ratios;
  for (uint64_t s : {42u, 43u}) {
    c.seed = s;
    ratios.push_back(ex::run_study(c, ex::make_init(c)).ratio_layer1());
  }
  EXPECT_NEAR(points[1].ratio.median, (ratios[0] + ratios[1]) / 2, 1e-12);
  EXPECT_LE(points[1].ratio.q1, points[1].ratio.median);
  EXPECT_LE(points[1].ratio.median, points[1].ratio.q3);
  // Each median comes with its bootstrap interval, and every seed's own values are kept.
  EXPECT_NEAR(points[1].ratio_ci.estimate, points[1].ratio.median, 1e-12);
  EXPECT_TRUE(points[1].ratio_ci.contains(points[1].ratio_ci.estimate));
  EXPECT_EQ(points[1].ratio_ci.n, 2);
  EXPECT_EQ(points[1].seeds, (std::vector<uint64_t>{42, 43}));
  ASSERT_EQ(points[1].pre.size(), 2u);
  EXPECT_EQ(points[1].pre[1][0] / points[1].post[1][0], ratios[1]);
  ASSERT_EQ(points[1].rel_post.size(), 6u);
  EXPECT_LE(points[1].rel_post[0].lo, points[1].rel_post[0].estimate);
  EXPECT_GE(points[1].raw_pre[0].hi, points[1].raw_pre[0].estimate);
  EXPECT_XG_ERROR(ex::run_sweep(base, {3}, {4}, 0), "--seeds");
}

// --sweep-save-init / --sweep-init: the sweep from its saved states gives the same gradients.
TEST(ExperimentsStudy, SweepFromSavedStatesIsTheSame) {
  ex::StudyConfig base;
  base.final_norm = true;
  const std::string dir = temp_path("sweep_states");
  std::filesystem::create_directories(dir);
  auto save = [&](const ex::StudyConfig& c, const ex::Init& init) { ex::save_init(dir + "/" + ex::sweep_init_file(c), init); };
  auto load = [&](const ex::StudyConfig& c) { return ex::load_init(dir + "/" + ex::sweep_init_file(c), c); };
  auto drawn = ex::run_sweep(base, {3, 5}, {4, 8}, 2, ex::make_init, save);
  auto loaded = ex::run_sweep(base, {3, 5}, {4, 8}, 2, load);
  ASSERT_EQ(drawn.size(), loaded.size());
  for (std::size_t i = 0; i < drawn.size(); ++i) {
    EXPECT_EQ(drawn[i].post, loaded[i].post);
    EXPECT_EQ(drawn[i].pre, loaded[i].pre);
  }
  ex::StudyConfig c = base;
  c.d_model = 8;
  c.layers = 5;
  c.seed = 43;
  EXPECT_EQ(ex::sweep_init_file(c), "sweep_d8_L5_seed43.safetensors");
}

// The exponent of median(y) ~ x^p with its interval: exact data y = 3 x^0.5 in every seed.
TEST(ExperimentsStudy, ExponentInterval) {
  const std::vector<double> x{2, 4, 8};
  std::vector<std::vector<double>> y;
  for (double v : x) y.push_back({3 * std::sqrt(v), 3 * std::sqrt(v)});
  ex::Interval p = ex::exponent_ci(x, y);
  EXPECT_NEAR(p.estimate, 0.5, 1e-12);
  EXPECT_NEAR(p.lo, 0.5, 1e-12);
  EXPECT_NEAR(p.hi, 0.5, 1e-12);
}

TEST(ExperimentsStudy, FitExponent) {
  std::vector<double> x{4, 8, 16, 32}, y;
  for (double v : x) y.push_back(3.0 / std::sqrt(v));
  EXPECT_NEAR(ex::fit_exponent(x, y), -0.5, 1e-12);
  EXPECT_XG_ERROR(ex::fit_exponent({4}, {1}), "at least two");
  EXPECT_XG_ERROR(ex::fit_exponent({4, 8}, {1, 0}), "positive");
}

TEST(ExperimentsStudy, WithFinalNormAddsOnlyTheFinalNorm) {
  ex::StudyConfig c;
  ex::Init a = ex::torch_seed42_init(c);
  ex::Init b = ex::with_final_norm(c, a);
  EXPECT_EQ(b.params.size(), a.params.size() + 2);
  c.final_norm = true;
  ex::StudyResult r = ex::run_study(c, b);
  EXPECT_NEAR(r.ratio_layer1(), 0.741, 0.001);  // the seed's 16.11x with a final norm
  EXPECT_NEAR(r.loss_pre, 0.788423, 1e-5);
}

TEST(ExperimentsStudy, XiongProfile) {
  ex::XiongConfig xc;
  xc.d_model = 16;
  xc.n_heads = 2;
  xc.batch = 2;
  xc.seq_len = 4;
  ex::XiongProfile a = ex::run_xiong(xc, 3), b = ex::run_xiong(xc, 3);
  ASSERT_EQ(a.post.size(), 3u);
  ASSERT_EQ(a.pre.size(), 3u);
  EXPECT_EQ(a.post, b.post);  // deterministic for a seed
  for (int i = 0; i < 3; ++i) {
    EXPECT_GT(a.post[i], 0);
    EXPECT_GT(a.pre[i], 0);
  }
  EXPECT_NE(a.post[0], a.pre[0]);
  EXPECT_XG_ERROR(ex::run_xiong(xc, 0), "at least 1");
}

TEST(ExperimentsStudy, Errors) {
  EXPECT_XG_ERROR(ex::parse_sublayer("conv"), "--sublayer: expected linear, ffn, attention or block, got 'conv'");
  EXPECT_XG_ERROR(ex::parse_norm("batchnorm"), "--norm: expected layernorm or rmsnorm");
  ex::StudyConfig c;
  c.layers = 0;
  EXPECT_XG_ERROR(c.validate(), "--layers: must be at least 1");
  c = ex::StudyConfig();
  c.d_model = 6;
  c.n_heads = 4;
  EXPECT_XG_ERROR(c.validate(), "--heads: must be at least 1 and divide --d-model 6");
  c = ex::StudyConfig();
  c.d_model = 5;  // the fixture's tensors are d_model 4
  EXPECT_XG_ERROR(ex::load_init(kFixture, c), "tensor 'layers.0.bias' has shape [4], the net needs [5]");
  c = ex::StudyConfig();
  c.layers = 9;  // the fixture has 8 layers
  EXPECT_XG_ERROR(ex::load_init(kFixture, c), "no tensor 'layers.8.bias'");
  c = ex::StudyConfig();
  c.final_norm = true;
  EXPECT_XG_ERROR(ex::load_init(kFixture, c), "no tensor 'final_norm.bias'");
}

TEST(ExperimentsStudy, CompiledInTorchInitIsTheFixture) {
  ex::StudyConfig c;
  ASSERT_TRUE(ex::uses_torch_seed42_init(c));
  ex::Init a = ex::torch_seed42_init(c), b = ex::load_init(kFixture, c);
  ASSERT_EQ(a.params.size(), b.params.size());
  for (const auto& [name, t] : b.params) {
    ASSERT_EQ(a.params.count(name), 1u) << name;
    EXPECT_EQ(a.params.at(name).to_vector(), t.to_vector()) << name;
  }
  EXPECT_EQ(a.x.to_vector(), b.x.to_vector());
  EXPECT_EQ(a.target.to_vector(), b.target.to_vector());
  expect_rel_near(ex::run_study(c, a).grad_pre[0], xg::test::fixture("prenorm").at("grad_pre").to_vector()[0], 1e-5,
                  "pre layer 1");
  c.final_norm = true;
  EXPECT_EQ(ex::torch_seed42_init(c).params.count("final_norm.bias"), 1u);
  c.seed = 7;
  EXPECT_FALSE(ex::uses_torch_seed42_init(c));
  EXPECT_XG_ERROR(ex::torch_seed42_init(c),
                  "compiled in only for the gradient study's default nets: 8 layers of relu(Linear(4, 4)), each "
                  "with its own LayerNorm, d_model 4, batch 2, seed 42");
}
