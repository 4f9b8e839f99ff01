#include "experiments/study.hpp"

#include <algorithm>
#include <cmath>

#include "autograd/elementwise.hpp"
#include "autograd/random.hpp"
#include "autograd/reduce.hpp"
#include "losses/cross_entropy.hpp"
#include "nn/init.hpp"
#include "nn/linear.hpp"

namespace xg::experiments {

const char* sublayer_name(Sublayer s) {
  switch (s) {
    case Sublayer::Linear: return "linear";
    case Sublayer::FFN: return "ffn";
    case Sublayer::Attention: return "attention";
    case Sublayer::Block: return "block";
  }
  return "?";
}

Sublayer parse_sublayer(const std::string& name) {
  if (name == "linear") return Sublayer::Linear;
  if (name == "ffn") return Sublayer::FFN;
  if (name == "attention") return Sublayer::Attention;
  if (name == "block") return Sublayer::Block;
  throw Error(str_cat("--sublayer: expected linear, ffn, attention or block, got '", name, "'"));
}

nn::NormKind parse_norm(const std::string& name) {
  if (name == "layernorm") return nn::NormKind::LayerNorm;
  if (name == "rmsnorm") return nn::NormKind::RMSNorm;
  throw Error(str_cat("--norm: expected layernorm or rmsnorm, got '", name, "'"));
}

void StudyConfig::validate() const {
  check(layers >= 1, "--layers: must be at least 1, got ", layers);
  check(d_model >= 1, "--d-model: must be at least 1, got ", d_model);
  check(batch >= 1, "--batch: must be at least 1, got ", batch);
  check(seq_len >= 1, "--seq-len: must be at least 1, got ", seq_len);
  check(n_heads >= 1 && d_model % n_heads == 0, "--heads: must be at least 1 and divide --d-model ", d_model,
        ", got ", n_heads);
}

namespace {

constexpr double kNormEps = 1e-5;  // nn.LayerNorm's default (RMSNorm uses the same here)

bool is_sequence(Sublayer s) { return s == Sublayer::Attention || s == Sublayer::Block; }

// Sum of squares, in double, of the gradients of a module's weight matrices.
double weight_grad_sq(const nn::Module& m) {
  double s = 0;
  for (const auto& [name, p] : m.named_parameters()) {
    if (p.dim() != 2) continue;
    Tensor g = p.grad();
    if (!g.defined()) continue;
    for (double v : g.to_vector()) s += v * v;
  }
  return s;
}

// Copies `from` (by name) into the module's parameters; every one must be there.
void load_params(nn::Module& m, const TensorMap& from, const std::string& who) {
  TensorMap mine;
  for (const auto& [name, p] : m.state_dict()) {
    auto it = from.find(name);
    check(it != from.end(), who, ": missing tensor '", name, "'");
    mine[name] = it->second;
  }
  m.load_state_dict(mine, /*strict=*/true);
}

}  // namespace

DeepNet::DeepNet(const StudyConfig& c, nn::NormPosition position) : config_(c), position_(position) {
  c.validate();
  layers_ = register_module("layers", std::make_shared<nn::ModuleList<nn::Module>>());
  if (c.sublayer != Sublayer::Block) norms_ = register_module("norms", std::make_shared<nn::ModuleList<nn::Norm>>());
  for (int64_t i = 0; i < c.layers; ++i) {
    switch (c.sublayer) {
      case Sublayer::Linear: layers_->push_back(std::make_shared<nn::Linear>(c.d_model, c.d_model)); break;
      case Sublayer::FFN:
        layers_->push_back(std::make_shared<nn::FFN>(c.d_model, 4 * c.d_model, nn::Activation::ReLU, 0.0, true,
                                                     nn::FFNNaming::FC));
        break;
      case Sublayer::Attention:
        layers_->push_back(std::make_shared<nn::MultiHeadAttention>(c.d_model, c.n_heads));
        break;
      case Sublayer::Block: {
        nn::BlockConfig b = nn::BlockConfig::teaching(c.d_model, c.n_heads);
        b.norm_position = position;
        if (c.norm == nn::NormKind::LayerNorm)
          b.norm = nn::LayerNormSpec{kNormEps};
        else
          b.norm = nn::RMSNormSpec{kNormEps};
        b.position = nn::PositionKind::None;
        b.n_layers = c.layers;
        layers_->push_back(std::make_shared<nn::TransformerBlock>(b));
        break;
      }
    }
    if (norms_) norms_->push_back(nn::make_norm(c.norm, c.d_model, kNormEps));
  }
  if (c.final_norm && position == nn::NormPosition::Pre)
    final_norm_ = register_module("final_norm", nn::make_norm(c.norm, c.d_model, kNormEps));
}

Tensor DeepNet::forward(const Tensor& x) const {
  const bool post = position_ != nn::NormPosition::Pre;
  Tensor h = x;
  for (int64_t i = 0; i < config_.layers; ++i) {
    const nn::Module& layer = *(*layers_)[i];
    if (config_.sublayer == Sublayer::Block) {
      h = static_cast<const nn::TransformerBlock&>(layer)(h).out;
      continue;
    }
    auto f = [&](const Tensor& in) -> Tensor {
      switch (config_.sublayer) {
        case Sublayer::Linear: return relu(static_cast<const nn::Linear&>(layer)(in));
        case Sublayer::FFN: return static_cast<const nn::FFN&>(layer)(in);
        default: return static_cast<const nn::MultiHeadAttention&>(layer)(in);
      }
    };
    const nn::Norm& norm = *(*norms_)[i];
    h = post ? norm(h + f(h)) : h + f(norm(h));
  }
  if (final_norm_) h = (*final_norm_)(h);
  return h;
}

double DeepNet::layer_grad_norm(int64_t i) const { return std::sqrt(weight_grad_sq(*(*layers_)[i])); }

Init make_init(const StudyConfig& config) {
  config.validate();
  manual_seed(config.seed);
  DeepNet net(config, nn::NormPosition::Post);  // draws the weights both nets start from
  Init init;
  for (const auto& [name, t] : net.state_dict()) init.params[name] = t.detach().clone();
  if (config.final_norm) {  // the Pre-Norm net's final norm: ones (and zeros), no randomness
    auto norm = nn::make_norm(config.norm, config.d_model, kNormEps);
    for (const auto& [name, t] : norm->state_dict()) init.params["final_norm." + name] = t.detach().clone();
  }
  Shape shape = is_sequence(config.sublayer) ? Shape{config.batch, config.seq_len, config.d_model}
                                             : Shape{config.batch, config.d_model};
  init.x = randn(shape);
  init.target = randn(shape);
  return init;
}

Init load_init(const std::string& path, const StudyConfig& config, const std::string& prefix) {
  config.validate();
  TensorMap file = io::load_safetensors(path);
  auto get = [&](const std::string& name) {
    auto it = file.find(prefix + name);
    check(it != file.end(), "--init ", path, ": no tensor '", prefix + name, "'");
    return it->second;
  };
  Init init;
  DeepNet pre(config, nn::NormPosition::Pre);
  DeepNet post(config, nn::NormPosition::Post);
  for (const nn::Module* net : {static_cast<const nn::Module*>(&pre), static_cast<const nn::Module*>(&post)})
    for (const auto& [name, t] : net->state_dict()) {
      Tensor v = get(name);
      check(v.shape() == t.shape(), "--init ", path, ": tensor '", prefix + name, "' has shape ",
            shape_str(v.shape()), ", the net needs ", shape_str(t.shape()));
      init.params[name] = v.to(t.dtype());
    }
  init.x = get("x");
  init.target = get("target");
  check(init.x.dim() >= 2 && init.x.size(-1) == config.d_model, "--init ", path, ": x has shape ",
        shape_str(init.x.shape()), ", its last dim must be --d-model ", config.d_model);
  check(init.target.shape() == init.x.shape(), "--init ", path, ": target has shape ",
        shape_str(init.target.shape()), ", x has ", shape_str(init.x.shape()));
  init.x = init.x.to(kFloat32);
  init.target = init.target.to(kFloat32);
  return init;
}

void save_init(const std::string& path, const Init& init) {
  TensorMap out = init.params;
  out["x"] = init.x;
  out["target"] = init.target;
  io::save_safetensors(path, out);
}

namespace {
struct TorchTensor {
  const char* name;
  Shape shape;
  std::vector<float> values;
};
const TorchTensor kTorchSeed42[] = {
#include "experiments/torch_seed42_init.inc"
};
}  // namespace

bool uses_torch_seed42_init(const StudyConfig& c) {
  return c.layers == 8 && c.d_model == 4 && c.batch == 2 && c.seed == 42 && c.sublayer == Sublayer::Linear &&
         c.norm == nn::NormKind::LayerNorm;
}

Init torch_seed42_init(const StudyConfig& config) {
  check(uses_torch_seed42_init(config), "torch_seed42_init: PyTorch's init is compiled in only for the gradient ",
        "study's default nets: 8 layers of relu(Linear(4, 4)), each with its own LayerNorm, d_model 4, batch 2, ",
        "seed 42");
  Init init;
  for (const TorchTensor& t : kTorchSeed42) {
    Tensor v = from_vector(std::vector<double>(t.values.begin(), t.values.end()), t.shape);
    if (std::string(t.name) == "x")
      init.x = v;
    else if (std::string(t.name) == "target")
      init.target = v;
    else
      init.params[t.name] = v;
  }
  if (config.final_norm) {
    init.params["final_norm.weight"] = ones({config.d_model});
    init.params["final_norm.bias"] = zeros({config.d_model});
  }
  return init;
}

std::vector<double> StudyResult::rel_post() const {
  std::vector<double> r;
  for (double g : grad_post) r.push_back(g / grad_post.back());
  return r;
}
std::vector<double> StudyResult::rel_pre() const {
  std::vector<double> r;
  for (double g : grad_pre) r.push_back(g / grad_pre.back());
  return r;
}

StudyResult run_study(const StudyConfig& config, const Init& init) {
  config.validate();
  StudyResult r;
  for (nn::NormPosition pos : {nn::NormPosition::Post, nn::NormPosition::Pre}) {
    DeepNet net(config, pos);
    load_params(net, init.params, "run_study");
    Tensor y = net.forward(init.x);
    Tensor d = y - init.target;
    Tensor loss = mean(d * d);  // F.mse_loss
    loss.backward();
    std::vector<double> g;
    for (int64_t i = 0; i < config.layers; ++i) g.push_back(net.layer_grad_norm(i));
    if (pos == nn::NormPosition::Post) {
      r.grad_post = g;
      r.loss_post = loss.item();
    } else {
      r.grad_pre = g;
      r.loss_pre = loss.item();
    }
  }
  return r;
}

Init with_final_norm(const StudyConfig& config, Init init) {
  auto norm = nn::make_norm(config.norm, config.d_model, kNormEps);
  for (const auto& [name, t] : norm->state_dict()) init.params.emplace("final_norm." + name, t.detach().clone());
  return init;
}

double fit_exponent(const std::vector<double>& x, const std::vector<double>& y) {
  check(x.size() == y.size() && x.size() >= 2, "fit_exponent: need at least two (x, y) pairs, got ", x.size(),
        " x and ", y.size(), " y");
  double mx = 0, my = 0;
  const double n = static_cast<double>(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    check(x[i] > 0 && y[i] > 0, "fit_exponent: values must be positive (a log-log fit)");
    mx += std::log(x[i]) / n;
    my += std::log(y[i]) / n;
  }
  double sxy = 0, sxx = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    sxy += (std::log(x[i]) - mx) * (std::log(y[i]) - my);
    sxx += (std::log(x[i]) - mx) * (std::log(x[i]) - mx);
  }
  check(sxx > 0, "fit_exponent: the x values are all equal");
  return sxy / sxx;
}

Quartiles quartiles(std::vector<double> v) {
  check(!v.empty(), "quartiles: no values");
  std::sort(v.begin(), v.end());
  auto at = [&](double q) {
    double pos = q * (v.size() - 1);
    size_t lo = static_cast<size_t>(std::floor(pos));
    size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (pos - lo) * (v[hi] - v[lo]);
  };
  return {at(0.25), at(0.5), at(0.75)};
}

std::string sweep_init_file(const StudyConfig& c) {
  return "sweep_d" + std::to_string(c.d_model) + "_L" + std::to_string(c.layers) + "_seed" + std::to_string(c.seed) +
         ".safetensors";
}

std::vector<SweepPoint> run_sweep(const StudyConfig& base, const std::vector<int64_t>& depths,
                                  const std::vector<int64_t>& d_models, int64_t seeds, const InitSource& source,
                                  const std::function<void(const StudyConfig&, const Init&)>& on_init) {
  check(seeds >= 1, "--seeds: must be at least 1, got ", seeds);
  std::vector<SweepPoint> out;
  for (int64_t d : d_models)
    for (int64_t depth : depths) {
      StudyConfig c = base;
      c.d_model = d;
      c.layers = depth;
      SweepPoint p;
      p.d_model = d;
      p.depth = depth;
      std::vector<double> post1, pre1, ratio;
      std::vector<std::vector<double>> rel_post(depth), rel_pre(depth), raw_post(depth), raw_pre(depth);
      for (int64_t s = 0; s < seeds; ++s) {
        c.seed = base.seed + static_cast<uint64_t>(s);
        const Init init = source(c);
        if (on_init) on_init(c, init);
        StudyResult r = run_study(c, init);
        p.seeds.push_back(c.seed);
        p.post.push_back(r.grad_post);
        p.pre.push_back(r.grad_pre);
        post1.push_back(r.grad_post[0]);
        pre1.push_back(r.grad_pre[0]);
        ratio.push_back(r.ratio_layer1());
        auto rp = r.rel_post(), rq = r.rel_pre();
        for (int64_t i = 0; i < depth; ++i) {
          rel_post[i].push_back(rp[i]);
          rel_pre[i].push_back(rq[i]);
          raw_post[i].push_back(r.grad_post[i]);
          raw_pre[i].push_back(r.grad_pre[i]);
        }
      }
      p.post_layer1 = quartiles(post1);
      p.pre_layer1 = quartiles(pre1);
      p.ratio = quartiles(ratio);
      p.post_layer1_ci = median_ci(post1);
      p.pre_layer1_ci = median_ci(pre1);
      p.ratio_ci = median_ci(ratio);
      for (int64_t i = 0; i < depth; ++i) {
        p.rel_post.push_back(median_ci(rel_post[i]));
        p.rel_pre.push_back(median_ci(rel_pre[i]));
        p.raw_post.push_back(median_ci(raw_post[i]));
        p.raw_pre.push_back(median_ci(raw_pre[i]));
        p.rel_post_median.push_back(p.rel_post.back().estimate);
        p.rel_pre_median.push_back(p.rel_pre.back().estimate);
        p.raw_post_median.push_back(p.raw_post.back().estimate);
        p.raw_pre_median.push_back(p.raw_pre.back().estimate);
      }
      out.push_back(std::move(p));
    }
  return out;
}

Interval exponent_ci(const std::vector<double>& x, const std::vector<std::vector<double>>& per_seed) {
  check(x.size() == per_seed.size(), "exponent_ci: ", x.size(), " x values and ", per_seed.size(), " samples");
  return bootstrap_ci(per_seed, [&x](const std::vector<std::vector<double>>& samples) {
    std::vector<double> y;
    for (const auto& s : samples) y.push_back(median(s));
    return fit_exponent(x, y);
  });
}

XiongProfile run_xiong(const XiongConfig& xc, int64_t depth) {
  check(depth >= 1, "--xiong-depths: each depth must be at least 1, got ", depth);
  check(xc.n_heads >= 1 && xc.d_model % xc.n_heads == 0, "xiong: heads ", xc.n_heads, " must divide d_model ",
        xc.d_model);
  XiongProfile prof;
  prof.depth = depth;
  manual_seed(xc.seed);
  auto block_config = [&](nn::NormPosition pos) {
    nn::BlockConfig b = nn::BlockConfig::teaching(xc.d_model, xc.n_heads);
    b.norm_position = pos;
    b.position = nn::PositionKind::None;
    b.n_layers = depth;
    return b;
  };
  // The Post-LN blocks draw the weights; the Pre-LN blocks copy them.
  std::vector<std::shared_ptr<nn::TransformerBlock>> post, pre;
  for (int64_t i = 0; i < depth; ++i) {
    post.push_back(std::make_shared<nn::TransformerBlock>(block_config(nn::NormPosition::Post)));
    if (!xc.xavier) continue;
    const std::vector<nn::Module*> sublayers{post.back()->attention().get(), post.back()->ffn().get()};
    for (nn::Module* sub : sublayers)
      for (auto& [name, p] : sub->named_parameters()) {
        if (p.dim() == 2)
          nn::init::xavier_uniform_(p);
        else
          nn::init::zeros_(p);
      }
  }
  for (int64_t i = 0; i < depth; ++i) {
    pre.push_back(std::make_shared<nn::TransformerBlock>(block_config(nn::NormPosition::Pre)));
    pre.back()->load_state_dict(post[i]->state_dict());
  }
  nn::Linear head(xc.d_model, xc.vocab);
  nn::LayerNorm final_norm(xc.d_model);
  Tensor x = randn({xc.batch, xc.seq_len, xc.d_model});
  Tensor labels = randint(0, xc.vocab, {xc.batch, xc.seq_len});
  for (bool is_post : {true, false}) {
    auto& blocks = is_post ? post : pre;
    head.zero_grad();
    Tensor h = x;
    for (auto& b : blocks) h = (*b)(h).out;
    if (!is_post) h = final_norm(h);
    Tensor loss = losses::cross_entropy(head(h), labels);
    loss.backward();
    auto& dst = is_post ? prof.post : prof.pre;
    for (auto& b : blocks) {
      const auto& ffn = static_cast<const nn::FFN&>(*b->ffn());
      dst.push_back(std::sqrt(weight_grad_sq(*ffn.down())));  // W^2, the paper's figure 3
    }
  }
  return prof;
}

}  // namespace xg::experiments
