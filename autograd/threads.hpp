// How many threads run xgrad's loops and products, and how idle ones wait.
//
// xgrad's loops and both gemm backends share one OpenMP (libgomp) pool, sized by
// OMP_NUM_THREADS or else the cores this process may run on. libgomp reads its wait policy
// (OMP_WAIT_POLICY, GOMP_SPINCOUNT) once, before main; by default idle threads spin for a while
// at every barrier before they sleep. On a machine where another process keeps a core busy,
// OMP_WAIT_POLICY=passive (or one thread) avoids the collapse that spinning causes there.
#pragma once

#include <string>

namespace xg {

// torch.set_num_threads: the threads of every later parallel loop and product (n >= 1).
void set_num_threads(int n);
// torch.get_num_threads.
int num_threads();
// One line for logs and --help: the count and the wait policy in force, e.g.
// "2 threads, OMP_WAIT_POLICY=passive" or "2 threads, libgomp's default wait (spin, then sleep)".
std::string threads_description();

}  // namespace xg
