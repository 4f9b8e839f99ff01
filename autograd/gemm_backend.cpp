// The float32 gemm backend: the choice (rules in gemm_backend.hpp), its description, and the
// one call into oneDNN.
#include "autograd/gemm_backend.hpp"

#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>

#include <atomic>
#include <cctype>
#include <cstdlib>
#include <set>
#include <sstream>
#include <string>

#include "autograd/detail/blas.hpp"
#include "autograd/error.hpp"
#include "autograd/settings.hpp"

namespace xg {

namespace {

// OpenBLAS's kernel sets (openblas_get_corename) that use AVX2 and FMA or better. Any other
// name (Prescott, Core2, Nehalem, Sandybridge, ...) is a generic or pre-AVX2 fallback.
const std::set<std::string>& avx2_cores() {
  static const std::set<std::string> cores = {"haswell", "zen", "skylakex", "cooperlake", "sapphirerapids",
                                              "excavator"};
  return cores;
}

// The kernel sets among those that use AVX-512, all three made for Intel's cores (OpenBLAS
// 0.3.21 has no AMD AVX-512 set: a Zen 4 gets Cooperlake, chosen by its features).
const std::set<std::string>& avx512_cores() {
  static const std::set<std::string> cores = {"skylakex", "cooperlake", "sapphirerapids"};
  return cores;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// "OpenBLAS 0.3.21" from openblas_get_config()'s "OpenBLAS 0.3.21 DYNAMIC_ARCH ...".
std::string openblas_version() {
  std::istringstream words(openblas_get_config());
  std::string name, version;
  words >> name >> version;
  return name + " " + version;
}

bool cpu_has_avx2_fma() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

bool cpu_is_amd() {
  __builtin_cpu_init();
  return __builtin_cpu_is("amd");
}

// oneDNN's avx512_core level: AVX-512 F, BW, VL and DQ.
bool cpu_has_avx512() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
}

const char* onednn_isa_name(dnnl_cpu_isa_t isa) {
  switch (isa) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: return "generic";
  }
}

// Read on every product: relaxed loads. g_backend is -1 until the first product chooses.
std::atomic<int> g_backend{-1};
std::atomic<bool> g_small_on_onednn{false};
std::string g_why;  // written with g_backend: once under the static's initialisation lock, or by set_gemm_choice

GemmBackend chosen() {
  const int b = g_backend.load(std::memory_order_relaxed);
  if (b >= 0) return static_cast<GemmBackend>(b);
  static const bool once = [] {
    const GemmChoice c = choose_gemm_backend(gemm_facts());
    int expected = -1;  // set_gemm_choice may have chosen already
    if (g_backend.compare_exchange_strong(expected, static_cast<int>(c.backend))) {
      g_why = c.why;
      g_small_on_onednn.store(c.small_on_onednn);
    }
    return true;
  }();
  (void)once;
  return static_cast<GemmBackend>(g_backend.load());
}

}  // namespace

GemmFacts gemm_facts() {
  GemmFacts f;
  f.xgrad_gemm = settings().gemm;
  f.openblas_coretype = settings().openblas_coretype;
  f.openblas_core = openblas_get_corename();
  f.openblas_version = openblas_version();
  f.cpu_avx2_fma = cpu_has_avx2_fma();
  f.cpu_avx512 = cpu_has_avx512();
  f.cpu_amd = cpu_is_amd();
  return f;
}

GemmChoice choose_gemm_backend(const GemmFacts& f) {
  if (!f.xgrad_gemm.empty()) {
    const std::string v = lower(f.xgrad_gemm);
    if (v == "openblas") return {GemmBackend::OpenBLAS, "XGRAD_GEMM=openblas"};
    if (v == "onednn") return {GemmBackend::OneDNN, "XGRAD_GEMM=onednn"};
    throw Error("XGRAD_GEMM=" + f.xgrad_gemm + ": expected openblas or onednn");
  }
  // The OpenBLAS kernels in force, whether OpenBLAS picked them or OPENBLAS_CORETYPE pinned
  // them (the variable is never changed: OpenBLAS keeps running those kernels for float64 and
  // whatever else calls it). When they use a narrower vector ISA than the CPU has, oneDNN
  // (which dispatches on the CPU's features and passes the whole suite) runs the products.
  const std::string core = lower(f.openblas_core);
  const bool avx2_kernels = avx2_cores().count(core) > 0;
  const bool avx512_kernels = avx512_cores().count(core) > 0;
  const std::string pinned = f.openblas_coretype.empty() ? "" : ", pinned by OPENBLAS_CORETYPE=" + f.openblas_coretype;
  const std::string kernels = f.openblas_version + " runs its " + f.openblas_core + " kernels" + pinned;
  if (f.cpu_avx2_fma && !avx2_kernels) return {GemmBackend::OneDNN, kernels + ", without this CPU's AVX2"};
  if (f.cpu_avx512 && !avx512_kernels) return {GemmBackend::OneDNN, kernels + ", without this CPU's AVX-512"};
  // Intel's AVX-512 kernels on an AMD CPU (a Zen 4 runs 512-bit operations on 256-bit units):
  // oneDNN's kernels are the faster there.
  if (f.cpu_amd && avx512_kernels) return {GemmBackend::OneDNN, kernels + ", made for Intel's AVX-512, on an AMD CPU"};
  if (!avx2_kernels) return {GemmBackend::OpenBLAS, "the CPU has no AVX2"};
  // OpenBLAS's kernels use the CPU's vector units; its small products still go to oneDNN, whose
  // kernels for them are faster (gemm_backend.hpp, rule 3). An OPENBLAS_CORETYPE pins
  // OpenBLAS's kernels only: oneDNN picks its own by the CPU's features.
  const bool small_on_onednn = f.cpu_avx2_fma;  // oneDNN's kernels need the CPU's AVX2 too
  if (!pinned.empty())
    return {GemmBackend::OpenBLAS, "OPENBLAS_CORETYPE=" + f.openblas_coretype + " is set", small_on_onednn};
  return {GemmBackend::OpenBLAS, "OpenBLAS chose its kernels by the CPU's model", small_on_onednn};
}

GemmBackend gemm_backend() { return chosen(); }

GemmChoice gemm_choice() {
  const GemmBackend b = chosen();
  return {b, g_why, b == GemmBackend::OpenBLAS && g_small_on_onednn.load()};
}

void set_gemm_choice(const GemmChoice& choice) {
  chosen();  // run the rules once so that a bad XGRAD_GEMM is still reported
  g_small_on_onednn.store(choice.backend == GemmBackend::OpenBLAS && choice.small_on_onednn);
  g_backend.store(static_cast<int>(choice.backend));
  g_why = choice.why;
}

void set_gemm_backend(GemmBackend backend) { set_gemm_choice({backend, "set_gemm_backend", false}); }

const char* gemm_backend_name(GemmBackend backend) {
  return backend == GemmBackend::OneDNN ? "onednn" : "openblas";
}

std::string gemm_kernels(GemmBackend backend) {
  std::ostringstream s;
  if (backend == GemmBackend::OneDNN) {
    const dnnl_version_t* v = dnnl_version();
    s << "oneDNN " << v->major << "." << v->minor << "." << v->patch << " sgemm, "
      << onednn_isa_name(dnnl_get_effective_cpu_isa()) << " kernels";
  } else {
    s << openblas_version() << " sgemm, " << openblas_get_corename() << " kernels";
  }
  return s.str();
}

std::string gemm_backend_description() {
  const GemmChoice c = gemm_choice();
  std::string d = gemm_kernels(c.backend) + " (" + c.why + ")";
  if (c.small_on_onednn) d += "; below 2^23 multiply-adds " + gemm_kernels(GemmBackend::OneDNN);
  return d + "; " + kOneRowProducts;
}

std::string build_kernels_description() {
#if defined(__AVX512BF16__) && defined(__AVX512F__)
  const char* isa = "AVX-512 with AVX512-BF16";
#elif defined(__AVX512F__)
  const char* isa = "AVX-512";
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
  const char* isa = "AVX2 with FMA and F16C";
#elif defined(__AVX2__)
  const char* isa = "AVX2";
#else
  const char* isa = "SSE2, the x86-64 baseline";
#endif
#if defined(XGRAD_MARCH_NATIVE)
  return std::string(isa) + " (built with -march=native: this machine's when it was built)";
#else
  return std::string(isa) + " (built with XGRAD_NATIVE off: the compiler's default target)";
#endif
}

namespace blas {

bool sgemm_on_onednn(double madds) {
  if (chosen() == GemmBackend::OneDNN) return true;
  return madds < kSmallGemmMadds && g_small_on_onednn.load(std::memory_order_relaxed);
}

void onednn_sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                  int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  // Each call runs on the calling thread, as OpenBLAS's OpenMP build does for products below its
  // threading threshold or inside a parallel region: matmul.cpp splits large products over the
  // threads itself. Left to itself, dnnl_sgemm opens a parallel region for every product, small
  // ones too (attention's per-head products, a tiny model's layers): many more barriers, and
  // under load each one waits for a thread that other programs keep off its core.
  const int threads = omp_get_max_threads();
  const bool narrow = threads > 1 && !omp_in_parallel();
  if (narrow) omp_set_num_threads(1);
  // dnnl_sgemm is row-major, with 64-bit sizes.
  const dnnl_status_t st = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta,
                                      C, ldc);
  if (narrow) omp_set_num_threads(threads);
  check(st == dnnl_success, "matmul: oneDNN's sgemm failed (status ", static_cast<int>(st), ") for M=", M, " N=", N,
        " K=", K);
}

}  // namespace blas

}  // namespace xg
