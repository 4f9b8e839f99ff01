// bfloat16 products: the choice between oneDNN's bf16 matmul and widening to float32
// (gemm_backend.hpp), and the one call into oneDNN's matmul primitive, cached by shape.
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
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
bool onednn_has_bf16_dot() {
  const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  return isa == dnnl_cpu_isa_avx512_core_bf16 || isa == dnnl_cpu_isa_avx512_core_amx;
}
bool onednn_has_amx() { return dnnl_get_effective_cpu_isa() == dnnl_cpu_isa_avx512_core_amx; }

// The level's name in bf16_gemm_description (avx512_core emulates the bf16 dot products).
const char* onednn_bf16_kernels() {
  if (onednn_has_amx()) return "avx512_core_amx";
  return onednn_has_bf16_dot() ? "avx512_core_bf16" : "avx512_core (bf16 dot products emulated)";
}

// Seconds for `rounds` rounds of 12 independent 512-bit vfmadd231ps (dpbf16 false) or
// vdpbf16ps (true). Twelve chains are more than either instruction's latency times its rate on
// the CPUs seen (4-6 cycles at 1-2 a cycle), so the loop runs at the instruction's throughput.
// The whole loop is one asm block on zeroed registers (no denormals), so that neither the
// compiler nor its optimisation level changes what is timed: at -O0 (the sanitizer build) a
// loop of asm statements on C variables loads and stores all 12 accumulators every round, the
// FMA loop then waits on stores, and the ratio read 1.06-1.34 instead of 0.5, near the
// threshold, so that the choice changed from run to run. Built whatever -march says: it runs only where oneDNN found the instructions.
#define XG_CHAIN_LOOP(INSN)                                                                                 \
  __asm__ volatile(                                                                                        \
      "vpxord %%zmm0, %%zmm0, %%zmm0\n\tvmovaps %%zmm0, %%zmm1\n\tvmovaps %%zmm0, %%zmm2\n\t"             \
      "vmovaps %%zmm0, %%zmm3\n\tvmovaps %%zmm0, %%zmm4\n\tvmovaps %%zmm0, %%zmm5\n\t"                     \
      "vmovaps %%zmm0, %%zmm6\n\tvmovaps %%zmm0, %%zmm7\n\tvmovaps %%zmm0, %%zmm8\n\t"                     \
      "vmovaps %%zmm0, %%zmm9\n\tvmovaps %%zmm0, %%zmm10\n\tvmovaps %%zmm0, %%zmm11\n\t"                   \
      "vmovaps %%zmm0, %%zmm12\n\tvmovaps %%zmm0, %%zmm13\n\t"                                              \
      "1:\n\t" INSN " %%zmm13, %%zmm12, %%zmm0\n\t" INSN " %%zmm13, %%zmm12, %%zmm1\n\t" INSN             \
      " %%zmm13, %%zmm12, %%zmm2\n\t" INSN " %%zmm13, %%zmm12, %%zmm3\n\t" INSN " %%zmm13, %%zmm12, %%zmm4\n\t" \
      INSN " %%zmm13, %%zmm12, %%zmm5\n\t" INSN " %%zmm13, %%zmm12, %%zmm6\n\t" INSN                         \
      " %%zmm13, %%zmm12, %%zmm7\n\t" INSN " %%zmm13, %%zmm12, %%zmm8\n\t" INSN " %%zmm13, %%zmm12, %%zmm9\n\t" \
      INSN " %%zmm13, %%zmm12, %%zmm10\n\t" INSN " %%zmm13, %%zmm12, %%zmm11\n\t"                            \
      "dec %[n]\n\tjnz 1b\n\tvzeroupper"                                                                      \
      : [n] "+r"(n)                                                                                        \
      :                                                                                                    \
      : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11",  \
        "xmm12", "xmm13", "cc")
double chain_seconds(int64_t rounds, bool dpbf16) {
  int64_t n = rounds;  // > 0
  const auto t0 = std::chrono::steady_clock::now();
  if (dpbf16)
    XG_CHAIN_LOOP("vdpbf16ps");
  else
    XG_CHAIN_LOOP("vfmadd231ps");
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
#undef XG_CHAIN_LOOP

// Multiply-adds a second of one core's bf16 dot products over its float32 FMAs (a vdpbf16ps does
// 32, a vfmadd231ps 16), each the fastest of 7 alternated runs of 20-80 us, so that a run the
// scheduler cut into counts for neither. AMD Zen 4 runs both at one 512-bit instruction a
// cycle (2x: bf16 pays); an Intel Emerald Rapids Xeon measured one vdpbf16ps every two cycles
// against two FMAs a cycle (0.5x: that chip's bf16 speed is AMX's, which a hypervisor may
// hide).
double measure_speedup() {
  constexpr int64_t kRounds = 8192;
  double fma = 1e30, dot = 1e30;
  for (int rep = 0; rep < 7; ++rep) {
    fma = std::min(fma, chain_seconds(kRounds, false));
    dot = std::min(dot, chain_seconds(kRounds, true));
  }
  return (32.0 / dot) / (16.0 / fma);
}

std::atomic<int> g_bf16{-1};  // -1 until the first bf16 product chooses
std::once_flag g_speedup_once;
double g_speedup = 0.0;

double speedup() {
  std::call_once(g_speedup_once, [] { g_speedup = measure_bf16_dot_speedup(); });
  return g_speedup;
}

Bf16Gemm choose_bf16() {
  std::string v = settings().gemm_bf16;
  for (char& c : v) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (v == "onednn") {
    check(onednn_has_bf16_matmul(), "XGRAD_GEMM_BF16=onednn: oneDNN has no bf16 matmul on this CPU (it needs AVX-512); "
          "unset it or use widened");
    return Bf16Gemm::OneDNN;
  }
  if (v == "widened") return Bf16Gemm::Widened;
  check(v.empty(), "XGRAD_GEMM_BF16=", settings().gemm_bf16, ": expected onednn or widened");
  if (!onednn_has_bf16_dot()) return Bf16Gemm::Widened;
  return choose_bf16_gemm(true, onednn_has_amx(), onednn_has_amx() ? 0.0 : speedup());
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

bool cpu_has_bf16_dot() { return onednn_has_bf16_dot(); }

// Levels are bit sets, each holding the ones below it: avx512_core and up contain its bits;
// avx2_vnni (0x407) and avx512_mic do not.
bool onednn_has_bf16_matmul() {
  const unsigned isa = dnnl_get_effective_cpu_isa();
  return (isa & dnnl_cpu_isa_avx512_core) == dnnl_cpu_isa_avx512_core;
}

double bf16_dot_speedup() { return speedup(); }

double measure_bf16_dot_speedup() { return onednn_has_bf16_dot() ? measure_speedup() : 0.0; }

Bf16Gemm choose_bf16_gemm(bool has_bf16_dot, bool has_amx, double dot_speedup) {
  if (!has_bf16_dot) return Bf16Gemm::Widened;
  if (has_amx) return Bf16Gemm::OneDNN;
  return dot_speedup >= kBf16DotSpeedupMin ? Bf16Gemm::OneDNN : Bf16Gemm::Widened;
}

Bf16Gemm bf16_gemm() {
  const int v = g_bf16.load(std::memory_order_relaxed);
  if (v >= 0) return static_cast<Bf16Gemm>(v);
  int expected = -1;
  g_bf16.compare_exchange_strong(expected, static_cast<int>(choose_bf16()));
  return static_cast<Bf16Gemm>(g_bf16.load());
}

void set_bf16_gemm(Bf16Gemm how) {
  check(how != Bf16Gemm::OneDNN || onednn_has_bf16_matmul(),
        "set_bf16_gemm: oneDNN has no bf16 matmul on this CPU (it needs AVX-512)");
  g_bf16.store(static_cast<int>(how));
}

const char* bf16_gemm_name(Bf16Gemm how) { return how == Bf16Gemm::OneDNN ? "onednn" : "widened"; }

std::string bf16_gemm_description() {
  const Bf16Gemm how = bf16_gemm();
  std::string why;
  if (!settings().gemm_bf16.empty()) {
    why = "XGRAD_GEMM_BF16=" + settings().gemm_bf16;
  } else if (!onednn_has_bf16_dot()) {
    why = "the CPU has no AVX512-BF16 or AMX";
  } else if (onednn_has_amx()) {
    why = "the CPU has AMX-BF16";
  } else {
    std::ostringstream r;
    r.precision(2);
    r << std::fixed << speedup();
    why = how == Bf16Gemm::OneDNN
              ? "the CPU's AVX512-BF16 dot products do " + r.str() + "x its float32 FMAs' multiply-adds"
              : "the CPU has AVX512-BF16, but its dot products do only " + r.str() +
                    "x its float32 FMAs' multiply-adds";
  }
  std::ostringstream s;
  if (how == Bf16Gemm::OneDNN) {
    const dnnl_version_t* v = dnnl_version();
    s << "oneDNN " << v->major << "." << v->minor << "." << v->patch << " bf16 matmul, "
      << onednn_bf16_kernels() << " kernels (" << why << ")";
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
