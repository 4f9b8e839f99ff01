// SinusoidalPositionalEncoding, LearnedPositionalEmbedding, RotaryEmbedding.
#include "nn/position.hpp"

#include <cmath>
#include <map>
#include <mutex>
#include <tuple>

#include "autograd/detail/dispatch.hpp"
#include "autograd/elementwise.hpp"
#include "autograd/graph.hpp"
#include "autograd/index.hpp"
#include "autograd/shape.hpp"
#include "nn/init.hpp"

namespace xg::nn {

namespace {

// RoPE's cos/sin tables, shared by every RotaryEmbedding of the same settings (all the layers
// of a model): a process-wide map to weak references to the tables' storage, so a table is
// found while some module holds it. Each module gets nodes of its own on that storage, so that
// Module::to, which rebinds a buffer's node (set_data), never changes another module's table.
// NOTE: per layer, Llama 3's 131072 positions x 64 frequencies would be 67 MB of tables, 2 GB
// over 32 layers; shared, one 67 MB pair.
std::pair<Tensor, Tensor> shared_rope_tables(int64_t head_dim, int64_t max_seq_len, double base, Dtype dtype,
                                             const RopeScaling& sc) {
  using Key = std::tuple<int64_t, int64_t, double, Dtype, int, double, double, double, int64_t>;
  const Key key{head_dim, max_seq_len, base, dtype, static_cast<int>(sc.kind), sc.factor, sc.low_freq_factor,
                sc.high_freq_factor, sc.original_max_seq_len};
  static std::mutex mu;
  static std::map<Key, std::pair<std::weak_ptr<Storage>, std::weak_ptr<Storage>>> cache;
  auto on = [&](std::shared_ptr<Storage> storage) {  // a node of its own on shared storage
    auto node = std::make_shared<Node>();
    node->dtype = dtype;
    node->shape = {max_seq_len, head_dim / 2};
    node->numel = max_seq_len * (head_dim / 2);
    node->storage = std::move(storage);
    return Tensor(std::move(node));
  };
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it != cache.end()) {
    std::shared_ptr<Storage> c = it->second.first.lock(), s = it->second.second.lock();
    if (c && s) return {on(std::move(c)), on(std::move(s))};
  }
  for (auto e = cache.begin(); e != cache.end();)  // forget the tables no module holds any more
    e = e->second.first.expired() || e->second.second.expired() ? cache.erase(e) : std::next(e);
  auto [c, s] = rope_tables(head_dim, max_seq_len, base, dtype, sc);
  cache[key] = {c.node()->storage, s.node()->storage};
  return {c, s};
}

// Positions offset .. offset + T - 1 of x ([..., T, C], T at dim t_dim) must fit a table of
// `rows` rows.
void check_positions(const Tensor& x, int64_t offset, int64_t rows, const std::string& who, const char* what,
                     int64_t t_dim = -2) {
  const int64_t T = x.size(t_dim);
  check(offset >= 0, who, ": offset must be non-negative, got ", offset);
  check(offset + T <= rows, who, ": positions 0..", T - 1, " with offset ", offset, " exceed ", what, " ", rows,
        " (input ", shape_str(x.shape()), ")");
}

// x [B, T, C] and positions int64 [B, T] with every position in [0, rows) -> table[positions] [B, T, C].
Tensor table_rows_at(const Tensor& table, const Tensor& x, const Tensor& positions, const std::string& who) {
  check(x.dim() == 3 && positions.defined() && positions.dtype() == kInt64 && positions.dim() == 2 &&
            positions.size(0) == x.size(0) && positions.size(1) == x.size(1),
        who, ": expected input [B, T, C] and positions int64 [B, T], got input ", shape_str(x.shape()), " and positions ",
        positions.defined() ? str_cat(dtype_name(positions.dtype()), " ", shape_str(positions.shape())) : "undefined");
  const int64_t rows = table.size(0), *p = positions.data<int64_t>();
  for (int64_t i = 0; i < positions.numel(); ++i)
    check(p[i] >= 0 && p[i] < rows, who, ": position ", p[i], " at [", i / positions.size(1), ",",
          i % positions.size(1), "] is outside the table's ", rows, " rows");
  return embedding(table, positions);
}

// pe [max_len, d_model] in `dtype`, computed in float64 and rounded once:
//   div_i = exp(2i * (-log(10000) / d)),  pe[t, 2i] = sin(t div_i),  pe[t, 2i+1] = cos(t div_i)
// NOTE: the usual PyTorch module (the Annotated Transformer, the nn.Transformer tutorial)
// registers "pe" as a persistent buffer; here it is [max_len, d_model] (no batch axis).
Tensor sinusoidal_table(int64_t d_model, int64_t max_len, Dtype dtype) {
  const int64_t half = d_model / 2;
  std::vector<double> div(static_cast<std::size_t>(half));
  for (int64_t i = 0; i < half; ++i)
    div[static_cast<std::size_t>(i)] = std::exp(static_cast<double>(2 * i) * (-std::log(10000.0) / d_model));
  Tensor pe = empty({max_len, d_model}, dtype);
  dispatch_float(dtype, "SinusoidalPositionalEncoding", [&](auto tag) {
    using T = decltype(tag);
    T* p = pe.data<T>();
    for (int64_t t = 0; t < max_len; ++t)
      for (int64_t i = 0; i < half; ++i) {
        const double a = static_cast<double>(t) * div[static_cast<std::size_t>(i)];
        p[t * d_model + 2 * i] = static_cast<T>(std::sin(a));
        p[t * d_model + 2 * i + 1] = static_cast<T>(std::cos(a));
      }
  });
  return pe;
}

}  // namespace

// --- sinusoidal ----------------------------------------------------------------------------

SinusoidalPositionalEncoding::SinusoidalPositionalEncoding(int64_t d_model, int64_t max_len, double dropout,
                                                           Dtype dtype)
    : d_model_(d_model), max_len_(max_len) {
  check(d_model > 0 && d_model % 2 == 0, "SinusoidalPositionalEncoding: d_model must be a positive even number, got ",
        d_model, " (sin and cos fill alternate features)");
  check(max_len > 0, "SinusoidalPositionalEncoding: max_len must be positive, got ", max_len);
  check(is_floating(dtype), "SinusoidalPositionalEncoding: dtype must be float32 or float64, got ", dtype_name(dtype));
  pe_ = register_buffer("pe", sinusoidal_table(d_model, max_len, dtype));
  dropout_ = register_module("dropout", std::make_shared<Dropout>(dropout));
}

Tensor SinusoidalPositionalEncoding::forward(const Tensor& x, int64_t offset) const {
  check(x.dim() >= 2 && x.size(-1) == d_model_, "SinusoidalPositionalEncoding(d_model=", d_model_,
        "): expected input [..., T, ", d_model_, "], got ", shape_str(x.shape()));
  check(x.dtype() == pe_.dtype(), "SinusoidalPositionalEncoding: input is ", dtype_name(x.dtype()), " but pe is ",
        dtype_name(pe_.dtype()), " (convert the module with .to())");
  check_positions(x, offset, max_len_, str_cat("SinusoidalPositionalEncoding(max_len=", max_len_, ")"), "max_len");
  return (*dropout_)(add(x, narrow(pe_, 0, offset, x.size(-2))));
}

Tensor SinusoidalPositionalEncoding::forward_at(const Tensor& x, const Tensor& positions) const {
  check(x.dtype() == pe_.dtype(), "SinusoidalPositionalEncoding: input is ", dtype_name(x.dtype()), " but pe is ",
        dtype_name(pe_.dtype()), " (convert the module with .to())");
  return (*dropout_)(add(x, table_rows_at(pe_, x, positions, str_cat("SinusoidalPositionalEncoding(max_len=", max_len_, ")"))));
}

// The table is a function of (d_model, max_len): recomputed in the new dtype, not widened.
void SinusoidalPositionalEncoding::rebuild_buffers(Dtype dtype) {
  NoGradGuard no_grad;
  pe_.set_data(sinusoidal_table(d_model_, max_len_, dtype));
}

std::string SinusoidalPositionalEncoding::extra_repr() const {
  return str_cat("d_model=", d_model_, ", max_len=", max_len_);
}

// --- learned -------------------------------------------------------------------------------

LearnedPositionalEmbedding::LearnedPositionalEmbedding(int64_t max_len, int64_t d_model, Dtype dtype)
    : max_len_(max_len), d_model_(d_model) {
  check(max_len > 0 && d_model > 0, "LearnedPositionalEmbedding: sizes must be positive, got max_len=", max_len,
        " and d_model=", d_model);
  Tensor w = empty({max_len, d_model}, dtype);
  init::normal_(w);
  weight_ = register_parameter("weight", w);
}

// out = x + weight[offset : offset + T]   =>   dx = g,   dweight[offset + t] = sum of g over the
// leading dims (narrow's backward writes it into zeros of the table's shape)
Tensor LearnedPositionalEmbedding::forward(const Tensor& x, int64_t offset) const {
  check(x.dim() >= 2 && x.size(-1) == d_model_, "LearnedPositionalEmbedding(max_len=", max_len_,
        ", d_model=", d_model_, "): expected input [..., T, ", d_model_, "], got ", shape_str(x.shape()));
  check(x.dtype() == weight_.dtype(), "LearnedPositionalEmbedding: input is ", dtype_name(x.dtype()),
        " but weight is ", dtype_name(weight_.dtype()), " (convert the module with .to())");
  check_positions(x, offset, max_len_, str_cat("LearnedPositionalEmbedding(max_len=", max_len_, ")"), "max_len");
  return add(x, narrow(weight_, 0, offset, x.size(-2)));
}

// out = x + weight[positions]   =>   dx = g,   dweight[p] = sum of g over the tokens at position p
Tensor LearnedPositionalEmbedding::forward_at(const Tensor& x, const Tensor& positions) const {
  check(x.dtype() == weight_.dtype(), "LearnedPositionalEmbedding: input is ", dtype_name(x.dtype()),
        " but weight is ", dtype_name(weight_.dtype()), " (convert the module with .to())");
  return add(x, table_rows_at(weight_, x, positions, str_cat("LearnedPositionalEmbedding(max_len=", max_len_, ")")));
}

std::string LearnedPositionalEmbedding::extra_repr() const { return str_cat(max_len_, ", ", d_model_); }

// --- rotary --------------------------------------------------------------------------------

RotaryEmbedding::RotaryEmbedding(int64_t head_dim, int64_t max_seq_len, double base, RopeLayout layout, Dtype dtype,
                                 const RopeScaling& scaling)
    : head_dim_(head_dim), max_seq_len_(max_seq_len), base_(base), layout_(layout), scaling_(scaling) {
  check(head_dim > 0 && head_dim % 2 == 0, "RotaryEmbedding: head_dim must be a positive even number, got ", head_dim,
        " (features are rotated in pairs)");
  check(max_seq_len > 0, "RotaryEmbedding: max_seq_len must be positive, got ", max_seq_len);
  // NOTE: the usual hand-written rotate-half RotaryEmbedding keeps [max_seq_len, head_dim]
  // tables (each angle twice, torch.cat((angles, angles))) computed in float32; these are
  // [max_seq_len, head_dim/2], computed in float64 and rounded once: the kernel reads each
  // entry for both halves.
  scaling.validate("RotaryEmbedding");
  auto [c, s] = shared_rope_tables(head_dim, max_seq_len, base, dtype, scaling);
  cos_ = register_buffer("cos", c, /*persistent=*/false);
  sin_ = register_buffer("sin", s, /*persistent=*/false);
}

Tensor RotaryEmbedding::forward(const Tensor& x, int64_t offset) const {
  check(x.dim() >= 2 && x.size(-1) == head_dim_, "RotaryEmbedding(head_dim=", head_dim_,
        "): expected input [..., T, ", head_dim_, "], got ", shape_str(x.shape()));
  check(x.dtype() == cos_.dtype(), "RotaryEmbedding: input is ", dtype_name(x.dtype()), " but the cos/sin tables are ",
        dtype_name(cos_.dtype()), " (convert the module with .to())");
  check_positions(x, offset, max_seq_len_, str_cat("RotaryEmbedding(head_dim=", head_dim_, ", max_seq_len=", max_seq_len_, ")"),
                  "max_seq_len");
  return apply_rope(x, cos_, sin_, offset, layout_);
}

Tensor RotaryEmbedding::forward_packed(const Tensor& x, int64_t offset, int64_t rotated_heads) const {
  check(x.dim() == 4 && x.size(-1) == head_dim_, "RotaryEmbedding(head_dim=", head_dim_,
        "): expected packed heads [B, T, H, ", head_dim_, "], got ", shape_str(x.shape()));
  check(x.dtype() == cos_.dtype(), "RotaryEmbedding: input is ", dtype_name(x.dtype()), " but the cos/sin tables are ",
        dtype_name(cos_.dtype()), " (convert the module with .to())");
  check_positions(x, offset, max_seq_len_, str_cat("RotaryEmbedding(head_dim=", head_dim_, ", max_seq_len=", max_seq_len_, ")"),
                  "max_seq_len", 1);
  return apply_rope_packed(x, cos_, sin_, offset, layout_, rotated_heads);
}

// cos/sin are recomputed in the new dtype: float32 tables widened to float64 would carry
// float32's rounding (~6e-8) into every float64 product.
void RotaryEmbedding::rebuild_buffers(Dtype dtype) {
  NoGradGuard no_grad;
  auto [c, s] = shared_rope_tables(head_dim_, max_seq_len_, base_, dtype, scaling_);
  cos_.set_data(c);
  sin_.set_data(s);
}

std::string RotaryEmbedding::extra_repr() const {
  return str_cat("head_dim=", head_dim_, ", max_seq_len=", max_seq_len_, ", base=", base_,
             ", layout=", rope_layout_name(layout_),
             scaling_.kind == RopeScalingKind::Llama3
                 ? str_cat(", scaling=llama3(factor=", scaling_.factor, ", low_freq_factor=", scaling_.low_freq_factor,
                           ", high_freq_factor=", scaling_.high_freq_factor, ", original_max_seq_len=",
                           scaling_.original_max_seq_len, ")")
             : scaling_.active()
                 ? str_cat(", scaling=",
                           scaling_.kind == RopeScalingKind::Linear    ? "linear"
                           : scaling_.kind == RopeScalingKind::Dynamic ? "dynamic"
                                                                       : "yarn",
                           "(factor=", scaling_.factor, ")")
                 : std::string());
}

}  // namespace xg::nn
