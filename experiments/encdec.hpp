// Xiong et al. (2020), "On Layer Normalization in the Transformer Architecture", figure 3 and
// Theorem 1, on the architecture they measured: an encoder-decoder translation Transformer at
// initialisation (part 3, --xiong). Post-LN and Pre-LN share every weight; each layer's FFN W2
// (fc2.weight) gradient norm is measured per stack, for one batch and for the expected loss (the
// gradient averaged over many batches, then its norm).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nn/attention.hpp"
#include "nn/ffn.hpp"
#include "nn/norm.hpp"
#include "nn/position.hpp"

namespace xg::experiments {

struct EncDecConfig {
  int64_t d_model = 64;
  int64_t n_heads = 4;
  int64_t batch = 4;
  int64_t src_len = 16, tgt_len = 16;
  int64_t vocab = 64;               // one vocabulary, shared by source, target and output (tied)
  double dropout = 0.0;             // fairseq's 0.1 on embeddings and every sublayer's output when on
  double label_smoothing = 0.1;     // the paper's (fairseq's label_smoothed_cross_entropy)
  int64_t batches = 32;             // batches averaged for the expected-loss gradient
  uint64_t seed = 42;
};

// One encoder layer: self-attention and a ReLU FFN (d_ff 4 d), norm1/norm2.
class EncoderLayer : public nn::Module {
 public:
  EncoderLayer(int64_t d_model, int64_t n_heads);
  // Post-LN: h = LN1(h + sa(h)), h = LN2(h + ffn(h)); Pre-LN: h = h + sa(LN1 h), h = h + ffn(LN2 h).
  Tensor forward(const Tensor& h, bool pre, double dropout) const;
  const nn::FFN& ffn() const { return *ffn_; }
  std::string name() const override { return "EncoderLayer"; }

 private:
  std::shared_ptr<nn::MultiHeadAttention> self_attn_;
  std::shared_ptr<nn::FFN> ffn_;
  std::shared_ptr<nn::LayerNorm> norm1_, norm2_;
};

// One decoder layer: causal self-attention, cross-attention to the encoder's output, FFN.
class DecoderLayer : public nn::Module {
 public:
  DecoderLayer(int64_t d_model, int64_t n_heads);
  // Post-LN: LN1(h + sa(h)), LN2(h + ca(h, memory)), LN3(h + ffn(h)); Pre-LN: the norms move
  // onto the sublayer inputs (the memory is already normalised by the encoder's final norm).
  Tensor forward(const Tensor& h, const Tensor& memory, bool pre, double dropout) const;
  const nn::FFN& ffn() const { return *ffn_; }
  std::string name() const override { return "DecoderLayer"; }

 private:
  std::shared_ptr<nn::MultiHeadAttention> self_attn_, cross_attn_;
  std::shared_ptr<nn::FFN> ffn_;
  std::shared_ptr<nn::LayerNorm> norm1_, norm2_, norm3_;
};

// The translation model: tied embedding (scaled by sqrt(d), plus sinusoidal positions), the two
// stacks, final norms on both for Pre-LN, output logits = h E^T. Initialised as fairseq's
// transformer (the paper's code): embeddings N(0, d^-1/2), Xavier-uniform weight matrices, q/k/v
// with gain 1/sqrt(2), zero biases.
// NOTE: fairseq leaves the q/k/v biases at nn.Linear's default; they are zero here (their
// contribution at init is tiny next to the weights, and it keeps Post and Pre on one init rule).
class EncoderDecoder : public nn::Module {
 public:
  EncoderDecoder(const EncDecConfig& config, int64_t enc_layers, int64_t dec_layers);
  Tensor forward(const Tensor& src, const Tensor& tgt, bool pre, bool train) const;  // logits [B, T, V]
  // FFN W2 gradient norm of each layer, bottom first.
  std::vector<double> enc_w2_grad() const;
  std::vector<double> dec_w2_grad() const;
  std::string name() const override { return "EncoderDecoder"; }

 private:
  EncDecConfig config_;
  std::shared_ptr<nn::Embedding> embed_;
  std::shared_ptr<nn::SinusoidalPositionalEncoding> pos_;
  std::shared_ptr<nn::ModuleList<EncoderLayer>> enc_;
  std::shared_ptr<nn::ModuleList<DecoderLayer>> dec_;
  std::shared_ptr<nn::LayerNorm> enc_norm_, dec_norm_;
};

struct EncDecProfile {
  int64_t enc_layers = 0, dec_layers = 0;
  // Per layer, bottom first: FFN W2 gradient norm of one batch, and of the mean gradient over
  // config.batches batches (the expected loss's gradient).
  std::vector<double> enc_post, enc_pre, dec_post, dec_pre;
  std::vector<double> enc_post_exp, enc_pre_exp, dec_post_exp, dec_pre_exp;
};
// What a run starts from: the model's initial parameters under its state_dict names
// (embed.weight, encoder.{i}.self_attn.w_q.weight, decoder.{i}.cross_attn.w_o.bias,
// decoder.{i}.ffn.fc2.weight, encoder_norm.weight, ...: experiments/README.md lists them with
// PyTorch's nn.Transformer equivalents) and the token batches, int64 [batches, batch, len] each.
struct EncDecState {
  int64_t enc_layers = 0, dec_layers = 0;
  TensorMap params;
  Tensor src, tgt, labels;
};
// Draws a state: the model from config.seed (fairseq's init), the batches from a generator
// seeded config.seed + 1000 (per batch: source, target-side inputs, labels).
EncDecState make_encdec_state(const EncDecConfig& config, int64_t enc_layers, int64_t dec_layers);
// `--xiong-save-init`: the parameters and the batches "src", "tgt", "labels" in one
// safetensors file (float32 and int64), with metadata naming the layers and the seed.
void save_encdec_state(const std::string& path, const EncDecState& state, const EncDecConfig& config);
// `--xiong-init`: reads what save_encdec_state wrote (or a file made the same way elsewhere, by
// PyTorch say) for a model of that config and depth; a missing tensor, a shape that does not fit
// or fewer batches than config.batches is an error naming the file and the tensor.
EncDecState load_encdec_state(const std::string& path, const EncDecConfig& config, int64_t enc_layers,
                              int64_t dec_layers);
// The file of one depth and seed in a --xiong-save-init folder: "xiong_L6_seed42.safetensors".
std::string encdec_state_file(int64_t layers, uint64_t seed);

// Measures both norm positions from one state (the dropout masks, when config.dropout > 0, come
// from xgrad's generator seeded config.seed + 2000: the same for Post-LN and Pre-LN).
EncDecProfile run_encdec(const EncDecConfig& config, const EncDecState& state);
// The same from a state drawn by make_encdec_state.
EncDecProfile run_encdec(const EncDecConfig& config, int64_t enc_layers, int64_t dec_layers);

}  // namespace xg::experiments
