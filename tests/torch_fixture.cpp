// Fixture loading and tensor comparison for the tests.
#include "tests/torch_fixture.hpp"

#include <cmath>
#include <map>
#include <mutex>

namespace xg::test {

const TensorMap& fixture(const std::string& file) {
  static std::map<std::string, TensorMap> cache;
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(file);
  if (it == cache.end())
    it = cache.emplace(file, io::load_safetensors(std::string(XGRAD_FIXTURE_DIR) + "/" + file + ".safetensors")).first;
  return it->second;
}

::testing::AssertionResult tensors_close(const Tensor& actual, const Tensor& expected, double rtol, double atol) {
  if (!actual.defined()) return ::testing::AssertionFailure() << "actual tensor is undefined";
  if (actual.shape() != expected.shape())
    return ::testing::AssertionFailure() << "shape " << shape_str(actual.shape()) << " != expected "
                                         << shape_str(expected.shape());
  if (actual.dtype() != expected.dtype())
    return ::testing::AssertionFailure() << "dtype " << dtype_name(actual.dtype()) << " != expected "
                                         << dtype_name(expected.dtype());
  std::vector<double> a = actual.to_vector(), e = expected.to_vector();
  double scale = 1;
  for (double v : e)
    if (std::isfinite(v)) scale = std::max(scale, std::abs(v));
  double worst = -1, worst_excess = 0;
  std::size_t worst_i = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const bool same_special = (std::isnan(a[i]) && std::isnan(e[i])) || (std::isinf(e[i]) && a[i] == e[i]);
    if (same_special) continue;
    const double diff = std::abs(a[i] - e[i]);
    const double excess = std::isnan(diff) ? INFINITY : diff - (rtol * std::abs(e[i]) + atol * scale);
    if (excess > 0 && (worst < 0 || excess > worst_excess)) {
      worst = diff;
      worst_excess = excess;
      worst_i = i;
    }
  }
  if (worst < 0) return ::testing::AssertionSuccess();
  // Row-major index of the worst element.
  std::string idx;
  std::size_t rem = worst_i;
  for (std::size_t d = expected.shape().size(); d-- > 0;) {
    idx = std::to_string(rem % expected.shape()[d]) + (idx.empty() ? "" : ",") + idx;
    rem /= expected.shape()[d];
  }
  return ::testing::AssertionFailure() << "shape " << shape_str(expected.shape()) << ": worst at [" << idx
                                       << "]: actual " << a[worst_i] << ", expected " << e[worst_i] << ", diff "
                                       << worst << " (rtol " << rtol << ", atol " << atol << ")";
}

namespace {

// One dtype of one case: loads the inputs (and, with a module, its parameters), runs fn,
// and checks the output, input gradients and parameter gradients against the fixture.
void check_case(const TensorMap& fx, const std::string& key, bool f32, const Fn& fn, nn::Module* module) {
  const double rtol = f32 ? 1e-5 : 1e-10;
  const double atol = f32 ? 1e-6 : 1e-12;
  ASSERT_TRUE(fx.count(key + "out")) << "fixture has no case " << key << " (rerun make_fixtures.py)";
  if (module) {
    module->to(f32 ? kFloat32 : kFloat64);
    module->zero_grad();
    TensorMap params;
    const std::string pre = key + "param.";
    for (const auto& [k, v] : fx)
      if (k.compare(0, pre.size(), pre) == 0) params.emplace(k.substr(pre.size()), v);
    module->load_state_dict(params);
  }
  std::vector<Tensor> inputs;
  for (int i = 0;; ++i) {
    auto it = fx.find(key + "in" + std::to_string(i));
    if (it == fx.end()) break;
    Tensor x = it->second.clone().detach();  // a fresh leaf per run
    if (fx.count(key + "grad" + std::to_string(i))) x.requires_grad_(true);
    inputs.push_back(x);
  }
  Tensor out = fn(inputs);
  EXPECT_TRUE(tensors_close(out, fx.at(key + "out"), rtol, atol)) << "output";
  auto up = fx.find(key + "upstream");
  if (up == fx.end()) return;
  ASSERT_TRUE(out.requires_grad()) << "PyTorch differentiated this case but the output has no grad_fn";
  out.backward(up->second);
  // A gradient that is zero in exact arithmetic (the float64 case reads under 1e-12 everywhere;
  // a key bias's, say: it adds q . b to a whole row of scores, which softmax ignores) is only
  // rounding noise in float32, in PyTorch and here alike, and its size depends on the order of
  // the sums (the kernels): in float32 it is checked to be that small, not equal to PyTorch's
  // noise. Its float64 case still checks it against PyTorch's.
  const std::string key64 = key.substr(0, key.size() - 4) + "f64.";
  auto check_grad = [&](const Tensor& actual, const std::string& name, const std::string& what) {
    const Tensor& want = fx.at(key + name);
    auto ref64 = fx.find(key64 + name);
    if (f32 && ref64 != fx.end() && max(abs(ref64->second)).item() < 1e-12) {
      EXPECT_TRUE(tensors_close(actual, zeros_like(want), 0, 1e-5)) << what << " (zero in exact arithmetic)";
      return;
    }
    EXPECT_TRUE(tensors_close(actual, want, rtol, atol)) << what;
  };
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const std::string name = "grad" + std::to_string(i);
    if (!fx.count(key + name)) continue;
    check_grad(inputs[i].grad().defined() ? inputs[i].grad() : zeros_like(inputs[i]), name,
               "gradient of input " + std::to_string(i));
  }
  if (!module) return;
  for (const auto& [name, p] : module->named_parameters()) {
    if (!fx.count(key + "pgrad." + name)) continue;
    check_grad(p.grad().defined() ? p.grad() : zeros_like(p), "pgrad." + name, "gradient of parameter " + name);
  }
}

void check_both_dtypes(const std::string& file, const std::string& case_name, const Fn& fn, nn::Module* module) {
  const TensorMap& fx = fixture(file);
  for (const char* tag : {"f32", "f64"}) {
    const std::string key = case_name + "." + tag + ".";
    SCOPED_TRACE(file + ": " + key);
    check_case(fx, key, tag[1] == '3', fn, module);
  }
  if (module) module->to(kFloat32);
}

}  // namespace

void expect_matches_torch(const std::string& file, const std::string& case_name, const Fn& fn) {
  check_both_dtypes(file, case_name, fn, nullptr);
}

void expect_module_matches_torch(const std::string& file, const std::string& case_name, nn::Module& module,
                                 const Fn& fn) {
  check_both_dtypes(file, case_name, fn, &module);
}

Tensor randn64(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  Tensor t = randn(shape, kFloat64, &gen);
  t.requires_grad_(true);
  return t;
}

std::vector<std::string> param_names(const nn::Module& m) {
  std::vector<std::string> out;
  for (const auto& [name, p] : m.named_parameters()) out.push_back(name);
  return out;
}

void randomize64(nn::Module& m, uint64_t seed, double scale) {
  m.to(kFloat64);
  Generator gen(seed);
  for (Tensor& p : m.parameters()) p.copy_(randn(p.shape(), kFloat64, &gen) * scale);
}

std::vector<Tensor> with_params(const Tensor& x, const nn::Module& m) {
  std::vector<Tensor> in = {x};
  for (const Tensor& p : m.parameters()) in.push_back(p);
  return in;
}

}  // namespace xg::test
