// libxgrad_wait_policy.so: xgrad's default OpenMP wait policy, set before libgomp reads it.
//
// libgomp reads OMP_WAIT_POLICY and GOMP_SPINCOUNT once, in its own load-time constructor,
// before main. Its default lets an idle thread spin up to 300,000 times (about 3 ms: libgomp
// counts ~100,000 spins per ms) at every barrier and between parallel regions before it
// sleeps; a passive wait sleeps at once. Neither suits a training step:
// - a tiny model's step runs ~100 parallel regions, and a sleeping thread takes longer to
//   wake than many of those regions last: passive runs such a step several times slower
//   than a spin on free cores (bench/README.md, "Shared machine");
// - a long spin holds a core while the program is between steps or in serial code.
// So the default here is a short spin, GOMP_SPINCOUNT=10000 (about 0.1 ms), which covers the
// gaps inside a step. When another process keeps a core busy, any spin loses (the spinning
// thread uses up its share of the shared core and is not run first when work comes), so
// xgrad also drops to fewer threads while the cores it runs on are busy with other work
// (autograd/threads.cpp). `OMP_WAIT_POLICY` or `GOMP_SPINCOUNT` in the environment is the
// user's choice and is never overridden.
//
// It must run before libgomp's constructor: the dynamic linker initialises a process's
// libraries depth first in the order the executable names them, so this library, which
// depends on nothing but libc, is named first on every link line (CMakeLists.txt puts it
// there; tests/test_cli_threads.cpp reads libgomp's own OMP_DISPLAY_ENV report to check).
#include <cstdlib>
#include <cstring>

namespace {

bool g_defaulted = false;  // the wait policy in force is xgrad's default, not the user's

// The children of a process whose policy xgrad set inherit GOMP_SPINCOUNT=10000; the marker
// tells them it is still xgrad's default, not their user's choice.
constexpr const char* kMarker = "XGRAD_DEFAULT_WAIT_POLICY";
constexpr const char* kSpinCount = "10000";

bool same(const char* a, const char* b) { return a && b && std::strcmp(a, b) == 0; }

__attribute__((constructor)) void default_to_short_spin() {
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  const char* spin = std::getenv("GOMP_SPINCOUNT");
  if (!policy && same(spin, kSpinCount) && same(std::getenv(kMarker), kSpinCount)) {
    g_defaulted = true;  // inherited from an xgrad parent
    return;
  }
  if (policy || spin) return;
  if (setenv("GOMP_SPINCOUNT", kSpinCount, /*overwrite=*/0) == 0 && setenv(kMarker, kSpinCount, 1) == 0)
    g_defaulted = true;
}

}  // namespace

// 1 when the wait policy in this process is xgrad's default short spin, not the user's
// (autograd/threads.cpp says which in threads_description()).
extern "C" int xgrad_wait_policy_defaulted() { return g_defaulted ? 1 : 0; }
