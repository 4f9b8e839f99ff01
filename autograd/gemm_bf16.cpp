// bfloat16 products: the choice between oneDNN's bf16 matmul and widening to float32
// (gemm_backend.hpp), and the one call into oneDNN's matmul primitive, cached by shape.
#include <omp.h>

#include <atomic>
#include <cctype>
#include <map>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <sstream>
#include <tuple>
#include <vector>

#include "autograd/detail/blas.hpp"
#include "autograd/error.hpp"
#include "autograd/gemm_backend.hpp"
#include "autograd/settings.hpp"

namespace xg {

namespace {

// oneDNN's own CPU level: bf16 dot products (vdpbf16ps) from avx512_core_bf16 up, AMX tiles
// at avx512_core_amx.
bool cpu_has_bf16_dot() {
  const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  return isa == dnnl_cpu_isa_avx512_core_bf16 || isa == dnnl_cpu_isa_avx512_core_amx;
}

std::atomic<int> g_bf16{-1};  // -1 until the first bf16 product chooses

Bf16Gemm choose_bf16() {
  std::string v = settings().gemm_bf16;
  for (char& c : v) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (v == "onednn") return Bf16Gemm::OneDNN;
  if (v == "widened") return Bf16Gemm::Widened;
  check(v.empty(), "XGRAD_GEMM_BF16=", settings().gemm_bf16, ": expected onednn or widened");
  return cpu_has_bf16_dot() ? Bf16Gemm::OneDNN : Bf16Gemm::Widened;
}

// A primitive per product layout (each thread's part of a split product is one): creating one
// costs 0.5-10 ms (oneDNN's kernel generation), running it microseconds, so each is made once.
// A training step has a few dozen; the map is emptied if it ever holds more than
// kMaxPrimitives (generation's varying lengths).
using Bf16Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool>;
constexpr std::size_t kMaxPrimitives = 512;

// A primitive and the descriptors of its three operands (the memory objects of each call
// wrap the caller's buffers with them).
struct Bf16Product {
  dnnl::memory::desc a, b, c;
  dnnl::memory::desc scratchpad;  // the working memory each call brings (see below)
  dnnl::matmul matmul;
};

struct Bf16Primitives {
  std::mutex mu;
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  std::map<Bf16Key, Bf16Product> products;
};

Bf16Primitives& bf16_primitives() {
  static Bf16Primitives c;
  return c;
}

Bf16Product make_product(const Bf16Key& key, const dnnl::engine& engine) {
  const auto [ta, tb, M, N, K, lda, ldb, ldc, accumulate] = key;
  using dt = dnnl::memory::data_type;
  using dims = dnnl::memory::dims;
  // Row-major operands as stored: op(A) [M, K] is A [M, K] (row stride lda) or, transposed,
  // A [K, M] read by columns; the same for op(B) [K, N].
  Bf16Product p;
  p.a = dnnl::memory::desc({M, K}, dt::bf16, ta ? dims{1, lda} : dims{lda, 1});
  p.b = dnnl::memory::desc({K, N}, dt::bf16, tb ? dims{1, ldb} : dims{ldb, 1});
  p.c = dnnl::memory::desc({M, N}, dt::f32, dims{ldc, 1});
  dnnl::primitive_attr attr;
  // NOTE: the two halves of a product split over threads (matmul.cpp) have one shape, so they
  // run one primitive at once; with oneDNN's own scratchpad they share its packed operands and
  // overwrite each other's. Each call passes its thread's scratchpad instead.
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (accumulate) {  // C = op(A) op(B) + C: oneDNN's "sum" post-op
    dnnl::post_ops ops;
    ops.append_sum(1.0f);
    attr.set_post_ops(ops);
  }
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(p.a, p.b, p.c), attr, engine);
  p.scratchpad = pd.scratchpad_desc();
  p.matmul = dnnl::matmul(pd);
  return p;
}

}  // namespace

Bf16Gemm bf16_gemm() {
  const int v = g_bf16.load(std::memory_order_relaxed);
  if (v >= 0) return static_cast<Bf16Gemm>(v);
  int expected = -1;
  g_bf16.compare_exchange_strong(expected, static_cast<int>(choose_bf16()));
  return static_cast<Bf16Gemm>(g_bf16.load());
}

void set_bf16_gemm(Bf16Gemm how) { g_bf16.store(static_cast<int>(how)); }

const char* bf16_gemm_name(Bf16Gemm how) { return how == Bf16Gemm::OneDNN ? "onednn" : "widened"; }

std::string bf16_gemm_description() {
  const Bf16Gemm how = bf16_gemm();
  const std::string why = !settings().gemm_bf16.empty() ? "XGRAD_GEMM_BF16=" + settings().gemm_bf16
                          : cpu_has_bf16_dot()          ? "the CPU has AVX512-BF16"
                                                        : "the CPU has no AVX512-BF16 or AMX";
  std::ostringstream s;
  if (how == Bf16Gemm::OneDNN) {
    const dnnl_version_t* v = dnnl_version();
    s << "oneDNN " << v->major << "." << v->minor << "." << v->patch << " bf16 matmul, "
      << (dnnl_get_effective_cpu_isa() == dnnl_cpu_isa_avx512_core_amx ? "avx512_core_amx" : "avx512_core_bf16")
      << " kernels (" << why << ")";
  } else {
    s << "bf16 widened to float32, then " << gemm_kernels(gemm_backend()) << " (" << why << ")";
  }
  return s.str();
}

namespace blas {

void onednn_gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const bfloat16* A, int64_t lda,
                      const bfloat16* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  check(beta == 0.0f || beta == 1.0f, "matmul: bf16 products accumulate with beta 0 or 1, got ", beta);
  Bf16Primitives& c = bf16_primitives();
  const Bf16Key key{trans_a, trans_b, M, N, K, lda, ldb, ldc, beta != 0.0f};
  Bf16Product p;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.products.find(key);
    if (it == c.products.end()) {
      if (c.products.size() >= kMaxPrimitives) c.products.clear();
      try {
        it = c.products.emplace(key, make_product(key, c.engine)).first;
      } catch (const dnnl::error& e) {
        throw Error(str_cat("matmul: oneDNN has no bf16 matmul for M=", M, " N=", N, " K=", K, " (", e.what(),
                            "); run with XGRAD_GEMM_BF16=widened"));
      }
    }
    p = it->second;
  }
  // Each call runs on the calling thread, as onednn_sgemm's: matmul.cpp splits a product over
  // the threads itself. Left to itself, oneDNN opens a parallel region for every product.
  const int threads = omp_get_max_threads();
  const bool narrow = threads > 1 && !omp_in_parallel();
  if (narrow) omp_set_num_threads(1);
  thread_local dnnl::stream stream(c.engine);  // a stream is not for two threads at once
  thread_local std::vector<char> scratch;      // grows to the largest this thread's calls need
  if (scratch.size() < p.scratchpad.get_size()) scratch.resize(p.scratchpad.get_size());
  dnnl::memory am(p.a, c.engine, const_cast<bfloat16*>(A)), bm(p.b, c.engine, const_cast<bfloat16*>(B)),
      cm(p.c, c.engine, C), sm(p.scratchpad, c.engine, scratch.data());
  p.matmul.execute(stream, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}, {DNNL_ARG_SCRATCHPAD, sm}});
  stream.wait();
  if (narrow) omp_set_num_threads(threads);
}

}  // namespace blas

}  // namespace xg
