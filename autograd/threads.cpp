// Thread count and the wait policy in force (threads.hpp).
#include "autograd/threads.hpp"

#include <omp.h>

#include <cstdlib>
#include <string>

#include "autograd/error.hpp"

// libxgrad_wait_policy.so (autograd/startup/wait_policy.cpp).
extern "C" int xgrad_wait_policy_defaulted();

namespace xg {

void set_num_threads(int n) {
  check(n >= 1, "set_num_threads: expected at least 1 thread, got ", n);
  omp_set_num_threads(n);
}

int num_threads() { return omp_get_max_threads(); }

std::string threads_description() {
  const int n = num_threads();
  std::string s = std::to_string(n) + (n == 1 ? " thread" : " threads");
  if (xgrad_wait_policy_defaulted()) return s + ", passive wait (xgrad's default; OMP_WAIT_POLICY=active to spin)";
  if (const char* p = std::getenv("OMP_WAIT_POLICY")) return s + ", OMP_WAIT_POLICY=" + p;
  if (const char* c = std::getenv("GOMP_SPINCOUNT")) return s + ", GOMP_SPINCOUNT=" + c;
  return s + ", libgomp's default wait (spin, then sleep)";
}

}  // namespace xg
