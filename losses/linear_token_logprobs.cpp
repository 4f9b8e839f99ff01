// log softmax(h W^T)[target] per row, a block of rows at a time (linear_token_logprobs.hpp).
#include "losses/linear_token_logprobs.hpp"

#include <algorithm>
#include <vector>

#include "autograd/detail/op_util.hpp"
#include "autograd/elementwise.hpp"
#include "autograd/graph.hpp"
#include "autograd/matmul.hpp"
#include "autograd/shape.hpp"
#include "losses/cross_entropy.hpp"
#include "losses/detail/util.hpp"

namespace xg::losses {

namespace {

// Block b's logits h_b W^T [n, V] in h's dtype: their cross-entropy per row into `nll` and, with
// `grad`, row_scale_i (softmax - onehot)_i written over them.
Tensor block_logits(const Tensor& hb, const Tensor& weight, const Tensor& tb, int64_t ignore_index, double* nll,
                    bool grad, const Tensor& row_scale, const char* op) {
  Tensor logits = linear(hb, weight);
  if (logits.dtype() != hb.dtype()) logits = logits.to(hb.dtype());
  detail::cross_entropy_rows_and_grad_(logits, tb, ignore_index, op, nll, grad, row_scale);
  return logits;
}

}  // namespace

// out_i = log softmax(h_i W^T)[t_i]
//   =>   dh_i = g_i (onehot - softmax_i) W,   dW = sum_i g_i (onehot - softmax_i)^T h_i
Tensor linear_token_logprobs(const Tensor& h, const Tensor& weight, const Tensor& targets, int64_t ignore_index,
                             int64_t chunk_rows) {
  const char* op = "linear_token_logprobs";
  detail::check_head_operands(h, weight, op);
  check(chunk_rows >= 0, op, ": chunk_rows must be >= 0, got ", chunk_rows);
  const Shape lead(h.shape().begin(), h.shape().end() - 1);
  check(targets.defined() && targets.dtype() == kInt64 && targets.shape() == lead, op, ": targets must be int64 ",
        shape_str(lead), " (h's shape without its last dim), got ",
        targets.defined() ? str_cat(dtype_name(targets.dtype()), " ", shape_str(targets.shape())) : std::string("undefined"));
  const int64_t C = h.shape().back(), V = weight.shape()[0];
  const int64_t N = shape_numel(lead);
  const Tensor rows = h.reshape({N, C}), t = targets.reshape({N});
  const int64_t block = chunk_rows > 0 ? chunk_rows : std::max<int64_t>(1, (int64_t{1} << 23) / std::max<int64_t>(V, 1));

  const bool want_h = wants_grad(h) && is_grad_enabled(), want_w = wants_grad(weight) && is_grad_enabled();
  // A frozen weight: each row's gradient direction (onehot - softmax_i) W, made now.
  const bool keep_direction = want_h && !want_w;
  Tensor direction = keep_direction ? empty({N, C}, h.dtype()) : Tensor();
  std::vector<double> nll(static_cast<std::size_t>(N));
  for (int64_t r0 = 0; r0 < N; r0 += block) {
    const int64_t n = std::min(block, N - r0);
    NoGradGuard no_grad;
    const Tensor hb = narrow(rows, 0, r0, n), tb = narrow(t, 0, r0, n);
    // (softmax - onehot) over the logits; the minus sign goes into backward's scale
    const Tensor dlogits = block_logits(hb, weight, tb, ignore_index, nll.data() + r0, keep_direction, Tensor(), op);
    if (keep_direction) detail::put_rows(direction, r0, matmul(dlogits, weight).to(h.dtype()));  // [n, V] @ [V, C]
  }
  for (double& x : nll) x = -x;  // log-probs
  const Tensor out = from_vector(nll, lead, h.dtype());
  if (keep_direction) {
    return record(out, {h, weight}, op, saves_nothing(), [direction, N](const Tensor& g, const Tensor&, const std::vector<Tensor>& in) {
      // dh_i = -g_i (softmax - onehot)_i W
      const Tensor dh = direction * (-g.contiguous().reshape({N, 1}).to(direction.dtype()));
      return std::vector<Tensor>{dh.reshape(in[0].shape()), Tensor()};
    });
  }
  // A weight that trains: backward makes each block's logits again.
  return record(out, {h, weight}, op, saves({0, 1}),
                [t, N, C, block, ignore_index, op](const Tensor& g, const Tensor&, const std::vector<Tensor>& in) {
                  const bool gh = wants(in, 0), gw = wants(in, 1);
                  const Tensor hr = in[0].reshape({N, C}), weight = in[1];
                  // row scale -g_i: the gradient of log softmax is onehot - softmax
                  const Tensor scale = (-g.contiguous().reshape({N})).to(in[0].dtype());
                  Tensor dh = gh ? empty({N, C}, in[0].dtype()) : Tensor(), dw;
                  std::vector<double> nll(static_cast<std::size_t>(std::min(block, N)));
                  for (int64_t r0 = 0; r0 < N; r0 += block) {
                    const int64_t n = std::min(block, N - r0);
                    const Tensor hb = narrow(hr, 0, r0, n);
                    const Tensor dlogits = block_logits(hb, weight, narrow(t, 0, r0, n), ignore_index, nll.data(), true,
                                                        narrow(scale, 0, r0, n).contiguous(), op);
                    if (gh) detail::put_rows(dh, r0, matmul(dlogits, weight).to(in[0].dtype()));  // [n, V] @ [V, C]
                    if (gw) {  // [V, n] @ [n, C], summed over the blocks in order
                      const Tensor dwb = matmul(dlogits.t(), hb);
                      if (dw.defined()) dw.add_(dwb); else dw = dwb;
                    }
                  }
                  if (dw.defined() && dw.dtype() != weight.dtype()) dw = dw.to(weight.dtype());
                  return std::vector<Tensor>{gh ? dh.reshape(in[0].shape()) : Tensor(), dw};
                });
}

}  // namespace xg::losses
