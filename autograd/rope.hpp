// Rotary position embedding (RoPE) as one fused op: rotates each pair of a head's features
// by position * frequency, in LLaMA's interleaved layout or the rotate-half layout.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "autograd/tensor.hpp"

namespace xg {

// Which features form a rotated pair (i = 0 .. hs/2 - 1):
//   Interleaved: (x[2i], x[2i+1])   -- RoFormer's pairs (Su et al.), Meta LLaMA's view_as_complex
//   RotateHalf:  (x[i], x[i + hs/2]) -- x * cos + rotate_half(x) * sin (GPT-NeoX, Hugging Face)
enum class RopeLayout { Interleaved, RotateHalf };

// x: [..., T, hs], cos/sin: [max_T, hs/2] (x's dtype) -> [..., T, hs]. Position t of x uses
// table row offset + t (cached decoding passes the number of tokens already seen). Each pair
// (a, b) becomes (a cos - b sin, b cos + a sin).
//   =>   dx = the inverse rotation of g;  dcos, dsin summed over the rows of each position
//        (only when the tables require grad, which rope_tables' do not)
Tensor apply_rope(const Tensor& x, const Tensor& cos, const Tensor& sin, int64_t offset, RopeLayout layout);

// x: [B, T, H, hs], heads at each position (a packed q/k/v projection reshaped, positions at
// dim 1) -> the same shape: heads 0 .. rotated_heads - 1 of position t rotated as apply_rope
// rotates them (table row offset + t), the others copied (the values packed beside queries
// and keys; see scaled_dot_product_attention_packed).
Tensor apply_rope_packed(const Tensor& x, const Tensor& cos, const Tensor& sin, int64_t offset, RopeLayout layout,
                         int64_t rotated_heads);

// A rescaling of RoPE's frequencies for a longer context than the model was trained on.
//   None:   freqs[i] = 1 / base^(2i / head_dim)
//   Llama3: Llama 3.1's scaling (transformers' _compute_llama3_parameters): with wavelen =
//           2 pi / freq, L = original_max_seq_len, low = L / low_freq_factor and
//           high = L / high_freq_factor, a frequency is kept when wavelen < high, divided by
//           factor when wavelen > low, and in between mixed as (1 - s) freq / factor + s freq
//           with s = (L / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor).
//   Linear: freqs[i] / factor (position interpolation; transformers' "linear").
//   Dynamic: NTK-aware dynamic scaling (transformers' _compute_dynamic_ntk_parameters), which
//           changes the base only for sequences longer than original_max_seq_len: the tables
//           (at most max_seq_len = original_max_seq_len rows) hold the unscaled frequencies.
//   Yarn:   YaRN (transformers' _compute_yarn_parameters): with L = original_max_seq_len and
//           d(r) = head_dim ln(L / (2 pi r)) / (2 ln base), low = d(beta_fast), high =
//           d(beta_slow) (floored / ceiled when truncate, then kept in [0, head_dim - 1]), the
//           ramp s_i = clamp((i - low) / (high - low), 0, 1) mixes freq / factor (weight s_i) and
//           freq (1 - s_i); cos and sin are multiplied by attention_factor.
enum class RopeScalingKind { None, Llama3, Linear, Dynamic, Yarn };
struct RopeScaling {
  RopeScalingKind kind = RopeScalingKind::None;
  double factor = 8.0;           // the Llama3 defaults are Llama 3.1's
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_seq_len = 8192;
  double beta_fast = 32.0, beta_slow = 1.0;  // Yarn's
  double attention_factor = 1.0;             // Yarn's: times cos and sin (resolved from mscale)
  bool truncate = true;                      // Yarn's: integer correction bounds
  bool active() const { return kind != RopeScalingKind::None; }
  // Throws xg::Error naming `who` and the field (factor > 0; Llama3: 0 < low < high, L > 0) when active.
  void validate(const std::string& who) const;
};

// The head_dim / 2 frequencies, in float64: 1 / base^(2i / head_dim), then `scaling`'s rescaling.
std::vector<double> rope_frequencies(int64_t head_dim, double base = 10000.0, const RopeScaling& scaling = {});

// The tables of both layouts: angles = outer(t, freqs) for t = 0 .. max_seq_len - 1 and the
// frequencies of rope_frequencies; returns (cos(angles), sin(angles)) (times Yarn's
// attention_factor), each
// [max_seq_len, head_dim/2], computed in float64 and rounded once to `dtype`.
// NOTE: transformers computes the frequencies and angles in float32; these differ from its
// tables by float32 rounding (below 1e-5 over a few thousand positions).
std::pair<Tensor, Tensor> rope_tables(int64_t head_dim, int64_t max_seq_len, double base = 10000.0,
                                      Dtype dtype = kFloat32, const RopeScaling& scaling = {});

const char* rope_layout_name(RopeLayout layout);  // "interleaved" / "rotate_half"

}  // namespace xg
