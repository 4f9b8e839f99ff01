// Shape ops. reshape/view/flatten/squeeze/unsqueeze are aliases: a new node over the same
// storage. Everything else copies through one strided-copy kernel (strided_copy below).
#include "autograd/shape.hpp"

#include <omp.h>
#ifdef __AVX__
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstring>

#include "autograd/broadcast.hpp"
#include "autograd/graph.hpp"
#include "autograd/detail/kernels.hpp"
#include "autograd/detail/op_util.hpp"

namespace xg {

using Grads = std::vector<Tensor>;

namespace {

// A tensor of `shape` over x's storage: no copy, not recorded.
Tensor alias(const Tensor& x, const Shape& shape) {
  auto node = std::make_shared<Node>();
  node->dtype = x.dtype();
  node->shape = shape;
  node->numel = x.numel();
  node->storage = x.node()->storage;
  return Tensor(std::move(node));
}

// out = x seen with another shape (same data)   =>   dx = g seen with x's shape
Tensor alias_op(const Tensor& x, const Shape& shape, const char* op) {
  Tensor out = alias(x, shape);
  const Shape in_shape = x.shape();
  return record(out, {x}, op, saves_nothing(), [in_shape](const Tensor& g, const Tensor&, const Grads&) {
    return Grads{alias(g, in_shape)};
  });
}

// Resolves one -1 in `shape` so that it holds `numel` elements.
Shape infer_shape(const Shape& shape, int64_t numel, const char* op) {
  Shape out = shape;
  int64_t known = 1, infer = -1;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      check(infer < 0, op, ": only one dimension can be inferred (shape ", shape_str(shape), ")");
      infer = static_cast<int64_t>(i);
    } else {
      check(shape[i] >= 0, op, ": invalid size ", shape[i], " in shape ", shape_str(shape));
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    check(known != 0 && numel % known == 0, op, ": shape ", shape_str(shape), " is invalid for input of size ",
          numel);
    out[infer] = numel / known;
  } else {
    check(known == numel, op, ": shape ", shape_str(shape), " is invalid for input of size ", numel);
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// the strided-copy kernel

// Unsigned types of 1, 2, 4 and 8 bytes: the kernel moves bits, so one instantiation per
// element size serves every dtype.
template <class F>
void dispatch_bits(Dtype d, F&& f) {
  switch (itemsize(d)) {
    case 1: f(uint8_t{}); return;
    case 2: f(uint16_t{}); return;
    case 4: f(uint32_t{}); return;
    default: f(uint64_t{}); return;
  }
}

// Drops size-1 dims and merges neighbouring dims that are contiguous in both operands,
// so that e.g. the head transpose [B,T,H,hs] -> [B,H,T,hs] is a loop over rows of hs.
void coalesce(Shape& shape, Shape& src, Shape& dst) {
  Shape s, a, b;
  for (std::size_t k = 0; k < shape.size(); ++k) {
    if (shape[k] == 1) continue;
    if (!s.empty() && a.back() == src[k] * shape[k] && b.back() == dst[k] * shape[k]) {
      s.back() *= shape[k];
      a.back() = src[k];
      b.back() = dst[k];
    } else {
      s.push_back(shape[k]);
      a.push_back(src[k]);
      b.push_back(dst[k]);
    }
  }
  shape.swap(s);
  src.swap(a);
  dst.swap(b);
}

constexpr int64_t kTile = 32;

#ifdef __AVX__
// d[a*dq + b] = s[b*si + a] for an 8x8 block of 4-byte elements, in registers.
inline void block_transpose(const uint32_t* src, int64_t si, uint32_t* dst, int64_t dq) {
  const float* s = reinterpret_cast<const float*>(src);
  float* d = reinterpret_cast<float*>(dst);
  __m256 r[8], t[8], u[8];
  for (int k = 0; k < 8; ++k) r[k] = _mm256_loadu_ps(s + k * si);
  for (int k = 0; k < 8; k += 2) {
    t[k] = _mm256_unpacklo_ps(r[k], r[k + 1]);
    t[k + 1] = _mm256_unpackhi_ps(r[k], r[k + 1]);
  }
  for (int k = 0; k < 8; k += 4) {
    u[k] = _mm256_shuffle_ps(t[k], t[k + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[k + 1] = _mm256_shuffle_ps(t[k], t[k + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[k + 2] = _mm256_shuffle_ps(t[k + 1], t[k + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[k + 3] = _mm256_shuffle_ps(t[k + 1], t[k + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int k = 0; k < 4; ++k) {
    _mm256_storeu_ps(d + k * dq, _mm256_permute2f128_ps(u[k], u[k + 4], 0x20));
    _mm256_storeu_ps(d + (k + 4) * dq, _mm256_permute2f128_ps(u[k], u[k + 4], 0x31));
  }
}

// The same for a 4x4 block of 8-byte elements.
inline void block_transpose(const uint64_t* src, int64_t si, uint64_t* dst, int64_t dq) {
  const double* s = reinterpret_cast<const double*>(src);
  double* d = reinterpret_cast<double*>(dst);
  const __m256d r0 = _mm256_loadu_pd(s), r1 = _mm256_loadu_pd(s + si), r2 = _mm256_loadu_pd(s + 2 * si),
                r3 = _mm256_loadu_pd(s + 3 * si);
  const __m256d t0 = _mm256_unpacklo_pd(r0, r1), t1 = _mm256_unpackhi_pd(r0, r1), t2 = _mm256_unpacklo_pd(r2, r3),
                t3 = _mm256_unpackhi_pd(r2, r3);
  _mm256_storeu_pd(d, _mm256_permute2f128_pd(t0, t2, 0x20));
  _mm256_storeu_pd(d + dq, _mm256_permute2f128_pd(t1, t3, 0x20));
  _mm256_storeu_pd(d + 2 * dq, _mm256_permute2f128_pd(t0, t2, 0x31));
  _mm256_storeu_pd(d + 3 * dq, _mm256_permute2f128_pd(t1, t3, 0x31));
}
#endif

// One tile of a transpose: d[a*dq + b] = s[b*si + a] for a < na, b < nb.
// NOTE: with AVX the tile moves in 8x8 (4-byte) or 4x4 (8-byte) register blocks: the scalar
// loop is much slower, as the compiler turns it into slow gathers.
template <class T>
void transpose_tile(const T* s, int64_t si, T* d, int64_t dq, int64_t na, int64_t nb) {
  int64_t a = 0;
#ifdef __AVX__
  constexpr int64_t B = sizeof(T) == 4 ? 8 : (sizeof(T) == 8 ? 4 : 0);
  if constexpr (B > 0) {
    for (; a + B <= na; a += B) {
      int64_t b = 0;
      for (; b + B <= nb; b += B) block_transpose(s + b * si + a, si, d + a * dq + b, dq);
      for (int64_t i = a; i < a + B; ++i)
        for (int64_t j = b; j < nb; ++j) d[i * dq + j] = s[j * si + i];
    }
  }
#endif
  for (; a < na; ++a)
    for (int64_t b = 0; b < nb; ++b) d[a * dq + b] = s[b * si + a];
}

// dst[sum_k i_k dst_st[k]] = src[sum_k i_k src_st[k]] for every index i of `shape`.
// Strides are in elements (0 on broadcast axes of src). Three loops:
//  - rows: the last dim is contiguous in dst, copied row by row (memcpy speed when also
//    contiguous in src, a fill when src broadcasts along it);
//  - tiles: the last dim of dst is strided in src while another dim of src is contiguous
//    (a transpose): 32x32 tiles, so reads and writes both stay in cache;
//  - otherwise a strided row loop.
template <class T>
void strided_copy(const T* src, Shape src_st, T* dst, Shape dst_st, Shape shape) {
  if (shape_numel(shape) == 0) return;
  coalesce(shape, src_st, dst_st);
  const int64_t nd = static_cast<int64_t>(shape.size());
  if (nd == 0) {
    dst[0] = src[0];
    return;
  }
  const int64_t n = shape_numel(shape);
  const bool par = n >= kParallelMin;
  const int64_t L = shape[nd - 1], si = src_st[nd - 1], di = dst_st[nd - 1];

  if (nd >= 2 && di == 1 && si != 1 && si != 0) {
    int64_t q = -1;
    for (int64_t d = nd - 2; d >= 0; --d)
      if (src_st[d] == 1) q = d;
    if (q >= 0) {
      // Tiles over (q, last); `outer` runs over the remaining dims.
      const int64_t A = shape[q], dq = dst_st[q];
      const int64_t tiles_a = (A + kTile - 1) / kTile;
      const int64_t outer = n / (A * L);
      auto tile = [&](int64_t w) {
        int64_t o = w / tiles_a, so = 0, dof = 0;
        for (int64_t d = nd - 2; d >= 0; --d) {
          if (d == q) continue;
          const int64_t i = o % shape[d];
          o /= shape[d];
          so += i * src_st[d];
          dof += i * dst_st[d];
        }
        const int64_t a0 = (w % tiles_a) * kTile, na = std::min(kTile, A - a0);
        for (int64_t b0 = 0; b0 < L; b0 += kTile)
          transpose_tile(src + so + a0 + b0 * si, si, dst + dof + a0 * dq + b0, dq, na, std::min(kTile, L - b0));
      };
      if (par) {
#pragma omp parallel for schedule(static)
        for (int64_t w = 0; w < outer * tiles_a; ++w) tile(w);
      } else {
        for (int64_t w = 0; w < outer * tiles_a; ++w) tile(w);
      }
      return;
    }
  }

  auto copy_row = [L, si, di](const T* s, T* d) {
    if (si == 1 && di == 1) {
      std::memcpy(d, s, static_cast<std::size_t>(L) * sizeof(T));
    } else if (si == 0 && di == 1) {
      const T v = s[0];
      for (int64_t j = 0; j < L; ++j) d[j] = v;
    } else {
      for (int64_t j = 0; j < L; ++j) d[j * di] = s[j * si];
    }
  };
  const int64_t rows = n / L;
  if (rows == 1) {
    if (si == 1 && di == 1 && par) {
#pragma omp parallel for schedule(static)
      for (int64_t j = 0; j < L; ++j) dst[j] = src[j];
    } else {
      copy_row(src, dst);
    }
    return;
  }
  // Rows r0 .. r1-1, walking their index with a counter (no division per row, which
  // matters when rows are short).
  auto run_rows = [&](int64_t r0, int64_t r1) {
    Shape idx(static_cast<std::size_t>(nd - 1));
    int64_t so = 0, dof = 0, r = r0;
    for (int64_t d = nd - 2; d >= 0; --d) {
      idx[d] = r % shape[d];
      r /= shape[d];
      so += idx[d] * src_st[d];
      dof += idx[d] * dst_st[d];
    }
    for (int64_t rr = r0; rr < r1; ++rr) {
      copy_row(src + so, dst + dof);
      for (int64_t d = nd - 2; d >= 0; --d) {
        if (++idx[d] < shape[d]) {
          so += src_st[d];
          dof += dst_st[d];
          break;
        }
        so -= (shape[d] - 1) * src_st[d];
        dof -= (shape[d] - 1) * dst_st[d];
        idx[d] = 0;
      }
    }
  };
  if (!par) {
    run_rows(0, rows);
    return;
  }
#pragma omp parallel
  {
    const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t r0 = rows * t / nt, r1 = rows * (t + 1) / nt;
    if (r0 < r1) run_rows(r0, r1);
  }
}

// A new contiguous tensor of `shape` with out[i] = x[offset + sum_k i_k strides[k]].
Tensor gather_copy(const Tensor& x, const Shape& shape, const Shape& strides, int64_t offset = 0) {
  Tensor out = empty(shape, x.dtype());
  dispatch_bits(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    strided_copy(static_cast<const T*>(x.raw_data()) + offset, strides, static_cast<T*>(out.raw_data()),
                 contiguous_strides(shape), shape);
  });
  return out;
}

// Writes contiguous `src` into dst[offset + sum_k i_k strides[k]] (i over src's shape).
void scatter_copy(const Tensor& src, Tensor& dst, const Shape& strides, int64_t offset) {
  dispatch_bits(src.dtype(), [&](auto tag) {
    using T = decltype(tag);
    strided_copy(static_cast<const T*>(src.raw_data()), contiguous_strides(src.shape()),
                 static_cast<T*>(dst.raw_data()) + offset, strides, src.shape());
  });
}

// x as [outer, size of dim, inner]: the view along one dim that cat/narrow/slice work on.
struct DimView {
  int64_t outer = 1, size = 1, inner = 1;
};
DimView dim_view(const Shape& s, int64_t dim) {
  DimView v;
  for (int64_t d = 0; d < dim; ++d) v.outer *= s[d];
  v.size = s[dim];
  for (std::size_t d = dim + 1; d < s.size(); ++d) v.inner *= s[d];
  return v;
}

// Elements start, start + step, ... (`length` of them) along dim, as a new tensor.
Tensor slice_copy(const Tensor& x, int64_t dim, int64_t start, int64_t length, int64_t step) {
  const DimView v = dim_view(x.shape(), dim);
  return gather_copy(x, {v.outer, length, v.inner}, {v.size * v.inner, step * v.inner, 1}, start * v.inner);
}

// The gradient of slice_copy: g written into zeros of the input's shape.
Tensor slice_backward(const Tensor& g, const Shape& in_shape, int64_t dim, int64_t start, int64_t step) {
  Tensor dx = zeros(in_shape, g.dtype());
  const DimView v = dim_view(in_shape, dim);
  const int64_t length = g.shape()[dim];
  scatter_copy(alias(g, {v.outer, length, v.inner}), dx, {v.size * v.inner, step * v.inner, 1}, start * v.inner);
  return dx;
}

// out = x[..., start : start + length*step : step, ...] along dim   =>   dx = g scattered into zeros
Tensor slice_op(const Tensor& x, int64_t dim, int64_t start, int64_t length, int64_t step, const char* op) {
  Tensor out = alias(slice_copy(x, dim, start, length, step), [&] {
    Shape s = x.shape();
    s[dim] = length;
    return s;
  }());
  const Shape in_shape = x.shape();
  return record(out, {x}, op, saves_nothing(), [in_shape, dim, start, step](const Tensor& g, const Tensor&, const Grads&) {
    return Grads{slice_backward(g, in_shape, dim, start, step)};
  });
}

// Output dims of a permutation: out.shape[i] = x.shape[perm[i]].
Tensor permute_copy(const Tensor& x, const std::vector<int64_t>& perm) {
  const Shape& s = x.shape();
  const Shape st = contiguous_strides(s);
  Shape shape(perm.size()), strides(perm.size());
  for (std::size_t i = 0; i < perm.size(); ++i) {
    shape[i] = s[perm[i]];
    strides[i] = st[perm[i]];
  }
  return gather_copy(x, shape, strides);
}

// out = x with dims permuted   =>   dx = g permuted back (inverse permutation)
Tensor permute_op(const Tensor& x, const std::vector<int64_t>& perm, const char* op) {
  bool identity = true;
  for (std::size_t i = 0; i < perm.size(); ++i) identity = identity && perm[i] == static_cast<int64_t>(i);
  if (identity) return alias_op(x, x.shape(), op);
  Tensor out = permute_copy(x, perm);
  std::vector<int64_t> inv(perm.size());
  for (std::size_t i = 0; i < perm.size(); ++i) inv[perm[i]] = static_cast<int64_t>(i);
  return record(out, {x}, op, saves_nothing(), [inv](const Tensor& g, const Tensor&, const Grads&) {
    return Grads{permute_copy(g, inv)};
  });
}

void check_same_dtypes(const std::vector<Tensor>& xs, const char* op) {
  for (std::size_t k = 0; k < xs.size(); ++k) {
    check(xs[k].defined(), op, ": input ", k, " is an undefined tensor");
    check(xs[k].dtype() == xs[0].dtype(), op, ": input ", k, " is ", dtype_name(xs[k].dtype()), " but input 0 is ",
          dtype_name(xs[0].dtype()), " (xgrad does not promote types; convert with .to())");
  }
}

// Copies each xs[k] (seen as [outer, sizes[k] * inner]) into out (seen as [outer, total * inner]).
// xs: [.., n_k, ..] -> [.., sum n_k, ..]
Tensor cat_copy(const std::vector<Tensor>& xs, const Shape& out_shape, int64_t dim, const Shape& sizes) {
  Tensor out = empty(out_shape, xs[0].dtype());
  const DimView v = dim_view(out_shape, dim);
  int64_t at = 0;
  for (std::size_t k = 0; k < xs.size(); ++k) {
    scatter_copy(alias(xs[k], {v.outer, sizes[k] * v.inner}), out, {v.size * v.inner, 1}, at * v.inner);
    at += sizes[k];
  }
  return out;
}

// Gradients of cat/stack: g cut back along dim into pieces of `sizes`, each in its input's shape.
Grads cat_backward(const Tensor& g, const Grads& in, int64_t dim, const Shape& sizes) {
  Grads grads(in.size());
  int64_t at = 0;
  for (std::size_t k = 0; k < in.size(); ++k) {
    if (wants(in, k)) grads[k] = alias(slice_copy(g, dim, at, sizes[k], 1), in[k].shape());
    at += sizes[k];
  }
  return grads;
}

// Keeps (i, j) of the last two dims where keep(j - i); zeroes the rest. x: [..., R, C]
Tensor triangle(const Tensor& x, int64_t diagonal, bool lower) {
  Tensor out = empty(x.shape(), x.dtype());
  const int64_t R = x.size(-2), C = x.size(-1);
  const int64_t mats = R * C == 0 ? 0 : x.numel() / (R * C);
  dispatch_bits(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* src = static_cast<const T*>(x.raw_data());
    T* dst = static_cast<T*>(out.raw_data());
#pragma omp parallel for schedule(static) if (x.numel() >= kParallelMin)
    for (int64_t r = 0; r < mats * R; ++r) {
      const int64_t i = r % R;
      // tril keeps j <= i + diagonal, triu keeps j >= i + diagonal.
      const int64_t edge = std::clamp<int64_t>(lower ? i + diagonal + 1 : i + diagonal, 0, C);
      const T* s = src + r * C;
      T* d = dst + r * C;
      const int64_t k0 = lower ? 0 : edge, k1 = lower ? edge : C;
      for (int64_t j = 0; j < C; ++j) d[j] = (j >= k0 && j < k1) ? s[j] : T(0);
    }
  });
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// views: a new node over the same storage

// out = x with a new shape (no copy)   =>   dx = g with x's shape
Tensor reshape(const Tensor& x, const Shape& shape) {
  return alias_op(x, infer_shape(shape, x.numel(), "reshape"), "reshape");
}

// out = x with a new shape (no copy)   =>   dx = g with x's shape
Tensor view(const Tensor& x, const Shape& shape) {
  return alias_op(x, infer_shape(shape, x.numel(), "view"), "view");
}

// out = x with dims start..end merged into one (no copy)   =>   dx = g with x's shape
Tensor flatten(const Tensor& x, int64_t start_dim, int64_t end_dim) {
  const Shape& s = x.shape();
  if (s.empty()) return alias_op(x, {1}, "flatten");  // as torch: a 0-d tensor flattens to [1]
  const int64_t n = x.dim();
  const int64_t a = wrap_dim(start_dim, n, "flatten", s), b = wrap_dim(end_dim, n, "flatten", s);
  check(a <= b, "flatten: start_dim ", start_dim, " comes after end_dim ", end_dim, " for shape ", shape_str(s));
  Shape out(s.begin(), s.begin() + a);
  int64_t merged = 1;
  for (int64_t d = a; d <= b; ++d) merged *= s[d];
  out.push_back(merged);
  out.insert(out.end(), s.begin() + b + 1, s.end());
  return alias_op(x, out, "flatten");
}

// out = x with a size-1 dim inserted at dim (no copy)   =>   dx = g with x's shape
Tensor unsqueeze(const Tensor& x, int64_t dim) {
  Shape s = x.shape();
  const int64_t d = wrap_dim(dim, x.dim() + 1, "unsqueeze", s);
  s.insert(s.begin() + d, 1);
  return alias_op(x, s, "unsqueeze");
}

// out = x without its size-1 dims (no copy)   =>   dx = g with x's shape
Tensor squeeze(const Tensor& x) {
  Shape s;
  for (int64_t v : x.shape())
    if (v != 1) s.push_back(v);
  return alias_op(x, s, "squeeze");
}

// out = x without dim if its size is 1 (no copy)   =>   dx = g with x's shape
Tensor squeeze(const Tensor& x, int64_t dim) {
  Shape s = x.shape();
  if (s.empty()) {  // as torch: a 0-d tensor accepts dim 0 or -1
    wrap_dim(dim, 1, "squeeze", s);
    return alias_op(x, s, "squeeze");
  }
  const int64_t d = wrap_dim(dim, x.dim(), "squeeze", s);
  if (s[d] == 1) s.erase(s.begin() + d);
  return alias_op(x, s, "squeeze");
}

// ---------------------------------------------------------------------------------------
// copies into a new layout

// out = x with dims dim0 and dim1 swapped   =>   dx = g with them swapped back
Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1) {
  const int64_t n = x.dim();
  if (n == 0) {  // as torch: a 0-d tensor accepts dims 0/-1 and is returned as is
    wrap_dim(dim0, 1, "transpose", x.shape());
    wrap_dim(dim1, 1, "transpose", x.shape());
    return alias_op(x, x.shape(), "transpose");
  }
  std::vector<int64_t> perm(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) perm[i] = i;
  std::swap(perm[wrap_dim(dim0, n, "transpose", x.shape())], perm[wrap_dim(dim1, n, "transpose", x.shape())]);
  return permute_op(x, perm, "transpose");
}

// out.shape[i] = x.shape[dims[i]]   =>   dx = g permuted by the inverse of dims
Tensor permute(const Tensor& x, const std::vector<int64_t>& dims) {
  const int64_t n = x.dim();
  check(static_cast<int64_t>(dims.size()) == n, "permute: got ", dims.size(), " dims ", shape_str(dims),
        " for a ", n, "-d tensor of shape ", shape_str(x.shape()));
  std::vector<int64_t> perm(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (std::size_t i = 0; i < dims.size(); ++i) {
    perm[i] = wrap_dim(dims[i], n, "permute", x.shape());
    check(!seen[perm[i]], "permute: dim ", dims[i], " repeated in ", shape_str(dims));
    seen[perm[i]] = true;
  }
  return permute_op(x, perm, "permute");
}

// out = x broadcast to shape   =>   dx = g summed over the broadcast axes (done by the engine)
Tensor expand(const Tensor& x, const Shape& shape) {
  const Shape& s = x.shape();
  check(shape.size() >= s.size(), "expand: the target shape ", shape_str(shape), " has fewer dims than the input ",
        shape_str(s));
  const std::size_t lead = shape.size() - s.size();
  Shape out(shape.size());
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i < lead) {
      check(shape[i] >= 0, "expand: size ", shape[i], " is not allowed for the new leading dim ", i, " (target ",
            shape_str(shape), ")");
      out[i] = shape[i];
      continue;
    }
    const int64_t have = s[i - lead];
    out[i] = shape[i] == -1 ? have : shape[i];
    check(out[i] >= 0, "expand: invalid size ", shape[i], " in target shape ", shape_str(shape));
    check(have == out[i] || have == 1, "expand: cannot expand dim ", i, " of size ", have, " to ", out[i],
          " (only size-1 dims expand; input ", shape_str(s), ", target ", shape_str(shape), ")");
  }
  if (out == s) return alias_op(x, s, "expand");
  Tensor result = gather_copy(x, out, broadcast_strides(s, out));
  return record(result, {x}, "expand", saves_nothing(), [](const Tensor& g, const Tensor&, const Grads&) { return Grads{g}; });
}

Tensor expand_as(const Tensor& x, const Tensor& other) { return expand(x, other.shape()); }

// out = x tiled repeats[i] times along dim i   =>   dx = g summed over the tiles
Tensor repeat(const Tensor& x, const std::vector<int64_t>& repeats) {
  const Shape& s = x.shape();
  check(repeats.size() >= s.size(), "repeat: ", repeats.size(), " repeat counts ", shape_str(repeats),
        " for a ", s.size(), "-d tensor of shape ", shape_str(s), " (need at least one per dim)");
  const std::size_t n = repeats.size(), lead = n - s.size();
  // out seen as [r0, s0, r1, s1, ...], reading x with stride 0 along each r.
  Shape padded(n, 1), tiled(2 * n), tiled_src(2 * n), out(n), reduced(2 * n);
  for (std::size_t i = lead; i < n; ++i) padded[i] = s[i - lead];
  const Shape st = contiguous_strides(padded);
  for (std::size_t i = 0; i < n; ++i) {
    check(repeats[i] >= 0, "repeat: repeat counts must be non-negative, got ", shape_str(repeats));
    tiled[2 * i] = repeats[i];
    tiled[2 * i + 1] = padded[i];
    tiled_src[2 * i] = 0;
    tiled_src[2 * i + 1] = st[i];
    reduced[2 * i] = 1;
    reduced[2 * i + 1] = padded[i];
    out[i] = repeats[i] * padded[i];
  }
  Tensor result = alias(gather_copy(x, tiled, tiled_src), out);
  return record(result, {x}, "repeat", saves_nothing(), [tiled, reduced, s](const Tensor& g, const Tensor&, const Grads&) {
    return Grads{alias(sum_to(alias(g, tiled), reduced), s)};
  });
}

// out = [x0, x1, ...] joined along dim   =>   dxk = the piece of g along dim that xk filled
Tensor cat(const std::vector<Tensor>& xs, int64_t dim) {
  check(!xs.empty(), "cat: expected a non-empty list of tensors");
  check_same_dtypes(xs, "cat");
  const Shape& s0 = xs[0].shape();
  check(!s0.empty(), "cat: zero-dimensional tensor (input 0) cannot be concatenated");
  const int64_t d = wrap_dim(dim, xs[0].dim(), "cat", s0);
  Shape sizes(xs.size());
  Shape out = s0;
  out[d] = 0;
  for (std::size_t k = 0; k < xs.size(); ++k) {
    const Shape& s = xs[k].shape();
    bool ok = s.size() == s0.size();
    for (std::size_t i = 0; ok && i < s.size(); ++i) ok = static_cast<int64_t>(i) == d || s[i] == s0[i];
    check(ok, "cat: input ", k, " has shape ", shape_str(s), " but input 0 has shape ", shape_str(s0),
          " (shapes must match except along dim ", d, ")");
    sizes[k] = s[d];
    out[d] += s[d];
  }
  Tensor result = cat_copy(xs, out, d, sizes);
  return record(result, xs, "cat", saves_nothing(), [d, sizes](const Tensor& g, const Tensor&, const Grads& in) {
    return cat_backward(g, in, d, sizes);
  });
}

// out = [x0, x1, ...] stacked along a new dim   =>   dxk = g[..., k, ...] along that dim
Tensor stack(const std::vector<Tensor>& xs, int64_t dim) {
  check(!xs.empty(), "stack: expected a non-empty list of tensors");
  check_same_dtypes(xs, "stack");
  const Shape& s0 = xs[0].shape();
  for (std::size_t k = 1; k < xs.size(); ++k)
    check(xs[k].shape() == s0, "stack: input ", k, " has shape ", shape_str(xs[k].shape()), " but input 0 has shape ",
          shape_str(s0), " (all inputs must have the same shape)");
  const int64_t d = wrap_dim(dim, xs[0].dim() + 1, "stack", s0);
  Shape out = s0;
  out.insert(out.begin() + d, static_cast<int64_t>(xs.size()));
  const Shape sizes(xs.size(), 1);
  Tensor result = cat_copy(xs, out, d, sizes);
  return record(result, xs, "stack", saves_nothing(), [d, sizes](const Tensor& g, const Tensor&, const Grads& in) {
    return cat_backward(g, in, d, sizes);
  });
}

// ---------------------------------------------------------------------------------------
// pieces: each output is its own narrow, whose backward writes g into zeros of x's shape

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  const int64_t d = wrap_dim(dim, x.dim(), "split", x.shape());
  const int64_t n = x.shape()[d];
  check(split_size > 0 || (split_size == 0 && n == 0), "split: split_size must be positive, got ", split_size);
  if (n == 0) return {narrow(x, d, 0, 0)};
  std::vector<Tensor> out;
  for (int64_t at = 0; at < n; at += split_size) out.push_back(narrow(x, d, at, std::min(split_size, n - at)));
  return out;
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  const int64_t d = wrap_dim(dim, x.dim(), "split", x.shape());
  int64_t total = 0;
  for (int64_t v : sizes) {
    check(v >= 0, "split: sizes must be non-negative, got ", shape_str(sizes));
    total += v;
  }
  check(total == x.shape()[d], "split: sizes ", shape_str(sizes), " sum to ", total, " but dim ", dim, " of shape ",
        shape_str(x.shape()), " has size ", x.shape()[d]);
  std::vector<Tensor> out;
  int64_t at = 0;
  for (int64_t v : sizes) {
    out.push_back(narrow(x, d, at, v));
    at += v;
  }
  return out;
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  check(chunks > 0, "chunk: chunks must be positive, got ", chunks);
  const int64_t d = wrap_dim(dim, x.dim(), "chunk", x.shape());
  const int64_t n = x.shape()[d];
  if (n == 0) return split(x, std::vector<int64_t>(static_cast<std::size_t>(chunks), 0), d);
  return split(x, (n - 1) / chunks + 1, d);  // as torch: may return fewer than `chunks`
}

// out = x[..., start : start + length, ...] along dim   =>   dx = g written into zeros
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length) {
  check(x.dim() > 0, "narrow: cannot narrow a 0-d tensor");
  const int64_t d = wrap_dim(dim, x.dim(), "narrow", x.shape());
  const int64_t n = x.shape()[d];
  check(start >= -n && start <= n, "narrow: start ", start, " out of range for dim ", dim, " of size ", n,
        " (shape ", shape_str(x.shape()), ")");
  const int64_t a = start < 0 ? start + n : start;
  check(length >= 0, "narrow: length must be non-negative, got ", length);
  check(a + length <= n, "narrow: start ", a, " + length ", length, " exceeds size ", n, " of dim ", dim,
        " (shape ", shape_str(x.shape()), ")");
  return slice_op(x, d, a, length, 1, "narrow");
}

// out = x[..., start:end:step, ...] along dim (Python semantics)   =>   dx = g written into zeros
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  check(x.dim() > 0, "slice: cannot slice a 0-d tensor");
  const int64_t d = wrap_dim(dim, x.dim(), "slice", x.shape());
  check(step > 0, "slice: step must be positive, got ", step);
  const int64_t n = x.shape()[d];
  auto clamp = [n](int64_t i) { return std::clamp<int64_t>(i < 0 ? i + n : i, 0, n); };
  const int64_t a = clamp(start), b = clamp(end);
  const int64_t length = b > a ? (b - a - 1) / step + 1 : 0;
  return slice_op(x, d, a, length, step, "slice");
}

// out = x with entries above diagonal `diagonal` zeroed   =>   dx = tril(g, diagonal)
Tensor tril(const Tensor& x, int64_t diagonal) {
  check(x.dim() >= 2, "tril: input must have at least 2 dims, got shape ", shape_str(x.shape()));
  Tensor out = triangle(x, diagonal, true);
  return record(out, {x}, "tril", saves_nothing(), [diagonal](const Tensor& g, const Tensor&, const Grads&) {
    return Grads{triangle(g, diagonal, true)};
  });
}

// out = x with entries below diagonal `diagonal` zeroed   =>   dx = triu(g, diagonal)
Tensor triu(const Tensor& x, int64_t diagonal) {
  check(x.dim() >= 2, "triu: input must have at least 2 dims, got shape ", shape_str(x.shape()));
  Tensor out = triangle(x, diagonal, false);
  return record(out, {x}, "triu", saves_nothing(), [diagonal](const Tensor& g, const Tensor&, const Grads&) {
    return Grads{triangle(g, diagonal, false)};
  });
}

}  // namespace xg
