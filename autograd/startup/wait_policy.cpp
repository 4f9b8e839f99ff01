// libxgrad_wait_policy.so: xgrad's default OpenMP wait policy, set before libgomp reads it.
//
// libgomp reads OMP_WAIT_POLICY and GOMP_SPINCOUNT once, in its own load-time constructor,
// before main. Its default lets an idle thread spin up to 300,000 times (about 3 ms) at every
// barrier and between parallel regions before it sleeps. When another process keeps one of
// the cores busy, that spinning competes with it for the shared core, the thread that the
// next region needs is descheduled for a time slice, and two threads ran the tiny step
// benchmark 1.6x slower than one (bench/README.md). With OMP_WAIT_POLICY=passive an idle
// thread sleeps at once and is woken when work comes.
//
// So this library's constructor sets OMP_WAIT_POLICY=passive unless the environment already
// chose (OMP_WAIT_POLICY or GOMP_SPINCOUNT set: a user's setting is never overridden). It
// must run before libgomp's constructor: the dynamic linker initialises a process's libraries
// depth first in the order the executable names them, so this library, which depends on
// nothing but libc, is named first on every link line (CMakeLists.txt puts it there; the
// test `wait_policy_reaches_libgomp` reads libgomp's own OMP_DISPLAY_ENV report to check).
#include <cstdlib>
#include <cstring>

namespace {

int g_source = 0;  // 0: the environment chose (or nobody did), 1: this library set passive

// The children of a process whose policy xgrad set inherit OMP_WAIT_POLICY=passive; the
// marker tells them it is still xgrad's default, not their user's choice.
constexpr const char* kMarker = "XGRAD_DEFAULT_WAIT_POLICY";

__attribute__((constructor)) void default_to_passive_wait() {
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  const char* marker = std::getenv(kMarker);
  if (policy && marker && std::strcmp(policy, marker) == 0 && !std::getenv("GOMP_SPINCOUNT")) {
    g_source = 1;  // inherited from an xgrad parent
    return;
  }
  if (policy || std::getenv("GOMP_SPINCOUNT")) return;
  if (setenv("OMP_WAIT_POLICY", "passive", /*overwrite=*/0) == 0 && setenv(kMarker, "passive", 1) == 0) g_source = 1;
}

}  // namespace

// 1 when OMP_WAIT_POLICY=passive in this process is xgrad's default, not the user's
// (autograd/threads.cpp says which in threads_description()).
extern "C" int xgrad_wait_policy_defaulted() { return g_source; }
