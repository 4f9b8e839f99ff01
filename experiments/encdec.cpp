#include "experiments/encdec.hpp"

#include <cmath>

#include "autograd/elementwise.hpp"
#include "autograd/matmul.hpp"
#include "autograd/random.hpp"
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

EncDecProfile run_encdec(const EncDecConfig& c, int64_t enc_layers, int64_t dec_layers) {
  check(c.batches >= 1, "--xiong-batches: must be at least 1, got ", c.batches);
  manual_seed(c.seed);
  EncoderDecoder model(c, enc_layers, dec_layers);
  EncDecProfile prof;
  prof.enc_layers = enc_layers;
  prof.dec_layers = dec_layers;
  for (bool pre : {false, true}) {
    Generator data(c.seed + 1000);  // the same token batches for Post-LN and Pre-LN
    manual_seed(c.seed + 2000);     // and the same dropout masks
    model.zero_grad();
    for (int64_t k = 0; k < c.batches; ++k) {
      // Random source tokens, target-side inputs and labels (at initialisation nothing has been
      // learned, so labels independent of the inputs give the same gradient statistics).
      Tensor src = randint(0, c.vocab, {c.batch, c.src_len}, &data);
      Tensor tgt = randint(0, c.vocab, {c.batch, c.tgt_len}, &data);
      Tensor labels = randint(0, c.vocab, {c.batch, c.tgt_len}, &data);
      Tensor logits = model.forward(src, tgt, pre, c.dropout > 0);
      Tensor loss = losses::cross_entropy(logits, labels, -100, losses::Reduction::Mean, c.label_smoothing);
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
