// Test helpers: value checks against PyTorch fixtures (tests/fixtures/*.safetensors, written
// by make_fixtures.py), tensor comparison with a readable failure report, and a gradcheck
// assertion.
#pragma once

#include <gtest/gtest.h>
#include <omp.h>

#include <functional>
#include <string>
#include <vector>

#include "xgrad.hpp"
#include "nn/module.hpp"

namespace xg::test {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

// The tensors of tests/fixtures/<file>.safetensors (loaded once, cached).
const TensorMap& fixture(const std::string& file);

// Compares `actual` with `expected` elementwise: |a - e| <= rtol |e| + atol * max(1, max|e|).
// On failure the message names the shape, the worst index, both values and the difference.
::testing::AssertionResult tensors_close(const Tensor& actual, const Tensor& expected, double rtol,
                                         double atol);

// Runs fn on the fixture case's inputs in float32 and float64, checks the output and, when
// the fixture has an upstream gradient, the gradient of every input that PyTorch
// differentiated. Tolerances: rtol 1e-5 / atol 1e-6 (float32), rtol 1e-10 / atol 1e-12 (float64).
void expect_matches_torch(const std::string& file, const std::string& case_name, const Fn& fn);

// Like expect_matches_torch for a module case written by fixture_util.module_case: for
// each dtype, converts `module` to it, loads PyTorch's parameters through load_state_dict,
// runs fn, and checks the output, the input gradients and every parameter gradient.
void expect_module_matches_torch(const std::string& file, const std::string& case_name, nn::Module& module,
                                 const Fn& fn);

// Float64 inputs for gradcheck: randn of the shape, requires_grad on.
Tensor randn64(const Shape& shape, uint64_t seed);

using optim::kInf;  // infinity, as a double

// An int64 tensor of class labels or token ids.
inline Tensor ids(const std::vector<int64_t>& v, const Shape& shape) { return from_vector(v, shape); }

// The names named_parameters() yields, in order.
std::vector<std::string> param_names(const nn::Module& m);

// Converts m to float64 and sets every parameter to scale * N(0, 1) drawn from Generator(seed):
// non-trivial weights everywhere (the norms' ones included), so that all of them matter in a
// gradcheck.
void randomize64(nn::Module& m, uint64_t seed, double scale = 0.5);

// x and then every parameter of m: the inputs of a module's gradcheck.
std::vector<Tensor> with_params(const Tensor& x, const nn::Module& m);

// Restores the process's float32 gemm choice (backend and small-product routing) when a test
// that switches it is done, also when an assertion returns early.
struct GemmBackendGuard {
  GemmChoice saved = gemm_choice();
  ~GemmBackendGuard() { set_gemm_choice(saved); }
};

// Runs a scope on one bf16 product kernel (gemm_backend.hpp) and puts the process's choice back,
// also when an assertion returns early.
struct Bf16GemmScope {
  explicit Bf16GemmScope(Bf16Gemm how) { set_bf16_gemm(how); }
  ~Bf16GemmScope() { set_bf16_gemm(saved); }
  Bf16GemmScope(const Bf16GemmScope&) = delete;
  Bf16GemmScope& operator=(const Bf16GemmScope&) = delete;
  Bf16Gemm saved = bf16_gemm();
};

// The bf16 product kernels this CPU has: oneDNN's where it has a bf16 matmul (AVX-512), and the
// widened float32 path everywhere.
inline std::vector<Bf16Gemm> bf16_gemms() {
  if (onednn_has_bf16_matmul()) return {Bf16Gemm::OneDNN, Bf16Gemm::Widened};
  return {Bf16Gemm::Widened};
}

// Sets the calling thread's OpenMP thread count for a scope and restores it, also when an
// assertion returns early or an op throws (omp_set_num_threads, not set_num_threads: the
// count stays this thread's and does not mark the count as chosen).
struct OmpThreadsScope {
  explicit OmpThreadsScope(int n) { omp_set_num_threads(n); }
  ~OmpThreadsScope() { omp_set_num_threads(saved); }
  OmpThreadsScope(const OmpThreadsScope&) = delete;
  OmpThreadsScope& operator=(const OmpThreadsScope&) = delete;
  int saved = omp_get_max_threads();
};

}  // namespace xg::test

// Asserts that gradcheck(fn, inputs) passes, printing its report when it does not.
#define EXPECT_GRADCHECK(fn, ...)                                         \
  do {                                                                     \
    auto xg_gc_result_ = ::xg::gradcheck((fn), __VA_ARGS__);              \
    EXPECT_TRUE(xg_gc_result_.ok) << xg_gc_result_.message;               \
  } while (0)

// Asserts that `stmt` throws xg::Error whose message contains `substr`.
#define EXPECT_XG_ERROR(stmt, substr)                                                          \
  do {                                                                                         \
    try {                                                                                      \
      stmt;                                                                                    \
      ADD_FAILURE() << "expected xg::Error containing \"" << (substr) << "\", nothing thrown"; \
    } catch (const ::xg::Error& e) {                                                           \
      EXPECT_NE(std::string(e.what()).find(substr), std::string::npos)                        \
          << "message was: " << e.what();                                                      \
    }                                                                                          \
  } while (0)
