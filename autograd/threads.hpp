// How many threads run xgrad's loops and products, and how idle ones wait.
//
// xgrad's loops and both gemm backends share one OpenMP (libgomp) pool, sized by
// OMP_NUM_THREADS or else the cores this process may run on. libgomp reads its wait policy
// (OMP_WAIT_POLICY, GOMP_SPINCOUNT) once, before main. Its own default lets idle threads spin
// for about 3 ms at every barrier; on a machine where another process keeps a core busy, that
// spinning made two threads slower than one. So xgrad's default is OMP_WAIT_POLICY=passive,
// put into the environment before libgomp reads it by libxgrad_wait_policy.so
// (autograd/startup/wait_policy.cpp), which every program linking xgrad loads; a policy the
// user set (OMP_WAIT_POLICY or GOMP_SPINCOUNT) is kept.
#pragma once

#include <string>

namespace xg {

// torch.set_num_threads: the threads of every later parallel loop and product (n >= 1).
void set_num_threads(int n);
// torch.get_num_threads.
int num_threads();
// One line for logs and --help: the count and the wait policy in force, e.g.
// "2 threads, passive wait (xgrad's default; OMP_WAIT_POLICY=active to spin)" or
// "2 threads, OMP_WAIT_POLICY=active" when the user chose.
std::string threads_description();

}  // namespace xg
