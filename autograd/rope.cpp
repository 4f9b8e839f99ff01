// Rotary position embedding: one pass over contiguous rows of x viewed as [rows, hs] (row r
// at position r % T), rotating each feature pair by the table angles; the backward is the
// same kernel with the angle negated, and needs only the tables (kept as the op's inputs).
#include "autograd/rope.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "autograd/detail/dispatch.hpp"
#include "autograd/graph.hpp"
#include "autograd/detail/op_util.hpp"
#include "autograd/detail/kernels.hpp"

namespace xg {

using Grads = std::vector<Tensor>;

namespace {


// The pair (a, b) = (x[ia], x[ib]) of feature pair i.
inline int64_t first_of(RopeLayout layout, int64_t i) { return layout == RopeLayout::Interleaved ? 2 * i : i; }
inline int64_t second_of(RopeLayout layout, int64_t i, int64_t half) {
  return layout == RopeLayout::Interleaved ? 2 * i + 1 : i + half;
}

// Which rows a position's rotation applies to: H consecutive rows (heads) per position, the
// first `rotated` of them rotated and the rest copied; positions at dim t_dim of the tensor.
// [..., T, hs]: H = rotated = 1, t_dim -2; [B, T, H, hs]: t_dim -3.
struct RopeRows {
  int64_t H = 1, rotated = 1, t_dim = -2;
};

// x: [rows, hs] (row r at table row offset + (r / H) % T), cos/sin: [max_T, hs/2] -> out: [rows, hs]
//   forward:  (a, b) -> (a c - b s, b c + a s)     (rotation by +theta)
//   Inverse:  (a, b) -> (a c + b s, b c - a s)     (rotation by -theta: the backward)
template <bool Inverse, class T>
void rope_kernel(const T* x, const T* cos, const T* sin, T* out, int64_t rows, int64_t T_, int64_t hs,
                 int64_t offset, RopeLayout layout, RopeRows rr) {
  const int64_t half = hs / 2;
  const bool interleaved = layout == RopeLayout::Interleaved;
#pragma omp parallel for schedule(static) if (rows * hs >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * hs;
    T* o = out + r * hs;
    if (r % rr.H >= rr.rotated) {
      std::copy(xr, xr + hs, o);
      continue;
    }
    const int64_t pos = offset + (r / rr.H) % T_;
    const T* c = cos + pos * half;
    const T* s = sin + pos * half;
    if (interleaved) {
#pragma omp simd
      for (int64_t i = 0; i < half; ++i) {
        const T a = xr[2 * i], b = xr[2 * i + 1];
        const T si = Inverse ? -s[i] : s[i];
        o[2 * i] = a * c[i] - b * si;
        o[2 * i + 1] = b * c[i] + a * si;
      }
    } else {
      const T* xb = xr + half;
      T* ob = o + half;
#pragma omp simd
      for (int64_t i = 0; i < half; ++i) {
        const T a = xr[i], b = xb[i];
        const T si = Inverse ? -s[i] : s[i];
        o[i] = a * c[i] - b * si;
        ob[i] = b * c[i] + a * si;
      }
    }
  }
}

// Gradients of the tables: for each position p = offset + t and pair i, summed over the rows
// at that position,  dcos[p, i] = g_a a + g_b b,   dsin[p, i] = g_b a - g_a b.
// Rows of the tables outside offset .. offset + T - 1 get zero.
template <class T>
void rope_table_grads(const T* x, const T* g, T* dcos, T* dsin, int64_t rows, int64_t T_, int64_t hs,
                      int64_t offset, RopeLayout layout, RopeRows rr) {
  const int64_t half = hs / 2;
  const int64_t N = rows / (T_ * rr.H);  // leading rows of every position (the batch)
#pragma omp parallel for schedule(static) if (rows * hs >= kParallelMin)
  for (int64_t t = 0; t < T_; ++t) {
    std::vector<double> ac(static_cast<std::size_t>(half), 0.0), as(static_cast<std::size_t>(half), 0.0);
    for (int64_t row = 0; row < N * rr.rotated; ++row) {
      const int64_t r = ((row / rr.rotated) * T_ + t) * rr.H + row % rr.rotated;
      const T* xr = x + r * hs;
      const T* gr = g + r * hs;
      for (int64_t i = 0; i < half; ++i) {
        const int64_t ia = first_of(layout, i), ib = second_of(layout, i, half);
        ac[static_cast<std::size_t>(i)] += static_cast<double>(gr[ia]) * xr[ia] + static_cast<double>(gr[ib]) * xr[ib];
        as[static_cast<std::size_t>(i)] += static_cast<double>(gr[ib]) * xr[ia] - static_cast<double>(gr[ia]) * xr[ib];
      }
    }
    T* dc = dcos + (offset + t) * half;
    T* ds = dsin + (offset + t) * half;
    for (int64_t i = 0; i < half; ++i) {
      dc[i] = static_cast<T>(ac[static_cast<std::size_t>(i)]);
      ds[i] = static_cast<T>(as[static_cast<std::size_t>(i)]);
    }
  }
}

// Runs the (inverse) rotation of `src` ([..., T, hs], or [B, T, H, hs]: rr) with the tables
// into a new tensor.
Tensor rotate(const Tensor& src, const Tensor& cos, const Tensor& sin, int64_t offset, RopeLayout layout,
              bool inverse, RopeRows rr) {
  Tensor out = empty(src.shape(), src.dtype());
  const int64_t hs = src.size(-1), T_ = src.size(rr.t_dim);
  const int64_t rows = hs == 0 ? 0 : src.numel() / hs;
  if (rows == 0) return out;
  dispatch_float(src.dtype(), "apply_rope", [&](auto tag) {
    using T = decltype(tag);
    if (inverse)
      rope_kernel<true>(src.data<T>(), cos.data<T>(), sin.data<T>(), out.data<T>(), rows, T_, hs, offset, layout, rr);
    else
      rope_kernel<false>(src.data<T>(), cos.data<T>(), sin.data<T>(), out.data<T>(), rows, T_, hs, offset, layout, rr);
  });
  return out;
}

// Checks x ([..., T, hs] with T at dim t_dim), the tables and the offset for `op`.
void check_rope(const Tensor& x, const Tensor& cos, const Tensor& sin, int64_t offset, int64_t t_dim, const char* op) {
  check(is_floating(x.dtype()), op, ": expected a float32 or float64 x, got ", dtype_name(x.dtype()));
  const int64_t hs = x.size(-1), T_ = x.size(t_dim);
  check(hs > 0 && hs % 2 == 0, op, ": head size hs=", hs, " must be a positive even number (x is ", shape_str(x.shape()),
        ", features are rotated in pairs)");
  const int64_t half = hs / 2;
  check(cos.dim() == 2 && cos.size(1) == half && sin.shape() == cos.shape(), op,
        ": cos and sin must both be [max_T, hs/2] = [max_T, ", half, "] tables for x ", shape_str(x.shape()),
        ", got cos ", shape_str(cos.shape()), " and sin ", shape_str(sin.shape()));
  check(cos.dtype() == x.dtype() && sin.dtype() == x.dtype(), op, ": dtype mismatch: x is ", dtype_name(x.dtype()),
        ", cos is ", dtype_name(cos.dtype()), ", sin is ", dtype_name(sin.dtype()), " (convert the tables with .to())");
  check(offset >= 0, op, ": offset must be non-negative, got ", offset);
  const int64_t max_T = cos.size(0);
  check(offset + T_ <= max_T, op, ": positions 0..", T_ - 1, " with offset ", offset, " exceed the table's ", max_T,
        " rows (need ", offset + T_, "; build the tables with a larger max_seq_len)");
}

// The rotation and its record, for both entry points.
Tensor rope_op(const Tensor& x, const Tensor& cos, const Tensor& sin, int64_t offset, RopeLayout layout, RopeRows rr,
               const char* op) {
  Tensor out = rotate(x, cos, sin, offset, layout, false, rr);
  return record(out, {x, cos, sin}, op,
                saves_where({wants_grad(cos) || wants_grad(sin), wants_grad(x), wants_grad(x)}), [offset, layout, rr](const Tensor& g, const Tensor&, const Grads& in) {
    Tensor dx, dcos, dsin;
    if (wants(in, 0)) dx = rotate(g, in[1], in[2], offset, layout, true, rr);
    if (wants(in, 1) || wants(in, 2)) {
      dcos = zeros(in[1].shape(), g.dtype());
      dsin = zeros(in[2].shape(), g.dtype());
      const int64_t hs_ = g.size(-1), T2 = g.size(rr.t_dim);
      const int64_t rows = g.numel() / hs_;
      if (rows > 0)
        dispatch_float(g.dtype(), "apply_rope", [&](auto tag) {
          using T = decltype(tag);
          rope_table_grads(in[0].data<T>(), g.data<T>(), dcos.data<T>(), dsin.data<T>(), rows, T2, hs_, offset,
                           layout, rr);
        });
      if (!wants(in, 1)) dcos = Tensor();
      if (!wants(in, 2)) dsin = Tensor();
    }
    return Grads{dx, dcos, dsin};
  });
}

}  // namespace

const char* rope_layout_name(RopeLayout layout) {
  return layout == RopeLayout::Interleaved ? "interleaved" : "rotate_half";
}

// out[..., t, pair i] = R((offset + t) theta_i) (a, b)
//   =>   dx = R(-(offset + t) theta_i) g   (the same kernel with sin negated),
//        dcos[p, i] = sum g_a a + g_b b,   dsin[p, i] = sum g_b a - g_a b   (over rows at position p)
Tensor apply_rope(const Tensor& x, const Tensor& cos, const Tensor& sin, int64_t offset, RopeLayout layout) {
  check(x.defined() && cos.defined() && sin.defined(), "apply_rope: undefined tensor argument");
  check(x.dim() >= 2, "apply_rope: expected x of shape [..., T, hs] (at least 2 dims), got ", shape_str(x.shape()));
  check_rope(x, cos, sin, offset, -2, "apply_rope");
  return rope_op(x, cos, sin, offset, layout, RopeRows{}, "apply_rope");
}

// out[b, t, h] = R((offset + t) theta) x[b, t, h] for h < rotated_heads, x[b, t, h] otherwise
//   =>   dx = R(-(offset + t) theta) g on the rotated heads, g on the others; the tables'
//        gradients as apply_rope's, over the rotated heads
Tensor apply_rope_packed(const Tensor& x, const Tensor& cos, const Tensor& sin, int64_t offset, RopeLayout layout,
                         int64_t rotated_heads) {
  constexpr const char* op = "apply_rope_packed";
  check(x.defined() && cos.defined() && sin.defined(), op, ": undefined tensor argument");
  check(x.dim() == 4, op, ": expected x of shape [B, T, H, hs], got ", shape_str(x.shape()));
  check(rotated_heads >= 0 && rotated_heads <= x.size(2), op, ": rotated_heads must be in [0, H = ", x.size(2),
        "], got ", rotated_heads);
  check_rope(x, cos, sin, offset, -3, op);
  return rope_op(x, cos, sin, offset, layout, RopeRows{x.size(2), rotated_heads, -3}, op);
}

void RopeScaling::validate(const std::string& who) const {
  if (!active()) return;
  check(factor > 0, who, ": field 'rope_scaling.factor' must be positive, got ", factor);
  if (kind == RopeScalingKind::Yarn) {
    check(beta_fast > 0 && beta_slow > 0, who, ": fields 'rope_scaling.beta_fast' and 'beta_slow' must be positive, got ",
          beta_fast, " and ", beta_slow);
    check(attention_factor > 0, who, ": field 'rope_scaling.attention_factor' must be positive, got ", attention_factor);
    check(original_max_seq_len > 0, who, ": field 'rope_scaling.original_max_seq_len' must be positive, got ",
          original_max_seq_len);
  }
  if (kind != RopeScalingKind::Llama3) return;
  check(low_freq_factor > 0, who, ": field 'rope_scaling.low_freq_factor' must be positive, got ", low_freq_factor);
  check(high_freq_factor > low_freq_factor, who, ": field 'rope_scaling.high_freq_factor' (", high_freq_factor,
        ") must be greater than low_freq_factor (", low_freq_factor, ")");
  check(original_max_seq_len > 0, who, ": field 'rope_scaling.original_max_seq_len' must be positive, got ",
        original_max_seq_len);
}

std::vector<double> rope_frequencies(int64_t head_dim, double base, const RopeScaling& scaling) {
  check(head_dim > 0 && head_dim % 2 == 0, "rope_frequencies: head_dim must be a positive even number, got ", head_dim);
  check(base > 0, "rope_frequencies: base must be positive, got ", base);
  scaling.validate("rope_frequencies");
  const int64_t half = head_dim / 2;
  std::vector<double> freqs(static_cast<std::size_t>(half));
  for (int64_t i = 0; i < half; ++i)
    freqs[static_cast<std::size_t>(i)] = 1.0 / std::pow(base, static_cast<double>(2 * i) / static_cast<double>(head_dim));
  if (scaling.kind == RopeScalingKind::Linear)
    for (double& f : freqs) f /= scaling.factor;
  if (scaling.kind == RopeScalingKind::Yarn) {
    const double pi = 3.14159265358979323846, dim = static_cast<double>(head_dim);
    const double L = static_cast<double>(scaling.original_max_seq_len);
    auto correction_dim = [&](double rotations) { return dim * std::log(L / (rotations * 2 * pi)) / (2 * std::log(base)); };
    double low = correction_dim(scaling.beta_fast), high = correction_dim(scaling.beta_slow);
    if (scaling.truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, dim - 1);
    if (low == high) high += 0.001;  // as transformers: no zero-width ramp
    for (int64_t i = 0; i < half; ++i) {
      const double s = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
      double& f = freqs[static_cast<std::size_t>(i)];
      f = f / scaling.factor * s + f * (1 - s);
    }
  }
  if (scaling.kind == RopeScalingKind::Llama3) {
    const double L = static_cast<double>(scaling.original_max_seq_len);
    const double low_wavelen = L / scaling.low_freq_factor, high_wavelen = L / scaling.high_freq_factor;
    for (double& f : freqs) {
      const double wavelen = 2.0 * 3.14159265358979323846 / f;
      if (wavelen > low_wavelen) {
        f /= scaling.factor;
      } else if (!(wavelen < high_wavelen)) {  // the medium band: interpolate
        const double s = (L / wavelen - scaling.low_freq_factor) / (scaling.high_freq_factor - scaling.low_freq_factor);
        f = (1.0 - s) * f / scaling.factor + s * f;
      }
    }
  }
  return freqs;
}

std::pair<Tensor, Tensor> rope_tables(int64_t head_dim, int64_t max_seq_len, double base, Dtype dtype,
                                      const RopeScaling& scaling) {
  check(head_dim > 0 && head_dim % 2 == 0, "rope_tables: head_dim must be a positive even number, got ", head_dim);
  check(max_seq_len >= 0, "rope_tables: max_seq_len must be non-negative, got ", max_seq_len);
  check(base > 0, "rope_tables: base must be positive, got ", base);
  check(is_floating(dtype), "rope_tables: dtype must be float32 or float64, got ", dtype_name(dtype));
  const int64_t half = head_dim / 2;
  // angles = outer(t, freqs): in float64, rounded once.
  const std::vector<double> freqs = rope_frequencies(head_dim, base, scaling);
  const double m = scaling.kind == RopeScalingKind::Yarn ? scaling.attention_factor : 1.0;
  Tensor cos = empty({max_seq_len, half}, dtype), sin = empty({max_seq_len, half}, dtype);
  dispatch_float(dtype, "rope_tables", [&](auto tag) {
    using T = decltype(tag);
    T* pc = cos.data<T>();
    T* ps = sin.data<T>();
#pragma omp parallel for schedule(static) if (max_seq_len * half >= kParallelMin)
    for (int64_t t = 0; t < max_seq_len; ++t)
      for (int64_t i = 0; i < half; ++i) {
        const double a = static_cast<double>(t) * freqs[static_cast<std::size_t>(i)];
        pc[t * half + i] = static_cast<T>(std::cos(a) * m);
        ps[t * half + i] = static_cast<T>(std::sin(a) * m);
      }
  });
  return {cos, sin};
}

}  // namespace xg
