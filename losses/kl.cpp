// KL divergence: KL(P || Q) between logits, composed from the fused log_softmax; and
// kl_div's pointwise term as one fused op with a hand-derived backward, then reduced.
#include "losses/kl.hpp"

#include <cmath>

#include "autograd/detail/dispatch.hpp"
#include "autograd/elementwise.hpp"
#include "autograd/graph.hpp"
#include "autograd/detail/kernels.hpp"
#include "autograd/reduce.hpp"
#include "autograd/softmax.hpp"
#include "losses/detail/util.hpp"

namespace xg::losses {

using Grads = std::vector<Tensor>;

// out = mean_rows(sum_c P (log P - log Q)),  P = softmax(p), Q = softmax(q)
//   (backward through log_softmax, exp, mul, sum and mean)
Tensor kl_divergence(const Tensor& p_logits, const Tensor& q_logits) {
  const char* op = "kl_divergence";
  detail::check_float(p_logits, op, "p_logits");
  detail::check_like(p_logits, "p_logits", q_logits, "q_logits", op);
  check(p_logits.dim() >= 1, op, ": logits must have a class dim, got a 0-d tensor");
  const Tensor p_ls = log_softmax(p_logits, -1);
  const Tensor q_ls = log_softmax(q_logits, -1);
  const Tensor p_s = exp(p_ls);  // softmax(p), without a second pass over the logits
  return mean(sum(p_s * (p_ls - q_ls), {-1}));
}

namespace {

// The pointwise term of kl_div, same-shape inputs.
//   out = t > 0 ? t (log t - x) : 0             =>  dx = -g t,       dt = g (log t + 1 - x)   (0 where t == 0)
//   log_target: out = exp(t) (t - x)            =>  dx = -g exp(t),  dt = g exp(t) (t - x + 1) (0 where exp(t) == 0)
Tensor kl_pointwise(const Tensor& x, const Tensor& t, bool log_target) {
  Tensor out = dispatch_float(x.dtype(), "kl_div", [&](auto tag) {
    using T = decltype(tag);
    return zip_tensor<T>(x, t, [log_target](T xi, T ti) {
      if (log_target) {
        const T e = std::exp(ti);
        return e == T(0) ? T(0) : e * (ti - xi);
      }
      return ti > T(0) ? ti * (std::log(ti) - xi) : T(0);
    });
  });
  return record(out, {x, t}, "kl_div", saves({0, 1}), [log_target](const Tensor& g, const Tensor&, const Grads& in) {
    Tensor dx, dt;
    dispatch_float(g.dtype(), "kl_div backward", [&](auto tag) {
      using T = decltype(tag);
      const T* pg = g.data<T>();
      const T* px = in[0].data<T>();
      const T* pt = in[1].data<T>();
      const int64_t n = g.numel();
      if (in[0].requires_grad()) {
        dx = empty(g.shape(), g.dtype());
        T* d = dx.data<T>();
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
        for (int64_t i = 0; i < n; ++i) d[i] = -pg[i] * (log_target ? std::exp(pt[i]) : pt[i]);
      }
      if (in[1].requires_grad()) {
        dt = empty(g.shape(), g.dtype());
        T* d = dt.data<T>();
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
        for (int64_t i = 0; i < n; ++i) {
          if (log_target) {
            const T e = std::exp(pt[i]);
            d[i] = e == T(0) ? T(0) : pg[i] * e * (pt[i] - px[i] + T(1));
          } else {
            d[i] = pt[i] > T(0) ? pg[i] * (std::log(pt[i]) + T(1) - px[i]) : T(0);
          }
        }
      }
    });
    return Grads{dx, dt};
  });
}

}  // namespace

Tensor kl_div(const Tensor& input, const Tensor& target, Reduction reduction, bool log_target) {
  const char* op = "kl_div";
  detail::check_float(input, op, "input");
  detail::check_like(input, "input", target, "target", op);
  const Tensor pointwise = kl_pointwise(input, target, log_target);
  switch (reduction) {
    case Reduction::None:
      return pointwise;
    case Reduction::Sum:
      return sum(pointwise);
    case Reduction::Mean:
      return mean(pointwise);
    case Reduction::BatchMean: {
      const int64_t batch = input.dim() == 0 ? 1 : input.size(0);
      return sum(pointwise) / static_cast<double>(batch);
    }
  }
  return pointwise;
}

}  // namespace xg::losses
