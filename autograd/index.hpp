// Indexing ops with int64 indices: gather, index_select, embedding lookup, index_add,
// topk, argmax/argmin, one_hot. Out-of-range indices are errors naming the index.
#pragma once

#include "autograd/tensor.hpp"

namespace xg {

// out[i][j][k] = x[i][index[i][j][k]][k] for dim = 1 (torch.gather)   =>   dx = scatter_add of g
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
// Entries of x along dim at the 1-D index   =>   dx = index_add of g
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
// weight: [V, C], ids: any int64 shape -> [..., C]; rows of padding_idx (if >= 0) get no gradient
Tensor embedding(const Tensor& weight, const Tensor& ids, int64_t padding_idx = -1);
// x with source's slices added at index along dim (out-of-place torch.index_add, alpha 1)
//   =>   dx = g,   dsource = index_select(g, dim, index)
Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source);
// k largest (or smallest) along dim, sorted; values differentiable, indices int64.
struct TopK {
  Tensor values;
  Tensor indices;
};
TopK topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true);
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);  // first maximum
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim = false);
// int64 [...] -> int64 [..., num_classes] (torch.nn.functional.one_hot); -1 infers max + 1.
Tensor one_hot(const Tensor& ids, int64_t num_classes = -1);

}  // namespace xg
