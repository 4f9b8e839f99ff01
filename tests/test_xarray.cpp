// Tests for autograd/xarray.hpp: conversions between Tensor and xt::xarray.
#include "autograd/xarray.hpp"

#include <xtensor/xmath.hpp>

#include "tests/torch_fixture.hpp"

using namespace xg;

TEST(Xarray, FromXarrayCopies) {
  xt::xarray<double> a = {{1.0, 2.0, 3.0}, {4.0, 5.0, 6.0}};
  Tensor t = from_xarray(a);
  EXPECT_EQ(t.dtype(), kFloat64);
  EXPECT_EQ(t.shape(), (Shape{2, 3}));
  EXPECT_EQ(t.to_vector(), (std::vector<double>{1, 2, 3, 4, 5, 6}));
  a(0, 0) = 9;
  EXPECT_EQ(t.to_vector()[0], 1.0);
  EXPECT_EQ(from_xarray(xt::xarray<int64_t>{3, 4}).dtype(), kInt64);
}

TEST(Xarray, AsXarraySharesStorage) {
  Tensor t = zeros({2, 2});
  auto view = as_xarray<float>(t);
  view(1, 0) = 7.0f;
  EXPECT_EQ(t.to_vector(), (std::vector<double>{0, 0, 7, 0}));
  EXPECT_EQ(xt::sum(view)(), 7.0f);
  xt::xarray<float> copy = to_xarray<float>(t);
  EXPECT_EQ(copy.shape()[0], 2u);
  EXPECT_EQ(copy(1, 0), 7.0f);
}
