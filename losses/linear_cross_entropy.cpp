// The LM head's linear and its cross-entropy, a block of rows at a time: each block's logits
// are made, turned into their gradient and multiplied back before the next block's exist.
#include "losses/linear_cross_entropy.hpp"

#include <algorithm>

#include "autograd/elementwise.hpp"
#include "autograd/graph.hpp"
#include "autograd/matmul.hpp"
#include "autograd/shape.hpp"
#include "losses/cross_entropy.hpp"
#include "losses/detail/util.hpp"

namespace xg::losses {

// loss = sum_blocks CE_sum(h_b W^T, t_b) [/ n_valid]
//   =>   dh_b = (softmax - onehot)_b W,   dW = sum_b (softmax - onehot)_b^T h_b   (times g [/ n_valid])
Tensor linear_cross_entropy(const Tensor& h, const Tensor& weight, const Tensor& targets, int64_t ignore_index,
                            Reduction reduction, int64_t chunk_rows) {
  const char* op = "linear_cross_entropy";
  detail::check_head_operands(h, weight, op);
  check(reduction != Reduction::None, op, ": reduction must be mean or sum (per-row losses need the whole logits)");
  check(chunk_rows >= 0, op, ": chunk_rows must be >= 0, got ", chunk_rows);
  const int64_t C = h.shape().back(), V = weight.shape()[0];
  const int64_t N = C == 0 ? 0 : h.numel() / C;
  check(targets.defined() && targets.dtype() == kInt64 && targets.numel() == N, op, ": targets must be int64 with ",
        N, " entries (one per row of h ", shape_str(h.shape()), ")");
  const Tensor rows = h.reshape({N, C});
  const Tensor t = targets.reshape({N});
  int64_t n_valid = 0;
  for (int64_t i = 0; i < N; ++i) n_valid += t.data<int64_t>()[i] != ignore_index;
  const int64_t block = chunk_rows > 0 ? chunk_rows : std::max<int64_t>(1, (int64_t{1} << 23) / std::max<int64_t>(V, 1));

  const bool want_h = wants_grad(h) && is_grad_enabled(), want_w = wants_grad(weight) && is_grad_enabled();
  Tensor dh = want_h ? empty({N, C}, h.dtype()) : Tensor();
  Tensor dw;
  double total = 0;
  for (int64_t r0 = 0; r0 < N; r0 += block) {
    const int64_t n = std::min(block, N - r0);
    NoGradGuard no_grad;
    const Tensor hb = narrow(rows, 0, r0, n), tb = narrow(t, 0, r0, n);
    Tensor dlogits = linear(hb, weight);  // [n, V]: the logits, then their gradient in place
    if (dlogits.dtype() != h.dtype()) dlogits = dlogits.to(h.dtype());
    total += detail::cross_entropy_sum_and_grad_(dlogits, tb, ignore_index, op);
    if (!want_h && !want_w) continue;
    if (want_h) {  // [n, V] @ [V, C]
      detail::put_rows(dh, r0, matmul(dlogits, weight).to(h.dtype()));
    }
    if (want_w) {  // [V, n] @ [n, C], summed over the blocks in order
      const Tensor dwb = matmul(dlogits.t(), hb);
      if (dw.defined()) dw.add_(dwb); else dw = dwb;
    }
  }
  const double scale = reduction == Reduction::Mean ? 1.0 / static_cast<double>(n_valid) : 1.0;
  // NOTE: Mean with every target ignored is 0/0 = NaN, as cross_entropy and PyTorch give.
  Tensor out = scalar_tensor(reduction == Reduction::Mean && n_valid == 0 ? total / 0.0 : total * scale, h.dtype());
  if (dh.defined()) dh = dh.reshape(h.shape());
  if (dw.defined() && dw.dtype() != weight.dtype()) dw = dw.to(weight.dtype());
  return record(out, {h, weight}, op, saves_nothing(), [dh, dw, scale](const Tensor& g, const Tensor&, const std::vector<Tensor>&) {
    const double s = g.item() * scale;
    return std::vector<Tensor>{dh.defined() ? dh * s : Tensor(), dw.defined() ? dw * s : Tensor()};
  });
}

}  // namespace xg::losses
