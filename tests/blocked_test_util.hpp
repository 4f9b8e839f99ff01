// What the tests of blocked weights (test_blocks.cpp: q8_0, q4_0; test_k_quants.cpp: the k-quants)
// share.
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <vector>

#include "tests/torch_fixture.hpp"

namespace xg::test {

// linear(x, w, b) for x [M, K] and a blocked w [N, K] against the float64 product of w widened
// (float64 x: only the sums' order differs; float32 x within 1e-4), and g w for g [M, N] (the
// gradient's product through w, and matmul's case) likewise. seed: x's, b's and g's.
inline void expect_blocked_products_match_widened(const Tensor& wq, int64_t M, uint64_t seed) {
  const int64_t N = wq.size(0), K = wq.size(1);
  const std::string what = str_cat(dtype_name(wq.dtype()), " [", N, ", ", K, "], ", M, " rows");
  const Tensor w64 = wq.to(kFloat64);
  const Tensor b64 = randn64({N}, seed).detach(), x64 = randn64({M, K}, seed + 1).detach();
  const Tensor expected = linear(x64, w64, b64);
  EXPECT_TRUE(tensors_close(linear(x64, wq, b64), expected, 1e-12, 1e-12)) << what;
  EXPECT_TRUE(tensors_close(linear(x64.to(kFloat32), wq, b64.to(kFloat32)).to(kFloat64), expected, 1e-4, 1e-4)) << what;
  const Tensor g64 = randn64({M, N}, seed + 2).detach();
  EXPECT_TRUE(tensors_close(matmul(g64, wq), matmul(g64, w64), 1e-12, 1e-12)) << what;
  EXPECT_TRUE(tensors_close(matmul(g64.to(kFloat32), wq).to(kFloat64), matmul(g64, w64), 1e-4, 1e-4)) << what;
}

// x w^T and g w for a blocked w [N, K] and each row count (a dot per row below 4 rows, register
// tiles, and from 2^26 multiply-adds BLAS): the same bits on 1 thread and on 2.
inline void expect_blocked_products_thread_independent(const Tensor& wq, std::initializer_list<int64_t> row_counts,
                                                       uint64_t seed) {
  const int64_t N = wq.size(0), K = wq.size(1);
  for (int64_t rows : row_counts) {
    const Tensor x = randn64({rows, K}, seed).detach().to(kFloat32);
    const Tensor g = randn64({rows, N}, seed + 1).detach().to(kFloat32);
    std::vector<double> y[2], dx[2];
    for (int t : {1, 2}) {
      OmpThreadsScope threads(t);
      y[t - 1] = linear(x, wq).to_vector();
      dx[t - 1] = matmul(g, wq).to_vector();
    }
    EXPECT_EQ(y[0], y[1]) << rows;
    EXPECT_EQ(dx[0], dx[1]) << rows;
  }
}

}  // namespace xg::test
