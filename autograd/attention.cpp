// scaled_dot_product_attention: scores by gemm, mask, fused stable softmax, dropout and the
// value product per (batch, kv head) "unit"; one fused backward.
//
// Units. A unit is (b, g) for kv head g and the rep = H / Hkv query heads that share k_g and
// v_g; its segments (runs of at most kRows rows forward, kBackwardRows backward, within one
// head) multiply against k_g, and dK_g, dV_g sum over the group's segments (GQA without
// repeat_kv). A causal segment only multiplies the keys its last row can see (the upper
// triangle is never computed).
//
// Products. Heads of at most 64 (kTiledMaxHead, and keys up to kTiledMaxKeys) multiply on the
// register-tiled kernels of detail/tiled_gemm.hpp, in segments of kTiledRows: no cost per call,
// so short segments skip more of a causal triangle; the rest go to BLAS (gemm_backend.hpp).
//
// Memory. The weights live in per-thread scratch rows; forward saves only each row's
// max and 1/sum ([B, H, Tq, 2]) and backward recomputes P = exp(scale q k^T + mask - max) / sum,
// as FlashAttention does: O(T) saved state instead of O(T^2), and no fresh T^2 buffers to
// page-fault in. Small problems (kKeptWeightsMax) keep P instead, which then stays in the L2
// cache until backward.
//
// Layout. Every operand is read through a RowLayout, so q, k and v may be separate
// [B, heads, T, hs] tensors or the heads of one packed projection [B, T, heads, hs]
// (scaled_dot_product_attention_packed), and the output [B, H, Tq, hv] or [B, Tq, H hv].
//
// Threads. OpenMP over segments (forward) and units (backward), OpenBLAS called inside the
// parallel region, where the OpenMP build of OpenBLAS runs single-threaded by itself (it
// checks omp_in_parallel). NOTE: not a serial loop of multithreaded gemms: a head's products
// are too small to share between threads, and the threads would meet at every product
// instead of once per pass. Small problems run on one thread. The measurements behind the
// constants below: bench/README.md, "Design measurements behind the code".
#include "autograd/attention.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "autograd/autocast.hpp"
#include "autograd/bfloat16.hpp"
#include "autograd/broadcast.hpp"
#include "autograd/detail/blas.hpp"
#include "autograd/detail/gemv.hpp"
#include "autograd/detail/dispatch.hpp"
#include "autograd/gemm_backend.hpp"
#include "autograd/graph.hpp"
#include "autograd/detail/op_util.hpp"
#include "autograd/detail/kernels.hpp"
#include "autograd/detail/row_kernels.hpp"
#include "autograd/detail/tiled_gemm.hpp"
#include "autograd/detail/tiled_gemm_bf16.hpp"

namespace xg {

using Grads = std::vector<Tensor>;

namespace {

constexpr int64_t kRows = 64;           // query rows per forward segment
// NOTE: backward segments of 32 rows, half the forward's: a causal segment multiplies up to its
// last row's keys, so shorter segments skip more of the masked triangle, down to where BLAS's
// fixed cost per call takes the gain back (other lengths, backward or forward, gained nothing).
constexpr int64_t kBackwardRows = 32;  // query rows per backward segment
// Query rows per segment on the register-tiled kernels, forward and backward: with no cost per
// call, shorter causal segments skip more of the masked triangle.
constexpr int64_t kTiledRows = 16;
// The tiled kernels by default for heads of at most 64 while a unit's k^T (or v^T) holds at
// most kTiledMaxKeys elements: there they beat BLAS, from tiny's shapes up to 2048 keys at a
// head of 64. A head of 128 gains nothing, and past 2048 keys they are unmeasured, so BLAS
// there. Without AVX-512 the tile has fewer accumulators: AVX2 builds win at 256 keys, tie at
// 512 and lose from 1024 (AttentionProductsForwardBackward), so up to 256 keys at hs 64 there.
constexpr int64_t kTiledMaxHead = 64;
#if defined(__AVX512F__)
constexpr int64_t kTiledMaxKeys = 2048 * 64;
#else
constexpr int64_t kTiledMaxKeys = 256 * 64;
#endif
// By default backward keeps the weights P instead of recomputing them while they have at most
// this many elements (512 KB in float32: they stay in the L2 cache): tiny's 65,536 a layer are
// kept; small's 524,288 leave the cache, and reading them back costs more than recomputing.
constexpr int64_t kKeptWeightsMax = int64_t{1} << 17;
constexpr double kBoolMasked = -1e9;  // hand-written attention's usual masked_fill value

enum class MaskKind { None, Keep, Additive };

// Where an operand's rows are: row t of head h of batch b starts at element
// off + b sb + h sh + t st. Separate tensors [B, heads, T, width] are contiguous
// (sb = heads T width, sh = T width, st = width); in a packed projection [B, T, C] the heads
// sit side by side in each token's row (sb = T C, sh = width, st = C, off = the first column).
struct RowLayout {
  int64_t off = 0, sb = 0, sh = 0, st = 0;
  int64_t at(int64_t b, int64_t h, int64_t t) const { return off + b * sb + h * sh + t * st; }
  static RowLayout contiguous(int64_t heads, int64_t T, int64_t width) {
    return {0, heads * T * width, T * width, width};
  }
};

// Everything the kernels need; shapes and flags only (captured by the backward closure).
struct AttentionPlan {
  int64_t B = 0, H = 0, Hkv = 0, Tq = 0, Tk = 0, hs = 0, hv = 0, rep = 1;
  RowLayout lq, lk, lv, lo;  // q, k, v, out (and their gradients, and g for out)
  double scale = 1;
  bool causal = false;
  MaskKind mask = MaskKind::None;
  std::array<int64_t, 4> ms{};  // mask strides read as [B, H, Tq, Tk] (0 on broadcast axes)
  bool dropout = false;
  bool tiled = false;  // the products on tiled_gemm.hpp's kernels, not BLAS
  bool bf16 = false;   // ... in bf16 with float32 sums (UnitProductsBf16): float32 under autocast

  int64_t units() const { return B * Hkv; }
  // Keys query i may see (all of them unless causal).
  int64_t visible(int64_t i) const { return causal ? std::min(Tk, i + (Tk - Tq) + 1) : Tk; }
};

// A run of rows [r0, r0 + n) of a unit that multiplies keys [0, kmax).
struct Segment {
  int64_t r0, n, kmax;
};

// The segments of a unit (the same for every unit): blocks of `block` rows within one head
// (a head's rows are evenly spaced in every layout), each stopping at the last key its last
// row sees (the upper triangle of a causal mask is never computed).
std::vector<Segment> make_segments(const AttentionPlan& p, int64_t block) {
  std::vector<Segment> segs;
  for (int64_t h = 0; h < p.rep; ++h)
    for (int64_t i0 = 0; i0 < p.Tq; i0 += block) {
      const int64_t n = std::min(block, p.Tq - i0);
      segs.push_back({h * p.Tq + i0, n, p.visible(i0 + n - 1)});
    }
  return segs;
}

// Sets row[L, Lp) to -inf, Lp being L rounded up to whole vectors (at most Tk), and returns
// Lp: the exponentials of a row then run as whole vectors (exp(-inf) = 0 adds nothing to the
// sum) instead of ending in scalar libm calls, a sixth of a short-head attention's time.
template <class T>
int64_t pad_row(T* row, int64_t L, int64_t Tk) {
  constexpr int64_t W = static_cast<int64_t>(Batch<T>::size);
  const int64_t Lp = std::min(Tk, (L + W - 1) / W * W);
  std::fill(row + L, row + Lp, -std::numeric_limits<T>::infinity());
  return Lp;
}

// row[0, L) <- softmax(row[0, L)) (max subtracted, sums in double), row[L, Tk) <- 0.
// Writes the row's max and 1/sum to stats[0], stats[1], from which backward recomputes the
// very same weights. An all -inf row becomes NaN, as PyTorch's softmax.
template <class T>
void softmax_row(T* row, int64_t L, int64_t Tk, T* stats) {
  const T m = row_max(row, L);
  const double total = exp_shifted(row, m, row, pad_row(row, L, Tk));
  const T inv = static_cast<T>(1 / total);
#pragma omp simd
  for (int64_t j = 0; j < L; ++j) row[j] *= inv;
  std::fill(row + L, row + Tk, T(0));
  stats[0] = m;
  stats[1] = inv;
}

// row[0, L) <- exp(row[0, L) - max) / sum with the forward's saved max and 1/sum: the same
// operations in the same order (exp_shifted's blocks, the same padding), so the same
// weights. row[L, Tk) <- 0.
// NOTE: not exp(s - lse): in float32 a fully masked row (-1e9 everywhere) loses log(L) in
// -1e9 + log(L), and its weights would come back as 1 instead of 1/L.
template <class T>
void exp_row(T* row, int64_t L, int64_t Tk, const T* stats) {
  constexpr int64_t W = static_cast<int64_t>(Batch<T>::size);
  const T m = stats[0], inv = stats[1];
  const Batch<T> vm(m);
  const int64_t Lp = pad_row(row, L, Tk);
  for (int64_t b0 = 0; b0 < Lp; b0 += kSumBlock) {
    const int64_t b1 = std::min(Lp, b0 + kSumBlock);
    int64_t j = b0;
    for (; j + W <= b1; j += W) vexp(Batch<T>::load_unaligned(row + j) - vm).store_unaligned(row + j);
    for (; j < b1; ++j) row[j] = std::exp(row[j] - m);
  }
#pragma omp simd
  for (int64_t j = 0; j < L; ++j) row[j] *= inv;
  std::fill(row + L, row + Tk, T(0));
}

// sum_j a[j] b[j] over [0, n): float partial sums in a vector, flushed into a double every
// kSumBlock elements as exp_shifted sums (not a double per product: those, reduced across 8 or
// 16 lanes at the end of every short row, cost a row more than its products).
template <class T>
double row_dot(const T* a, const T* b, int64_t n) {
  constexpr int64_t W = static_cast<int64_t>(Batch<T>::size);
  double total = 0;
  for (int64_t b0 = 0; b0 < n; b0 += kSumBlock) {
    const int64_t b1 = std::min(n, b0 + kSumBlock);
    Batch<T> acc(T(0));
    int64_t j = b0;
    for (; j + W <= b1; j += W) acc = xsimd::fma(Batch<T>::load_unaligned(a + j), Batch<T>::load_unaligned(b + j), acc);
    T part = xsimd::hadd(acc);
    for (; j < b1; ++j) part += a[j] * b[j];
    total += part;
  }
  return total;
}

// Unit u = (b, g): batch b, kv head g, query heads g rep .. (g + 1) rep - 1. row0 is the
// unit's first row in [B, H, Tq] order, which indexes the row statistics and the dropout draws.
struct UnitOffsets {
  int64_t b, g, row0;
};
UnitOffsets unit_offsets(const AttentionPlan& p, int64_t u) {
  const int64_t b = u / p.Hkv, g = u % p.Hkv;
  return {b, g, (b * p.H + g * p.rep) * p.Tq};
}

// Where segment s of unit uo starts in an operand of query rows (q, out, their gradients).
int64_t seg_at(const RowLayout& l, const AttentionPlan& p, const UnitOffsets& uo, const Segment& s) {
  return l.at(uo.b, uo.g * p.rep + s.r0 / p.Tq, s.r0 % p.Tq);
}

// Query rows per unit (b, kv head) up to which the tiled path takes the scores as dot products
// of each query row with k's rows (detail/gemv.hpp) instead of transposing k first: a decoded
// token's rows, for which the transpose (scalar gathers of the whole cached k) cost as much as
// the product.
constexpr int64_t kScoresByRowsOfK = 4;

// Which unit's k_g and v_g a thread's products read: point_at(uo) moves them to unit uo and
// says whether it changed (a thread's segments are contiguous: mostly one change per unit).
template <class T>
struct UnitOperands {
  const AttentionPlan& p;
  const T* k;
  const T* v;
  int64_t unit = -1;
  const T* k_g = nullptr;
  const T* v_g = nullptr;
  bool point_at(const UnitOffsets& uo) {
    const int64_t u = uo.b * p.Hkv + uo.g;
    if (u == unit) return false;
    unit = u;
    k_g = k + p.lk.at(uo.b, uo.g, 0);
    v_g = v + p.lv.at(uo.b, uo.g, 0);
    return true;
  }
};

// The products of one unit (b, g), on BLAS or on the register-tiled kernels (plan.tiled).
// BLAS reads k_g and v_g transposed through its flag; the tiled kernels multiply by k_g^T and
// v_g^T, copied once per unit into per-thread scratch [hs, Tk] / [hv, Tk]. Score-shaped
// operands (S, W, dS) have leading dim Tk; the others their layout's row stride.
template <class T>
class UnitProducts {
 public:
  UnitProducts(const AttentionPlan& p, const T* k, const T* v, bool need_kT, bool need_vT)
      : p_(p), at_{p, k, v}, by_rows_of_k_(p.tiled && p.Tq * p.rep <= kScoresByRowsOfK),
        kT_(p.tiled && need_kT && !by_rows_of_k_ ? static_cast<std::size_t>(p.hs * p.Tk) : 0),
        vT_(p.tiled && need_vT ? static_cast<std::size_t>(p.hv * p.Tk) : 0) {}

  // Points the products at unit uo's k_g and v_g (transposing them on the tiled path).
  void set_unit(const UnitOffsets& uo) {
    if (!at_.point_at(uo)) return;
    k_g_ = at_.k_g;
    v_g_ = at_.v_g;
    if (!kT_.empty()) tiled::transpose(k_g_, p_.Tk, p_.hs, p_.lk.st, kT_.data(), p_.Tk);
    if (!vT_.empty()) tiled::transpose(v_g_, p_.Tk, p_.hv, p_.lv.st, vT_.data(), p_.Tk);
  }
  const T* k_g() const { return k_g_; }
  const T* v_g() const { return v_g_; }

  // S[n, kmax] = alpha x k_g^T for x [n, hs] (row stride ldx)
  void by_kT(int64_t n, int64_t kmax, T alpha, const T* x, int64_t ldx, T* S) const {
    if (by_rows_of_k_) {
      for (int64_t r = 0; r < n; ++r) {
        T* row = S + r * p_.Tk;
        gemv::row_by_transposed(0, kmax, p_.hs, x + r * ldx, k_g_, p_.lk.st, T(0), row);
#pragma omp simd
        for (int64_t j = 0; j < kmax; ++j) row[j] *= alpha;
      }
    } else if (p_.tiled)
      tiled::gemm(n, kmax, p_.hs, alpha, x, ldx, int64_t{1}, kT_.data(), p_.Tk, S, p_.Tk, false);
    else
      blas::gemm(false, true, n, kmax, p_.hs, alpha, x, ldx, k_g_, p_.lk.st, T(0), S, p_.Tk);
  }
  // dW[n, kmax] = g v_g^T for g [n, hv] (row stride ldg)
  void by_vT(int64_t n, int64_t kmax, const T* g, int64_t ldg, T* dW) const {
    if (p_.tiled)
      tiled::gemm(n, kmax, p_.hv, T(1), g, ldg, int64_t{1}, vT_.data(), p_.Tk, dW, p_.Tk, false);
    else
      blas::gemm(false, true, n, kmax, p_.hv, T(1), g, ldg, v_g_, p_.lv.st, T(0), dW, p_.Tk);
  }
  // C[n, cols] = alpha W[n, 0:kmax] X[0:kmax, cols] (out = W v, dQ = scale dS k)
  void weights_by(int64_t n, int64_t cols, int64_t kmax, T alpha, const T* W, const T* X, int64_t ldx, T* C,
                  int64_t ldc) const {
    if (p_.tiled)
      tiled::gemm(n, cols, kmax, alpha, W, p_.Tk, int64_t{1}, X, ldx, C, ldc, false);
    else
      blas::gemm(false, false, n, cols, kmax, alpha, W, p_.Tk, X, ldx, T(0), C, ldc);
  }
  // C[0:kmax, cols] += alpha W[n, 0:kmax]^T X[n, cols] (dV += W^T g, dK += scale dS^T q)
  void weights_t_by(int64_t n, int64_t cols, int64_t kmax, T alpha, const T* W, const T* X, int64_t ldx, T* C,
                    int64_t ldc) const {
    if (p_.tiled)
      tiled::gemm(kmax, cols, n, alpha, W, int64_t{1}, p_.Tk, X, ldx, C, ldc, true);
    else
      blas::gemm(true, false, kmax, cols, n, alpha, W, p_.Tk, X, ldx, T(1), C, ldc);
  }

 private:
  const AttentionPlan& p_;
  UnitOperands<T> at_;
  const bool by_rows_of_k_;  // scores as dot products with k's rows, no k^T (few query rows)
  std::vector<T> kT_, vT_;
  const T* k_g_ = nullptr;
  const T* v_g_ = nullptr;
};

#if defined(__AVX512BF16__) && defined(__AVX512F__)
// UnitProducts's products in bf16 with float32 sums (tiled_gemm_bf16.hpp), for float32
// attention under autocast on a CPU with AVX512-BF16, as PyTorch's autocast runs q k^T and P v
// as bf16 matmuls. The unit's k and v are packed once per unit when a product first reads
// them: k^T and v^T in pairs along the head (scores, dW = g v^T), and k's and v's rows in pairs
// along the keys (out = P v, dQ = dS k). A product's other operand (a segment of q, g, the
// weights or dS) is rounded per call, as an autocast matmul rounds its float32 operands.
class UnitProductsBf16 {
 public:
  UnitProductsBf16(const AttentionPlan& p, const float* k, const float* v, bool, bool)
      : p_(p), at_{p, k, v}, hs2_((p.hs + 1) / 2), hv2_((p.hv + 1) / 2), tk2_((p.Tk + 1) / 2) {}

  void set_unit(const UnitOffsets& uo) {
    if (!at_.point_at(uo)) return;
    k_g_ = at_.k_g;
    v_g_ = at_.v_g;
    kT_.ready = vT_.ready = kR_.ready = vR_.ready = false;
  }
  const float* k_g() const { return k_g_; }
  const float* v_g() const { return v_g_; }

  // S[n, kmax] = alpha x k_g^T for x [n, hs] (row stride ldx)
  void by_kT(int64_t n, int64_t kmax, float alpha, const float* x, int64_t ldx, float* S) const {
    by_transposed(n, kmax, alpha, x, ldx, p_.hs, hs2_, transposed(kT_, k_g_, p_.hs, p_.lk.st), S);
  }
  // dW[n, kmax] = g v_g^T for g [n, hv] (row stride ldg)
  void by_vT(int64_t n, int64_t kmax, const float* g, int64_t ldg, float* dW) const {
    by_transposed(n, kmax, 1.0f, g, ldg, p_.hv, hv2_, transposed(vT_, v_g_, p_.hv, p_.lv.st), dW);
  }
  // C[n, cols] = alpha W[n, 0:kmax] X[0:kmax, cols], X = v_g (out = W v) or k_g (dQ = scale dS k)
  void weights_by(int64_t n, int64_t cols, int64_t kmax, float alpha, const float* W, const float* X, int64_t ldx,
                  float* C, int64_t ldc) const {
    // X is always the unit's v_g or k_g (forward_kernel and backward_kernel pass nothing else),
    // whose packed rows are kept for the unit.
    const uint16_t* Xp = X == v_g_ ? paired_rows(vR_, v_g_, p_.hv, ldx) : paired_rows(kR_, k_g_, p_.hs, ldx);
    const int64_t k2 = (kmax + 1) / 2;
    a_.resize(static_cast<std::size_t>(n * 2 * k2));
    tiled_bf16::rows_to_bf16(W, n, kmax, p_.Tk, a_.data(), 2 * k2);
    tiled_bf16::gemm(n, cols, k2, alpha, a_.data(), k2, 1, Xp, cols, C, ldc, false);
  }
  // C[0:kmax, cols] += alpha W[n, 0:kmax]^T X[n, cols] (dV += W^T g, dK += scale dS^T q)
  void weights_t_by(int64_t n, int64_t cols, int64_t kmax, float alpha, const float* W, const float* X, int64_t ldx,
                    float* C, int64_t ldc) const {
    const int64_t n2 = (n + 1) / 2;
    // A = W^T [kmax, n]: W's rows in pairs along n, Wp[r / 2][j] = (W[r][j], W[r + 1][j]), read
    // with A(j, r / 2) = Wp[r / 2][j] (ai = 1, ak = kmax).
    a_.resize(static_cast<std::size_t>(n2 * kmax * 2));
    tiled_bf16::pack_rows_in_pairs(W, n, kmax, p_.Tk, a_.data(), kmax);
    b_.resize(static_cast<std::size_t>(n2 * cols * 2));
    tiled_bf16::pack_rows_in_pairs(X, n, cols, ldx, b_.data(), cols);
    tiled_bf16::gemm(kmax, cols, n2, alpha, a_.data(), 1, kmax, b_.data(), cols, C, ldc, true);
  }

 private:
  struct Packed {
    std::vector<uint16_t> data;
    bool ready = false;
  };
  // x [n, width] rounded, times Bp (width in pairs) into S [n, kmax] (leading dim Tk).
  void by_transposed(int64_t n, int64_t kmax, float alpha, const float* x, int64_t ldx, int64_t width, int64_t w2,
                     const uint16_t* Bp, float* S) const {
    a_.resize(static_cast<std::size_t>(n * 2 * w2));
    tiled_bf16::rows_to_bf16(x, n, width, ldx, a_.data(), 2 * w2);
    tiled_bf16::gemm(n, kmax, w2, alpha, a_.data(), w2, 1, Bp, p_.Tk, S, p_.Tk, false);
  }
  // src^T ([width, Tk] for src [Tk, width]) in pairs along width, packed once per unit.
  const uint16_t* transposed(Packed& c, const float* src, int64_t width, int64_t lds) const {
    if (!c.ready) {
      const int64_t w2 = (width + 1) / 2;
      c.data.resize(static_cast<std::size_t>(w2 * p_.Tk * 2));
      row_.resize(static_cast<std::size_t>(2 * w2));
      tiled_bf16::pack_transposed_in_pairs(src, p_.Tk, width, lds, c.data.data(), p_.Tk, row_.data());
      c.ready = true;
    }
    return c.data.data();
  }
  // src's rows [Tk, width] in pairs along the keys, packed once per unit.
  const uint16_t* paired_rows(Packed& c, const float* src, int64_t width, int64_t lds) const {
    if (!c.ready) {
      c.data.resize(static_cast<std::size_t>(tk2_ * width * 2));
      tiled_bf16::pack_rows_in_pairs(src, p_.Tk, width, lds, c.data.data(), width);
      c.ready = true;
    }
    return c.data.data();
  }

  const AttentionPlan& p_;
  UnitOperands<float> at_;
  const int64_t hs2_, hv2_, tk2_;
  const float* k_g_ = nullptr;
  const float* v_g_ = nullptr;
  mutable Packed kT_, vT_, kR_, vR_;
  mutable std::vector<uint16_t> a_, b_, row_;  // a product's rounded operands
};
#endif

// The masked scores of one segment into S (leading dim Tk): S = scale q k^T, then a bool
// mask's dropped entries set to -1e9 or an additive mask added, on each row's visible keys.
template <class T, class MM>
void segment_scores(const AttentionPlan& p, const UnitOffsets& uo, const Segment& s, const T* q, const MM& mm,
                    const void* mask, T* S) {
  mm.by_kT(s.n, s.kmax, static_cast<T>(p.scale), q + seg_at(p.lq, p, uo, s), p.lq.st, S);
  if (p.mask == MaskKind::None) return;
  for (int64_t rr = 0; rr < s.n; ++rr) {
    const int64_t r = s.r0 + rr, h = uo.g * p.rep + r / p.Tq, i = r % p.Tq;
    const int64_t L = p.visible(i), off = uo.b * p.ms[0] + h * p.ms[1] + i * p.ms[2], sj = p.ms[3];
    T* row = S + rr * p.Tk;
    if (p.mask == MaskKind::Keep) {
      const bool* m = static_cast<const bool*>(mask) + off;
      for (int64_t j = 0; j < L; ++j)
        if (!m[j * sj]) row[j] = static_cast<T>(kBoolMasked);
    } else {
      const T* m = static_cast<const T*>(mask) + off;
      for (int64_t j = 0; j < L; ++j) row[j] += m[j * sj];
    }
  }
}

// dst[r, 0:kmax) = P[r, 0:kmax) * drop[r, 0:kmax) for n rows of leading dim Tk.
template <class T>
void apply_dropout(const T* P, const T* drop, T* dst, int64_t n, int64_t kmax, int64_t Tk) {
  for (int64_t r = 0; r < n; ++r) {
    const T* pr = P + r * Tk;
    const T* dr = drop + r * Tk;
    T* o = dst + r * Tk;
#pragma omp simd
    for (int64_t j = 0; j < kmax; ++j) o[j] = pr[j] * dr[j];
  }
}

// Forward over all segments of all units, in parallel; each thread's weights live in a
// rows x Tk scratch, or in `weights` [B, H, Tq, Tk] when backward keeps them. stats (when not
// null): [B, H, Tq, 2], each row's max and 1/sum.
template <class T, class MM = UnitProducts<T>>
void forward_kernel(const AttentionPlan& p, const T* q, const T* k, const T* v, const void* mask, const T* drop, T* stats,
                    T* weights, T* out, bool parallel) {
  const int64_t rows = p.tiled ? kTiledRows : kRows;
  const std::vector<Segment> segs = make_segments(p, rows);
  const int64_t ns = static_cast<int64_t>(segs.size()), total = p.units() * ns;
#pragma omp parallel if (parallel && total > 1)
  {
    std::vector<T> scratch(weights ? 0 : static_cast<std::size_t>(rows * p.Tk));
    std::vector<T> dropped(p.dropout ? static_cast<std::size_t>(rows * p.Tk) : 0);
    MM mm(p, k, v, true, false);
    T unused[2];
#pragma omp for schedule(static)
    for (int64_t t = 0; t < total; ++t) {
      const Segment& s = segs[static_cast<std::size_t>(t % ns)];
      const UnitOffsets uo = unit_offsets(p, t / ns);
      mm.set_unit(uo);  // a thread's segments are contiguous: mostly one transpose per unit
      const int64_t row = uo.row0 + s.r0;
      T* P = weights ? weights + row * p.Tk : scratch.data();
      segment_scores(p, uo, s, q, mm, mask, P);
      for (int64_t rr = 0; rr < s.n; ++rr)
        softmax_row(P + rr * p.Tk, p.visible((s.r0 + rr) % p.Tq), p.Tk, stats ? stats + 2 * (row + rr) : unused);
      const T* W = P;
      if (p.dropout) {
        apply_dropout(P, drop + row * p.Tk, dropped.data(), s.n, s.kmax, p.Tk);
        W = dropped.data();
      }
      mm.weights_by(s.n, p.hv, s.kmax, T(1), W, mm.v_g(), p.lv.st, out + seg_at(p.lo, p, uo, s), p.lo.st);
    }
  }
}

// Backward per unit (units run in parallel; a unit's segments accumulate its dK_g, dV_g), on
// the weights forward kept, or recomputed from the saved row max and 1/sum
// (P = exp(S - max) / sum):
//   dW = g v^T,  dV = W^T g,  dP = dW * drop,  dS = P * (dP - rowsum(dP * P)),
//   dQ = scale dS k,  dK = scale dS^T q   (W = P * drop, the weights the values saw)
// dS (unscaled) is the gradient of an additive mask: written to dS_full [B, H, Tq, Tk] when
// asked, else kept in a scratch. A bool mask's masked scores were replaced by a constant
// (masked_fill): their dS is 0, which matters in a fully masked row, where P is uniform.
template <class T, class MM = UnitProducts<T>>
void backward_kernel(const AttentionPlan& p, const T* g, const T* q, const T* k, const T* v, const void* mask, const T* stats,
                     const T* weights, const T* drop, T* dS_full, T* dq, T* dk, T* dv, bool parallel) {
  const std::vector<Segment> segs = make_segments(p, p.tiled ? kTiledRows : kBackwardRows);
  const int64_t U = p.units(), rows = std::min(p.tiled ? kTiledRows : kBackwardRows, std::max<int64_t>(p.Tq, 1));
  const bool need_dS = dq || dk || dS_full;
  const bool* keep = p.mask == MaskKind::Keep ? static_cast<const bool*>(mask) : nullptr;
#pragma omp parallel if (parallel && U > 1)
  {
    std::vector<T> scratch(weights ? 0 : static_cast<std::size_t>(rows * p.Tk));
    std::vector<T> dS_buf(need_dS && !dS_full ? static_cast<std::size_t>(rows * p.Tk) : 0);
    std::vector<T> dropped(p.dropout && dv ? static_cast<std::size_t>(rows * p.Tk) : 0);
    MM mm(p, k, v, !weights, need_dS);
#pragma omp for schedule(static)
    for (int64_t u = 0; u < U; ++u) {
      const UnitOffsets uo = unit_offsets(p, u);
      mm.set_unit(uo);
      T* dk_g = dk ? dk + p.lk.at(uo.b, uo.g, 0) : nullptr;
      T* dv_g = dv ? dv + p.lv.at(uo.b, uo.g, 0) : nullptr;
      for (int64_t t = 0; t < p.Tk; ++t) {
        if (dk_g) std::fill(dk_g + t * p.lk.st, dk_g + t * p.lk.st + p.hs, T(0));
        if (dv_g) std::fill(dv_g + t * p.lv.st, dv_g + t * p.lv.st + p.hv, T(0));
      }
      for (const Segment& s : segs) {
        const int64_t row = uo.row0 + s.r0;
        const T* g_seg = g + seg_at(p.lo, p, uo, s);
        const T* P = weights ? weights + row * p.Tk : scratch.data();
        if (!weights) {
          segment_scores(p, uo, s, q, mm, mask, scratch.data());
          for (int64_t rr = 0; rr < s.n; ++rr)
            exp_row(scratch.data() + rr * p.Tk, p.visible((s.r0 + rr) % p.Tq), p.Tk, stats + 2 * (row + rr));
        }
        if (dv) {  // dV_g += W^T g
          const T* W = P;
          if (p.dropout) {
            apply_dropout(P, drop + row * p.Tk, dropped.data(), s.n, s.kmax, p.Tk);
            W = dropped.data();
          }
          mm.weights_t_by(s.n, p.hv, s.kmax, T(1), W, g_seg, p.lo.st, dv_g, p.lv.st);
        }
        if (!need_dS) continue;
        T* dS = dS_full ? dS_full + row * p.Tk : dS_buf.data();
        mm.by_vT(s.n, s.kmax, g_seg, p.lo.st, dS);  // dW
        for (int64_t rr = 0; rr < s.n; ++rr) {
          const int64_t i = (s.r0 + rr) % p.Tq, L = p.visible(i);
          T* d = dS + rr * p.Tk;
          const T* pr = P + rr * p.Tk;
          if (p.dropout) {
            const T* dr = drop + (row + rr) * p.Tk;
#pragma omp simd
            for (int64_t j = 0; j < L; ++j) d[j] *= dr[j];
          }
          // rowsum(dP * P) over whole vectors where the segment's keys allow: past L, P is 0
          // and dP a finite product (g v^T), so the padding adds nothing.
          constexpr int64_t W = static_cast<int64_t>(Batch<T>::size);
          const T c = static_cast<T>(row_dot(d, pr, std::min(s.kmax, (L + W - 1) / W * W)));
#pragma omp simd
          for (int64_t j = 0; j < L; ++j) d[j] = pr[j] * (d[j] - c);
          std::fill(d + L, d + p.Tk, T(0));
          if (keep) {
            const int64_t h = uo.g * p.rep + (s.r0 + rr) / p.Tq;
            const bool* m = keep + uo.b * p.ms[0] + h * p.ms[1] + i * p.ms[2];
            for (int64_t j = 0; j < L; ++j)
              if (!m[j * p.ms[3]]) d[j] = T(0);
          }
        }
        const T sc = static_cast<T>(p.scale);
        if (dq) mm.weights_by(s.n, p.hs, s.kmax, sc, dS, mm.k_g(), p.lk.st, dq + seg_at(p.lq, p, uo, s), p.lq.st);
        if (dk) mm.weights_t_by(s.n, p.hs, s.kmax, sc, dS, q + seg_at(p.lq, p, uo, s), p.lq.st, dk_g, p.lk.st);
      }
    }
  }
}

std::atomic<int> g_products{static_cast<int>(AttentionProducts::Auto)};
std::atomic<int64_t> g_kept_weights_max{kKeptWeightsMax};

// The register-tiled kernels for short heads and keys (kTiledMaxHead, kTiledMaxKeys), BLAS for
// the rest, unless set_attention_products forces one.
bool use_tiled(int64_t hs, int64_t hv, int64_t keys) {
  switch (static_cast<AttentionProducts>(g_products.load(std::memory_order_relaxed))) {
    case AttentionProducts::Blas: return false;
    case AttentionProducts::Tiled: return true;
    default: {
      const int64_t head = std::max(hs, hv);
      return head <= kTiledMaxHead && keys * head <= kTiledMaxKeys;
    }
  }
}

// Enough work to split over threads: a few hundred thousand multiply-adds.
bool worth_parallel(const AttentionPlan& p) {
  return p.B * p.H * p.Tq * p.Tk * (p.hs + p.hv) >= 8 * kParallelMin;
}

// The settings every entry point shares, checked against the plan's shapes: the scale, the
// causal flag, the mask (its kind and broadcast strides), dropout, and the kind of products.
void plan_settings(AttentionPlan& p, const AttnMask& am, Dtype dt, double dropout_p, bool training, double scale,
                   const char* op) {
  p.rep = p.H / p.Hkv;
  p.scale = scale == 0 ? 1.0 / std::sqrt(static_cast<double>(p.hs)) : scale;
  p.causal = am.causal;
  check(!p.causal || p.Tk >= p.Tq, op, ": a causal mask needs at least as many keys as queries (aligned to the end), ",
        "got Tq = ", p.Tq, " and Tk = ", p.Tk);
  if (am.mask.defined()) {
    const Tensor& m = am.mask;
    const Shape full = {p.B, p.H, p.Tq, p.Tk};
    bool ok = m.dim() <= 4;
    for (int64_t d = 0; ok && d < m.dim(); ++d) {
      const int64_t n = m.size(-1 - d);
      ok = n == 1 || n == full[static_cast<std::size_t>(3 - d)];
    }
    check(ok, op, ": mask ", shape_str(m.shape()), " does not broadcast to [B, H, Tq, Tk] = ", shape_str(full));
    if (m.dtype() == kBool) {
      p.mask = MaskKind::Keep;
    } else {
      check(m.dtype() == dt, op, ": mask must be bool (true = keep) or additive of q's dtype ", dtype_name(dt),
            ", got ", dtype_name(m.dtype()));
      p.mask = MaskKind::Additive;
    }
    const Shape st = broadcast_strides(m.shape(), full);
    for (std::size_t d = 0; d < 4; ++d) p.ms[d] = st[d];
  }
  check(dropout_p >= 0 && dropout_p < 1, op, ": dropout_p must be in [0, 1), got ", dropout_p);
  p.dropout = training && dropout_p > 0;
  p.tiled = use_tiled(p.hs, p.hv, p.Tk);
  // Autocast's bf16 products where the CPU has bf16 dot products (bf16_gemm()), on the tiled
  // path (short heads), except a decoded token's few rows (dot products with k's rows).
  p.bf16 = tiled_bf16::kHaveBf16Tiles && p.tiled && dt == kFloat32 && autocast_enabled() &&
           bf16_gemm() == Bf16Gemm::OneDNN && p.Tq * p.rep > kScoresByRowsOfK;
}

// keys: how many of k's and v's positions to read (-1: all of them); their row strides stay
// those of the whole tensors.
AttentionPlan make_plan(const Tensor& q, const Tensor& k, const Tensor& v, const AttnMask& am, double dropout_p,
               bool training, double scale, int64_t keys = -1, const char* op = "scaled_dot_product_attention") {
  check(q.defined() && k.defined() && v.defined(), op, ": undefined q, k or v");
  check(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, op, ": expected q [B, H, Tq, hs], k [B, Hkv, Tk, hs], ",
        "v [B, Hkv, Tk, hv], got q ", shape_str(q.shape()), ", k ", shape_str(k.shape()), ", v ",
        shape_str(v.shape()));
  check(is_floating(q.dtype()), op, ": expected float32 or float64 tensors, got ", dtype_name(q.dtype()));
  check(k.dtype() == q.dtype() && v.dtype() == q.dtype(), op, ": dtype mismatch, q ", dtype_name(q.dtype()), ", k ",
        dtype_name(k.dtype()), ", v ", dtype_name(v.dtype()));
  AttentionPlan p;
  p.B = q.size(0);
  p.H = q.size(1);
  p.Tq = q.size(2);
  p.hs = q.size(3);
  p.Hkv = k.size(1);
  const int64_t capacity = k.size(2);
  p.Tk = keys < 0 ? capacity : keys;
  p.hv = v.size(3);
  const std::string shapes = str_cat("q ", shape_str(q.shape()), ", k ", shape_str(k.shape()), ", v ", shape_str(v.shape()));
  check(k.size(0) == p.B && v.size(0) == p.B, op, ": batch sizes differ: ", shapes);
  check(k.size(3) == p.hs, op, ": q and k head sizes differ (", p.hs, " vs ", k.size(3), "): ", shapes);
  check(v.size(1) == p.Hkv && v.size(2) == capacity, op, ": k and v must have the same heads and length, got ",
        shapes);
  check(p.Tk <= capacity, op, ": ", p.Tk, " keys asked of k and v holding ", capacity, ": ", shapes);
  check(p.Hkv > 0 && p.H % p.Hkv == 0, op, ": query heads ", p.H, " are not a multiple of kv heads ", p.Hkv, ": ",
        shapes);
  check(p.Tk > 0, op, ": no keys (Tk = 0): ", shapes);
  check(p.hs > 0, op, ": head size is 0: ", shapes);
  check(std::max({p.B * p.H * p.Tq * p.Tk, p.Tq * p.hs, p.Tk * p.hs, p.Tk * p.hv}) < INT_MAX, op,
        ": sizes exceed BLAS's 32-bit indexing: ", shapes);
  p.lq = RowLayout::contiguous(p.H, p.Tq, p.hs);
  p.lk = RowLayout::contiguous(p.Hkv, capacity, p.hs);
  p.lv = RowLayout::contiguous(p.Hkv, capacity, p.hv);
  p.lo = RowLayout::contiguous(p.H, p.Tq, p.hv);
  plan_settings(p, am, q.dtype(), dropout_p, training, scale, op);
  return p;
}

AttentionPlan make_packed_plan(const Tensor& qkv, int64_t n_heads, int64_t n_kv_heads, const AttnMask& am, double dropout_p,
                      bool training, double scale) {
  constexpr const char* op = "scaled_dot_product_attention_packed";
  check(qkv.defined(), op, ": undefined qkv");
  check(n_heads > 0 && n_kv_heads > 0 && n_heads % n_kv_heads == 0, op, ": n_heads ", n_heads,
        " must be a positive multiple of n_kv_heads ", n_kv_heads);
  const int64_t heads = n_heads + 2 * n_kv_heads;
  check(qkv.dim() == 4 && qkv.size(2) == heads, op, ": expected qkv [B, T, n_heads + 2 n_kv_heads = ", heads,
        ", hs], got ", shape_str(qkv.shape()));
  check(is_floating(qkv.dtype()), op, ": expected a float32 or float64 qkv, got ", dtype_name(qkv.dtype()));
  AttentionPlan p;
  p.B = qkv.size(0);
  p.Tq = p.Tk = qkv.size(1);
  p.H = n_heads;
  p.Hkv = n_kv_heads;
  p.hs = p.hv = qkv.size(3);
  check(p.Tk > 0, op, ": no keys (T = 0): qkv ", shape_str(qkv.shape()));
  check(p.hs > 0, op, ": head size is 0: qkv ", shape_str(qkv.shape()));
  const int64_t C = heads * p.hs, T = p.Tq;
  check(std::max({p.B * p.H * p.Tq * p.Tk, T * C}) < INT_MAX, op, ": sizes exceed BLAS's 32-bit indexing: qkv ",
        shape_str(qkv.shape()));
  // q, k, v: heads [0, H), [H, H + Hkv), [H + Hkv, H + 2 Hkv) of each token's row; out [B, T, H hs].
  p.lq = {0, T * C, p.hs, C};
  p.lk = {p.H * p.hs, T * C, p.hs, C};
  p.lv = {(p.H + p.Hkv) * p.hs, T * C, p.hs, C};
  p.lo = {0, T * p.H * p.hv, p.hv, p.H * p.hv};
  plan_settings(p, am, qkv.dtype(), dropout_p, training, scale, op);
  return p;
}

// Both entry points: runs the forward on plan p and records its backward. q, k and v live in
// `operands` (three tensors, or one packed qkv for all three: operand[i] says which holds q, k
// and v), read through the plan's layouts; the output has out_shape and the plan's layout lo.
// The backward gives each operand one gradient of its shape, dq, dk and dv written into it at
// their layouts (a packed gradient is covered whole by the three).
Tensor attend(std::shared_ptr<const AttentionPlan> p, std::vector<Tensor> inputs, std::array<std::size_t, 3> operand,
              const Shape& out_shape, const AttnMask& mask, double dropout_p, Generator* gen, const char* op) {
  const std::size_t n_operands = inputs.size();
  const bool mask_grad = p->mask == MaskKind::Additive && mask.mask.requires_grad();
  if (mask_grad) inputs.push_back(mask.mask);
  const bool save = needs_grad(inputs);
  const Dtype dt = inputs[0].dtype();
  Tensor out = empty(out_shape, dt);
  // What backward keeps of the weights: each row's max and 1/sum, O(T) instead of O(T^2), or
  // for a small problem the weights themselves (no scores to recompute).
  const bool keep_weights = save && p->B * p->H * p->Tq * p->Tk <= g_kept_weights_max.load(std::memory_order_relaxed);
  Tensor weights = keep_weights ? empty({p->B, p->H, p->Tq, p->Tk}, dt) : Tensor();
  Tensor stats = save && !keep_weights ? empty({p->B, p->H, p->Tq, 2}, dt) : Tensor();
  Tensor drop;  // 0 or 1/(1-p) per weight, drawn serially in row-major order (as xg::dropout)
  if (p->dropout) {
    drop = empty({p->B, p->H, p->Tq, p->Tk}, dt);
    Generator& rng = gen ? *gen : default_generator();
    dispatch_float(dt, op, [&](auto tag) {
      using T = decltype(tag);
      T* d = drop.data<T>();
      const T keep = static_cast<T>(1.0 / (1.0 - dropout_p));
      for (int64_t i = 0, n = drop.numel(); i < n; ++i) d[i] = rng.uniform() < dropout_p ? T(0) : keep;
    });
  }
  const bool parallel = worth_parallel(*p);
  dispatch_float(dt, op, [&](auto tag) {
    using T = decltype(tag);
    const void* m = p->mask == MaskKind::None ? nullptr : mask.mask.raw_data();
    auto ptr = [](Tensor& t) { return t.defined() ? t.data<T>() : nullptr; };
    const T* q = inputs[operand[0]].data<T>();
    const T* k = inputs[operand[1]].data<T>();
    const T* v = inputs[operand[2]].data<T>();
#if defined(__AVX512BF16__) && defined(__AVX512F__)
    if constexpr (std::is_same_v<T, float>)
      if (p->bf16)
        return forward_kernel<float, UnitProductsBf16>(*p, q, k, v, m, ptr(drop), ptr(stats), ptr(weights), out.data<T>(),
                                                       parallel);
#endif
    forward_kernel<T>(*p, q, k, v, m, ptr(drop), ptr(stats), ptr(weights), out.data<T>(), parallel);
  });
  if (!save) return out;
  // Saved for backward: the row statistics, the dropout draws and a mask that is not an
  // input (a bool mask, or an additive one that needs no gradient).
  Tensor saved_mask = p->mask != MaskKind::None && !mask_grad ? mask.mask : Tensor();
  // Saved: q, k and v (bf16 copies under autocast), and a mask that has a gradient.
  Saves saved{~uint64_t{0}, false};
  saved.bf16_ok = (uint64_t{1} << n_operands) - 1;
  return record(out, std::move(inputs), op, saved,
                [p, stats, weights, drop, saved_mask, parallel, operand, n_operands](const Tensor& g, const Tensor&,
                                                                                      const Grads& in) {
                  Grads grads(in.size());
                  const Dtype dt = g.dtype();
                  for (std::size_t i = 0; i < n_operands; ++i)
                    if (wants(in, i)) grads[i] = empty(in[i].shape(), dt);
                  const bool mask_grad = in.size() > n_operands && wants(in, n_operands);
                  if (mask_grad) grads[n_operands] = empty({p->B, p->H, p->Tq, p->Tk}, dt);  // summed to the mask's shape
                  const Tensor& m = in.size() > n_operands ? in[n_operands] : saved_mask;
                  dispatch_float(dt, "scaled_dot_product_attention backward", [&](auto tag) {
                    using T = decltype(tag);
                    auto ptr = [&](std::size_t i) { return grads[i].defined() ? grads[i].data<T>() : nullptr; };
                    auto saved = [](const Tensor& t) { return t.defined() ? t.data<T>() : nullptr; };
                    auto run = [&](auto kernel) {
                      kernel(*p, g.data<T>(), in[operand[0]].data<T>(), in[operand[1]].data<T>(),
                             in[operand[2]].data<T>(), m.defined() ? m.raw_data() : nullptr, saved(stats),
                             saved(weights), saved(drop), mask_grad ? grads[n_operands].data<T>() : nullptr,
                             ptr(operand[0]), ptr(operand[1]), ptr(operand[2]), parallel);
                    };
#if defined(__AVX512BF16__) && defined(__AVX512F__)
                    if constexpr (std::is_same_v<T, float>)
                      if (p->bf16) return run(backward_kernel<float, UnitProductsBf16>);
#endif
                    run(backward_kernel<T>);
                  });
                  return grads;
                });
}

}  // namespace

void set_attention_products(AttentionProducts which) { g_products.store(static_cast<int>(which)); }
AttentionProducts attention_products() { return static_cast<AttentionProducts>(g_products.load()); }
AttentionProducts attention_products_for(int64_t hs, int64_t hv, int64_t keys) {
  return use_tiled(hs, hv, keys) ? AttentionProducts::Tiled : AttentionProducts::Blas;
}
int64_t attention_tiled_max_keys() { return kTiledMaxKeys; }
bool attention_has_bf16_tiles() { return tiled_bf16::kHaveBf16Tiles; }
void set_attention_kept_weights_max(int64_t elements) {
  check(elements >= 0, "set_attention_kept_weights_max: expected a count >= 0, got ", elements);
  g_kept_weights_max.store(elements);
}
int64_t attention_kept_weights_max() { return g_kept_weights_max.load(); }

// q: [B, H, Tq, hs], k: [B, Hkv, Tk, hs], v: [B, Hkv, Tk, hv] -> [B, H, Tq, hv]
// out = W v,  W = dropout(P),  P = softmax(scale q k^T + mask)
//   =>   dV = W^T g,   dS = P * (dP - rowsum(dP * P)) with dP = (g v^T) * drop,
//        dQ = scale dS k,   dK = scale dS^T q,   dmask = dS   (dK, dV summed over each group)
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttnMask& mask,
                                    double dropout_p, bool training, double scale, Generator* gen) {
  auto p = std::make_shared<const AttentionPlan>(make_plan(q, k, v, mask, dropout_p, training, scale));
  return attend(p, {q, k, v}, {0, 1, 2}, {p->B, p->H, p->Tq, p->hv}, mask, dropout_p, gen,
                "scaled_dot_product_attention");
}

// The attention above on the first `keys` positions of k and v, read in place (a KV cache's
// buffers: row strides of the whole capacity).
Tensor scaled_dot_product_attention_prefix(const Tensor& q, const Tensor& k, const Tensor& v, int64_t keys,
                                           const AttnMask& mask, double dropout_p, bool training, double scale,
                                           Generator* gen) {
  constexpr const char* op = "scaled_dot_product_attention_prefix";
  check(keys >= 0, op, ": keys must be >= 0, got ", keys);
  auto p = std::make_shared<const AttentionPlan>(make_plan(q, k, v, mask, dropout_p, training, scale, keys, op));
  check(keys == k.size(2) || !needs_grad({q, k, v}), op, ": no gradient through part of k and v (", keys, " of ",
        k.size(2), " positions); narrow them first");
  return attend(p, {q, k, v}, {0, 1, 2}, {p->B, p->H, p->Tq, p->hv}, mask, dropout_p, gen, op);
}

// qkv: [B, T, H + 2 Hkv, hs] -> [B, T, H hs]: the attention above on q = qkv[:, :, :H],
// k = qkv[:, :, H:H + Hkv], v = qkv[:, :, H + Hkv:] (each transposed to heads first), read in
// place; its gradient is one tensor of qkv's shape holding dQ, dK and dV.
Tensor scaled_dot_product_attention_packed(const Tensor& qkv, int64_t n_heads, int64_t n_kv_heads,
                                           const AttnMask& mask, double dropout_p, bool training, double scale,
                                           Generator* gen) {
  auto p = std::make_shared<const AttentionPlan>(make_packed_plan(qkv, n_heads, n_kv_heads, mask, dropout_p, training, scale));
  return attend(p, {qkv}, {0, 0, 0}, {p->B, p->Tq, p->H * p->hv}, mask, dropout_p, gen,
                "scaled_dot_product_attention_packed");
}

}  // namespace xg
