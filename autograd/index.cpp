// Indexing ops with int64 indices: gather, index_select, embedding, index_add, topk,
// argmax/argmin, one_hot. Every index is checked before any output is written.
#include "autograd/index.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <type_traits>
#include <utility>

#include "autograd/broadcast.hpp"
#include "autograd/detail/dispatch.hpp"
#include "autograd/graph.hpp"
#include "autograd/blocks.hpp"
#include "autograd/detail/kernels.hpp"
#include "autograd/detail/op_util.hpp"

namespace xg {

using Grads = std::vector<Tensor>;

namespace {

// A scatter-add backward (gather, index_select, embedding, topk) reads a bf16 gradient widened
// and sums it in float32, rounding the result once: an index that repeats adds many rows into
// one, and a bf16 accumulator would round at every addition.
Tensor widened_for_sums(const Tensor& g) { return g.dtype() == kBFloat16 ? g.detach().to(kFloat32) : g; }
Tensor back_in(const Tensor& sums, Dtype dtype) { return sums.dtype() == dtype ? sums : sums.to(dtype); }

void check_int64(const Tensor& t, const char* op, const char* what) {
  check(t.dtype() == kInt64, op, ": ", what, " must be an int64 tensor, got ", dtype_name(t.dtype()));
}

void check_at_least_1d(const Tensor& x, const char* op) {
  check(x.dim() >= 1, op, ": expected a tensor with at least 1 dim, got a 0-d tensor");
}

// A shape seen as [O, N, I] around dim: O = product of the dims before, N = shape[dim],
// I = product of the dims after. A 0-d shape is [1, 1, 1].
struct Split {
  int64_t O = 1, N = 1, I = 1;
};

Split split_at(const Shape& s, int64_t dim) {
  Split r;
  const int64_t nd = static_cast<int64_t>(s.size());
  for (int64_t d = 0; d < nd; ++d) {
    if (d < dim) r.O *= s[d];
    else if (d == dim) r.N = s[d];
    else r.I *= s[d];
  }
  return r;
}

// Every idx[p] must lie in [0, size). The error names the op, the bad index, the bound and
// where the index sits in the index tensor:
//   embedding: index 12 out of range for 10 rows (at position 3 of ids [2,4])
void check_indices(const int64_t* idx, int64_t count, int64_t size, const Shape& index_shape, const char* op,
                   const std::string& bound, const char* index_name) {
  bool bad = false;
  for (int64_t p = 0; p < count; ++p) bad |= (idx[p] < 0) | (idx[p] >= size);
  if (!bad) return;
  for (int64_t p = 0; p < count; ++p) {
    if (idx[p] >= 0 && idx[p] < size) continue;
    throw Error(str_cat(op, ": index ", idx[p], " out of range for ", bound, " (at position ", p, " of ", index_name,
                    " ", shape_str(index_shape), ")", idx[p] < 0 ? "; negative indices are not allowed" : ""));
  }
}

std::string dim_bound(int64_t dim, int64_t size) { return str_cat("dim ", dim, " of size ", size); }

// Element offsets, in an array with `strides`, of every coordinate of shape[begin, end) in
// row-major order (the other coordinates held at 0).
std::vector<int64_t> sub_offsets(const Shape& shape, const Shape& strides, int64_t begin, int64_t end) {
  int64_t n = 1;
  for (int64_t d = begin; d < end; ++d) n *= shape[d];
  std::vector<int64_t> off(static_cast<std::size_t>(n));
  std::vector<int64_t> coord(static_cast<std::size_t>(std::max<int64_t>(end - begin, 0)), 0);
  int64_t cur = 0;
  for (int64_t p = 0; p < n; ++p) {
    off[p] = cur;
    for (int64_t d = end - 1; d >= begin; --d) {
      if (++coord[d - begin] < shape[d]) {
        cur += strides[d];
        break;
      }
      cur -= (shape[d] - 1) * strides[d];
      coord[d - begin] = 0;
    }
  }
  return off;
}

// Where torch.gather / scatter_add along dim read and write: an index of shape [O, J, I]
// (split at dim) maps position (o, j, i) to the x offset outer[o] + index * stride + inner[i].
// The index may be smaller than x in dims other than dim, so offsets come from tables.
struct GatherPlan {
  int64_t O, J, I, stride;
  std::vector<int64_t> outer, inner;
};

GatherPlan gather_plan(const Shape& x_shape, const Shape& index_shape, int64_t dim) {
  const Split s = split_at(index_shape, dim);
  const int64_t nd = static_cast<int64_t>(x_shape.size());
  if (nd == 0) return {1, 1, 1, 0, {0}, {0}};
  const Shape xs = contiguous_strides(x_shape);
  return {s.O, s.N, s.I, xs[dim], sub_offsets(index_shape, xs, 0, dim), sub_offsets(index_shape, xs, dim + 1, nd)};
}

// dst[plan(o, j, i)] += src[o, j, i]. Different o write disjoint parts of dst, so the
// outer loop runs in parallel; within one o duplicates accumulate in a fixed order.
template <class T>
void scatter_add_kernel(T* dst, const T* src, const int64_t* idx, const GatherPlan& p) {
  const int64_t J = p.J, I = p.I, stride = p.stride;
#pragma omp parallel for schedule(static) if (p.O > 1 && p.O * J * I >= kParallelMin)
  for (int64_t o = 0; o < p.O; ++o) {
    T* d = dst + p.outer[o];
    for (int64_t j = 0; j < J; ++j) {
      const int64_t r = (o * J + j) * I;
      for (int64_t i = 0; i < I; ++i) d[idx[r + i] * stride + p.inner[i]] += src[r + i];
    }
  }
}

// dst: [O, N, I], src: [O, J, I], idx: [J] in [0, N)
//   dst[o, idx[j], :] += src[o, j, :]   (rows with idx[j] == skip are left out)
// Duplicates accumulate. Each thread owns whole outer slices, or, when there are few of
// them (embedding's [V, C] gradient has one), a range of columns, so no element is written
// by two threads and the order of additions is fixed (the result is deterministic).
template <class T>
void add_rows(T* dst, const T* src, const int64_t* idx, int64_t O, int64_t N, int64_t J, int64_t I, int64_t skip) {
  const bool par = O * J * I >= kParallelMin;
  auto add_row = [](T* d, const T* s, int64_t c0, int64_t c1) {
#pragma omp simd
    for (int64_t c = c0; c < c1; ++c) d[c] += s[c];
  };
  if (O >= 2 * omp_get_max_threads() || I < 64 || !par) {
#pragma omp parallel for schedule(static) if (par && O > 1)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t j = 0; j < J; ++j)
        if (idx[j] != skip) add_row(dst + (o * N + idx[j]) * I, src + (o * J + j) * I, 0, I);
    return;
  }
#pragma omp parallel
  {
    const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t c0 = I * t / nt, c1 = I * (t + 1) / nt;
    for (int64_t o = 0; o < O; ++o)
      for (int64_t j = 0; j < J; ++j)
        if (idx[j] != skip) add_row(dst + (o * N + idx[j]) * I, src + (o * J + j) * I, c0, c1);
  }
}

// src: [O, N, I], idx: [J] in [0, N) -> out: [O, J, I] with out[o, j, :] = src[o, idx[j], :]
template <class T>
void select_rows(T* out, const T* src, const int64_t* idx, int64_t O, int64_t N, int64_t J, int64_t I) {
#pragma omp parallel for collapse(2) schedule(static) if (O * J * I >= kParallelMin)
  for (int64_t o = 0; o < O; ++o)
    for (int64_t j = 0; j < J; ++j) {
      const T* s = src + (o * N + idx[j]) * I;
      T* d = out + (o * J + j) * I;
      if (I == 1) d[0] = s[0];
      else std::memcpy(d, s, static_cast<std::size_t>(I) * sizeof(T));
    }
}

// f(T{}) for the dtypes that can be added and ordered here (float32, float64, int64); bool and
// bfloat16 are errors.
template <class F>
decltype(auto) dispatch_numeric(Dtype d, const char* op, F&& f) {
  switch (d) {
    case Dtype::Float32: return f(float{});
    case Dtype::Float64: return f(double{});
    case Dtype::Int64: return f(int64_t{});
    default: break;
  }
  throw Error(str_cat(op, ": expected a float32, float64 or int64 tensor, got ", dtype_name(d)));
}

template <class T>
bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T>) return std::isnan(v);
  else return false;
}

// Strict total order of topk's (value, index) pairs: NaN first when Largest (last when
// smallest, as PyTorch counts NaN above every number), then by value, then by lower index.
template <bool Largest>
struct TopkBefore {
  template <class P>
  bool operator()(const P& a, const P& b) const {
    if (Largest ? a.first > b.first : a.first < b.first) return true;
    if (Largest ? a.first < b.first : a.first > b.first) return false;
    const bool na = is_nan(a.first), nb = is_nan(b.first);
    if (na != nb) return Largest ? na : nb;
    return a.second < b.second;
  }
};

// The k first entries under TopkBefore of one line of N values read at `stride`, left in
// `sel` in that order (sorted) or in index order (!sorted).
template <bool Largest, class T>
void select_k(const T* src, int64_t N, int64_t stride, int64_t k, bool sorted, std::vector<std::pair<T, int64_t>>& sel) {
  using P = std::pair<T, int64_t>;
  const TopkBefore<Largest> before;
  sel.clear();
  if (k * 8 <= N) {
    // Small k (top-k sampling, MoE routing): keep the k best in a heap whose top is the worst
    // of them. An entry strictly worse than the top (NaN never is) cannot be selected;
    // contiguous lines test 16 entries at a time for that, so most of the line is one
    // vectorised compare.
    for (int64_t j = 0; j < k; ++j) sel.emplace_back(src[j * stride], j);
    std::make_heap(sel.begin(), sel.end(), before);
    T worst = sel.front().first;
    auto loses = [](T v, T w) { return Largest ? v < w : v > w; };
    auto consider = [&](int64_t j) {
      const P c{src[j * stride], j};
      if (loses(c.first, worst) || !before(c, sel.front())) return;
      std::pop_heap(sel.begin(), sel.end(), before);
      sel.back() = c;
      std::push_heap(sel.begin(), sel.end(), before);
      worst = sel.front().first;
    };
    int64_t j = k;
    if (stride == 1) {
      constexpr int64_t B = 16;
      for (; j + B <= N; j += B) {
        int any = 0;
#pragma omp simd reduction(| : any)
        for (int64_t b = 0; b < B; ++b) any |= static_cast<int>(!loses(src[j + b], worst));
        if (any)
          for (int64_t b = 0; b < B; ++b) consider(j + b);
      }
    }
    for (; j < N; ++j) consider(j);
  } else {
    for (int64_t j = 0; j < N; ++j) sel.emplace_back(src[j * stride], j);
    std::nth_element(sel.begin(), sel.begin() + (k - 1), sel.end(), before);
    sel.resize(static_cast<std::size_t>(k));
  }
  if (sorted) std::sort(sel.begin(), sel.end(), before);
  else std::sort(sel.begin(), sel.end(), [](const P& x, const P& y) { return x.second < y.second; });
}

// Index of the first maximum (minimum) of a contiguous row of n > 0 values; NaN counts as
// the extreme (the first NaN wins). One vectorised pass finds the extreme, a second finds
// its first position.
template <bool IsMax, class T>
int64_t arg_extreme_row(const T* src, int64_t n) {
  T m = src[0];
  bool nan = false;
  if constexpr (IsMax) {
#pragma omp simd reduction(max : m) reduction(| : nan)
    for (int64_t j = 0; j < n; ++j) {
      m = src[j] > m ? src[j] : m;
      nan |= is_nan(src[j]);
    }
  } else {
#pragma omp simd reduction(min : m) reduction(| : nan)
    for (int64_t j = 0; j < n; ++j) {
      m = src[j] < m ? src[j] : m;
      nan |= is_nan(src[j]);
    }
  }
  int64_t j = 0;
  if (nan) {
    while (!is_nan(src[j])) ++j;
  } else {
    while (src[j] != m) ++j;
  }
  return j;
}

// The same shape with dim's size replaced by n.
Shape with_size(Shape s, int64_t dim, int64_t n) {
  s[dim] = n;
  return s;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// gather / index_select / embedding / index_add

// out[o, j, i] = x[o, index[o, j, i], i] along dim (torch.gather; index may be smaller than
// x in the other dims)   =>   dx = zeros(x) with g scatter-added at the same places
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  check_int64(index, "gather", "index");
  check(index.dim() == x.dim(), "gather: index ", shape_str(index.shape()), " must have as many dims as x ",
        shape_str(x.shape()));
  dim = wrap_dim(dim, x.shape(), "gather");
  for (int64_t d = 0; d < x.dim(); ++d)
    check(d == dim || index.size(d) <= x.size(d), "gather: index ", shape_str(index.shape()),
          " is larger than x ", shape_str(x.shape()), " in dim ", d, " (only dim ", dim, " may be larger)");
  const int64_t size = x.dim() == 0 ? 1 : x.size(dim);
  check_indices(index.data<int64_t>(), index.numel(), size, index.shape(), "gather", dim_bound(dim, size), "index");

  Tensor out = empty(index.shape(), x.dtype());
  if (out.numel() > 0) {
    const GatherPlan p = gather_plan(x.shape(), index.shape(), dim);
    dispatch_all(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T* px = x.data<T>();
      const int64_t* idx = index.data<int64_t>();
      T* po = out.data<T>();
      const int64_t J = p.J, I = p.I, stride = p.stride;
#pragma omp parallel for collapse(2) schedule(static) if (out.numel() >= kParallelMin)
      for (int64_t o = 0; o < p.O; ++o)
        for (int64_t j = 0; j < J; ++j) {
          const T* s = px + p.outer[o];
          const int64_t r = (o * J + j) * I;
          for (int64_t i = 0; i < I; ++i) po[r + i] = s[idx[r + i] * stride + p.inner[i]];
        }
    });
  }
  const Shape x_shape = x.shape();
  return record(out, {x, index}, "gather", saves({1}), [x_shape, dim](const Tensor& g, const Tensor&, const Grads& in) {
    if (!wants(in, 0)) return Grads{Tensor(), Tensor()};
    const Tensor gw = widened_for_sums(g);
    Tensor dx = zeros(x_shape, gw.dtype());
    const GatherPlan p = gather_plan(x_shape, g.shape(), dim);
    dispatch_float(gw.dtype(), "gather backward", [&](auto tag) {
      using T = decltype(tag);
      scatter_add_kernel(dx.data<T>(), gw.data<T>(), in[1].data<int64_t>(), p);
    });
    return Grads{back_in(dx, g.dtype()), Tensor()};
  });
}

// out = x with dim's entries taken at index ([..., N, ...] -> [..., J, ...])
//   =>   dx = zeros(x) with g's slices added at index (index_add)
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  check_int64(index, "index_select", "index");
  check_at_least_1d(x, "index_select");
  check(index.dim() <= 1, "index_select: index must be 1-D, got shape ", shape_str(index.shape()));
  dim = wrap_dim(dim, x.shape(), "index_select");
  const Split s = split_at(x.shape(), dim);
  const int64_t J = index.numel();
  check_indices(index.data<int64_t>(), J, s.N, index.shape(), "index_select", dim_bound(dim, s.N), "index");

  Tensor out = empty(with_size(x.shape(), dim, J), x.dtype());
  dispatch_all(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    select_rows(out.data<T>(), x.data<T>(), index.data<int64_t>(), s.O, s.N, J, s.I);
  });
  const Shape x_shape = x.shape();
  return record(out, {x, index}, "index_select", saves({1}), [x_shape, s, J](const Tensor& g, const Tensor&, const Grads& in) {
    if (!wants(in, 0)) return Grads{Tensor(), Tensor()};
    const Tensor gw = widened_for_sums(g);
    Tensor dx = zeros(x_shape, gw.dtype());
    dispatch_float(gw.dtype(), "index_select backward", [&](auto tag) {
      using T = decltype(tag);
      add_rows(dx.data<T>(), gw.data<T>(), in[1].data<int64_t>(), s.O, s.N, J, s.I, -1);
    });
    return Grads{back_in(dx, g.dtype()), Tensor()};
  });
}

// weight: [V, C], ids: [...] -> out: [..., C] with out[p, :] = weight[ids[p], :]
//   =>   dweight[v, :] = sum of g[p, :] over the p with ids[p] == v, except v == padding_idx
// NOTE: here padding_idx < 0 means "no padding row"; PyTorch counts a negative padding_idx
// from the end (-1 is the last row). Pass V - 1 for that.
Tensor embedding(const Tensor& weight, const Tensor& ids, int64_t padding_idx) {
  check_int64(ids, "embedding", "ids");
  check(weight.dim() == 2, "embedding: weight must be 2-D [V, C], got shape ", shape_str(weight.shape()));
  const int64_t V = weight.size(0), C = weight.size(1), N = ids.numel();
  check(padding_idx < V, "embedding: padding_idx ", padding_idx, " out of range for ", V, " rows");
  check_indices(ids.data<int64_t>(), N, V, ids.shape(), "embedding", str_cat(V, " rows"), "ids");
  if (is_blocked(weight.dtype())) return detail::embedding_blocked(weight, ids);  // rows widened, a frozen table

  Shape out_shape = ids.shape();
  out_shape.push_back(C);
  Tensor out = empty(out_shape, weight.dtype());
  dispatch_all(weight.dtype(), [&](auto tag) {
    using T = decltype(tag);
    select_rows(out.data<T>(), weight.data<T>(), ids.data<int64_t>(), 1, V, N, C);
  });
  return record(out, {weight, ids}, "embedding", saves({1}), [V, C, N, padding_idx](const Tensor& g, const Tensor&, const Grads& in) {
    if (!wants(in, 0)) return Grads{Tensor(), Tensor()};
    const Tensor gw = widened_for_sums(g);
    Tensor dw = zeros({V, C}, gw.dtype());
    dispatch_float(gw.dtype(), "embedding backward", [&](auto tag) {
      using T = decltype(tag);
      add_rows(dw.data<T>(), gw.data<T>(), in[1].data<int64_t>(), 1, V, N, C, padding_idx < 0 ? -1 : padding_idx);
    });
    return Grads{back_in(dw, g.dtype()), Tensor()};
  });
}

// out = x.clone(); out[..., index[j], ...] += source[..., j, ...] along dim (duplicates add up)
//   =>   dx = g,   dsource = index_select(g, dim, index)
Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source) {
  check_int64(index, "index_add", "index");
  check_at_least_1d(x, "index_add");
  check(index.dim() <= 1, "index_add: index must be 1-D, got shape ", shape_str(index.shape()));
  check(x.dtype() == source.dtype(), "index_add: dtype mismatch, x is ", dtype_name(x.dtype()), " and source is ",
        dtype_name(source.dtype()));
  dim = wrap_dim(dim, x.shape(), "index_add");
  const Split s = split_at(x.shape(), dim);
  const int64_t J = index.numel();
  check(source.shape() == with_size(x.shape(), dim, J), "index_add: source ", shape_str(source.shape()),
        " must have x's shape ", shape_str(x.shape()), " with dim ", dim, " of size ", J, " (the index length)");
  check_indices(index.data<int64_t>(), J, s.N, index.shape(), "index_add", dim_bound(dim, s.N), "index");

  Tensor out = empty(x.shape(), x.dtype());
  dispatch_numeric(x.dtype(), "index_add", [&](auto tag) {
    using T = decltype(tag);
    std::memcpy(out.data<T>(), x.data<T>(), static_cast<std::size_t>(x.numel()) * sizeof(T));
    add_rows(out.data<T>(), source.data<T>(), index.data<int64_t>(), s.O, s.N, J, s.I, -1);
  });
  return record(out, {x, index, source}, "index_add", saves({1}), [dim](const Tensor& g, const Tensor&, const Grads& in) {
    return Grads{wants(in, 0) ? g : Tensor(), Tensor(), wants(in, 2) ? index_select(g, dim, in[1]) : Tensor()};
  });
}

// ---------------------------------------------------------------------------------------
// topk, argmax/argmin, one_hot

// values, indices = the k largest (smallest) entries of x along dim
//   =>   dx = zeros(x) with g put back at indices
// NaN counts as larger than every number (as in PyTorch); ties go to the lower index.
// NOTE: with sorted = false the k entries come in increasing index order (PyTorch leaves
// that order unspecified).
TopK topk(const Tensor& x, int64_t k, int64_t dim, bool largest, bool sorted) {
  check_at_least_1d(x, "topk");
  dim = wrap_dim(dim, x.shape(), "topk");
  const Split s = split_at(x.shape(), dim);
  check(k >= 0 && k <= s.N, "topk: k = ", k, " out of range for dim ", dim, " of size ", s.N, " in x ",
        shape_str(x.shape()), " (need 0 <= k <= size)");
  const Shape out_shape = with_size(x.shape(), dim, k);
  TopK r{empty(out_shape, x.dtype()), empty(out_shape, kInt64)};
  const int64_t N = s.N, I = s.I, lines = s.O * s.I;
  if (k > 0 && lines > 0) {
    dispatch_numeric(x.dtype(), "topk", [&](auto tag) {
      using T = decltype(tag);
      const T* px = x.data<T>();
      T* pv = r.values.data<T>();
      int64_t* pi = r.indices.data<int64_t>();
#pragma omp parallel if (lines > 1 && lines * N >= kParallelMin)
      {
        std::vector<std::pair<T, int64_t>> sel;
        sel.reserve(static_cast<std::size_t>(k * 8 <= N ? k : N));
#pragma omp for schedule(static)
        for (int64_t line = 0; line < lines; ++line) {
          const int64_t o = line / I, i = line % I;
          if (largest) select_k<true>(px + o * N * I + i, N, I, k, sorted, sel);
          else select_k<false>(px + o * N * I + i, N, I, k, sorted, sel);
          T* dv = pv + o * k * I + i;
          int64_t* di = pi + o * k * I + i;
          for (int64_t j = 0; j < k; ++j) {
            dv[j * I] = sel[j].first;
            di[j * I] = sel[j].second;
          }
        }
      }
    });
  }
  const Shape x_shape = x.shape();
  Tensor indices = r.indices;
  r.values = record(r.values, {x}, "topk", saves_nothing(), [x_shape, dim, indices](const Tensor& g, const Tensor&, const Grads&) {
    const Tensor gw = widened_for_sums(g);
    Tensor dx = zeros(x_shape, gw.dtype());
    const GatherPlan p = gather_plan(x_shape, g.shape(), dim);
    dispatch_float(gw.dtype(), "topk backward", [&](auto tag) {
      using T = decltype(tag);
      scatter_add_kernel(dx.data<T>(), gw.data<T>(), indices.data<int64_t>(), p);
    });
    return Grads{back_in(dx, g.dtype())};
  });
  return r;
}

namespace {

// Index of the first maximum (minimum) along dim; NaN counts as the extreme (as in PyTorch).
Tensor arg_extreme(const Tensor& x, int64_t dim, bool keepdim, bool is_max, const char* op) {
  dim = wrap_dim(dim, x.shape(), op);
  const Split s = split_at(x.shape(), dim);
  check(s.N > 0, op, ": cannot reduce dim ", dim, " of size 0 in x ", shape_str(x.shape()));
  Shape out_shape = x.shape();
  if (x.dim() > 0) {
    if (keepdim) out_shape[dim] = 1;
    else out_shape.erase(out_shape.begin() + dim);
  }
  Tensor out = empty(out_shape, kInt64);
  if (out.numel() == 0) return out;
  dispatch_numeric(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    int64_t* po = out.data<int64_t>();
    const int64_t N = s.N, I = s.I;
    auto better = [is_max](T v, T best) {
      return (is_max ? v > best : v < best) || (is_nan(v) && !is_nan(best));
    };
#pragma omp parallel for schedule(static) if (s.O > 1 && x.numel() >= kParallelMin)
    for (int64_t o = 0; o < s.O; ++o) {
      const T* src = px + o * N * I;
      int64_t* dst = po + o * I;
      if (I == 1) {
        dst[0] = is_max ? arg_extreme_row<true>(src, N) : arg_extreme_row<false>(src, N);
        continue;
      }
      // Inner dims are contiguous: sweep rows, keeping the best so far per column.
      std::vector<T> best(src, src + I);
      std::fill(dst, dst + I, int64_t{0});
      for (int64_t j = 1; j < N; ++j) {
        const T* row = src + j * I;
        for (int64_t i = 0; i < I; ++i)
          if (better(row[i], best[i])) {
            best[i] = row[i];
            dst[i] = j;
          }
      }
    }
  });
  return out;
}

}  // namespace

// Not differentiable: int64 indices of the first maximum along dim.
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) { return arg_extreme(x, dim, keepdim, true, "argmax"); }
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim) { return arg_extreme(x, dim, keepdim, false, "argmin"); }

// ids: int64 [...] -> int64 [..., num_classes] with a 1 at each id (not differentiable)
Tensor one_hot(const Tensor& ids, int64_t num_classes) {
  check_int64(ids, "one_hot", "ids");
  check(num_classes >= -1, "one_hot: num_classes must be -1 (infer) or >= 0, got ", num_classes);
  const int64_t n = ids.numel();
  const int64_t* p = ids.data<int64_t>();
  if (num_classes == -1) {
    check(n > 0, "one_hot: cannot infer num_classes from an empty ids tensor ", shape_str(ids.shape()),
          "; pass num_classes");
    num_classes = *std::max_element(p, p + n) + 1;
  }
  check_indices(p, n, num_classes, ids.shape(), "one_hot", str_cat(num_classes, " classes"), "ids");
  Shape out_shape = ids.shape();
  out_shape.push_back(num_classes);
  Tensor out = zeros(out_shape, kInt64);
  int64_t* po = out.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) po[i * num_classes + p[i]] = 1;
  return out;
}

}  // namespace xg
