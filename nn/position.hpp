// Positional encodings: sinusoidal (added to the input, "Attention Is All You Need"),
// learned (GPT-2's position table) and rotary (RoPE, applied to Q and K inside attention).
#pragma once

#include "autograd/rope.hpp"
#include "nn/linear.hpp"
#include "nn/module.hpp"

namespace xg::nn {

// x + pe[offset : offset + T] with pe[t, 2i] = sin(t / 10000^(2i/d)), pe[t, 2i+1] = cos(...),
// then dropout. pe is a persistent buffer "pe" of [max_len, d_model], the table that the usual
// hand-written get_sinusoidal_encoding(max_len, d_model) returns.
class SinusoidalPositionalEncoding : public Module {
 public:
  SinusoidalPositionalEncoding(int64_t d_model, int64_t max_len = 5000, double dropout = 0.0,
                               Dtype dtype = kFloat32);
  // x: [..., T, d_model] -> [..., T, d_model]; positions offset .. offset + T - 1.
  Tensor forward(const Tensor& x, int64_t offset = 0) const;
  Tensor operator()(const Tensor& x, int64_t offset = 0) const { return forward(x, offset); }
  // x: [B, T, d_model], positions: int64 [B, T] -> x + pe[positions] (packed rows, whose
  // positions restart where each sequence starts), then dropout.
  Tensor forward_at(const Tensor& x, const Tensor& positions) const;
  Tensor pe() const { return pe_; }
  int64_t d_model() const { return d_model_; }
  int64_t max_len() const { return max_len_; }
  std::string name() const override { return "SinusoidalPositionalEncoding"; }
  std::string extra_repr() const override;

 protected:
  void rebuild_buffers(Dtype dtype) override;

 private:
  int64_t d_model_, max_len_;
  Tensor pe_;
  std::shared_ptr<Dropout> dropout_;
};

// x + weight[offset : offset + T]: a learned [max_len, d_model] table (an nn.Embedding of
// positions, parameter "weight", init N(0, 1) as nn.Embedding).
class LearnedPositionalEmbedding : public Module {
 public:
  LearnedPositionalEmbedding(int64_t max_len, int64_t d_model, Dtype dtype = kFloat32);
  // x: [..., T, d_model] -> [..., T, d_model]
  Tensor forward(const Tensor& x, int64_t offset = 0) const;
  Tensor operator()(const Tensor& x, int64_t offset = 0) const { return forward(x, offset); }
  // x: [B, T, d_model], positions: int64 [B, T] -> x + weight[positions] (packed rows).
  Tensor forward_at(const Tensor& x, const Tensor& positions) const;
  Tensor weight() const { return weight_; }
  int64_t d_model() const { return d_model_; }
  int64_t max_len() const { return max_len_; }
  std::string name() const override { return "LearnedPositionalEmbedding"; }
  std::string extra_repr() const override;

 private:
  int64_t max_len_, d_model_;
  Tensor weight_;
};

// Rotates the features of Q or K by position (apply_rope). cos/sin are non-persistent
// buffers of [max_seq_len, head_dim/2] (rope_tables, with the frequencies rescaled by
// `scaling` when it is active), so they never enter a state dict.
class RotaryEmbedding : public Module {
 public:
  RotaryEmbedding(int64_t head_dim, int64_t max_seq_len = 4096, double base = 10000.0,
                  RopeLayout layout = RopeLayout::RotateHalf, Dtype dtype = kFloat32,
                  const RopeScaling& scaling = {});
  // x: [..., T, head_dim] (e.g. [B, H, T, hs]) -> same shape; positions offset .. offset + T - 1.
  Tensor forward(const Tensor& x, int64_t offset = 0) const;
  Tensor operator()(const Tensor& x, int64_t offset = 0) const { return forward(x, offset); }
  // x: [B, T, H, head_dim], heads at each position (a packed q/k/v projection) -> same shape,
  // heads 0 .. rotated_heads - 1 rotated at positions offset .. offset + T - 1, the rest copied.
  Tensor forward_packed(const Tensor& x, int64_t offset, int64_t rotated_heads) const;
  Tensor cos() const { return cos_; }
  Tensor sin() const { return sin_; }
  int64_t head_dim() const { return head_dim_; }
  int64_t max_seq_len() const { return max_seq_len_; }
  double base() const { return base_; }
  RopeLayout layout() const { return layout_; }
  const RopeScaling& scaling() const { return scaling_; }
  std::string name() const override { return "RotaryEmbedding"; }
  std::string extra_repr() const override;

 protected:
  void rebuild_buffers(Dtype dtype) override;

 private:
  int64_t head_dim_, max_seq_len_;
  double base_;
  RopeLayout layout_;
  RopeScaling scaling_;
  Tensor cos_, sin_;
};

}  // namespace xg::nn
