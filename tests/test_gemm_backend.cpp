// Tests for autograd/gemm_backend.cpp: the rules that choose the float32 gemm backend, and
// products that agree across backends (the whole suite also runs under each backend:
// XGRAD_GEMM=openblas and XGRAD_GEMM=onednn in .ci/run).
#include "autograd/gemm_backend.hpp"

#include <malloc.h>
#include <omp.h>

#include <cstdlib>

#include "autograd/attention.hpp"
#include "tests/torch_fixture.hpp"

#if defined(__SANITIZE_ADDRESS__)
#define XG_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define XG_TEST_ASAN 1
#endif
#endif

using namespace xg;

namespace {

GemmFacts facts(const std::string& core, bool avx2) {
  GemmFacts f;
  f.openblas_core = core;
  f.openblas_version = "OpenBLAS 0.3.21";
  f.cpu_avx2_fma = avx2;
  return f;
}

}  // namespace

TEST(GemmBackend, GenericOpenBLASKernelsOnAnAVX2CPUGoToOneDNN) {
  const GemmChoice c = choose_gemm_backend(facts("Prescott", true));
  EXPECT_EQ(c.backend, GemmBackend::OneDNN);
  EXPECT_EQ(c.why, "OpenBLAS 0.3.21 runs its Prescott kernels, without this CPU's AVX2");
  EXPECT_EQ(choose_gemm_backend(facts("Sandybridge", true)).backend, GemmBackend::OneDNN);  // AVX without FMA
}

TEST(GemmBackend, OpenBLASKeepsTheCPUsItKnowsAndCPUsWithoutAVX2) {
  for (const char* core : {"Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids"}) {
    const GemmChoice c = choose_gemm_backend(facts(core, true));
    EXPECT_EQ(c.backend, GemmBackend::OpenBLAS) << core;
    EXPECT_TRUE(c.small_on_onednn) << core << ": rule 3 sends its small products to oneDNN";
  }
  const GemmChoice old_cpu = choose_gemm_backend(facts("Nehalem", false));
  EXPECT_EQ(old_cpu.backend, GemmBackend::OpenBLAS);
  EXPECT_EQ(old_cpu.why, "the CPU has no AVX2");
  EXPECT_FALSE(old_cpu.small_on_onednn);  // oneDNN has no AVX2 kernels there either
  // AVX2 kernels pinned on a CPU the facts say lacks AVX2: oneDNN would have none to run.
  EXPECT_FALSE(choose_gemm_backend(facts("Haswell", false)).small_on_onednn);
}

TEST(GemmBackend, AnAVX512CPUWithoutAVX512KernelsGoesToOneDNNPinnedOrNot) {
  GemmFacts f = facts("Haswell", true);
  f.cpu_avx512 = true;
  f.openblas_coretype = "Haswell";  // pinned (this AMD EPYC's environment): the variable is left alone
  const GemmChoice c = choose_gemm_backend(f);
  EXPECT_EQ(c.backend, GemmBackend::OneDNN);
  EXPECT_EQ(c.why, "OpenBLAS 0.3.21 runs its Haswell kernels, pinned by OPENBLAS_CORETYPE=Haswell, without this CPU's AVX-512");
  f.openblas_coretype.clear();
  f.openblas_core = "Zen";
  EXPECT_EQ(choose_gemm_backend(f).why, "OpenBLAS 0.3.21 runs its Zen kernels, without this CPU's AVX-512");
  for (const char* core : {"SkylakeX", "Cooperlake", "SapphireRapids"}) {
    f.openblas_core = core;
    EXPECT_EQ(choose_gemm_backend(f).backend, GemmBackend::OpenBLAS) << core;
  }
}

// OpenBLAS 0.3.21 runs its Cooperlake kernels on an AMD Zen 4 (it checks the features, not the
// vendor); there oneDNN is faster (sgemm 2048^3 222 against 204 GFLOP/s, the medium and gpt2s
// steps' products 8-10%). On an Intel CPU the same kernels stay: a Sapphire Rapids Xeon pinned
// to Cooperlake ran 295 against oneDNN's 230.
TEST(GemmBackend, AnAMDCPUOnIntelsAVX512KernelsGoesToOneDNN) {
  GemmFacts f = facts("Cooperlake", true);
  f.cpu_avx512 = true;
  f.cpu_amd = true;
  const GemmChoice c = choose_gemm_backend(f);
  EXPECT_EQ(c.backend, GemmBackend::OneDNN);
  EXPECT_EQ(c.why, "OpenBLAS 0.3.21 runs its Cooperlake kernels, made for Intel's AVX-512, on an AMD CPU");
  f.openblas_core = "SkylakeX";
  f.openblas_coretype = "SkylakeX";
  EXPECT_EQ(choose_gemm_backend(f).why,
            "OpenBLAS 0.3.21 runs its SkylakeX kernels, pinned by OPENBLAS_CORETYPE=SkylakeX, made for Intel's AVX-512, on an AMD CPU");
  f.cpu_amd = false;  // an Intel CPU keeps them
  EXPECT_EQ(choose_gemm_backend(f).backend, GemmBackend::OpenBLAS);
  f.openblas_coretype.clear();
  f.openblas_core = "Cooperlake";
  EXPECT_EQ(choose_gemm_backend(f).backend, GemmBackend::OpenBLAS);
  // An AMD CPU on AVX2 kernels (a Zen 3) stays on OpenBLAS.
  f = facts("Zen", true);
  f.cpu_amd = true;
  EXPECT_EQ(choose_gemm_backend(f).backend, GemmBackend::OpenBLAS);
}

TEST(GemmBackend, APinnedCoretypeThatUsesTheCPUStaysOnOpenBLAS) {
  GemmFacts f = facts("Haswell", true);
  f.openblas_coretype = "Haswell";  // an AVX2 CPU without AVX-512
  const GemmChoice c = choose_gemm_backend(f);
  EXPECT_EQ(c.backend, GemmBackend::OpenBLAS);
  EXPECT_EQ(c.why, "OPENBLAS_CORETYPE=Haswell is set");
  EXPECT_TRUE(c.small_on_onednn);  // the pin is OpenBLAS's; oneDNN picks its own kernels
  // Pinned to the generic kernels on an AVX2 CPU: the pin stays OpenBLAS's, the products go
  // where the CPU's vector units are used.
  f.openblas_core = f.openblas_coretype = "Prescott";
  EXPECT_EQ(choose_gemm_backend(f).backend, GemmBackend::OneDNN);
  EXPECT_EQ(choose_gemm_backend(f).why, "OpenBLAS 0.3.21 runs its Prescott kernels, pinned by OPENBLAS_CORETYPE=Prescott, without this CPU's AVX2");
}

TEST(GemmBackend, XgradGemmChoosesAndABadValueIsNamed) {
  GemmFacts f = facts("Haswell", true);
  f.openblas_coretype = "Haswell";
  f.xgrad_gemm = "onednn";
  EXPECT_EQ(choose_gemm_backend(f).backend, GemmBackend::OneDNN);
  f.xgrad_gemm = "OpenBLAS";
  EXPECT_EQ(choose_gemm_backend(f).backend, GemmBackend::OpenBLAS);
  EXPECT_FALSE(choose_gemm_backend(f).small_on_onednn);  // every product on the library asked for
  f.xgrad_gemm = "mkl";
  EXPECT_XG_ERROR(choose_gemm_backend(f), "XGRAD_GEMM=mkl: expected openblas or onednn");
}

TEST(GemmBackend, DescriptionNamesTheLibraryItsKernelsAndTheRule) {
  test::GemmBackendGuard guard;
  set_gemm_backend(GemmBackend::OneDNN);
  EXPECT_EQ(gemm_backend_description().rfind("oneDNN ", 0), 0u) << gemm_backend_description();
  EXPECT_NE(gemm_backend_description().find(" kernels (set_gemm_backend)"), std::string::npos);
  const std::string one_row = std::string("; one-row products (decoding) on xgrad's matrix-vector kernel");
  EXPECT_EQ(gemm_backend_description(), gemm_kernels(GemmBackend::OneDNN) + " (set_gemm_backend)" + one_row);
  set_gemm_backend(GemmBackend::OpenBLAS);
  EXPECT_EQ(gemm_backend_description(), gemm_kernels(GemmBackend::OpenBLAS) + " (set_gemm_backend)" + one_row);
  set_gemm_choice({GemmBackend::OpenBLAS, "a test's rule", true});
  EXPECT_EQ(gemm_backend_description(), gemm_kernels(GemmBackend::OpenBLAS) + " (a test's rule); below 2^23 multiply-adds " +
                                            gemm_kernels(GemmBackend::OneDNN) + one_row);
  EXPECT_STREQ(gemm_backend_name(GemmBackend::OneDNN), "onednn");
}

// The instruction set xgrad's own kernels were built for: one of five, and "with AVX512-BF16"
// exactly when attention's bf16 tiles were built (the library's flags, not the test's); and how
// it was chosen, as the build was configured (the test runner gets the same XGRAD_NATIVE).
TEST(GemmBackend, OwnKernelsNameTheInstructionSetTheyWereBuiltFor) {
  const std::string d = build_kernels_description();
  const bool known = d.rfind("AVX-512 with AVX512-BF16 (", 0) == 0 || d.rfind("AVX-512 (", 0) == 0 ||
                     d.rfind("AVX2 with FMA and F16C (", 0) == 0 || d.rfind("AVX2 (", 0) == 0 ||
                     d.rfind("SSE2, the x86-64 baseline (", 0) == 0;
  EXPECT_TRUE(known) << d;
  EXPECT_EQ(d.find("with AVX512-BF16") != std::string::npos, attention_has_bf16_tiles()) << d;
  EXPECT_EQ(d.find("built with -march=native") != std::string::npos, XGRAD_TEST_MARCH_NATIVE == 1) << d;
  EXPECT_EQ(d.find("built with XGRAD_NATIVE off") != std::string::npos, XGRAD_TEST_MARCH_NATIVE == 0) << d;
}

// Rule 3 routes a float32 product by the size of the whole product: below 2^23 multiply-adds
// it gives oneDNN's result bit for bit, above it OpenBLAS's, on one thread or two (matmul.cpp
// splits a product over threads, and the halves of the large one here are below 2^23: were
// the library chosen by the part, two threads would round it like oneDNN). The references are
// taken at the same thread count: oneDNN's rounding depends on the rows a call gets.
TEST(GemmBackend, SmallProductsRunOnOneDNNChosenByTheWholeProductsSize) {
  test::GemmBackendGuard guard;
  Generator gen(11);
  const Tensor small_a = randn({64, 1024}, kFloat32, &gen), small_b = randn({1024, 64}, kFloat32, &gen);  // 4.2 M
  const Tensor large_a = randn({96, 1024}, kFloat32, &gen), large_b = randn({1024, 96}, kFloat32, &gen);  // 9.4 M
  ASSERT_LT(64.0 * 1024 * 64, kSmallGemmMadds);
  ASSERT_GT(96.0 * 1024 * 96, kSmallGemmMadds);
  ASSERT_LT(48.0 * 1024 * 96, kSmallGemmMadds);
  const GemmChoice routed{GemmBackend::OpenBLAS, "a test's rule", true};
  auto product = [](const GemmChoice& c, const Tensor& a, const Tensor& b) {
    set_gemm_choice(c);
    return matmul(a, b).to_vector();
  };
  for (int t : {1, 2}) {
    SCOPED_TRACE(std::to_string(t) + " thread(s)");
    const test::OmpThreadsScope scope(t);
    const GemmChoice openblas{GemmBackend::OpenBLAS, "", false}, onednn{GemmBackend::OneDNN, "", false};
    const std::vector<double> small_onednn = product(onednn, small_a, small_b),
                              large_openblas = product(openblas, large_a, large_b);
    // The two libraries must round these differently, or the test could not tell which ran.
    ASSERT_NE(product(openblas, small_a, small_b), small_onednn);
    ASSERT_NE(product(onednn, large_a, large_b), large_openblas);
    EXPECT_EQ(product(routed, small_a, small_b), small_onednn);
    EXPECT_EQ(product(routed, large_a, large_b), large_openblas);
  }
}

// Both backends against a float64 product of the same float32 values, on shapes that take
// every path of matmul (single gemm, split over threads, batched, transposed operands in backward).
TEST(GemmBackend, BothBackendsMatchAFloat64ProductForwardAndBackward) {
  test::GemmBackendGuard guard;
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{3, 5}, {5, 2}}, {{64, 48}, {48, 80}}, {{257, 129}, {129, 65}}, {{4, 33, 17}, {4, 17, 9}}};
  for (const auto& [sa, sb] : cases) {
    Generator gen(7);
    const Tensor a32 = randn(sa, kFloat32, &gen), b32 = randn(sb, kFloat32, &gen);
    const Tensor want = matmul(a32.to(kFloat64), b32.to(kFloat64));
    for (GemmBackend backend : {GemmBackend::OpenBLAS, GemmBackend::OneDNN}) {
      SCOPED_TRACE(gemm_backend_name(backend));
      set_gemm_backend(backend);
      Tensor a = a32.detach(), b = b32.detach();
      a.requires_grad_(true);
      b.requires_grad_(true);
      const Tensor y = matmul(a, b);
      EXPECT_TRUE(test::tensors_close(y.to(kFloat64), want, 1e-5, 1e-5));
      const Tensor g = ones_like(y);
      y.backward(g);
      // dA = g B^T, dB = A^T g, in float64 from the same float32 values
      const Tensor g64 = g.to(kFloat64);
      EXPECT_TRUE(test::tensors_close(a.grad().to(kFloat64), matmul(g64, transpose(b32.to(kFloat64), -1, -2)), 1e-5, 1e-5));
      EXPECT_TRUE(test::tensors_close(b.grad().to(kFloat64), matmul(transpose(a32.to(kFloat64), -1, -2), g64), 1e-5, 1e-5));
    }
  }
}

// What xgrad does not allocate itself comes from glibc's malloc; oneDNN's sgemm mallocs its
// packing buffers on every call. glibc's default maps a block above 128 KB afresh and unmaps
// it when freed, so every call faulted those buffers in again (gpt2s step benchmark: 3,700
// page faults a step, 1,000 with the thresholds xgrad sets at start-up, autograd/tensor.cpp).
// A 30 MB block now comes from the heap, not a mapping of its own (mallinfo2's hblks).
TEST(GemmBackend, MallocKeepsBlocksUpTo32MBOnTheHeap) {
  if (std::getenv("GLIBC_TUNABLES") || std::getenv("MALLOC_TRIM_THRESHOLD_") || std::getenv("MALLOC_MMAP_THRESHOLD_"))
    GTEST_SKIP() << "malloc tuned from the environment: xgrad leaves it as set";
#ifdef XG_TEST_ASAN
  GTEST_SKIP() << "AddressSanitizer's allocator replaces glibc's malloc";
#endif
  const std::size_t mapped_before = mallinfo2().hblks;
  void* block = std::malloc(std::size_t{30} << 20);
  ASSERT_NE(block, nullptr);
  const std::size_t mapped_with = mallinfo2().hblks;
  std::free(block);
  EXPECT_EQ(mapped_with, mapped_before);
}
