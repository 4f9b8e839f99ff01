// Which library computes float32 matrix products (matmul, linear, bmm, attention's products).
//
// Debian's OpenBLAS picks its kernels by the CPU's model number, and a model it does not know
// (OpenBLAS 0.3.21 on a Sapphire Rapids Xeon, say) gets its generic "Prescott" SSE3 kernels:
// a small fraction of what the machine can do. oneDNN picks its kernels by the CPU's features
// (AVX2, AVX-512, AMX), so it is used exactly when OpenBLAS's kernels use less of the CPU:
//   1. XGRAD_GEMM=openblas or XGRAD_GEMM=onednn in the environment chooses;
//   2. else oneDNN when the OpenBLAS kernels in force (its own pick, or those an
//      OPENBLAS_CORETYPE in the environment pins) lack AVX2 on a CPU with AVX2 and FMA, or lack
//      AVX-512 on a CPU with AVX-512 (an AMD Zen 5 pinned to Haswell, say), or are its Intel
//      AVX-512 sets (SkylakeX, Cooperlake, SapphireRapids) on an AMD CPU: OpenBLAS 0.3.21 picks
//      Cooperlake on a Zen 4 by its features, and there oneDNN's kernels are the faster (on an
//      Intel Xeon pinned to Cooperlake OpenBLAS's are, and it stays).
//      OPENBLAS_CORETYPE itself is never changed (some machines set it because other
//      OpenBLAS kernels compute wrong results there): OpenBLAS keeps running the kernels it
//      names, for float64 and for anything else that calls it;
//   3. else OpenBLAS, and on a CPU with AVX2 and FMA its products of fewer than 2^23
//      multiply-adds (M N K of the whole product) go to oneDNN: there its jit kernels beat
//      OpenBLAS's, which zero C in a pass of their own and pack both operands whatever the size
//      (attention's per-head products, a d 64 model's layers); from about 2^24 up OpenBLAS's
//      are as fast or faster, and it keeps those.
// The choice is made once, at the first product, and kept for the process, so runs are
// reproducible; a product's library depends only on its shape, never on the thread count.
// Float64 products always run on OpenBLAS (oneDNN has no dgemm). The measurements behind
// these rules: bench/README.md, "Design measurements behind the code".
#pragma once

#include <string>

namespace xg {

enum class GemmBackend { OpenBLAS, OneDNN };

// The backend float32 products use (chosen at the first call, by the rules above).
GemmBackend gemm_backend();

// Replaces the choice for the rest of the process with one backend for every product (tests
// and benchmarks compare backends).
void set_gemm_backend(GemmBackend backend);

// "openblas" or "onednn", the names XGRAD_GEMM takes.
const char* gemm_backend_name(GemmBackend backend);

// What the rules read, and the rules as a function of it (tests check each rule).
struct GemmFacts {
  std::string xgrad_gemm;         // XGRAD_GEMM, empty when unset
  std::string openblas_coretype;  // OPENBLAS_CORETYPE, empty when unset
  std::string openblas_core;      // openblas_get_corename(): the kernel set OpenBLAS runs
  std::string openblas_version;   // e.g. "OpenBLAS 0.3.21"
  bool cpu_avx2_fma = false;      // the CPU has AVX2 and FMA
  bool cpu_avx512 = false;        // the CPU has AVX-512 F/BW/VL/DQ (oneDNN's avx512_core)
  bool cpu_amd = false;           // the CPU is AMD's (cpuid's vendor string)
};
// Under rule 3, float32 products below this many multiply-adds run on oneDNN.
constexpr double kSmallGemmMadds = 8388608.0;  // 2^23

struct GemmChoice {
  GemmBackend backend;
  std::string why;               // the rule that chose it, for gemm_backend_description()
  bool small_on_onednn = false;  // rule 3: products below kSmallGemmMadds go to oneDNN
};
// Throws xg::Error naming XGRAD_GEMM when it is neither openblas nor onednn.
GemmChoice choose_gemm_backend(const GemmFacts& facts);

// The whole choice in force (backend, small-product routing, rule), and its replacement:
// what a test saves and restores.
GemmChoice gemm_choice();
void set_gemm_choice(const GemmChoice& choice);

// This process's facts.
GemmFacts gemm_facts();

// The library, its version and the kernels a backend runs on this CPU, e.g. "oneDNN 2.6.3
// sgemm, avx512_core_amx kernels" or "OpenBLAS 0.3.21 sgemm, Prescott kernels".
std::string gemm_kernels(GemmBackend backend);

// float32 products of one row by a transposed matrix (x @ w^T of a decoded token) run on xgrad's
// own matrix-vector kernel whatever the backend (matmul.cpp; it reads w from memory faster than
// dnnl_sgemm does for one row); gemm_backend_description() ends with this.
constexpr const char* kOneRowProducts = "one-row products (decoding) on xgrad's matrix-vector kernel";

// One line for logs, --help and benchmark JSON: the library, its version, the kernels that run
// and why, e.g. "oneDNN 2.6.3 sgemm, avx512_core_amx kernels (OpenBLAS 0.3.21 runs its
// Prescott kernels, without this CPU's AVX2); one-row products ..." or "OpenBLAS 0.3.21 sgemm,
// Zen kernels (OpenBLAS chose its kernels by the CPU's model); below 2^23 multiply-adds oneDNN
// 2.6.3 sgemm, avx2 kernels; one-row products ...".
std::string gemm_backend_description();

// One line: the instruction set xgrad's own kernels (the quantized block formats, attention's
// and the blocked products' register tiles, the elementwise ops through xsimd) were compiled
// for, e.g. "AVX-512 with AVX512-BF16 (built with -march=native: ...)" or "SSE2, the x86-64
// baseline (built with XGRAD_NATIVE off: ...)". Unlike the libraries above, which pick kernels as they
// run, these are fixed when xgrad is built (XGRAD_NATIVE in CMakeLists.txt).
std::string build_kernels_description();

// --- bfloat16 products ------------------------------------------------------------------
// A product with a bfloat16 operand (matmul.hpp says which) multiplies bf16 values and sums
// them in float32. Where the CPU's bf16 dot-product instructions beat its float32 FMAs,
// oneDNN's matmul primitive runs it: AVX512-BF16 on AMD Zen 4/5 (oneDNN's avx512_core_bf16
// level; a vdpbf16ps does twice an FMA's multiply-adds at the same rate) and AMX-BF16 on
// Sapphire Rapids on (avx512_core_amx). Elsewhere each operand is widened to float32 and the
// float32 product of gemm_backend() runs: the same products of the same bf16 values, summed in
// float32 in another order, so results agree to float32 rounding. That is every CPU without
// bf16 instructions (oneDNN would only emulate them, slower than its sgemm), and Intel Xeons
// whose AMX is absent or hidden by a hypervisor: their vdpbf16ps does half the multiply-adds of
// their two FMA units, so oneDNN's bf16 matmul runs at half its sgemm's rate.
enum class Bf16Gemm { OneDNN, Widened };
// Chosen at the first bf16 product (XGRAD_GEMM_BF16=onednn|widened in the environment
// overrides), then kept for the process: Widened without bf16 dot products, OneDNN with AMX,
// and otherwise by bf16_dot_speedup() against kBf16DotSpeedupMin (choose_bf16_gemm).
Bf16Gemm bf16_gemm();
// Whether oneDNN finds bf16 dot products on this CPU (AVX512-BF16 or AMX): what the tests of the
// bf16 kernels need, whichever bf16_gemm() chose.
bool cpu_has_bf16_dot();
// Whether oneDNN has a bf16 matmul at all here: from its avx512_core level up (emulating the dot
// products below avx512_core_bf16). An AVX2 CPU has none, so Bf16Gemm::OneDNN is refused there
// (set_bf16_gemm, XGRAD_GEMM_BF16=onednn) and products take the widened path.
bool onednn_has_bf16_matmul();
// One core's multiply-adds a second in vdpbf16ps over those in float32 FMAs (vfmadd231ps), both
// on 512-bit registers, measured once in under 1 ms: 0.47-0.50 on an Intel Emerald Rapids Xeon
// (AMX hidden by its hypervisor); about 2 expected on AMD Zen 4, whose bf16 matmul ran at 1.9x
// its sgemm. 0 where the CPU has no bf16 dot products.
double bf16_dot_speedup();
// The same measured afresh (bf16_dot_speedup() keeps its first reading): the tests check that
// readings agree, since a choice that flipped between runs would change a run's numbers.
double measure_bf16_dot_speedup();
// oneDNN's bf16 matmul converts and packs its operands, so bf16 dot products must do more than
// break even: 1.2x the FMAs' multiply-adds.
constexpr double kBf16DotSpeedupMin = 1.2;
Bf16Gemm choose_bf16_gemm(bool has_bf16_dot, bool has_amx, double dot_speedup);
void set_bf16_gemm(Bf16Gemm how);  // tests and benchmarks compare the two; OneDNN needs onednn_has_bf16_matmul()
// "onednn" or "widened", the names XGRAD_GEMM_BF16 takes.
const char* bf16_gemm_name(Bf16Gemm how);
// One line for logs, --help and benchmark JSON: "oneDNN 2.6.3 bf16 matmul, avx512_core_bf16
// kernels (the CPU has AVX512-BF16)" or "widened to float32, then <gemm_kernels> (the CPU has
// no AVX512-BF16 or AMX)".
std::string bf16_gemm_description();

}  // namespace xg
