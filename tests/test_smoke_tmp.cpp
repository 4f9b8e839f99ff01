#include "tests/torch_fixture.hpp"
TEST(Smoke, AddMul) {
  xg::Tensor a = xg::tensor({1, 2, 3}, xg::kFloat64).requires_grad_();
  xg::Tensor b = xg::tensor({4, 5, 6}, xg::kFloat64).requires_grad_();
  xg::Tensor y = a * b + a;
  xg::backward({xg::sub(y, y * 0.5)}, {xg::ones({3}, xg::kFloat64)});
  EXPECT_EQ(a.grad().to_vector(), (std::vector<double>{2.5, 3, 3.5}));
}
