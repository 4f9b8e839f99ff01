// Tests for the test helpers themselves: a comparison that cannot fail proves nothing.
#include "tests/torch_fixture.hpp"

using namespace xg;

TEST(TorchFixture, TensorsCloseReportsTheWorstElement) {
  Tensor e = tensor({{1.0, 2.0}, {3.0, 4.0}});
  EXPECT_TRUE(test::tensors_close(e, e, 1e-5, 1e-6));
  Tensor a = tensor({{1.0, 2.0}, {3.1, 4.0}});
  ::testing::AssertionResult r = test::tensors_close(a, e, 1e-5, 1e-6);
  EXPECT_FALSE(r);
  EXPECT_NE(std::string(r.message()).find("worst at [1,0]: actual 3.0999999"), std::string::npos) << r.message();
  EXPECT_FALSE(test::tensors_close(zeros({2}), zeros({3}), 1, 1));
  EXPECT_FALSE(test::tensors_close(zeros({2}), zeros({2}, kFloat64), 1, 1));
  EXPECT_FALSE(test::tensors_close(tensor({NAN}), tensor({1.0}), 1, 1));
}

TEST(TorchFixture, EveryFixtureHasBothDtypes) {
  for (const char* file : {"elementwise", "reduce", "softmax", "matmul", "shape", "index"}) {
    for (const auto& [name, t] : test::fixture(file)) {
      if (name.find(".f32.") == std::string::npos) continue;
      std::string twin = name;
      twin.replace(twin.find(".f32."), 5, ".f64.");
      EXPECT_TRUE(test::fixture(file).count(twin)) << file << ": " << name << " has no float64 twin";
    }
  }
}
