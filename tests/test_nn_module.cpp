// Tests for nn/module.cpp: registration, dotted names, modes, state dicts and files.
#include "nn/module.hpp"

#include <stdexcept>

#include "nn/activation.hpp"
#include "nn/linear.hpp"
#include "tests/torch_fixture.hpp"

using namespace xg;
using namespace xg::nn;

namespace {

// Mirrors the PyTorch Net in gen_nn_linear.py, with a stand-in for LayerNorm's parameters.
struct FakeNorm : Module {
  FakeNorm() {
    register_parameter("weight", ones({4}));
    register_parameter("bias", zeros({4}));
  }
};
struct Block : Module {
  Block() {
    w_q = register_module("w_q", std::make_shared<Linear>(4, 4));
    register_module("norm", std::make_shared<FakeNorm>());
  }
  std::shared_ptr<Linear> w_q;
};
struct Net : Module {
  Net() {
    register_module("embed", std::make_shared<Embedding>(10, 4));
    layers = register_module("layers", std::make_shared<ModuleList<Block>>());
    layers->push_back(std::make_shared<Block>());
    layers->push_back(std::make_shared<Block>());
    head = register_module("head", std::make_shared<Linear>(4, 10, false));
    register_buffer("mask", ones({3}), true);
    register_buffer("scratch", ones({2}), false);
  }
  std::string name() const override { return "Net"; }
  std::shared_ptr<ModuleList<Block>> layers;
  std::shared_ptr<Linear> head;
};

TensorMap torch_net() {
  TensorMap out;
  for (const auto& [k, v] : test::fixture("nn_linear"))
    if (k.rfind("net.", 0) == 0) out.emplace(k.substr(4), v);
  return out;
}

}  // namespace

TEST(Module, DottedNamesInRegistrationOrder) {
  Net net;
  std::vector<std::string> names;
  for (const auto& [n, p] : net.named_parameters()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"embed.weight", "layers.0.w_q.weight", "layers.0.w_q.bias",
                                             "layers.0.norm.weight", "layers.0.norm.bias", "layers.1.w_q.weight",
                                             "layers.1.w_q.bias", "layers.1.norm.weight", "layers.1.norm.bias",
                                             "head.weight"}));
  EXPECT_EQ(net.num_parameters(), 40 + 2 * (16 + 4 + 4 + 4) + 40);
  std::vector<std::string> mods;
  for (const auto& [n, m] : net.named_modules()) mods.push_back(n);
  EXPECT_EQ(mods, (std::vector<std::string>{"embed", "layers", "layers.0", "layers.0.w_q", "layers.0.norm",
                                            "layers.1", "layers.1.w_q", "layers.1.norm", "head"}));
  EXPECT_EQ(net.children().size(), 3u);
}

TEST(Module, StateDictHasPersistentBuffersAndSharesStorage) {
  Net net;
  TensorMap sd = net.state_dict();
  EXPECT_EQ(sd.count("mask"), 1u);
  EXPECT_EQ(sd.count("scratch"), 0u);
  EXPECT_EQ(sd.at("head.weight").raw_data(), net.head->weight().raw_data());
}

TEST(Module, LoadsAPyTorchStateDictIntoExistingStorage) {
  Net net;
  void* before = net.layers->operator[](1)->w_q->weight().raw_data();
  TensorMap sd = torch_net();
  sd.emplace("mask", zeros({3}));
  net.load_state_dict(sd);
  EXPECT_EQ(net.layers->operator[](1)->w_q->weight().raw_data(), before);
  EXPECT_EQ(net.layers->operator[](1)->w_q->weight().to_vector(), sd.at("layers.1.w_q.weight").to_vector());
  EXPECT_EQ(net.head->weight().to_vector(), sd.at("head.weight").to_vector());
}

TEST(Module, LoadStateDictErrorListsEveryProblem) {
  Net net;
  TensorMap sd = torch_net();  // has no "mask"
  sd.erase("layers.0.w_q.bias");
  sd.emplace("extra.weight", ones({1}));
  sd["head.weight"] = zeros({10, 5});
  EXPECT_XG_ERROR(net.load_state_dict(sd),
                  "load_state_dict: error(s) loading into Net: missing keys: layers.0.w_q.bias, mask. "
                  "unexpected keys: extra.weight. wrong shapes: head.weight (checkpoint [10,5], model [10,4]).");
  sd["head.weight"] = zeros({10, 4});
  net.load_state_dict(sd, false);  // non-strict: missing/unexpected tolerated
  EXPECT_EQ(net.head->weight().to_vector(), std::vector<double>(40, 0.0));
}

TEST(Module, SaveLoadRoundTripThroughSafetensors) {
  Net a, b;
  const std::string path = std::string(XGRAD_BINARY_DIR) + "/net.safetensors";
  save(a, path);
  load(b, path);
  for (const auto& [n, t] : a.state_dict()) EXPECT_EQ(b.state_dict().at(n).to_vector(), t.to_vector()) << n;
}

TEST(Module, ModesGradsAndDtype) {
  Net net;
  EXPECT_TRUE(net.is_training());
  net.eval();
  EXPECT_FALSE(net.layers->operator[](0)->w_q->is_training());
  net.train();
  EXPECT_TRUE(net.head->is_training());
  net.requires_grad_(false);
  EXPECT_FALSE(net.head->weight().requires_grad());
  net.requires_grad_(true);
  Tensor w = net.head->weight();
  net.to(kFloat64);
  EXPECT_EQ(w.dtype(), kFloat64);  // the handle an optimizer holds sees the conversion
  EXPECT_EQ(net.state_dict().at("mask").dtype(), kFloat64);
  EXPECT_TRUE(w.requires_grad());
}

// nn.Sequential(Linear(4, 8), ReLU(), Linear(8, 3)): PyTorch's names ("0.weight", "2.bias")
// and the composition of its children.
TEST(Module, SequentialChainsUnaryModulesUnderIndexNames) {
  auto first = std::make_shared<Linear>(4, 8), last = std::make_shared<Linear>(8, 3);
  Sequential seq({first, std::make_shared<ReLU>(), last});
  std::vector<std::string> names;
  for (const auto& [n, p] : seq.named_parameters()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"}));
  EXPECT_EQ(seq.size(), 3u);
  const Tensor x = randn({2, 5, 4});
  EXPECT_TRUE(test::tensors_close(seq(x), (*last)(relu((*first)(x))), 0, 0));
  EXPECT_TRUE(test::tensors_close(Sequential()(x), x, 0, 0));  // empty: the identity
  // A UnaryModule is what the container calls, whatever the kind.
  const UnaryModule& as_unary = seq;
  EXPECT_EQ(as_unary(x).shape(), (Shape{2, 5, 3}));
  EXPECT_EQ(seq.repr(), "Sequential(\n  (0): Linear(in_features=4, out_features=8, bias=true)\n  (1): ReLU()\n"
                        "  (2): Linear(in_features=8, out_features=3, bias=true)\n)");
}

// The guard restores each module's own mode, also a child that was already in eval mode and
// also when the scope ends by an exception.
TEST(Module, EvalModeGuardRestoresEveryModulesOwnMode) {
  Net net;
  net.layers->operator[](1)->eval();  // e.g. a frozen part kept in eval mode
  try {
    EvalModeGuard guard(net);
    EXPECT_FALSE(net.is_training());
    EXPECT_FALSE(net.head->is_training());
    EXPECT_FALSE(net.layers->operator[](0)->w_q->is_training());
    throw std::runtime_error("leaves the scope");
  } catch (const std::runtime_error&) {
  }
  EXPECT_TRUE(net.is_training());
  EXPECT_TRUE(net.head->is_training());
  EXPECT_TRUE(net.layers->operator[](0)->w_q->is_training());
  EXPECT_FALSE(net.layers->operator[](1)->is_training());
  EXPECT_FALSE(net.layers->operator[](1)->w_q->is_training());
}

TEST(ModuleErrors, Registration) {
  Module m;
  m.register_parameter("w", ones({1}));
  EXPECT_XG_ERROR(m.register_parameter("w", ones({1})), "Module::register_parameter: 'w' is already registered");
  EXPECT_XG_ERROR(m.register_buffer("a.b", ones({1})), "name 'a.b' must be non-empty and contain no '.'");
  EXPECT_XG_ERROR(m.register_module("c", std::shared_ptr<Module>()), "Module::register_module: 'c' is null");
}

TEST(Module, Repr) {
  Net net;
  const std::string r = net.repr();
  EXPECT_NE(r.find("(head): Linear(in_features=4, out_features=10, bias=false)"), std::string::npos) << r;
  EXPECT_NE(r.find("(0): Module("), std::string::npos) << r;
}
