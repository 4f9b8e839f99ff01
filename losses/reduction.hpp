// How a loss reduces its per-element values to what it returns, as PyTorch's `reduction=`
// string: "none", "mean", "sum", and kl_div's "batchmean".
#pragma once

namespace xg::losses {

enum class Reduction {
  None,       // per-element values, in the input's shape (without the class dim)
  Mean,       // the mean (cross_entropy: over the targets that are not ignored)
  Sum,        // the sum
  BatchMean,  // kl_div only: the sum divided by the batch size (size of dim 0)
};

inline const char* reduction_name(Reduction r) {
  switch (r) {
    case Reduction::None:
      return "none";
    case Reduction::Mean:
      return "mean";
    case Reduction::Sum:
      return "sum";
    case Reduction::BatchMean:
      return "batchmean";
  }
  return "?";
}

}  // namespace xg::losses
