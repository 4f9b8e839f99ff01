// q8_0 blocks (q8_0.hpp): quantizing and widening, and the products and lookups that read a
// q8_0 weight. A product widens a tile of the weight at a time into a thread's buffer and runs
// the float gemm on it, so a frozen base costs 1.0625 bytes a weight plus one tile per thread.
#include "autograd/q8_0.hpp"

#include <omp.h>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "autograd/autocast.hpp"
#include "autograd/detail/blas.hpp"
#include "autograd/detail/dispatch.hpp"
#include "autograd/detail/kernels.hpp"
#include "autograd/detail/tiled_gemm.hpp"
#include "autograd/float16.hpp"
#include "autograd/gemm_backend.hpp"
#include "autograd/graph.hpp"
#include "autograd/threads.hpp"

namespace xg {

using Grads = std::vector<Tensor>;

namespace {

// A tile of the weight is up to kQ8Rows rows (or, for w's own product g w, kQ8Cols columns)
// wide, a size that depends on the product's shape alone, never on the thread count: each
// element of a product is summed in the same order on one thread or many, so a run that follows
// the load gives the same numbers.
constexpr int64_t kQ8Rows = 256;
constexpr int64_t kQ8Cols = 256;

// Below this many rows of x a product is a dot per weight row (decoding one token), not a gemm.
constexpr int64_t kQ8DotRows = 4;

float block_scale(const uint8_t* block) {
  uint16_t h;
  std::memcpy(&h, block, 2);
  return half_to_float(h);
}

// T float or double: exactly d * q; bfloat16: d * q rounded (a product under autocast).
template <class T>
void widen_block(const uint8_t* block, T* out) {
  using A = acc_t<T>;
  const A d = static_cast<A>(block_scale(block));
  const int8_t* q = reinterpret_cast<const int8_t*>(block + 2);
  for (int64_t j = 0; j < kQ8Block; ++j) out[j] = static_cast<T>(d * static_cast<A>(q[j]));
}

// One thread's C = op(A) op(B) + beta C on a widened tile: BLAS for float and double, oneDNN's
// bf16 matmul (float32 sums) for bfloat16.
template <class T>
void tile_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, const T* B, int64_t ldb,
               acc_t<T> beta, acc_t<T>* C, int64_t ldc) {
  if constexpr (std::is_same_v<T, bfloat16>)
    blas::onednn_gemm_bf16(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
  else
    blas::gemm(ta, tb, M, N, K, T(1), A, lda, B, ldb, beta, C, ldc);
}

// out [r1 - r0, c1 - c0] = rows r0..r1, columns c0..c1 (multiples of 32) of a q8_0 matrix whose
// rows hold `cols` values.
template <class T>
void widen_tile(const uint8_t* w, int64_t cols, int64_t r0, int64_t r1, int64_t c0, int64_t c1, T* out) {
  const int64_t row_bytes = cols / kQ8Block * kQ8BlockBytes, width = c1 - c0;
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* row = w + r * row_bytes + c0 / kQ8Block * kQ8BlockBytes;
    T* o = out + (r - r0) * width;
    for (int64_t b = 0; b < width / kQ8Block; ++b) widen_block(row + b * kQ8BlockBytes, o + b * kQ8Block);
  }
}

// Rows r0..r1 of a q8_0 matrix whose rows hold `cols` values, widened and transposed into
// out [cols, r1 - r0]: out[k (r1 - r0) + (r - r0)] = w[r][k], the B of a register-tiled x w^T.
void widen_tile_transposed(const uint8_t* w, int64_t cols, int64_t r0, int64_t r1, float* out) {
  const int64_t row_bytes = cols / kQ8Block * kQ8BlockBytes, n = r1 - r0;
  float block[kQ8Block];
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t b = 0; b < cols / kQ8Block; ++b) {
      widen_block(w + r * row_bytes + b * kQ8BlockBytes, block);
      for (int64_t j = 0; j < kQ8Block; ++j) out[(b * kQ8Block + j) * n + (r - r0)] = block[j];
    }
}

// A float32 product of fewer multiply-adds than this (all of a small model's) runs on xgrad's
// register tiles (detail/tiled_gemm.hpp) rather than BLAS: no library kernel is compiled at the
// process's first product (oneDNN's sgemm JIT-compiles its kernels then, 29-33 ms, more than
// the whole prompt of a model of a few million parameters), and for these shapes the tiles
// keep up with oneDNN's kernels after that (bench/README, "Q8_0 files on an Intel Xeon").
// Larger products (a 135M model's from 28 M up) run faster on BLAS.
constexpr double kQ8TiledMadds = 67108864.0;  // 2^26


// sum over `blocks` blocks b of d_b * dot(q_b, x[32 b .. 32 b + 31]): one weight row (q8_0) with
// one row of x, summed in acc_t<T>. A decoding step's product is these alone.
template <class T>
acc_t<T> dot_row(const uint8_t* row, const T* x, int64_t blocks) {
  using A = acc_t<T>;
  A acc = 0;
  for (int64_t b = 0; b < blocks; ++b) {
    const int8_t* q = reinterpret_cast<const int8_t*>(row + b * kQ8BlockBytes + 2);
    A part = 0;
#pragma omp simd reduction(+ : part)
    for (int64_t j = 0; j < kQ8Block; ++j) part += static_cast<A>(q[j]) * static_cast<A>(x[b * kQ8Block + j]);
    acc += static_cast<A>(block_scale(row + b * kQ8BlockBytes)) * part;
  }
  return acc;
}

#if defined(__AVX512F__) && defined(__F16C__)
// float x on AVX-512: a block's 32 int8 widened in two registers of 16, its dot with x kept as a
// vector and scaled by d into a vector sum, one horizontal sum at the end. (The scalar loop
// above called the half conversion per block and summed each block horizontally: 4x slower
// than a float32 row in decoding.)
template <>
float dot_row<float>(const uint8_t* row, const float* x, int64_t blocks) {
  __m512 acc = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* blk = row + b * kQ8BlockBytes;
    const __m512 q0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2))));
    const __m512 q1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 18))));
    __m512 part = _mm512_mul_ps(q0, _mm512_loadu_ps(x + b * kQ8Block));
    part = _mm512_fmadd_ps(q1, _mm512_loadu_ps(x + b * kQ8Block + 16), part);
    uint16_t h;
    std::memcpy(&h, blk, 2);
    acc = _mm512_fmadd_ps(_mm512_set1_ps(_cvtsh_ss(h)), part, acc);
  }
  return _mm512_reduce_add_ps(acc);
}
#endif

// Threads for `pieces` independent pieces of a product of `madds` multiply-adds.
int piece_threads(int64_t pieces, double madds) {
  if (omp_in_parallel() || pieces < 2 || madds < 262144.0) return 1;
  follow_load();
  return static_cast<int>(std::min<int64_t>(omp_get_max_threads(), pieces));
}

// y [M, N] (row stride ldy) = x [M, K] w^T for w [N, K] q8_0, plus y when accumulate. T is
// what the product multiplies (bfloat16 under autocast), y holds acc_t<T>.
template <class T>
void product_nt(int64_t M, int64_t N, int64_t K, const T* x, const uint8_t* w, bool accumulate, acc_t<T>* y,
                int64_t ldy) {
  using A = acc_t<T>;
  if (M == 0 || N == 0) return;
  const int64_t row_bytes = K / kQ8Block * kQ8BlockBytes;
  if (M < kQ8DotRows) {  // a dot per weight row, its blocks widened in registers
    const int threads = piece_threads((N + 15) / 16, static_cast<double>(M) * N * K);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t m = 0; m < M; ++m) {
        const A acc = dot_row(w + n * row_bytes, x + m * K, K / kQ8Block);
        y[m * ldy + n] = accumulate ? y[m * ldy + n] + acc : acc;
      }
    return;
  }
  const int64_t rows = piece_len(N, 16, kQ8Rows), pieces = (N + rows - 1) / rows;
  const int threads = piece_threads(pieces, static_cast<double>(M) * N * K);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int64_t p = 0; p < pieces; ++p) {
    const int64_t n0 = p * rows, n1 = std::min(N, n0 + rows);
    T* tile = thread_buffer<T>(static_cast<std::size_t>((n1 - n0) * K));
    if constexpr (std::is_same_v<T, float>) {
      if (static_cast<double>(M) * N * K < kQ8TiledMadds) {
        widen_tile_transposed(w, K, n0, n1, tile);  // [K, n1 - n0]
        tiled::gemm<float>(M, n1 - n0, K, 1.0f, x, K, 1, tile, n1 - n0, y + n0, ldy, accumulate);
        continue;
      }
    }
    widen_tile(w, K, n0, n1, 0, K, tile);
    // [M, K] @ [n1 - n0, K]^T into columns n0..n1 of y
    tile_gemm(false, true, M, n1 - n0, K, x, K, tile, K, accumulate ? A(1) : A(0), y + n0, ldy);
  }
}

// y [M, K] = g [M, N] w for w [N, K] q8_0: pieces of kQ8Cols columns of y, each summing over N
// in tiles of kQ8Rows rows in order. T and y as product_nt's.
template <class T>
void product_nn(int64_t M, int64_t N, int64_t K, const T* g, const uint8_t* w, acc_t<T>* y) {
  using A = acc_t<T>;
  if (M == 0 || K == 0) return;
  if (N == 0) {
    std::fill(y, y + M * K, A(0));
    return;
  }
  const int64_t cols = piece_len(K, kQ8Block, kQ8Cols), pieces = (K + cols - 1) / cols;
  const int threads = piece_threads(pieces, static_cast<double>(M) * N * K);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int64_t p = 0; p < pieces; ++p) {
    const int64_t k0 = p * cols, k1 = std::min(K, k0 + cols), width = k1 - k0;
    T* tile = thread_buffer<T>(static_cast<std::size_t>(kQ8Rows * width));
    for (int64_t n0 = 0; n0 < N; n0 += kQ8Rows) {
      const int64_t n1 = std::min(N, n0 + kQ8Rows);
      widen_tile(w, K, n0, n1, k0, k1, tile);
      // [M, n1 - n0] (columns n0..n1 of g) @ [n1 - n0, width] into columns k0..k1 of y
      tile_gemm(false, false, M, width, n1 - n0, g + n0, N, tile, width, n0 ? A(1) : A(0), y + k0, K);
    }
  }
}

// Whether a product of x (rows of it) with a q8_0 weight runs on bf16 tiles: under autocast, a
// float32 x, oneDNN's bf16 kernels present, and more rows than a decoding step's (whose dot per
// weight row reads the blocks as they are, the faster way for one row).
bool on_bf16(const Tensor& x, int64_t rows) {
  return autocast_enabled() && x.dtype() == kFloat32 && bf16_gemm() == Bf16Gemm::OneDNN && rows >= kQ8DotRows;
}

void check_frozen(const Tensor& w, const char* op) {
  check(!w.requires_grad(), op, ": a q8_0 weight ", shape_str(w.shape()),
        " cannot require grad (it is a frozen base's; train adapters on it, or widen it with .to(kFloat32))");
}

void check_input(const Tensor& x, const char* op, const char* what) {
  check(x.dtype() == kFloat32 || x.dtype() == kFloat64, op, ": a q8_0 weight multiplies float32 or float64 ", what,
        ", got ", dtype_name(x.dtype()));
}

}  // namespace

namespace {

// max |x_j| of one block, and whether every x_j is finite.
float block_amax(const float* x, bool& finite) {
#if defined(__AVX512F__)
  const __m512 a = _mm512_loadu_ps(x), b = _mm512_loadu_ps(x + 16), zero = _mm512_setzero_ps();
  // x - x is 0 exactly when x is finite (NaN for NaN and Inf)
  finite = (_mm512_cmp_ps_mask(_mm512_sub_ps(a, a), zero, _CMP_EQ_OQ) &
            _mm512_cmp_ps_mask(_mm512_sub_ps(b, b), zero, _CMP_EQ_OQ)) == 0xFFFF;
  return _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(b)));
#else
  float amax = 0;
  finite = true;
  for (int64_t j = 0; j < kQ8Block; ++j) {
    finite = finite && std::isfinite(x[j]);
    amax = std::max(amax, std::fabs(x[j]));
  }
  return amax;
#endif
}

// q_j = roundf(x_j * id) for one block (|x_j * id| <= 127): halves away from zero, as ggml's
// reference. AVX-512: t = trunc(v), then t + sign(v) where |v - t| >= 0.5 (v - t is exact);
// its own rounding mode would round halves to even.
void round_block(const float* x, float id, int8_t* q) {
#if defined(__AVX512F__)
  const __m512 vid = _mm512_set1_ps(id), half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f);
  const __m512i sign_bit = _mm512_set1_epi32(static_cast<int>(0x80000000u));
  for (int k = 0; k < 2; ++k) {
    const __m512 v = _mm512_mul_ps(_mm512_loadu_ps(x + 16 * k), vid);
    __m512 t = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __mmask16 up = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_sub_ps(v, t)), half, _CMP_GE_OQ);
    const __m512 step = _mm512_castsi512_ps(
        _mm512_or_si512(_mm512_and_si512(_mm512_castps_si512(v), sign_bit), _mm512_castps_si512(one)));
    t = _mm512_mask_add_ps(t, up, t, step);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16 * k), _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(t)));
  }
#else
  // std::round rounds halves away from zero, as ggml's roundf; |x / d| <= 127 fits int8.
  for (int64_t j = 0; j < kQ8Block; ++j) q[j] = static_cast<int8_t>(std::round(x[j] * id));
#endif
}

// One block of x into o (34 bytes); false when it cannot be stored (a NaN or Inf, or a scale
// beyond half's range).
bool quantize_block(const float* x, uint8_t* o) {
  bool finite = true;
  const float amax = block_amax(x, finite);
  const float d = amax / 127.0f;
  // 1 / d overflows for a subnormal d (max|x| below about 4e-37): then x / d, which stays
  // within +-127 (ggml multiplies by the infinite 1 / d, and converting that to int8 is
  // undefined). Such a block's half scale is 0 either way, so it widens to zeros.
  const float id = d != 0 ? 1.0f / d : 0.0f;
  const uint16_t dh = float_to_half(d);
  if (!finite || (dh & 0x7fffu) == 0x7c00u) return false;
  std::memcpy(o, &dh, 2);
  auto* q = reinterpret_cast<int8_t*>(o + 2);
  if (d != 0 && !std::isfinite(id)) {
    for (int64_t j = 0; j < kQ8Block; ++j) q[j] = static_cast<int8_t>(std::round(x[j] / d));
    return true;
  }
  round_block(x, id, q);
  return true;
}

}  // namespace

// Blocks are independent: split over the threads, the first bad one reported whatever the split.
int64_t quantize_q8_0(const float* x, int64_t n, void* out) {
  auto* o = static_cast<uint8_t*>(out);
  const int64_t blocks = n / kQ8Block;
  int64_t first_bad = blocks;
#pragma omp parallel for schedule(static) reduction(min : first_bad) if (n >= kParallelMin)
  for (int64_t b = 0; b < blocks; ++b)
    if (!quantize_block(x + b * kQ8Block, o + b * kQ8BlockBytes)) first_bad = std::min(first_bad, b);
  return first_bad < blocks ? first_bad * kQ8Block : -1;
}

void dequantize_q8_0(const void* blocks, int64_t n, float* out) {
  const auto* p = static_cast<const uint8_t*>(blocks);
  for (int64_t b = 0; b < n / kQ8Block; ++b) widen_block(p + b * kQ8BlockBytes, out + b * kQ8Block);
}

void dequantize_q8_0(const void* blocks, int64_t n, double* out) {
  const auto* p = static_cast<const uint8_t*>(blocks);
  for (int64_t b = 0; b < n / kQ8Block; ++b) widen_block(p + b * kQ8BlockBytes, out + b * kQ8Block);
}

int64_t first_nonfinite_q8_0_scale(const void* blocks, int64_t count) {
  const auto* p = static_cast<const uint8_t*>(blocks);
  for (int64_t b = 0; b < count; ++b) {
    uint16_t h;
    std::memcpy(&h, p + b * kQ8BlockBytes, 2);
    if ((h & 0x7c00u) == 0x7c00u) return b;  // exponent all ones: Inf or NaN
  }
  return -1;
}

namespace detail {

// x: [..., in], w: [out, in] q8_0, b: [out] -> [..., out]
// out = x @ w^T + b   =>   dx = g @ w,   db = sum of g over all rows   (w is frozen)
Tensor linear_q8_0(const Tensor& x, const Tensor& w, const Tensor& b, const char* op) {
  check_input(x, op, "inputs");
  check_frozen(w, op);
  const int64_t C = x.shape().back(), OC = w.shape()[0];
  if (b.defined())
    check(b.dtype() == x.dtype(), op, ": bias is ", dtype_name(b.dtype()), " and input ", dtype_name(x.dtype()));
  const int64_t rows = shape_numel(Shape(x.shape().begin(), x.shape().end() - 1));
  Shape out_shape = x.shape();
  out_shape.back() = OC;
  Tensor out = empty(out_shape, x.dtype());
  const auto* pw = static_cast<const uint8_t*>(w.raw_data());
  const bool bf16 = on_bf16(x, rows);
  if (bf16) {  // under autocast: the tiles rounded to bf16, x too, float32 sums (as a bf16 weight's)
    float* po = out.data<float>();
    if (b.defined())
      for (int64_t i = 0; i < rows; ++i) std::memcpy(po + i * OC, b.data<float>(), sizeof(float) * OC);
    product_nt(rows, OC, C, detail::bf16_operand(x, false).data<bfloat16>(), pw, b.defined(), po, OC);
  } else {
    const Tensor xc = x.contiguous();
    dispatch_float(x.dtype(), op, [&](auto tag) {
      using T = decltype(tag);
      T* po = out.data<T>();
      if (b.defined())
        for (int64_t i = 0; i < rows; ++i) std::memcpy(po + i * OC, b.data<T>(), sizeof(T) * OC);
      product_nt(rows, OC, C, xc.data<T>(), pw, b.defined(), po, OC);
    });
  }
  std::vector<Tensor> inputs = {x, w};
  if (b.defined()) inputs.push_back(b);
  return record(out, std::move(inputs), op, saves({1}), [rows, C, OC, bf16](const Tensor& g, const Tensor&, const Grads& in) {
    Grads grads(in.size());
    const auto* pw = static_cast<const uint8_t*>(in[1].raw_data());
    if (wants(in, 0)) {  // [rows, OC] @ [OC, C]
      grads[0] = empty(in[0].shape(), g.dtype());
      if (bf16) {
        product_nn(rows, OC, C, detail::bf16_operand(g, false).data<bfloat16>(), pw, grads[0].data<float>());
      } else {
        const Tensor gc = g.contiguous();
        dispatch_float(g.dtype(), "linear backward", [&](auto tag) {
          using T = decltype(tag);
          product_nn(rows, OC, C, gc.data<T>(), pw, grads[0].data<T>());
        });
      }
    }
    if (in.size() > 2 && wants(in, 2)) grads[2] = g.contiguous().reshape({rows, OC}).sum(0);
    return grads;
  });
}

// a: [..., n], w: [n, m] q8_0 -> [..., m]
// out = a @ w   =>   da = g @ w^T   (w is frozen)
Tensor matmul_q8_0(const Tensor& a, const Tensor& w, const char* op) {
  check_input(a, op, "operands");
  check_frozen(w, op);
  check(a.dim() >= 1 && w.dim() == 2 && a.shape().back() == w.shape()[0], op, ": shapes ", shape_str(a.shape()),
        " and ", shape_str(w.shape()), " (q8_0) cannot be multiplied (a q8_0 right operand is a 2-D matrix)");
  const int64_t N = w.shape()[0], K = w.shape()[1];
  const int64_t rows = shape_numel(Shape(a.shape().begin(), a.shape().end() - 1));
  Shape out_shape = a.shape();
  out_shape.back() = K;
  Tensor out = empty(out_shape, a.dtype());
  const auto* pw = static_cast<const uint8_t*>(w.raw_data());
  const bool bf16 = on_bf16(a, rows);
  if (bf16) {
    product_nn(rows, N, K, detail::bf16_operand(a, false).data<bfloat16>(), pw, out.data<float>());
  } else {
    const Tensor ac = a.contiguous();
    dispatch_float(a.dtype(), op, [&](auto tag) {
      using T = decltype(tag);
      product_nn(rows, N, K, ac.data<T>(), pw, out.data<T>());
    });
  }
  return record(out, {a, w}, op, saves({1}), [rows, N, K, bf16](const Tensor& g, const Tensor&, const Grads& in) {
    Grads grads(2);
    if (!wants(in, 0)) return grads;
    const auto* pw = static_cast<const uint8_t*>(in[1].raw_data());
    grads[0] = empty(in[0].shape(), g.dtype());
    if (bf16) {
      product_nt(rows, N, K, detail::bf16_operand(g, false).data<bfloat16>(), pw, false, grads[0].data<float>(), N);
      return grads;
    }
    const Tensor gc = g.contiguous();
    dispatch_float(g.dtype(), "matmul backward", [&](auto tag) {
      using T = decltype(tag);
      product_nt(rows, N, K, gc.data<T>(), pw, false, grads[0].data<T>(), N);
    });
    return grads;
  });
}

Tensor embedding_q8_0(const Tensor& w, const Tensor& ids) {
  check_frozen(w, "embedding");
  const int64_t C = w.shape()[1], N = ids.numel();
  Shape out_shape = ids.shape();
  out_shape.push_back(C);
  Tensor out = empty(out_shape, kFloat32);
  const auto* pw = static_cast<const uint8_t*>(w.raw_data());
  const int64_t* idx = ids.data<int64_t>();
  float* po = out.data<float>();
#pragma omp parallel for schedule(static) if (N * C >= kParallelMin)
  for (int64_t i = 0; i < N; ++i) widen_tile(pw, C, idx[i], idx[i] + 1, 0, C, po + i * C);
  return out;
}

}  // namespace detail

}  // namespace xg
