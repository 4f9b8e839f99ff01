// Shape ops, PyTorch's set for reshaping tensors (view, transpose, expand, cat, split, ...).
// reshape/view/flatten/squeeze/unsqueeze share the input's storage (data is contiguous);
// transpose/permute/expand/repeat materialise a contiguous copy (PyTorch returns views; here
// data is always contiguous).
#pragma once

#include <vector>

#include "autograd/tensor.hpp"

namespace xg {

// One size may be -1 (inferred). view and reshape are the same op here (no copy).
Tensor reshape(const Tensor& x, const Shape& shape);
Tensor view(const Tensor& x, const Shape& shape);
Tensor flatten(const Tensor& x, int64_t start_dim = 0, int64_t end_dim = -1);
Tensor unsqueeze(const Tensor& x, int64_t dim);
Tensor squeeze(const Tensor& x);               // removes every size-1 dim
Tensor squeeze(const Tensor& x, int64_t dim);  // removes dim if its size is 1, else no-op
Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1);
Tensor permute(const Tensor& x, const std::vector<int64_t>& dims);
// Broadcasts size-1 dims (and new leading dims) to `shape`; -1 keeps a size.
Tensor expand(const Tensor& x, const Shape& shape);
Tensor expand_as(const Tensor& x, const Tensor& other);
// Tiles x `repeats[i]` times along dim i (torch.Tensor.repeat; may add leading dims).
Tensor repeat(const Tensor& x, const std::vector<int64_t>& repeats);
Tensor cat(const std::vector<Tensor>& xs, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& xs, int64_t dim = 0);
// Pieces of `split_size` along dim (the last may be smaller), or of the given sizes.
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim = 0);
// `chunks` pieces of ceil(size / chunks) (torch.chunk; may return fewer).
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);
// Elements start .. start + length - 1 along dim.
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length);
// Python's x[..., start:end:step] along dim (negative start/end count from the end,
// clamped to the size like Python slices; step > 0).
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
// Lower/upper triangle of the last two dims, with torch's `diagonal` offset.
Tensor tril(const Tensor& x, int64_t diagonal = 0);
Tensor triu(const Tensor& x, int64_t diagonal = 0);

}  // namespace xg
