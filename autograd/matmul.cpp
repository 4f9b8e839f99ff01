// Matrix products: matmul (torch.matmul's rules), linear and bmm. Every product is one
// gemm call (or a loop of them over a batch) with transpose flags, on OpenBLAS or oneDNN
// (gemm_backend.hpp); no transpose is ever materialised, and a batch that meets an
// unbatched operand is folded into gemm's M.
#include "autograd/matmul.hpp"

#include <omp.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <memory>
#include <optional>
#include <type_traits>
#include <vector>

#include "autograd/autocast.hpp"
#include "autograd/detail/blas.hpp"
#include "autograd/detail/gemv.hpp"
#include "autograd/detail/dispatch.hpp"
#include "autograd/gemm_backend.hpp"
#include "autograd/graph.hpp"
#include "autograd/blocks.hpp"
#include "autograd/detail/op_util.hpp"
#include "autograd/threads.hpp"
#include "autograd/detail/kernels.hpp"

namespace xg {

using Grads = std::vector<Tensor>;

namespace {


// A product of a bfloat16 operand with a float32 one is a bf16 product (the float32 operand
// rounded, matmul.hpp); any other pair of dtypes must match.
bool bf16_pair(Dtype a, Dtype b) {
  return (a == kBFloat16 && (b == kBFloat16 || b == kFloat32)) || (b == kBFloat16 && a == kFloat32);
}

void check_operands(const Tensor& a, const Tensor& b, const char* op) {
  check(a.defined() && b.defined(), op, ": undefined tensor argument");
  const bool blocked_weight = is_blocked(b.dtype()) && (a.dtype() == kFloat32 || a.dtype() == kFloat64);
  check(a.dtype() == b.dtype() || bf16_pair(a.dtype(), b.dtype()) || blocked_weight, op, ": dtype mismatch, ",
        dtype_name(a.dtype()),
        " ", shape_str(a.shape()), " and ", dtype_name(b.dtype()), " ", shape_str(b.shape()),
        " (xgrad does not promote types; convert one with .to())");
}

// Whether a product of a and b runs in bf16: an operand is bf16, or autocast is on and both are
// float32 (autocast.hpp).
bool bf16_product(const Tensor& a, const Tensor& b) {
  if (a.dtype() == kBFloat16 || b.dtype() == kBFloat16) return true;
  return a.dtype() == kFloat32 && b.dtype() == kFloat32 && autocast_enabled();
}

// A float32 tensor rounded to bf16 outside the graph (a bf16 product's result when both its
// operands are bf16, a gradient for a bf16 operand).
Tensor as_dtype(const Tensor& t, Dtype d) {
  if (t.dtype() == d) return t;
  NoGradGuard no_grad;
  return t.to(d);
}

// Below this many multiply-adds a product runs as one single-threaded gemm (OpenBLAS's own
// threshold for threading, 4 * 65536).
constexpr double kGemmSplitMin = 262144.0;
// A bf16 product is computed in pieces of this many rows (or columns) of C (gemm below).
constexpr int64_t kBf16Piece = 256;

// c = a B^T + beta c for one row a [K] and B [N, K] (x @ w^T of a decoded token): xgrad's
// matrix-vector kernel (detail/gemv.hpp), which reads B from memory faster than dnnl_sgemm does
// for one row; split over threads by rows of B in blocks of 16 outside a parallel region.
void row_by_transposed(int64_t N, int64_t K, const float* a, const float* B, int64_t ldb, float beta, float* c) {
  const int64_t blocks = (N + 15) / 16;
  const int threads = omp_in_parallel() ? 1 : static_cast<int>(std::min<int64_t>(omp_get_max_threads(), blocks));
  if (threads < 2 || static_cast<double>(N) * K < kGemmSplitMin)
    return gemv::row_by_transposed(0, N, K, a, B, ldb, beta, c);
#pragma omp parallel num_threads(threads)
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t lo = std::min(N, blocks * t / nt * 16), hi = std::min(N, blocks * (t + 1) / nt * 16);
    gemv::row_by_transposed(lo, hi, K, a, B, ldb, beta, c);
  }
}

// One thread's part of a product on its library: BLAS's float32 / float64 gemm (blas.hpp), or
// oneDNN's bf16 matmul for bf16 operands (float32 sums).
template <class T>
void library_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, const T* B,
                  int64_t ldb, acc_t<T> beta, acc_t<T>* C, int64_t ldc, double whole_madds = 0) {
  if constexpr (std::is_same_v<T, bfloat16>)
    blas::onednn_gemm_bf16(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
  else
    blas::gemm(ta, tb, M, N, K, T(1), A, lda, B, ldb, beta, C, ldc, whole_madds);
}

// A bf16 array of rows x cols (row stride ld) widened into a contiguous float32 one.
void widen_rows(const bfloat16* p, int64_t rows, int64_t cols, int64_t ld, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* in = reinterpret_cast<const uint16_t*>(p + r * ld);
    float* o = out + r * cols;
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) o[c] = bf16::to_float(in[c]);
  }
}

// c [N] = a [K] B^T (+ beta c) for one row a and B [N, K] (row stride ldb), both bf16, summed in
// float32 with B's rows widened in registers: a decoded token's product on the widened path,
// which would otherwise widen all of B for one row. Split over threads by rows of B.
void widened_row_by_transposed(int64_t N, int64_t K, const bfloat16* a, const bfloat16* B, int64_t ldb, float beta,
                               float* c) {
  const int64_t blocks = (N + 15) / 16;
  follow_load();
  const int threads = omp_in_parallel() || static_cast<double>(N) * K < kGemmSplitMin
                          ? 1
                          : static_cast<int>(std::min<int64_t>(omp_get_max_threads(), blocks));
  const uint16_t* x = reinterpret_cast<const uint16_t*>(a);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int64_t n = 0; n < N; ++n) {
    const uint16_t* w = reinterpret_cast<const uint16_t*>(B + n * ldb);
    float acc = 0;
#pragma omp simd reduction(+ : acc)
    for (int64_t k = 0; k < K; ++k) acc += bf16::to_float(x[k]) * bf16::to_float(w[k]);
    c[n] = beta == 0.0f ? acc : acc + beta * c[n];
  }
}

// C = op(A) op(B) + beta C for bf16 A and B on the float32 gemm, when bf16_gemm() is Widened (a
// CPU whose bf16 dot products do not beat its float32 FMAs, or that has none). The sum runs in
// chunks of kWidenedDepth along K. For each chunk, the operand along C's shorter side is widened
// whole, and the other a piece of at most kBf16Piece rows (columns) of C at a time into the
// thread's buffer: the widened copies take at most min(M, N) + kBf16Piece (a thread) times kWidenedDepth
// floats, never a float32 copy of a frozen bf16 weight (a head's 49,152 x 576 would be 113 MB).
// Chunks and pieces depend on the shape alone, as the bf16 kernels' pieces do (gemm below).
constexpr int64_t kWidenedDepth = 2048;
void widened_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const bfloat16* A, int64_t lda,
                  const bfloat16* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 1 && !ta && tb) return widened_row_by_transposed(N, K, A, B, ldb, beta, C);
  const bool by_rows = M >= N;
  // Pieces of an eighth of C's longer side, rounded up to 16, at most kBf16Piece.
  const int64_t len = by_rows ? M : N, piece = piece_len(len, 16, kBf16Piece);
  const int64_t pieces = (len + piece - 1) / piece;
  const double whole_madds = static_cast<double>(M) * N * K;  // the library is chosen by the whole product's size
  follow_load();
  const int most = omp_get_max_threads();
  const int threads =
      omp_in_parallel() || whole_madds < kGemmSplitMin ? 1 : static_cast<int>(std::min<int64_t>(most, pieces));
  // On one thread outside a parallel region OpenBLAS would split a piece over its own threads,
  // and its sums would then depend on the thread count.
  struct OneThread {
    int saved;
    explicit OneThread(int n) : saved(n) { omp_set_num_threads(1); }
    ~OneThread() { omp_set_num_threads(saved); }
  };
  std::optional<OneThread> one;
  if (threads == 1 && most > 1 && !omp_in_parallel()) one.emplace(most);
  const int64_t depth = std::min(K, kWidenedDepth), other = by_rows ? N : M;
  Tensor whole = empty({other * depth}, kFloat32);
  float* W = whole.data<float>();
  for (int64_t k0 = 0; k0 < K; k0 += depth) {
    const int64_t kn = std::min(depth, K - k0);
    const float b = k0 == 0 ? beta : 1.0f;
    // op(B)[k0.., :] or op(A)[:, k0..] as stored: [N, kn] (B [N, K]) or [kn, N] (B [K, N]), etc.
    if (by_rows)
      tb ? widen_rows(B + k0, N, kn, ldb, W) : widen_rows(B + k0 * ldb, kn, N, ldb, W);
    else
      ta ? widen_rows(A + k0 * lda, kn, M, lda, W) : widen_rows(A + k0, M, kn, lda, W);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
    for (int64_t p = 0; p < pieces; ++p) {
      const int64_t lo = p * piece, n = std::min(len, lo + piece) - lo;
      float* buf = thread_buffer<float>(static_cast<std::size_t>(n * kn));
      if (by_rows) {  // rows lo.. of op(A)[:, k0..]: A's rows (A [M, K]) or columns (A [K, M])
        ta ? widen_rows(A + k0 * lda + lo, kn, n, lda, buf) : widen_rows(A + lo * lda + k0, n, kn, lda, buf);
        blas::gemm(ta, tb, n, N, kn, 1.0f, buf, ta ? n : kn, W, tb ? kn : N, b, C + lo * ldc, ldc, whole_madds);
      } else {  // columns lo.. of op(B)[k0.., :]: B's rows (B [N, K]) or columns (B [K, N])
        tb ? widen_rows(B + lo * ldb + k0, n, kn, ldb, buf) : widen_rows(B + k0 * ldb + lo, kn, n, ldb, buf);
        blas::gemm(ta, tb, M, n, kn, 1.0f, W, ta ? M : kn, buf, tb ? kn : n, b, C + lo, ldc, whole_madds);
      }
    }
  }
}

// C = op(A) op(B) + beta C, row-major. Handles empty sizes, which BLAS rejects (it wants
// leading dims >= 1). T is float, double or bfloat16; C holds acc_t<T> (float32 for bf16).
//
// Outside a parallel region the product is split into one independent gemm per OpenMP thread,
// over C's longer side in multiples of 16 rows or columns; inside one, OpenBLAS's OpenMP build
// and oneDNN run each call on its calling thread. This is as fast as OpenBLAS's own threading
// on large shapes and faster on small ones: OpenBLAS's threads share packed panels and wait for
// each other with sched_yield, a system call, costly on a VM, and oneDNN's bf16 matmul opens a
// parallel region of its own for every product, small ones too. K is never split: each thread
// computes whole sums for its part of C. bf16 products split into fixed pieces instead (below).
// bf16 products run on oneDNN's bf16 kernels, or, when bf16_gemm() is Widened, on the float32
// gemm of operands widened a piece at a time (widened_gemm).
//
// lda, ldb, ldc: the row strides of A, B and C as stored, for operands that are column slices
// of wider matrices (linear_cat); the overload below takes them from the shapes.
template <class T>
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, const T* B, int64_t ldb,
          acc_t<T> beta, acc_t<T>* C, int64_t ldc) {
  using TO = acc_t<T>;
  if (M == 0 || N == 0) return;
  if (K == 0) {  // an empty sum: C = beta C
    if (beta == TO(0))
      for (int64_t i = 0; i < M; ++i) std::fill(C + i * ldc, C + i * ldc + N, TO(0));
    return;
  }
  if constexpr (std::is_same_v<T, bfloat16>) {
    if (bf16_gemm() == Bf16Gemm::Widened) return widened_gemm(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
  }
  check(M < INT_MAX && N < INT_MAX && K < INT_MAX && M * N < INT_MAX && M * K < INT_MAX && K * N < INT_MAX,
        "matmul: sizes M=", M, " N=", N, " K=", K, " exceed BLAS's 32-bit int indexing");
  follow_load();  // the thread count for the cores other programs leave free (threads.hpp)
  if constexpr (std::is_same_v<T, float>)
    if (M == 1 && !ta && tb) return row_by_transposed(N, K, A, B, ldb, beta, C);
  const bool by_rows = M >= N;
  if constexpr (std::is_same_v<T, bfloat16>) {
    // oneDNN's bf16 sums round differently for another shape of call (a transposed A's, at
    // least), so the product is cut into pieces of kBf16Piece rows or columns whatever the
    // thread count: a run that follows the load computes the same numbers on one thread or two.
    const int64_t len = by_rows ? M : N, pieces = (len + kBf16Piece - 1) / kBf16Piece;
    const int threads = omp_in_parallel() ? 1 : static_cast<int>(std::min<int64_t>(omp_get_max_threads(), pieces));
    if (pieces == 1 || static_cast<double>(M) * N * K < kGemmSplitMin) {
      library_gemm(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
      return;
    }
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
    for (int64_t p = 0; p < pieces; ++p) {
      const int64_t lo = p * kBf16Piece, hi = std::min(len, lo + kBf16Piece);
      if (by_rows)
        library_gemm(ta, tb, hi - lo, N, K, ta ? A + lo : A + lo * lda, lda, B, ldb, beta, C + lo * ldc, ldc);
      else
        library_gemm(ta, tb, M, hi - lo, K, A, lda, tb ? B + lo * ldb : B + lo, ldb, beta, C + lo, ldc);
    }
    return;
  }
  const int64_t blocks = ((by_rows ? M : N) + 15) / 16;  // the split side, in blocks of 16
  const int threads = omp_in_parallel() ? 1 : static_cast<int>(std::min<int64_t>(omp_get_max_threads(), blocks));
  if (threads < 2 || static_cast<double>(M) * N * K < kGemmSplitMin) {
    library_gemm(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t len = by_rows ? M : N;
    const int64_t lo = std::min(len, blocks * t / nt * 16), hi = std::min(len, blocks * (t + 1) / nt * 16);
    const double whole = static_cast<double>(M) * N * K;  // the library is chosen by the whole product's size
    if (hi > lo && by_rows)  // rows lo..hi of C need rows lo..hi of op(A)
      library_gemm(ta, tb, hi - lo, N, K, ta ? A + lo : A + lo * lda, lda, B, ldb, beta, C + lo * ldc, ldc, whole);
    else if (hi > lo)  // columns lo..hi of C need columns lo..hi of op(B)
      library_gemm(ta, tb, M, hi - lo, K, A, lda, tb ? B + lo * ldb : B + lo, ldb, beta, C + lo, ldc, whole);
  }
}

// Contiguous operands: the strides follow from the stored shapes.
template <class T>
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const T* A, const T* B, acc_t<T> beta, acc_t<T>* C) {
  gemm(ta, tb, M, N, K, A, ta ? M : K, B, tb ? K : N, beta, C, N);
}

// How a (batched) product lays out: a [a_batch..., n, k] @ b [b_batch..., k, m] ->
// [batch..., n, m], batch being the broadcast of a_batch and b_batch. Captured by the
// backward closure (shapes and offsets only).
struct MatmulPlan {
  Shape out_shape;          // the result's shape (a 1-D operand's dim removed)
  int64_t n = 0, k = 0, m = 0;
  int64_t batches = 1;      // number of matrices in the result
  int64_t a_batches = 1, b_batches = 1;
  std::vector<int64_t> a_off, b_off;  // per result matrix, where its a and b matrices start
  // b is one matrix shared by a full batch of a: fold the batch into gemm's M.
  bool fold() const { return b_batches == 1 && a_batches == batches; }
};

// Offsets (in matrices) of a batch operand of `shape` read as broadcast to `batch`.
std::vector<int64_t> batch_offsets(const Shape& shape, const Shape& batch, int64_t count) {
  const Shape strides = broadcast_strides(shape, batch);
  std::vector<int64_t> off(static_cast<std::size_t>(count), 0);
  const int64_t nd = static_cast<int64_t>(batch.size());
  for (int64_t i = 0; i < count; ++i) {
    int64_t r = i, o = 0;
    for (int64_t d = nd - 1; d >= 0; --d) {
      o += (r % batch[d]) * strides[d];
      r /= batch[d];
    }
    off[i] = o;
  }
  return off;
}

// Validates a @ b under torch.matmul's rules and works out the plan.
MatmulPlan make_plan(const Tensor& a, const Tensor& b, const char* op) {
  check_operands(a, b, op);
  const Shape& sa = a.shape();
  const Shape& sb = b.shape();
  check(a.dim() >= 1 && b.dim() >= 1, op, ": both arguments need at least 1 dimension, got ", shape_str(sa),
        " and ", shape_str(sb));
  MatmulPlan p;
  const int64_t ka = sa.back();
  const int64_t kb = b.dim() == 1 ? sb[0] : sb[sb.size() - 2];
  check(ka == kb, op, ": cannot multiply ", shape_str(sa), " by ", shape_str(sb), " (inner sizes ", ka, " and ", kb,
        " differ)");
  p.k = ka;
  p.n = a.dim() == 1 ? 1 : sa[sa.size() - 2];
  p.m = b.dim() == 1 ? 1 : sb.back();
  const Shape a_batch(sa.begin(), sa.end() - std::min<int64_t>(a.dim(), 2));
  const Shape b_batch(sb.begin(), sb.end() - std::min<int64_t>(b.dim(), 2));
  Shape batch;
  {
    const std::size_t nd = std::max(a_batch.size(), b_batch.size());
    batch.resize(nd);
    for (std::size_t i = 0; i < nd; ++i) {
      const int64_t da = i < nd - a_batch.size() ? 1 : a_batch[i - (nd - a_batch.size())];
      const int64_t db = i < nd - b_batch.size() ? 1 : b_batch[i - (nd - b_batch.size())];
      check(da == db || da == 1 || db == 1, op, ": batch dims ", shape_str(a_batch), " of ", shape_str(sa), " and ",
            shape_str(b_batch), " of ", shape_str(sb), " do not broadcast (", da, " vs ", db, ")");
      batch[i] = da == 1 ? db : da;
    }
  }
  p.batches = shape_numel(batch);
  p.a_batches = shape_numel(a_batch);
  p.b_batches = shape_numel(b_batch);
  if (!p.fold()) {
    p.a_off = batch_offsets(a_batch, batch, p.batches);
    p.b_off = batch_offsets(b_batch, batch, p.batches);
  }
  p.out_shape = batch;
  if (a.dim() > 1) p.out_shape.push_back(p.n);
  if (b.dim() > 1) p.out_shape.push_back(p.m);
  return p;
}

// out = a @ b over the plan's batch. T: the operands' type, TO: the sums' (float for bf16).
template <class T, class TO = T>
void matmul_forward(const MatmulPlan& p, const T* a, const T* b, TO* out) {
  const int64_t n = p.n, k = p.k, m = p.m;
  if (p.fold()) {
    // [batches * n, k] @ [k, m]: one gemm.
    gemm(false, false, p.batches * n, m, k, a, b, TO(0), out);
    return;
  }
  for (int64_t i = 0; i < p.batches; ++i)
    gemm(false, false, n, m, k, a + p.a_off[i] * n * k, b + p.b_off[i] * k * m, TO(0), out + i * n * m);
}

// da = g @ b^T, summed over the batch dims along which a was broadcast.
template <class T, class TO = T>
void matmul_grad_a(const MatmulPlan& p, const T* g, const T* b, TO* da) {
  const int64_t n = p.n, k = p.k, m = p.m;
  if (p.fold()) {
    gemm(false, true, p.batches * n, k, m, g, b, TO(0), da);  // [batches*n, m] @ [k, m]^T
    return;
  }
  const bool full = p.a_batches == p.batches;  // each da matrix written once
  if (!full) std::fill(da, da + p.a_batches * n * k, TO(0));
  for (int64_t i = 0; i < p.batches; ++i)
    gemm(false, true, n, k, m, g + i * n * m, b + p.b_off[i] * k * m, full ? TO(0) : TO(1), da + p.a_off[i] * n * k);
}

// db = a^T @ g, summed over the batch dims along which b was broadcast.
template <class T, class TO = T>
void matmul_grad_b(const MatmulPlan& p, const T* a, const T* g, TO* db) {
  const int64_t n = p.n, k = p.k, m = p.m;
  if (p.fold()) {
    gemm(true, false, k, m, p.batches * n, a, g, TO(0), db);  // [batches*n, k]^T @ [batches*n, m]
    return;
  }
  const bool full = p.b_batches == p.batches;
  if (!full) std::fill(db, db + p.b_batches * k * m, TO(0));
  for (int64_t i = 0; i < p.batches; ++i)
    gemm(true, false, k, m, n, a + p.a_off[i] * n * k, g + i * n * m, full ? TO(0) : TO(1), db + p.b_off[i] * k * m);
}

// What a product's backward reads, inputs {x, ws..., bs...}: x for the weights' gradients
// (when one wants it), the weights for x's; never a bias. A frozen projection of an activation
// keeps only its weight, so the graph lets go of the activation when nothing else reads it.
Saves product_saves(const Tensor& x, const std::vector<Tensor>& ws) {
  bool any_w = false;
  for (const Tensor& w : ws) any_w = any_w || wants_grad(w);
  Saves s{0, false};
  if (any_w) s.inputs |= 1;
  if (wants_grad(x))
    for (std::size_t i = 0; i < ws.size(); ++i) s.inputs |= uint64_t{1} << (1 + i);
  return s;
}

// A bf16 product over the plan: bf16 operands (float32 ones rounded; a weight's copy cached
// under autocast), float32 sums, returned in bf16 when both operands are bf16 and in float32
// otherwise. The gradients are bf16 products too, each returned in its operand's dtype.
Tensor batched_product_bf16(const Tensor& a, const Tensor& b, std::shared_ptr<const MatmulPlan> p, const char* op) {
  const Tensor A = detail::bf16_operand(a, true), B = detail::bf16_operand(b, true);
  Tensor sums = empty(p->out_shape, kFloat32);
  matmul_forward<bfloat16, float>(*p, A.data<bfloat16>(), B.data<bfloat16>(), sums.data<float>());
  const Dtype out_dtype = a.dtype() == kBFloat16 && b.dtype() == kBFloat16 ? kBFloat16 : kFloat32;
  return record(as_dtype(sums, out_dtype), {a, b}, op, saves_where({wants_grad(b), wants_grad(a)}),
                [p](const Tensor& g, const Tensor&, const Grads& in) {
    const Tensor G = detail::bf16_operand(g, false);
    Tensor da, db;
    if (wants(in, 0)) {
      da = empty(in[0].shape(), kFloat32);
      const Tensor B = detail::bf16_operand(in[1], true);
      matmul_grad_a<bfloat16, float>(*p, G.data<bfloat16>(), B.data<bfloat16>(), da.data<float>());
      da = as_dtype(da, in[0].dtype());
    }
    if (wants(in, 1)) {
      db = empty(in[1].shape(), kFloat32);
      const Tensor A = detail::bf16_operand(in[0], true);
      matmul_grad_b<bfloat16, float>(*p, A.data<bfloat16>(), G.data<bfloat16>(), db.data<float>());
      db = as_dtype(db, in[1].dtype());
    }
    return Grads{da, db};
  });
}

// matmul and bmm share everything but their validation and name.
Tensor batched_product(const Tensor& a, const Tensor& b, MatmulPlan plan, const char* op) {
  auto p = std::make_shared<const MatmulPlan>(std::move(plan));
  if (bf16_product(a, b)) return batched_product_bf16(a, b, p, op);
  Tensor out = empty(p->out_shape, a.dtype());
  dispatch_float(a.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    matmul_forward<T>(*p, a.data<T>(), b.data<T>(), out.data<T>());
  });
  return record(out, {a, b}, op, saves_where({wants_grad(b), wants_grad(a)}),
                [p](const Tensor& g, const Tensor&, const Grads& in) {
    Tensor da, db;
    dispatch_float(g.dtype(), "matmul backward", [&](auto tag) {
      using T = decltype(tag);
      if (wants(in, 0)) {
        da = empty(in[0].shape(), g.dtype());
        matmul_grad_a<T>(*p, g.data<T>(), in[1].data<T>(), da.data<T>());
      }
      if (wants(in, 1)) {
        db = empty(in[1].shape(), g.dtype());
        matmul_grad_b<T>(*p, in[0].data<T>(), g.data<T>(), db.data<T>());
      }
    });
    return Grads{da, db};
  });
}

// db[j] = sum over rows i of g[i, j], g: [M, N] with row stride ldg; double accumulators,
// parallel over columns.
template <class T>
void sum_rows(const T* g, int64_t M, int64_t N, int64_t ldg, T* db) {
  constexpr int64_t kBlock = 256;
  const int64_t blocks = (N + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (blocks > 1 && M * N >= kParallelMin)
  for (int64_t jb = 0; jb < blocks; ++jb) {
    const int64_t j0 = jb * kBlock, len = std::min(kBlock, N - j0);
    double acc[kBlock] = {};
    for (int64_t i = 0; i < M; ++i) {
      const T* row = g + i * ldg + j0;
      for (int64_t j = 0; j < len; ++j) acc[j] += row[j];
    }
    for (int64_t j = 0; j < len; ++j) db[j0 + j] = static_cast<T>(acc[j]);
  }
}

// Validates x @ w^T + b for `op` and returns w's out features.
int64_t check_linear(const Tensor& x, const Tensor& w, const Tensor& b, const char* op) {
  check_operands(x, w, op);
  check(x.dim() >= 1, op, ": input needs at least 1 dimension, got ", shape_str(x.shape()));
  const int64_t C = x.shape().back();
  check(w.dim() == 2 && w.shape()[1] == C, op, ": weight must be [out, in] with in = ", C, " (the last dim of input ",
        shape_str(x.shape()), "), got ", shape_str(w.shape()));
  const int64_t OC = w.shape()[0];
  if (b.defined()) {
    check_operands(x, b, op);
    check(b.dim() == 1 && b.shape()[0] == OC, op, ": bias must be [out] = [", OC, "] for weight ",
          shape_str(w.shape()), ", got ", shape_str(b.shape()));
  }
  return OC;
}

// out's rows start as the bias before a product accumulates onto them: a bf16 bias widened, a
// float32 one rounded to bf16 under autocast (torch.autocast casts every operand of linear).
void bias_rows(const Tensor& b, int64_t rows, int64_t ld, float* out) {
  const Tensor fb = b.dtype() == kFloat32 && !autocast_enabled() ? b : as_dtype(as_dtype(b, kBFloat16), kFloat32);
  const int64_t n = fb.numel();
  for (int64_t i = 0; i < rows; ++i) std::memcpy(out + i * ld, fb.data<float>(), sizeof(float) * n);
}

// db = the sum of g's rows (g [rows, n] with row stride ld, of g's dtype), in b's dtype.
Tensor bias_grad(const Tensor& g, int64_t rows, int64_t n, int64_t ld, int64_t col,
                 Dtype bias_dtype) {
  Tensor db = empty({n}, g.dtype());
  dispatch_floating(g.dtype(), "linear backward", [&](auto tag) {
    using T = decltype(tag);
    sum_rows(g.data<T>() + col, rows, n, ld, db.data<T>());
  });
  return as_dtype(db, bias_dtype);
}

// linear_cat (and linear, its one-weight case) as bf16 products: x [rows, C] and each ws[i]
// [out_i, C] rounded to bf16 (a weight's copy cached under autocast), float32 sums written into
// columns offs[i]..offs[i+1] of out, which is bf16 when x and every weight are bf16, float32
// otherwise.
//   =>   dx = sum_i g_i @ ws[i],   dws[i] = g_i^T @ x   (bf16 products, float32 sums, each
//   gradient in its operand's dtype),   dbs[i] = sum of g_i over rows
Tensor linear_cat_bf16(const Tensor& x, const std::vector<Tensor>& ws, const std::vector<Tensor>& bs,
                       const std::vector<int64_t>& offs, const char* op) {
  const int64_t C = x.shape().back(), width = offs.back();
  const int64_t rows = shape_numel(Shape(x.shape().begin(), x.shape().end() - 1));
  const int64_t n = static_cast<int64_t>(ws.size());
  Shape out_shape = x.shape();
  out_shape.back() = width;
  Tensor sums = empty(out_shape, kFloat32);
  float* po = sums.data<float>();
  const Tensor X = detail::bf16_operand(x, false);  // an activation: its copy is not kept for the scope
  bool all_bf16 = x.dtype() == kBFloat16;
  for (int64_t i = 0; i < n; ++i) {
    if (!bs.empty()) bias_rows(bs[i], rows, width, po + offs[i]);
    const Tensor W = detail::bf16_operand(ws[i], true);
    all_bf16 = all_bf16 && ws[i].dtype() == kBFloat16;
    gemm(false, true, rows, offs[i + 1] - offs[i], C, X.data<bfloat16>(), C, W.data<bfloat16>(), C,
         bs.empty() ? 0.0f : 1.0f, po + offs[i], width);  // [rows, C] @ [out_i, C]^T
  }
  std::vector<Tensor> inputs = {x};
  inputs.insert(inputs.end(), ws.begin(), ws.end());
  inputs.insert(inputs.end(), bs.begin(), bs.end());
  const bool has_bias = !bs.empty();
  // The weights' gradients read x as the forward rounded it: the bf16 copy is what is saved
  // (half the bytes of a float32 activation), not x.
  const Saves saved = product_saves(x, ws);
  const Tensor Xs = (saved.inputs & 1) ? X : Tensor();
  return record(as_dtype(sums, all_bf16 ? kBFloat16 : kFloat32), std::move(inputs), op,
                Saves{saved.inputs & ~uint64_t{1}, false},
                [rows, C, n, has_bias, offs, Xs](const Tensor& g, const Tensor&, const Grads& in) {
                  Grads grads(in.size());
                  const int64_t width = offs.back();
                  const Tensor G = detail::bf16_operand(g, false);
                  const bfloat16* pg = G.data<bfloat16>();
                  if (wants(in, 0)) {
                    Tensor dx = empty(in[0].shape(), kFloat32);
                    for (int64_t i = 0; i < n; ++i) {  // [rows, out_i] @ [out_i, C], summed over i
                      const Tensor W = detail::bf16_operand(in[1 + i], true);
                      gemm(false, false, rows, C, offs[i + 1] - offs[i], pg + offs[i], width, W.data<bfloat16>(), C,
                           i == 0 ? 0.0f : 1.0f, dx.data<float>(), C);
                    }
                    grads[0] = as_dtype(dx, in[0].dtype());
                  }
                  for (int64_t i = 0; i < n; ++i) {
                    const int64_t oc = offs[i + 1] - offs[i];
                    if (wants(in, 1 + i)) {  // [rows, out_i]^T @ [rows, C]
                      const Tensor& X = Xs;
                      Tensor dw = empty(in[1 + i].shape(), kFloat32);
                      gemm(true, false, oc, C, rows, pg + offs[i], width, X.data<bfloat16>(), C, 0.0f, dw.data<float>(),
                           C);
                      grads[1 + i] = as_dtype(dw, in[1 + i].dtype());
                    }
                    if (has_bias && wants(in, 1 + n + i))
                      grads[1 + n + i] = bias_grad(g, rows, oc, width, offs[i], in[1 + n + i].dtype());
                  }
                  return grads;
                });
}

}  // namespace

// out = a @ b (torch.matmul)   =>   da = g @ b^T,   db = a^T @ g
//   (summed over the batch dims an operand was broadcast along; a 1-D operand is a row on
//   the left or a column on the right)
// (b q8_0 or q4_0: a frozen weight widened tile by tile, blocks.hpp)
Tensor matmul(const Tensor& a, const Tensor& b) {
  if (b.defined() && is_blocked(b.dtype())) return detail::matmul_blocked(a, b, "matmul");
  return batched_product(a, b, make_plan(a, b, "matmul"), "matmul");
}

// a: [B, n, k], b: [B, k, m] -> [B, n, m]   =>   da = g @ b^T,   db = a^T @ g   (per batch)
Tensor bmm(const Tensor& a, const Tensor& b) {
  check_operands(a, b, "bmm");
  check(a.dim() == 3 && b.dim() == 3, "bmm: expected two 3-D tensors [B, n, k] and [B, k, m], got ",
        shape_str(a.shape()), " and ", shape_str(b.shape()));
  check(a.shape()[0] == b.shape()[0], "bmm: batch sizes differ: ", shape_str(a.shape()), " and ",
        shape_str(b.shape()), " (", a.shape()[0], " vs ", b.shape()[0], "; bmm does not broadcast, use matmul)");
  return batched_product(a, b, make_plan(a, b, "bmm"), "bmm");
}

// x: [..., in], w: [out, in], b: [out] -> [..., out]
// out = x @ w^T + b   =>   dx = g @ w,   dw = g^T @ x,   db = sum of g over all rows
// (the leading dims of x are folded into one M = B*T, so each product is one gemm)
// (w q8_0 or q4_0: a frozen weight widened tile by tile, blocks.hpp)
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  const int64_t OC = check_linear(x, w, b, "linear");
  if (is_blocked(w.dtype())) return detail::linear_blocked(x, w, b, "linear");
  if (bf16_product(x, w) || (b.defined() && b.dtype() == kBFloat16))
    return linear_cat_bf16(x, {w}, b.defined() ? std::vector<Tensor>{b} : std::vector<Tensor>{}, {0, OC}, "linear");
  const int64_t C = x.shape().back();
  const bool has_bias = b.defined();
  Shape out_shape = x.shape();
  out_shape.back() = OC;
  const int64_t rows = shape_numel(Shape(x.shape().begin(), x.shape().end() - 1));  // B*T
  Tensor out = empty(out_shape, x.dtype());
  dispatch_float(x.dtype(), "linear", [&](auto tag) {
    using T = decltype(tag);
    T* po = out.data<T>();
    if (has_bias) {  // rows start as the bias; gemm accumulates onto them
      const T* pb = b.data<T>();
      for (int64_t i = 0; i < rows; ++i) std::memcpy(po + i * OC, pb, sizeof(T) * OC);
    }
    gemm(false, true, rows, OC, C, x.data<T>(), w.data<T>(), has_bias ? T(1) : T(0), po);  // [rows, C] @ [OC, C]^T
  });
  std::vector<Tensor> inputs = {x, w};
  if (has_bias) inputs.push_back(b);
  const Saves saved = product_saves(x, {w});
  return record(out, std::move(inputs), "linear", saved, [rows, C, OC](const Tensor& g, const Tensor&, const Grads& in) {
    Grads grads(in.size());
    dispatch_float(g.dtype(), "linear backward", [&](auto tag) {
      using T = decltype(tag);
      const T* pg = g.data<T>();
      if (wants(in, 0)) {
        grads[0] = empty(in[0].shape(), g.dtype());
        gemm(false, false, rows, C, OC, pg, in[1].data<T>(), T(0), grads[0].data<T>());  // [rows, OC] @ [OC, C]
      }
      if (wants(in, 1)) {
        grads[1] = empty(in[1].shape(), g.dtype());
        gemm(true, false, OC, C, rows, pg, in[0].data<T>(), T(0), grads[1].data<T>());  // [rows, OC]^T @ [rows, C]
      }
      if (in.size() > 2 && wants(in, 2)) {
        grads[2] = empty(in[2].shape(), g.dtype());
        sum_rows(pg, rows, OC, OC, grads[2].data<T>());
      }
    });
    return grads;
  });
}

// x: [..., in], ws[i]: [out_i, in], bs[i]: [out_i] -> [..., sum out_i]
// out = cat_i (x @ ws[i]^T + bs[i]) along the last dim, with no stacked weight: product i
// writes its column slice of out in place (C's row stride is sum out_i), as
// torch.cat([F.linear(x, w, b) for ...], -1) computes it.
//   =>   dx = sum_i g_i @ ws[i],   dws[i] = g_i^T @ x,   dbs[i] = sum of g_i over all rows
// (g_i: columns of g that product i wrote, read in place with g's row stride)
// Self-attention's q, k and v (nn::linear_stacked) share one input this way: the three
// weights are neither copied into one before the product nor their gradient split after it.
Tensor linear_cat(const Tensor& x, const std::vector<Tensor>& ws, const std::vector<Tensor>& bs) {
  check(!ws.empty(), "linear_cat: needs at least one weight");
  check(bs.empty() || bs.size() == ws.size(), "linear_cat: ", ws.size(), " weights take ", ws.size(),
        " biases or none, got ", bs.size());
  std::vector<int64_t> offs = {0};  // where product i's columns start; offs.back() = sum out_i
  for (std::size_t i = 0; i < ws.size(); ++i)
    offs.push_back(offs.back() + check_linear(x, ws[i], bs.empty() ? Tensor() : bs[i], "linear_cat"));
  bool bf16 = false;
  for (const Tensor& w : ws) bf16 = bf16 || bf16_product(x, w);
  for (const Tensor& b : bs) bf16 = bf16 || b.dtype() == kBFloat16;
  if (bf16) return linear_cat_bf16(x, ws, bs, offs, "linear_cat");
  const int64_t C = x.shape().back(), width = offs.back();
  Shape out_shape = x.shape();
  out_shape.back() = width;
  const int64_t rows = shape_numel(Shape(x.shape().begin(), x.shape().end() - 1));
  const int64_t n = static_cast<int64_t>(ws.size());
  Tensor out = empty(out_shape, x.dtype());
  dispatch_float(x.dtype(), "linear_cat", [&](auto tag) {
    using T = decltype(tag);
    T* po = out.data<T>();
    if (!bs.empty())  // rows start as the biases; the products accumulate onto them
      for (int64_t i = 0; i < n; ++i)
        for (int64_t r = 0; r < rows; ++r)
          std::memcpy(po + r * width + offs[i], bs[i].data<T>(), sizeof(T) * (offs[i + 1] - offs[i]));
    for (int64_t i = 0; i < n; ++i)  // [rows, C] @ [out_i, C]^T into columns offs[i]..offs[i+1]
      gemm(false, true, rows, offs[i + 1] - offs[i], C, x.data<T>(), C, ws[i].data<T>(), C, bs.empty() ? T(0) : T(1),
           po + offs[i], width);
  });
  std::vector<Tensor> inputs = {x};
  inputs.insert(inputs.end(), ws.begin(), ws.end());
  inputs.insert(inputs.end(), bs.begin(), bs.end());
  const bool has_bias = !bs.empty();
  return record(out, std::move(inputs), "linear_cat", product_saves(x, ws),
                [rows, C, n, has_bias, offs](const Tensor& g, const Tensor&, const Grads& in) {
                  Grads grads(in.size());
                  dispatch_float(g.dtype(), "linear_cat backward", [&](auto tag) {
                    using T = decltype(tag);
                    const int64_t width = offs.back();
                    const T* pg = g.data<T>();
                    if (wants(in, 0)) {
                      grads[0] = empty(in[0].shape(), g.dtype());
                      for (int64_t i = 0; i < n; ++i)  // [rows, out_i] @ [out_i, C], summed over i
                        gemm(false, false, rows, C, offs[i + 1] - offs[i], pg + offs[i], width,
                             in[1 + i].data<T>(), C, i == 0 ? T(0) : T(1), grads[0].data<T>(), C);
                    }
                    for (int64_t i = 0; i < n; ++i) {
                      const int64_t oc = offs[i + 1] - offs[i];
                      if (wants(in, 1 + i)) {  // [rows, out_i]^T @ [rows, C]
                        grads[1 + i] = empty(in[1 + i].shape(), g.dtype());
                        gemm(true, false, oc, C, rows, pg + offs[i], width, in[0].data<T>(), C, T(0),
                             grads[1 + i].data<T>(), C);
                      }
                      if (has_bias && wants(in, 1 + n + i)) {
                        grads[1 + n + i] = empty(in[1 + n + i].shape(), g.dtype());
                        sum_rows(pg + offs[i], rows, oc, width, grads[1 + n + i].data<T>());
                      }
                    }
                  });
                  return grads;
                });
}

}  // namespace xg
