#include "experiments/encdec.hpp"

#include <cmath>

#include "autograd/elementwise.hpp"
#include "autograd/matmul.hpp"
#include "autograd/random.hpp"
#include "io/safetensors.hpp"
#include "losses/cross_entropy.hpp"
#include "nn/init.hpp"

namespace xg::experiments {

namespace {

constexpr double kQKVGain = 0.70710678118654752;  // 1/sqrt(2): fairseq's MultiheadAttention init

// Xavier-uniform weights (q/k/v with gain 1/sqrt(2)), zero biases: fairseq's transformer.
void fairseq_init(nn::MultiHeadAttention& a) {
  for (const auto* l : {&a.w_q(), &a.w_k(), &a.w_v()}) {
    Tensor w = (*l)->weight();
    nn::init::xavier_uniform_(w, kQKVGain);
  }
  Tensor wo = a.w_o()->weight();
  nn::init::xavier_uniform_(wo);
  for (const auto* l : {&a.w_q(), &a.w_k(), &a.w_v(), &a.w_o()}) {
    Tensor b = (*l)->bias();
    if (b.defined()) nn::init::zeros_(b);
  }
}
void fairseq_init(nn::FFN& f) {
  for (const auto* l : {&f.up(), &f.down()}) {
    Tensor w = (*l)->weight();
    nn::init::xavier_uniform_(w);
    Tensor b = (*l)->bias();
    if (b.defined()) nn::init::zeros_(b);
  }
}

Tensor drop(const Tensor& x, double p) { return p > 0 ? dropout(x, p, true) : x; }

double w2_grad_norm(const nn::FFN& f) {
  Tensor g = f.down()->weight().grad();
  if (!g.defined()) return 0;
  double s = 0;
  for (double v : g.to_vector()) s += v * v;
  return std::sqrt(s);
}

}  // namespace

EncoderLayer::EncoderLayer(int64_t d, int64_t n_heads) {
  self_attn_ = register_module("self_attn", std::make_shared<nn::MultiHeadAttention>(d, n_heads));
  ffn_ = register_module("ffn", std::make_shared<nn::FFN>(d, 4 * d, nn::Activation::ReLU, 0.0, true, nn::FFNNaming::FC));
  norm1_ = register_module("norm1", std::make_shared<nn::LayerNorm>(d));
  norm2_ = register_module("norm2", std::make_shared<nn::LayerNorm>(d));
  fairseq_init(*self_attn_);
  fairseq_init(*ffn_);
}

Tensor EncoderLayer::forward(const Tensor& h0, bool pre, double p) const {
  Tensor h = h0;
  if (pre) {
    h = h + drop((*self_attn_)((*norm1_)(h)), p);
    return h + drop((*ffn_)((*norm2_)(h)), p);
  }
  h = (*norm1_)(h + drop((*self_attn_)(h), p));
  return (*norm2_)(h + drop((*ffn_)(h), p));
}

DecoderLayer::DecoderLayer(int64_t d, int64_t n_heads) {
  self_attn_ = register_module("self_attn", std::make_shared<nn::MultiHeadAttention>(d, n_heads));
  cross_attn_ = register_module("cross_attn", std::make_shared<nn::MultiHeadAttention>(d, n_heads));
  ffn_ = register_module("ffn", std::make_shared<nn::FFN>(d, 4 * d, nn::Activation::ReLU, 0.0, true, nn::FFNNaming::FC));
  norm1_ = register_module("norm1", std::make_shared<nn::LayerNorm>(d));
  norm2_ = register_module("norm2", std::make_shared<nn::LayerNorm>(d));
  norm3_ = register_module("norm3", std::make_shared<nn::LayerNorm>(d));
  fairseq_init(*self_attn_);
  fairseq_init(*cross_attn_);
  fairseq_init(*ffn_);
}

Tensor DecoderLayer::forward(const Tensor& h0, const Tensor& memory, bool pre, double p) const {
  const AttnMask causal = AttnMask::causal_mask();
  Tensor h = h0;
  if (pre) {
    h = h + drop((*self_attn_)((*norm1_)(h), causal), p);
    h = h + drop((*cross_attn_)((*norm2_)(h), memory), p);
    return h + drop((*ffn_)((*norm3_)(h)), p);
  }
  h = (*norm1_)(h + drop((*self_attn_)(h, causal), p));
  h = (*norm2_)(h + drop((*cross_attn_)(h, memory), p));
  return (*norm3_)(h + drop((*ffn_)(h), p));
}

EncoderDecoder::EncoderDecoder(const EncDecConfig& c, int64_t enc_layers, int64_t dec_layers) : config_(c) {
  check(enc_layers >= 1 && dec_layers >= 1, "xiong: encoder and decoder need at least 1 layer each, got ",
        enc_layers, " and ", dec_layers);
  check(c.n_heads >= 1 && c.d_model % c.n_heads == 0, "xiong: heads ", c.n_heads, " must divide d_model ", c.d_model);
  embed_ = register_module("embed", std::make_shared<nn::Embedding>(c.vocab, c.d_model));
  Tensor e = embed_->weight();
  nn::init::normal_(e, 0.0, 1.0 / std::sqrt(static_cast<double>(c.d_model)));  // fairseq's Embedding()
  pos_ = register_module("pos", std::make_shared<nn::SinusoidalPositionalEncoding>(
                                    c.d_model, std::max(c.src_len, c.tgt_len)));
  enc_ = register_module("encoder", std::make_shared<nn::ModuleList<EncoderLayer>>());
  dec_ = register_module("decoder", std::make_shared<nn::ModuleList<DecoderLayer>>());
  for (int64_t i = 0; i < enc_layers; ++i) enc_->push_back(std::make_shared<EncoderLayer>(c.d_model, c.n_heads));
  for (int64_t i = 0; i < dec_layers; ++i) dec_->push_back(std::make_shared<DecoderLayer>(c.d_model, c.n_heads));
  enc_norm_ = register_module("encoder_norm", std::make_shared<nn::LayerNorm>(c.d_model));
  dec_norm_ = register_module("decoder_norm", std::make_shared<nn::LayerNorm>(c.d_model));
}

Tensor EncoderDecoder::forward(const Tensor& src, const Tensor& tgt, bool pre, bool train) const {
  const double p = train ? config_.dropout : 0.0;
  const double scale = std::sqrt(static_cast<double>(config_.d_model));
  Tensor h = drop((*pos_)((*embed_)(src) * scale), p);
  for (std::size_t i = 0; i < enc_->size(); ++i) h = (*enc_)[i]->forward(h, pre, p);
  const Tensor memory = pre ? (*enc_norm_)(h) : h;
  Tensor y = drop((*pos_)((*embed_)(tgt) * scale), p);
  for (std::size_t i = 0; i < dec_->size(); ++i) y = (*dec_)[i]->forward(y, memory, pre, p);
  if (pre) y = (*dec_norm_)(y);
  return linear(y, embed_->weight());  // tied output layer: y E^T
}

std::vector<double> EncoderDecoder::enc_w2_grad() const {
  std::vector<double> g;
  for (std::size_t i = 0; i < enc_->size(); ++i) g.push_back(w2_grad_norm((*enc_)[i]->ffn()));
  return g;
}
std::vector<double> EncoderDecoder::dec_w2_grad() const {
  std::vector<double> g;
  for (std::size_t i = 0; i < dec_->size(); ++i) g.push_back(w2_grad_norm((*dec_)[i]->ffn()));
  return g;
}

namespace {

// Batch k of a [batches, batch, len] int64 tensor, as its own [batch, len] tensor.
Tensor batch_of(const Tensor& all, int64_t k) {
  const int64_t B = all.size(1), T = all.size(2);
  const int64_t* p = all.data<int64_t>() + k * B * T;
  return from_vector(std::vector<int64_t>(p, p + B * T), {B, T});
}

}  // namespace

EncDecState make_encdec_state(const EncDecConfig& c, int64_t enc_layers, int64_t dec_layers) {
  check(c.batches >= 1, "--xiong-batches: must be at least 1, got ", c.batches);
  manual_seed(c.seed);
  EncoderDecoder model(c, enc_layers, dec_layers);
  EncDecState s;
  s.enc_layers = enc_layers;
  s.dec_layers = dec_layers;
  for (const auto& [name, t] : model.state_dict()) s.params[name] = t.detach().clone();
  // Random source tokens, target-side inputs and labels (at initialisation nothing has been
  // learned, so labels independent of the inputs give the same gradient statistics).
  Generator data(c.seed + 1000);
  std::vector<int64_t> src, tgt, labels;
  auto append = [&](std::vector<int64_t>& dst, int64_t len) {
    Tensor t = randint(0, c.vocab, {c.batch, len}, &data);
    dst.insert(dst.end(), t.data<int64_t>(), t.data<int64_t>() + t.numel());
  };
  for (int64_t k = 0; k < c.batches; ++k) {
    append(src, c.src_len);
    append(tgt, c.tgt_len);
    append(labels, c.tgt_len);
  }
  s.src = from_vector(src, {c.batches, c.batch, c.src_len});
  s.tgt = from_vector(tgt, {c.batches, c.batch, c.tgt_len});
  s.labels = from_vector(labels, {c.batches, c.batch, c.tgt_len});
  return s;
}

std::string encdec_state_file(int64_t layers, uint64_t seed) {
  return "xiong_L" + std::to_string(layers) + "_seed" + std::to_string(seed) + ".safetensors";
}

void save_encdec_state(const std::string& path, const EncDecState& s, const EncDecConfig& c) {
  TensorMap out = s.params;
  out["src"] = s.src;
  out["tgt"] = s.tgt;
  out["labels"] = s.labels;
  io::save_safetensors(path, out,
                       {{"encoder_layers", std::to_string(s.enc_layers)},
                        {"decoder_layers", std::to_string(s.dec_layers)},
                        {"seed", std::to_string(c.seed)},
                        {"d_model", std::to_string(c.d_model)},
                        {"heads", std::to_string(c.n_heads)},
                        {"vocab", std::to_string(c.vocab)},
                        {"label_smoothing", str_cat(c.label_smoothing)}});
}

EncDecState load_encdec_state(const std::string& path, const EncDecConfig& c, int64_t enc_layers,
                              int64_t dec_layers) {
  TensorMap file = io::load_safetensors(path);
  auto get = [&](const std::string& name) {
    auto it = file.find(name);
    check(it != file.end(), "--xiong-init ", path, ": no tensor '", name, "'");
    return it->second;
  };
  EncoderDecoder model(c, enc_layers, dec_layers);  // for the names and shapes only
  EncDecState s;
  s.enc_layers = enc_layers;
  s.dec_layers = dec_layers;
  for (const auto& [name, t] : model.state_dict()) {
    Tensor v = get(name);
    check(v.shape() == t.shape(), "--xiong-init ", path, ": tensor '", name, "' has shape ", shape_str(v.shape()),
          ", the model needs ", shape_str(t.shape()));
    s.params[name] = v.to(t.dtype());
  }
  auto tokens = [&](const char* name, int64_t len) {
    Tensor v = get(name);
    check(v.dim() == 3 && v.size(0) >= c.batches && v.size(1) == c.batch && v.size(2) == len, "--xiong-init ", path,
          ": tensor '", name, "' has shape ", shape_str(v.shape()), ", need [", c.batches, " or more batches, ",
          c.batch, ", ", len, "]");
    check(v.dtype() == kInt64, "--xiong-init ", path, ": tensor '", name, "' must hold int64 token ids");
    for (int64_t i = 0; i < v.numel(); ++i) {
      const int64_t id = v.data<int64_t>()[i];
      check(id >= 0 && id < c.vocab, "--xiong-init ", path, ": tensor '", name, "' holds token ", id,
            ", outside the vocabulary [0, ", c.vocab, ")");
    }
    return v;
  };
  s.src = tokens("src", c.src_len);
  s.tgt = tokens("tgt", c.tgt_len);
  s.labels = tokens("labels", c.tgt_len);
  return s;
}

EncDecProfile run_encdec(const EncDecConfig& c, int64_t enc_layers, int64_t dec_layers) {
  return run_encdec(c, make_encdec_state(c, enc_layers, dec_layers));
}

EncDecProfile run_encdec(const EncDecConfig& c, const EncDecState& state) {
  check(c.batches >= 1, "--xiong-batches: must be at least 1, got ", c.batches);
  check(state.src.defined() && state.src.size(0) >= c.batches, "run_encdec: the state has fewer token batches than ",
        c.batches);
  EncoderDecoder model(c, state.enc_layers, state.dec_layers);
  model.load_state_dict(state.params, /*strict=*/true);
  EncDecProfile prof;
  prof.enc_layers = state.enc_layers;
  prof.dec_layers = state.dec_layers;
  for (bool pre : {false, true}) {
    manual_seed(c.seed + 2000);  // the same dropout masks for Post-LN and Pre-LN
    model.zero_grad();
    for (int64_t k = 0; k < c.batches; ++k) {
      Tensor logits = model.forward(batch_of(state.src, k), batch_of(state.tgt, k), pre, c.dropout > 0);
      Tensor loss =
          losses::cross_entropy(logits, batch_of(state.labels, k), -100, losses::Reduction::Mean, c.label_smoothing);
      loss.backward();  // gradients accumulate over the batches: their sum
      if (k == 0) {
        (pre ? prof.enc_pre : prof.enc_post) = model.enc_w2_grad();
        (pre ? prof.dec_pre : prof.dec_post) = model.dec_w2_grad();
      }
    }
    auto mean_of = [&](std::vector<double> v) {
      for (double& x : v) x /= static_cast<double>(c.batches);  // norm of the mean = norm of the sum / K
      return v;
    };
    (pre ? prof.enc_pre_exp : prof.enc_post_exp) = mean_of(model.enc_w2_grad());
    (pre ? prof.dec_pre_exp : prof.dec_post_exp) = mean_of(model.dec_w2_grad());
  }
  return prof;
}

}  // namespace xg::experiments
