// The products and lookups that read a blocked weight (q8_0, q4_0, a k-quant, q4_1, q5_0, q5_1,
// iq4_nl or iq4_xs, blocks.hpp), written once over a block format (detail/block_formats.hpp,
// detail/k_formats.hpp, detail/legacy_formats.hpp, detail/iq4_formats.hpp). A product widens a
// tile of the weight at a time into a thread's buffer and runs the float gemm on it, so a frozen
// base costs its blocks (1.0625 bytes a weight for q8_0, 0.5625 for q4_0, 0.33-0.82 for the
// k-quants, 0.625-0.75 for q4_1, q5_0 and q5_1, 0.53-0.5625 for iq4_xs and iq4_nl) plus one tile
// per thread.
#include "autograd/blocks.hpp"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "autograd/autocast.hpp"
#include "autograd/detail/blas.hpp"
#include "autograd/detail/block_formats.hpp"
#include "autograd/detail/f16_format.hpp"
#include "autograd/detail/iq4_formats.hpp"
#include "autograd/detail/k_formats.hpp"
#include "autograd/detail/legacy_formats.hpp"
#include "autograd/detail/dispatch.hpp"
#include "autograd/detail/kernels.hpp"
#include "autograd/detail/op_util.hpp"
#include "autograd/detail/tiled_gemm.hpp"
#include "autograd/gemm_backend.hpp"
#include "autograd/graph.hpp"
#include "autograd/q4_0.hpp"
#include "autograd/q8_0.hpp"
#include "autograd/threads.hpp"

namespace xg {

namespace {

using Grads = std::vector<Tensor>;

// A tile of the weight is up to kTileRows rows (or, for w's own product g w, kTileCols columns)
// wide, a size that depends on the product's shape alone, never on the thread count: each
// element of a product is summed in the same order on one thread or many, so a run that follows
// the load gives the same numbers.
constexpr int64_t kTileRows = 256;
constexpr int64_t kTileCols = 256;

// Below this many rows of x a product is a dot per weight row (decoding one token), not a gemm.
constexpr int64_t kDotRows = 4;

// A float32 product of fewer multiply-adds than this (all of a small model's) runs on xgrad's
// register tiles (detail/tiled_gemm.hpp) rather than BLAS: no library kernel is compiled at the
// process's first product (oneDNN's sgemm JIT-compiles its kernels then, 29-33 ms, more than
// the whole prompt of a model of a few million parameters), and for these shapes the tiles
// keep up with oneDNN's kernels after that (bench/README, "Q8_0 files on an Intel Xeon").
// Larger products (a 135M model's from 28 M up) run faster on BLAS.
constexpr double kTiledMadds = 67108864.0;  // 2^26

// f(Fmt{}) for w's block format.
template <class F>
decltype(auto) dispatch_blocks(Dtype d, const char* op, F&& f) {
  switch (d) {
    case Dtype::Q8_0: return f(blocks::Q8{});
    case Dtype::Q4_0: return f(blocks::Q4{});
    case Dtype::Q4_K: return f(blocks::Q4K{});
    case Dtype::Q5_K: return f(blocks::Q5K{});
    case Dtype::Q6_K: return f(blocks::Q6K{});
    case Dtype::Q4_1: return f(blocks::Q41{});
    case Dtype::Q5_0: return f(blocks::Q50{});
    case Dtype::Q5_1: return f(blocks::Q51{});
    case Dtype::IQ4_NL: return f(blocks::IQ4NL{});
    case Dtype::IQ4_XS: return f(blocks::IQ4XS{});
    case Dtype::Q2_K: return f(blocks::Q2K{});
    case Dtype::Q3_K: return f(blocks::Q3K{});
    case Dtype::F16: return f(blocks::F16{});
    default: break;
  }
  throw Error(str_cat(op, ": expected a blocked tensor (q8_0, q4_0, a k-quant q2_k ... q6_k, q4_1, q5_0, q5_1, "
                      "iq4_nl, iq4_xs, float16), got ",
                      dtype_name(d)));
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

// out [r1 - r0, c1 - c0] = rows r0..r1, columns c0..c1 (multiples of a block) of a blocked matrix
// whose rows hold `cols` values.
template <class Fmt, class T>
void widen_tile(const uint8_t* w, int64_t cols, int64_t r0, int64_t r1, int64_t c0, int64_t c1, T* out) {
  constexpr int64_t kV = Fmt::kValues;
  const int64_t row_bytes = cols / kV * Fmt::kBytes, width = c1 - c0;
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* row = w + r * row_bytes + c0 / kV * Fmt::kBytes;
    T* o = out + (r - r0) * width;
    for (int64_t b = 0; b < width / kV; ++b) Fmt::widen(row + b * Fmt::kBytes, o + b * kV);
  }
}

// Rows r0..r1 of a blocked matrix whose rows hold `cols` values, widened and transposed into
// out [cols, r1 - r0]: out[k (r1 - r0) + (r - r0)] = w[r][k], the B of a register-tiled x w^T.
template <class Fmt>
void widen_tile_transposed(const uint8_t* w, int64_t cols, int64_t r0, int64_t r1, float* out) {
  constexpr int64_t kV = Fmt::kValues;
  const int64_t row_bytes = cols / kV * Fmt::kBytes, n = r1 - r0;
  float block[kV];
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t b = 0; b < cols / kV; ++b) {
      Fmt::widen(w + r * row_bytes + b * Fmt::kBytes, block);
      for (int64_t j = 0; j < kV; ++j) out[(b * kV + j) * n + (r - r0)] = block[j];
    }
}

// Threads for `pieces` independent pieces of a product of `madds` multiply-adds.
int piece_threads(int64_t pieces, double madds) {
  if (omp_in_parallel() || pieces < 2 || madds < 262144.0) return 1;
  follow_load();
  return static_cast<int>(std::min<int64_t>(omp_get_max_threads(), pieces));
}

// y [M, N] (row stride ldy) = x [M, K] w^T for w [N, K] blocked, plus y when accumulate. T is
// what the product multiplies (bfloat16 under autocast), y holds acc_t<T>.
template <class Fmt, class T>
void product_nt(int64_t M, int64_t N, int64_t K, const T* x, const uint8_t* w, bool accumulate, acc_t<T>* y,
                int64_t ldy) {
  using A = acc_t<T>;
  if (M == 0 || N == 0) return;
  const int64_t row_bytes = K / Fmt::kValues * Fmt::kBytes;
  if (M < kDotRows) {  // a dot per weight row, its blocks widened in registers
    const int threads = piece_threads((N + 15) / 16, static_cast<double>(M) * N * K);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t m = 0; m < M; ++m) {
        const A acc = Fmt::dot(w + n * row_bytes, x + m * K, K / Fmt::kValues);
        y[m * ldy + n] = accumulate ? y[m * ldy + n] + acc : acc;
      }
    return;
  }
  const int64_t rows = piece_len(N, 16, kTileRows), pieces = (N + rows - 1) / rows;
  const int threads = piece_threads(pieces, static_cast<double>(M) * N * K);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int64_t p = 0; p < pieces; ++p) {
    const int64_t n0 = p * rows, n1 = std::min(N, n0 + rows);
    T* tile = thread_buffer<T>(static_cast<std::size_t>((n1 - n0) * K));
    if constexpr (std::is_same_v<T, float>) {
      if (static_cast<double>(M) * N * K < kTiledMadds) {
        widen_tile_transposed<Fmt>(w, K, n0, n1, tile);  // [K, n1 - n0]
        tiled::gemm<float>(M, n1 - n0, K, 1.0f, x, K, 1, tile, n1 - n0, y + n0, ldy, accumulate);
        continue;
      }
    }
    widen_tile<Fmt>(w, K, n0, n1, 0, K, tile);
    // [M, K] @ [n1 - n0, K]^T into columns n0..n1 of y
    tile_gemm(false, true, M, n1 - n0, K, x, K, tile, K, accumulate ? A(1) : A(0), y + n0, ldy);
  }
}

// y [M, K] = g [M, N] w for w [N, K] blocked: pieces of kTileCols columns of y, each summing over
// N in tiles of kTileRows rows in order. T and y as product_nt's.
template <class Fmt, class T>
void product_nn(int64_t M, int64_t N, int64_t K, const T* g, const uint8_t* w, acc_t<T>* y) {
  using A = acc_t<T>;
  if (M == 0 || K == 0) return;
  if (N == 0) {
    std::fill(y, y + M * K, A(0));
    return;
  }
  const int64_t cols = piece_len(K, Fmt::kValues, kTileCols), pieces = (K + cols - 1) / cols;
  const int threads = piece_threads(pieces, static_cast<double>(M) * N * K);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int64_t p = 0; p < pieces; ++p) {
    const int64_t k0 = p * cols, k1 = std::min(K, k0 + cols), width = k1 - k0;
    T* tile = thread_buffer<T>(static_cast<std::size_t>(kTileRows * width));
    for (int64_t n0 = 0; n0 < N; n0 += kTileRows) {
      const int64_t n1 = std::min(N, n0 + kTileRows);
      widen_tile<Fmt>(w, K, n0, n1, k0, k1, tile);
      // [M, n1 - n0] (columns n0..n1 of g) @ [n1 - n0, width] into columns k0..k1 of y
      tile_gemm(false, false, M, width, n1 - n0, g + n0, N, tile, width, n0 ? A(1) : A(0), y + k0, K);
    }
  }
}

// product_nt and product_nn for w's format: T as theirs.
template <class T>
void blocked_nt(Dtype wd, int64_t M, int64_t N, int64_t K, const T* x, const uint8_t* w, bool accumulate, acc_t<T>* y,
                int64_t ldy) {
  dispatch_blocks(wd, "linear", [&](auto fmt) { product_nt<decltype(fmt)>(M, N, K, x, w, accumulate, y, ldy); });
}
template <class T>
void blocked_nn(Dtype wd, int64_t M, int64_t N, int64_t K, const T* g, const uint8_t* w, acc_t<T>* y) {
  dispatch_blocks(wd, "matmul", [&](auto fmt) { product_nn<decltype(fmt)>(M, N, K, g, w, y); });
}

// Whether a product of x (rows of it) with a blocked weight runs on bf16 tiles: under autocast,
// a float32 x, oneDNN's bf16 kernels present, and more rows than a decoding step's (whose dot
// per weight row reads the blocks as they are, the faster way for one row).
bool on_bf16(const Tensor& x, int64_t rows) {
  return autocast_enabled() && x.dtype() == kFloat32 && bf16_gemm() == Bf16Gemm::OneDNN && rows >= kDotRows;
}

void check_frozen(const Tensor& w, const char* op) {
  check(!w.requires_grad(), op, ": a ", dtype_name(w.dtype()), " weight ", shape_str(w.shape()),
        " cannot require grad (it is a frozen base's; train adapters on it, or widen it with .to(kFloat32))");
}

void check_input(const Tensor& x, const Tensor& w, const char* op, const char* what) {
  check(x.dtype() == kFloat32 || x.dtype() == kFloat64, op, ": a ", dtype_name(w.dtype()),
        " weight multiplies float32 or float64 ", what, ", got ", dtype_name(x.dtype()));
}

}  // namespace

int64_t quantize_blocks(Dtype d, const float* x, int64_t n, void* out) {
  if (d == kQ8_0) return quantize_q8_0(x, n, out);
  if (d == kF16) return blocks::quantize_each(x, n, out, blocks::F16::kBytes, blocks::F16::quantize);
  check(d == kQ4_0, "quantize_blocks: expected q8_0, q4_0 or float16, got ", dtype_name(d),
        is_read_only_blocked(d) ? " (xgrad reads it from GGUF files but does not make it)" : "");
  return quantize_q4_0(x, n, out);
}

void dequantize_blocks(Dtype d, const void* data, int64_t n, float* out) {
  dispatch_blocks(d, "dequantize_blocks", [&](auto fmt) { blocks::widen_each<decltype(fmt)>(data, n, out); });
}

void dequantize_blocks(Dtype d, const void* data, int64_t n, double* out) {
  dispatch_blocks(d, "dequantize_blocks", [&](auto fmt) { blocks::widen_each<decltype(fmt)>(data, n, out); });
}

int64_t first_nonfinite_block_scale(Dtype d, const void* data, int64_t count) {
  check(is_blocked(d), "first_nonfinite_block_scale: expected a blocked dtype, got ", dtype_name(d));
  const auto* p = static_cast<const uint8_t*>(data);
  return dispatch_blocks(d, "first_nonfinite_block_scale", [&](auto fmt) { return decltype(fmt)::first_nonfinite(p, count); });
}

namespace detail {

// x: [..., in], w: [out, in] blocked, b: [out] -> [..., out]
// out = x @ w^T + b   =>   dx = g @ w,   db = sum of g over all rows   (w is frozen)
Tensor linear_blocked(const Tensor& x, const Tensor& w, const Tensor& b, const char* op) {
  check_input(x, w, op, "inputs");
  check_frozen(w, op);
  const int64_t C = x.shape().back(), OC = w.shape()[0];
  if (b.defined())
    check(b.dtype() == x.dtype(), op, ": bias is ", dtype_name(b.dtype()), " and input ", dtype_name(x.dtype()));
  const int64_t rows = shape_numel(Shape(x.shape().begin(), x.shape().end() - 1));
  Shape out_shape = x.shape();
  out_shape.back() = OC;
  Tensor out = empty(out_shape, x.dtype());
  const auto* pw = static_cast<const uint8_t*>(w.raw_data());
  const Dtype wd = w.dtype();
  const bool bf16 = on_bf16(x, rows);
  if (bf16) {  // under autocast: the tiles rounded to bf16, x too, float32 sums (as a bf16 weight's)
    float* po = out.data<float>();
    if (b.defined())
      for (int64_t i = 0; i < rows; ++i) std::memcpy(po + i * OC, b.data<float>(), sizeof(float) * OC);
    blocked_nt(wd, rows, OC, C, detail::bf16_operand(x, false).data<bfloat16>(), pw, b.defined(), po, OC);
  } else {
    const Tensor xc = x.contiguous();
    dispatch_float(x.dtype(), op, [&](auto tag) {
      using T = decltype(tag);
      T* po = out.data<T>();
      if (b.defined())
        for (int64_t i = 0; i < rows; ++i) std::memcpy(po + i * OC, b.data<T>(), sizeof(T) * OC);
      blocked_nt(wd, rows, OC, C, xc.data<T>(), pw, b.defined(), po, OC);
    });
  }
  std::vector<Tensor> inputs = {x, w};
  if (b.defined()) inputs.push_back(b);
  return record(out, std::move(inputs), op, saves({1}), [rows, C, OC, bf16](const Tensor& g, const Tensor&, const Grads& in) {
    Grads grads(in.size());
    const auto* pw = static_cast<const uint8_t*>(in[1].raw_data());
    const Dtype wd = in[1].dtype();
    if (wants(in, 0)) {  // [rows, OC] @ [OC, C]
      grads[0] = empty(in[0].shape(), g.dtype());
      if (bf16) {
        blocked_nn(wd, rows, OC, C, detail::bf16_operand(g, false).data<bfloat16>(), pw, grads[0].data<float>());
      } else {
        const Tensor gc = g.contiguous();
        dispatch_float(g.dtype(), "linear backward", [&](auto tag) {
          using T = decltype(tag);
          blocked_nn(wd, rows, OC, C, gc.data<T>(), pw, grads[0].data<T>());
        });
      }
    }
    if (in.size() > 2 && wants(in, 2)) grads[2] = g.contiguous().reshape({rows, OC}).sum(0);
    return grads;
  });
}

// a: [..., n], w: [n, m] blocked -> [..., m]
// out = a @ w   =>   da = g @ w^T   (w is frozen)
Tensor matmul_blocked(const Tensor& a, const Tensor& w, const char* op) {
  check_input(a, w, op, "operands");
  check_frozen(w, op);
  check(a.dim() >= 1 && w.dim() == 2 && a.shape().back() == w.shape()[0], op, ": shapes ", shape_str(a.shape()),
        " and ", shape_str(w.shape()), " (", dtype_name(w.dtype()),
        ") cannot be multiplied (a blocked right operand is a 2-D matrix)");
  const int64_t N = w.shape()[0], K = w.shape()[1];
  const int64_t rows = shape_numel(Shape(a.shape().begin(), a.shape().end() - 1));
  Shape out_shape = a.shape();
  out_shape.back() = K;
  Tensor out = empty(out_shape, a.dtype());
  const auto* pw = static_cast<const uint8_t*>(w.raw_data());
  const Dtype wd = w.dtype();
  const bool bf16 = on_bf16(a, rows);
  if (bf16) {
    blocked_nn(wd, rows, N, K, detail::bf16_operand(a, false).data<bfloat16>(), pw, out.data<float>());
  } else {
    const Tensor ac = a.contiguous();
    dispatch_float(a.dtype(), op, [&](auto tag) {
      using T = decltype(tag);
      blocked_nn(wd, rows, N, K, ac.data<T>(), pw, out.data<T>());
    });
  }
  return record(out, {a, w}, op, saves({1}), [rows, N, K, bf16](const Tensor& g, const Tensor&, const Grads& in) {
    Grads grads(2);
    if (!wants(in, 0)) return grads;
    const auto* pw = static_cast<const uint8_t*>(in[1].raw_data());
    const Dtype wd = in[1].dtype();
    grads[0] = empty(in[0].shape(), g.dtype());
    if (bf16) {
      blocked_nt(wd, rows, N, K, detail::bf16_operand(g, false).data<bfloat16>(), pw, false, grads[0].data<float>(), N);
      return grads;
    }
    const Tensor gc = g.contiguous();
    dispatch_float(g.dtype(), "matmul backward", [&](auto tag) {
      using T = decltype(tag);
      blocked_nt(wd, rows, N, K, gc.data<T>(), pw, false, grads[0].data<T>(), N);
    });
    return grads;
  });
}

Tensor embedding_blocked(const Tensor& w, const Tensor& ids) {
  check_frozen(w, "embedding");
  const int64_t C = w.shape()[1], N = ids.numel();
  Shape out_shape = ids.shape();
  out_shape.push_back(C);
  Tensor out = empty(out_shape, kFloat32);
  const auto* pw = static_cast<const uint8_t*>(w.raw_data());
  const int64_t* idx = ids.data<int64_t>();
  float* po = out.data<float>();
  dispatch_blocks(w.dtype(), "embedding", [&](auto fmt) {
    using Fmt = decltype(fmt);
#pragma omp parallel for schedule(static) if (N * C >= kParallelMin)
    for (int64_t i = 0; i < N; ++i) widen_tile<Fmt>(pw, C, idx[i], idx[i] + 1, 0, C, po + i * C);
  });
  return out;
}

}  // namespace detail

}  // namespace xg
