// Tests for optim/optimizer.cpp: parameter bookkeeping, zero_grad, in-place updates, the
// decay / no-decay split, state dicts, and resuming from a file bit for bit.
#include <cstdio>
#include <cstring>

#include "autograd/graph.hpp"
#include "optim/optimizer.hpp"
#include "tests/optim_test_util.hpp"

using namespace xg;
using namespace xg::optim;
using xg::test::make_mlp;
using xg::test::MLP;
using xg::test::mlp_loss;

namespace {

std::string temp_path(const std::string& name) { return ::testing::TempDir() + "/xgrad_optim_" + name; }

std::vector<std::string> keys(const TensorMap& m) {
  std::vector<std::string> out;
  for (const auto& kv : m) out.push_back(kv.first);
  return out;
}

// Bitwise equality of two tensors' data.
bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.raw_data(), b.raw_data(), static_cast<std::size_t>(a.numel()) * itemsize(a.dtype())) == 0;
}

// An optimizer + schedule + clipping setup, built the same way for a fresh run and a resumed one.
struct TrainingRun {
  std::shared_ptr<MLP> model;
  std::unique_ptr<Optimizer> opt;
  std::unique_ptr<LambdaLR> sched;
  double max_norm;

  TrainingRun(Dtype dtype, const std::string& kind) : model(make_mlp(dtype)), max_norm(kind == "adamw" ? 0.5 : -1) {
    if (kind == "sgd") {
      opt = std::make_unique<SGD>(model->parameters(), SGDOptions{0.05, 0.9, 0, 1e-3, true});
    } else if (kind == "adam") {
      opt = std::make_unique<Adam>(model->parameters(), AdamOptions{0.01, {0.9, 0.99}, 1e-8, 0.01, true});
    } else {
      opt = std::make_unique<AdamW>(
          weight_decay_groups(model->named_parameters(), AdamWOptions{0.02, {0.9, 0.95}, 1e-8, 0.1, true}));
      sched = std::make_unique<LambdaLR>(*opt, cosine_with_warmup(4, 20, 0.1));
    }
  }
  void train(int steps) {
    for (int s = 0; s < steps; ++s) {
      opt->zero_grad();
      mlp_loss(*model).backward();
      if (max_norm > 0) clip_grad_norm_(model->parameters(), max_norm);
      opt->step();
      if (sched) sched->step();
    }
  }
};

}  // namespace

TEST(Optimizer, ZeroGradDropsOrZeroesGradients) {
  Tensor a = ones({2}).requires_grad_(), b = ones({3}).requires_grad_();
  SGD opt({a, b}, SGDOptions{0.1});
  a.set_grad(ones({2}));
  opt.zero_grad();
  EXPECT_FALSE(a.grad().defined());
  a.set_grad(ones({2}));
  opt.zero_grad(false);
  ASSERT_TRUE(a.grad().defined());
  EXPECT_EQ(a.grad().to_vector(), (std::vector<double>{0, 0}));
  EXPECT_FALSE(b.grad().defined());  // stays undefined
}

// Others hold handles to a parameter (modules, views): the update writes its storage.
TEST(Optimizer, StepWritesIntoTheParametersStorageOutsideTheGraph) {
  MLP model(kFloat64);
  Tensor w = model.fc1->weight();
  const void* storage = w.raw_data();
  Tensor view = w.detach();
  const std::vector<double> before = w.to_vector();
  AdamW opt(model.parameters());
  mlp_loss(model).backward();
  opt.step();
  EXPECT_EQ(w.raw_data(), storage);
  EXPECT_NE(w.to_vector(), before);
  EXPECT_EQ(view.to_vector(), w.to_vector());
  EXPECT_EQ(model.fc1->weight().to_vector(), w.to_vector());
  EXPECT_TRUE(w.is_leaf());
  EXPECT_TRUE(w.requires_grad());
  EXPECT_STREQ(w.op_name(), "");
}

TEST(Optimizer, RejectsBadParameterLists) {
  EXPECT_XG_ERROR(SGD({}, SGDOptions{0.1}), "SGD: got an empty parameter list");
  Tensor p = ones({2}).requires_grad_();
  EXPECT_XG_ERROR(SGD({p, p}, SGDOptions{0.1}), "appears more than once");
  EXPECT_XG_ERROR(Adam(std::vector<ParamGroup<AdamOptions>>{{{p}, {}}, {{p}, {}}}), "Adam: a parameter of shape [2]");
  EXPECT_XG_ERROR(Adam({mul(p, p)}), "Adam: can't optimize a non-leaf tensor");
  EXPECT_XG_ERROR(Adam({zeros({2}, kInt64)}), "can only optimize float32/float64 tensors");
  EXPECT_XG_ERROR(Adam({Tensor()}), "undefined tensor");
}

TEST(Optimizer, ParametersAndGroupsInOrder) {
  Tensor a = ones({2}).requires_grad_(), b = ones({3}).requires_grad_(), c = ones({4}).requires_grad_();
  Adam opt(std::vector<ParamGroup<AdamOptions>>{{{a, b}, AdamOptions{0.1}}});
  opt.add_param_group({{c}, AdamOptions{0.5}});
  ASSERT_EQ(opt.num_groups(), 2u);
  EXPECT_EQ(opt.parameters().size(), 3u);
  EXPECT_EQ(opt.parameters()[2].node(), c.node());
  EXPECT_EQ(opt.lr(1), 0.5);
  opt.set_lr(0, 0.25);
  EXPECT_EQ(opt.options(0).lr, 0.25);
  EXPECT_XG_ERROR(opt.set_lr(1, -1), "Adam: invalid learning rate lr = -1 for group 1");
  EXPECT_XG_ERROR(opt.add_param_group({{a}, AdamOptions{0.1}}), "appears more than once");
  EXPECT_XG_ERROR(opt.state(3), "Adam.state: parameter index 3 out of range (the optimizer holds 3 parameters)");
}

TEST(Optimizer, DefaultNoDecayRule) {
  EXPECT_TRUE(default_no_decay("layers.0.w_q.bias", zeros({4})));
  EXPECT_TRUE(default_no_decay("layers.0.norm.weight", zeros({4})));
  EXPECT_TRUE(default_no_decay("tok_embeddings.weight", zeros({10, 4})));
  EXPECT_TRUE(default_no_decay("model.Embed.weight", zeros({10, 4})));
  EXPECT_TRUE(default_no_decay("transformer.wte.weight", zeros({10, 4})));
  EXPECT_TRUE(default_no_decay("pos.weight", zeros({16, 4})));
  EXPECT_FALSE(default_no_decay("layers.0.w_q.weight", zeros({4, 4})));
  EXPECT_FALSE(default_no_decay("output.weight", zeros({10, 4})));
  EXPECT_FALSE(default_no_decay("layers.0.position_ffn.weight", zeros({4, 4})));
}

TEST(Optimizer, WeightDecayGroupsSplitByTheRule) {
  Tensor emb = zeros({10, 4}).requires_grad_(), wq = zeros({4, 4}).requires_grad_();
  Tensor bias = zeros({4}).requires_grad_(), norm = ones({4}).requires_grad_(), head = zeros({10, 4}).requires_grad_();
  Tensor frozen = zeros({4, 4});  // requires_grad off: left out
  NamedTensors named = {{"tok_embeddings.weight", emb}, {"layers.0.w_q.weight", wq}, {"layers.0.w_q.bias", bias},
                        {"layers.0.norm.weight", norm}, {"frozen.weight", frozen},   {"output.weight", head}};
  auto groups = weight_decay_groups(named, AdamWOptions{3e-4, {0.9, 0.95}, 1e-8, 0.1});
  ASSERT_EQ(groups.size(), 2u);
  auto nodes = [](const std::vector<Tensor>& ts) {
    std::vector<Node*> out;
    for (const Tensor& t : ts) out.push_back(t.node());
    return out;
  };
  EXPECT_EQ(nodes(groups[0].params), (std::vector<Node*>{wq.node(), head.node()}));
  EXPECT_EQ(nodes(groups[1].params), (std::vector<Node*>{emb.node(), bias.node(), norm.node()}));
  EXPECT_EQ(groups[0].options.weight_decay, 0.1);
  EXPECT_EQ(groups[1].options.weight_decay, 0.0);
  EXPECT_EQ(groups[1].options.lr, 3e-4);
  EXPECT_EQ(groups[1].options.betas.second, 0.95);
  // A predicate of one's own: here, decay everything but the head.
  auto custom = weight_decay_groups(named, SGDOptions{0.1, 0, 0, 0.01},
                                    [](const std::string& name, const Tensor&) { return name == "output.weight"; });
  EXPECT_EQ(nodes(custom[1].params), (std::vector<Node*>{head.node()}));
  EXPECT_EQ(custom[0].params.size(), 4u);
  // No group is dropped even when empty, so indices stay fixed.
  auto only_biases = weight_decay_groups(NamedTensors{{"b", bias}}, AdamWOptions{});
  EXPECT_TRUE(only_biases[0].params.empty());
  AdamW opt(only_biases);
  EXPECT_EQ(opt.num_groups(), 2u);
}

TEST(Optimizer, StateDictNamesAndCopies) {
  Tensor a = ones({2, 3}, kFloat64).requires_grad_(), b = ones({4}, kFloat64).requires_grad_();
  Adam opt(std::vector<ParamGroup<AdamOptions>>{{{a}, AdamOptions{0.1}}, {{b}, AdamOptions{0.2, {0.8, 0.9}}}});
  a.set_grad(full({2, 3}, 0.5, kFloat64));
  opt.step();
  opt.step();
  const TensorMap sd = opt.state_dict();
  EXPECT_EQ(keys(sd),
            (std::vector<std::string>{
                "param_groups.0.amsgrad", "param_groups.0.beta1", "param_groups.0.beta2", "param_groups.0.eps",
                "param_groups.0.lr", "param_groups.0.maximize", "param_groups.0.params", "param_groups.0.weight_decay",
                "param_groups.1.amsgrad", "param_groups.1.beta1", "param_groups.1.beta2", "param_groups.1.eps",
                "param_groups.1.lr", "param_groups.1.maximize", "param_groups.1.params", "param_groups.1.weight_decay",
                "state.0.exp_avg", "state.0.exp_avg_sq", "state.0.step"}));
  EXPECT_EQ(sd.at("state.0.step").item(), 2);
  EXPECT_EQ(sd.at("param_groups.1.params").to_vector(), (std::vector<double>{1}));
  EXPECT_EQ(sd.at("param_groups.1.beta1").item(), 0.8);
  const std::vector<double> m = sd.at("state.0.exp_avg").to_vector();
  opt.step();  // a state dict already taken does not change
  EXPECT_EQ(sd.at("state.0.exp_avg").to_vector(), m);
  EXPECT_NE(opt.state(0)->buffers.at("exp_avg").to_vector(), m);
}

TEST(Optimizer, LoadStateDictRestoresOptionsAndState) {
  Tensor a = ones({3}, kFloat64).requires_grad_();
  SGD src({a}, SGDOptions{0.1, 0.9});
  a.set_grad(ones({3}, kFloat64));
  src.step();
  src.options().lr = 0.01;
  Tensor b = ones({3}, kFloat64).requires_grad_();
  SGD dst({b}, SGDOptions{0.5});
  dst.load_state_dict(src.state_dict());
  EXPECT_EQ(dst.options().lr, 0.01);
  EXPECT_EQ(dst.options().momentum, 0.9);
  ASSERT_NE(dst.state(0), nullptr);
  EXPECT_EQ(dst.state(0)->buffers.at("momentum_buffer").to_vector(), (std::vector<double>{1, 1, 1}));
  // float32 parameters take float64 state converted, as torch casts state to the parameter's dtype
  Tensor c = ones({3}).requires_grad_();
  SGD f32({c}, SGDOptions{0.5});
  f32.load_state_dict(src.state_dict());
  EXPECT_EQ(f32.state(0)->buffers.at("momentum_buffer").dtype(), kFloat32);
}

TEST(Optimizer, LoadStateDictRejectsMismatches) {
  Tensor a = ones({3}).requires_grad_();
  Adam adam({a});
  a.set_grad(ones({3}));
  adam.step();
  const TensorMap sd = adam.state_dict();

  Tensor b = ones({3}).requires_grad_();
  SGD sgd({b}, SGDOptions{0.1});
  EXPECT_XG_ERROR(sgd.load_state_dict(sd),
                  "SGD.load_state_dict: missing 'param_groups.0.momentum' (is this state from "
                  "another kind of optimizer?)");
  Tensor c = ones({4}).requires_grad_();
  Adam wrong_shape({c});
  EXPECT_XG_ERROR(wrong_shape.load_state_dict(sd), "'state.0.exp_avg' is float32 [3] but parameter 0 is [4]");
  Adam two({ones({3}).requires_grad_(), ones({1}).requires_grad_()});
  EXPECT_XG_ERROR(two.load_state_dict(sd), "group 0 holds 2 parameters but 'param_groups.0.params' is int64 [1]");
  TensorMap extra = sd;
  extra["state.0.bogus_"] = ones({3});
  extra["misc"] = ones({1});
  Adam d({ones({3}).requires_grad_()});
  EXPECT_XG_ERROR(d.load_state_dict(extra), "Adam.load_state_dict: unexpected keys: misc, state.0.bogus_");
  TensorMap bad_lr = sd;
  bad_lr["param_groups.0.lr"] = scalar_tensor(-1, kFloat64);
  EXPECT_XG_ERROR(d.load_state_dict(bad_lr), "Adam: invalid lr = -1");
  TensorMap more_groups = sd;
  more_groups["param_groups.1.lr"] = scalar_tensor(1, kFloat64);
  EXPECT_XG_ERROR(d.load_state_dict(more_groups), "'param_groups.1.lr' is for group 1 but the optimizer has 1 groups");
}

TEST(Optimizer, SaveAndLoadFiles) {
  Tensor a = ones({3}).requires_grad_();
  Adam adam({a});
  a.set_grad(ones({3}));
  adam.step();
  const std::string path = temp_path("adam.safetensors");
  adam.save(path);
  std::map<std::string, std::string> meta;
  io::load_safetensors(path, &meta);
  EXPECT_EQ(meta.at("optimizer"), "Adam");
  Tensor b = ones({3}).requires_grad_();
  Adam fresh({b});
  fresh.load(path);
  EXPECT_TRUE(same_bits(fresh.state(0)->buffers.at("exp_avg_sq"), adam.state(0)->buffers.at("exp_avg_sq")));
  AdamW other({ones({3}).requires_grad_()});
  EXPECT_XG_ERROR(other.load(path), "AdamW.load: " + path + " holds the state of a Adam optimizer, not AdamW");
  io::save_safetensors(path, {{"x", ones({1})}});
  EXPECT_XG_ERROR(fresh.load(path), "holds no optimizer state");
  std::remove(path.c_str());
}

// The test: 10 steps, save (model, optimizer, scheduler), load into a fresh model
// and optimizer, 10 more steps == 20 straight steps, bit for bit.
TEST(Optimizer, ResumedRunIsBitwiseIdenticalToAStraightRun) {
  for (const std::string kind : {"sgd", "adam", "adamw"}) {
    for (Dtype dt : {kFloat32, kFloat64}) {
      TrainingRun straight(dt, kind);
      straight.train(20);

      TrainingRun first(dt, kind);
      first.train(10);
      const std::string model_path = temp_path("model.safetensors"), opt_path = temp_path("opt.safetensors");
      nn::save(*first.model, model_path);
      first.opt->save(opt_path);
      TensorMap sched_state = first.sched ? first.sched->state_dict() : TensorMap{};

      TrainingRun resumed(dt, kind);
      nn::load(*resumed.model, model_path);
      resumed.opt->load(opt_path);
      if (resumed.sched) resumed.sched->load_state_dict(sched_state);
      resumed.train(10);

      const auto a = straight.model->named_parameters(), b = resumed.model->named_parameters();
      ASSERT_EQ(a.size(), b.size());
      for (std::size_t i = 0; i < a.size(); ++i)
        EXPECT_TRUE(same_bits(a[i].second, b[i].second)) << kind << " " << dtype_name(dt) << " " << a[i].first;
      // and the runs did move the weights
      EXPECT_FALSE(same_bits(straight.model->fc1->weight(), make_mlp(dt)->fc1->weight()));
      std::remove(model_path.c_str());
      std::remove(opt_path.c_str());
    }
  }
}
