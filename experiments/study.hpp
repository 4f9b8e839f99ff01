// The Pre-Norm vs Post-Norm gradient study (the theory: Xiong et al. 2020, "On Layer
// Normalization in the Transformer Architecture"): two deep residual nets built from the same
// initial tensors, one Post-Norm `x = norm(x + f(x))`, one Pre-Norm `x = x + f(norm(x))`, one
// forward/backward through an MSE loss, and each layer's weight-gradient norm. The default net
// is a small classroom demonstration of the effect: 8 layers of relu(Linear(4, 4)), each with
// its own LayerNorm, batch 2, seed 42. The executable experiments/prenorm_vs_postnorm.cpp only
// parses flags and writes files; everything measured lives here so that tests call it directly.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "experiments/bootstrap.hpp"
#include "io/safetensors.hpp"
#include "nn/block.hpp"

namespace xg::experiments {

// What each of the net's layers computes as its sublayer f.
enum class Sublayer {
  Linear,     // f(h) = relu(linear(h)): the default net (layers.{i} is an nn.Linear(d, d))
  FFN,        // f(h) = fc2(relu(fc1(h))), d_ff = 4 d (layers.{i}.fc1 / fc2)
  Attention,  // f(h) = multi-head self-attention (layers.{i}.w_q/w_k/w_v/w_o), input [B, T, d]
  Block,      // layers.{i} is a whole TransformerBlock (MHA + ReLU FFN) with Post/Pre norms
};
const char* sublayer_name(Sublayer s);            // "linear", "ffn", "attention", "block"
Sublayer parse_sublayer(const std::string& name);  // throws xg::Error on anything else
nn::NormKind parse_norm(const std::string& name);  // "layernorm" | "rmsnorm"

struct StudyConfig {
  int64_t layers = 8;
  int64_t d_model = 4;
  int64_t batch = 2;
  int64_t seq_len = 4;  // tokens per sequence (attention and block sublayers only)
  int64_t n_heads = 1;    // attention heads (attention and block sublayers); must divide d_model
  uint64_t seed = 42;
  nn::NormKind norm = nn::NormKind::LayerNorm;
  // A final norm after the last layer of the Pre-Norm net ("final_norm"), as real Pre-Norm
  // models have. The Post-Norm net already ends with a norm and never gets one.
  bool final_norm = false;
  Sublayer sublayer = Sublayer::Linear;
  void validate() const;  // throws xg::Error naming the flag and the rule broken
};

// One net: `layers` sublayers and (except for the block sublayer, whose blocks own their
// norms) one norm per layer, under PyTorch's names layers.{i}.*, norms.{i}.*.
class DeepNet : public nn::Module {
 public:
  DeepNet(const StudyConfig& config, nn::NormPosition position);
  Tensor forward(const Tensor& x) const;
  // Gradient norm of layer i's weight matrices (every parameter of layers.{i} with 2 dims,
  // i.e. no biases and no norm gains): for the default net, layers[i].weight.grad.norm().
  double layer_grad_norm(int64_t i) const;
  std::string name() const override { return "DeepNet"; }

 private:
  StudyConfig config_;
  nn::NormPosition position_;
  std::shared_ptr<nn::ModuleList<nn::Module>> layers_;
  std::shared_ptr<nn::ModuleList<nn::Norm>> norms_;
  std::shared_ptr<nn::Norm> final_norm_;
};

// The initial state both nets start from: the parameters by PyTorch's names, the input x
// and the target.
struct Init {
  TensorMap params;
  Tensor x, target;
};
// Builds the Post-Norm net's initial state with xgrad's generator seeded with config.seed,
// then draws x and target from randn (in the order of tests/fixtures/gen_prenorm.py: both
// nets, then x, then target).
Init make_init(const StudyConfig& config);
// Reads an init (`--init`): x, target and every parameter the config's net has, under
// `prefix` + name. Other tensors in the file are ignored; missing or mis-shaped ones are an
// error naming the file and the tensor.
Init load_init(const std::string& path, const StudyConfig& config, const std::string& prefix = "");
void save_init(const std::string& path, const Init& init);  // `--save-init`
// PyTorch's own seed-42 init of the default nets (torch.manual_seed(42) before each net, then
// randn x and target), compiled in from tests/fixtures/gen_prenorm.py, so that the default run
// prints PyTorch's numbers. Only for the default shape: true from uses_torch_seed42_init.
bool uses_torch_seed42_init(const StudyConfig& config);  // 8 layers, d 4, batch 2, Linear, LayerNorm, seed 42
Init torch_seed42_init(const StudyConfig& config);      // throws xg::Error for any other config

struct StudyResult {
  std::vector<double> grad_post, grad_pre;  // per layer, bottom (layer 1) first
  double loss_post = 0, loss_pre = 0;
  // grad[i] / grad[top layer]: vanishing measured independently of the loss scale.
  std::vector<double> rel_post() const;
  std::vector<double> rel_pre() const;
  double ratio_layer1() const { return grad_pre.at(0) / grad_post.at(0); }  // Pre / Post
};

// Builds both nets from `init`, runs one forward/backward each, returns the gradient norms.
StudyResult run_study(const StudyConfig& config, const Init& init);
// `init` plus the Pre-Norm net's final norm (gain ones, bias zeros: no randomness), so that the
// same initial tensors run with config.final_norm on; parameters already there are kept.
Init with_final_norm(const StudyConfig& config, Init init);

// Least-squares slope of log y against log x: the exponent p of y ~ c x^p.
double fit_exponent(const std::vector<double>& x, const std::vector<double>& y);

// --- the depth sweep (part 2, --sweep) -------------------------------------------------------

struct Quartiles {
  double q1 = 0, median = 0, q3 = 0;
};
Quartiles quartiles(std::vector<double> values);  // linear interpolation (numpy's default)

struct SweepPoint {
  int64_t d_model = 0, depth = 0;
  std::vector<uint64_t> seeds;
  // Per seed (in the order of `seeds`), per layer bottom first: the raw gradient norms.
  std::vector<std::vector<double>> post, pre;
  Quartiles post_layer1, pre_layer1, ratio;  // over seeds (the spread of the seeds)
  // The same medians with their 95% bootstrap intervals over seeds (the uncertainty of the
  // median); ratio_ci is the median of the per-seed Pre/Post layer-1 ratios.
  Interval post_layer1_ci, pre_layer1_ci, ratio_ci;
  // Median over seeds of each layer's gradient norm relative to the top layer, and raw, each
  // with its interval.
  std::vector<Interval> rel_post, rel_pre, raw_post, raw_pre;
  std::vector<double> rel_post_median, rel_pre_median;  // the estimates of rel_post, rel_pre
  std::vector<double> raw_post_median, raw_pre_median;
};
// Where a sweep's initial states come from: make_init by default; a folder of saved states
// (`--sweep-init`) otherwise.
using InitSource = std::function<Init(const StudyConfig&)>;
// The file of one width, depth and seed in a --sweep-save-init folder:
// "sweep_d64_L8_seed42.safetensors" (the --save-init format).
std::string sweep_init_file(const StudyConfig& config);
// For each d_model and depth, `seeds` runs with seeds base.seed, base.seed + 1, ...
// (base.final_norm decides whether the Pre-Norm nets end with a norm.) `source` gives each
// run's initial state; `on_init`, when set, sees each one (to save it).
std::vector<SweepPoint> run_sweep(const StudyConfig& base, const std::vector<int64_t>& depths,
                                  const std::vector<int64_t>& d_models, int64_t seeds,
                                  const InitSource& source = make_init,
                                  const std::function<void(const StudyConfig&, const Init&)>& on_init = {});

// The exponent p of median(y) ~ c x^p fitted over the points (one sample of per-seed values per
// x), with a bootstrap interval: each point's seeds resampled on their own, the medians and the
// fit recomputed.
Interval exponent_ci(const std::vector<double>& x, const std::vector<std::vector<double>>& per_seed);

// --- an encoder-only stack of Transformer blocks at initialisation ----------------------------
// (the earlier part 3; --xiong now measures the encoder-decoder of experiments/encdec.hpp, the
// architecture of Xiong et al. 2020. Kept as a library function: its Post-LN profile is flat.)

struct XiongConfig {
  int64_t d_model = 64;
  int64_t n_heads = 4;
  int64_t batch = 4;
  int64_t seq_len = 16;
  int64_t vocab = 64;  // size of the linear head trained with cross-entropy on random labels
  uint64_t seed = 42;
  // The paper's (fairseq's) init: Xavier-uniform weight matrices and zero biases in the
  // attention and the FFN. Off: PyTorch's nn.Linear default (kaiming_uniform, a = sqrt 5).
  bool xavier = true;
};
struct XiongProfile {
  int64_t depth = 0;
  // Per layer (bottom first): norm of the gradient of the FFN's second weight matrix W2
  // (fc2.weight), the quantity of the paper's figure 3.
  std::vector<double> post, pre;
};
// Post-LN: x = LN(x + attn(x)), x = LN(x + ffn(x)); Pre-LN: x = x + attn(LN(x)),
// x = x + ffn(LN(x)) and a final LN, as in the paper; both from the same initial weights,
// then a linear head and cross-entropy against random labels.
XiongProfile run_xiong(const XiongConfig& config, int64_t depth);

}  // namespace xg::experiments
