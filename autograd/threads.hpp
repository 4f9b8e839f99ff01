// How many threads run xgrad's loops and products, and how idle ones wait.
//
// xgrad's loops and both gemm backends share one OpenMP (libgomp) pool, sized by
// OMP_NUM_THREADS or else the cores this process may run on. libgomp reads its wait policy
// (OMP_WAIT_POLICY, GOMP_SPINCOUNT) once, before main; xgrad's default there is a short spin
// (GOMP_SPINCOUNT=10000, about 0.1 ms), put into the environment before libgomp reads it by
// libxgrad_wait_policy.so (autograd/startup/wait_policy.cpp says why); a policy the user set
// is kept.
//
// A spinning thread on a core another program keeps busy makes every parallel region wait
// for it (two threads then run a tiny model slower than one does). So unless the count was chosen
// (OMP_NUM_THREADS, set_num_threads, --threads N), xgrad looks at the load every 0.1 s, at the
// start of a matrix product, and runs on as many threads as there are cores other programs
// leave free: /proc/stat's busy time of this process's CPUs minus this process's own CPU time
// is the others' load. Results are bitwise repeatable at a fixed thread count; with OpenBLAS
// products the last bits depend on the count, so a run that must repeat bit for bit on a
// shared machine fixes it.
#pragma once

#include <string>

namespace xg {

// torch.set_num_threads: the threads of every later parallel loop and product (n >= 1), in
// every thread of the process (see apply_thread_count).
void set_num_threads(int n);
// torch.get_num_threads.
int num_threads();
// OpenMP keeps the thread count per thread: a thread the user starts begins with
// OMP_NUM_THREADS or the core count, whatever set_num_threads said. So each thread applies the
// count last set when it makes a tensor, runs a product or asks num_threads(), as PyTorch's
// parallel_for does (lazy_init_num_threads). One atomic load when nothing changed.
void apply_thread_count();
// One line for logs and --help: the count and the wait policy in force, e.g.
// "2 threads (fewer while other programs keep these cores busy), short spin wait (xgrad's
// default, GOMP_SPINCOUNT=10000; ...)" or "2 threads, OMP_WAIT_POLICY=active" when the user chose.
std::string threads_description();

// Called by xgrad's products outside parallel regions: every 0.1 s, sets the thread count to
// the cores the others' load leaves free (a no-op when the count was chosen).
void follow_load();

// The parts of follow_load(), for tests.
struct LoadSample {
  double wall_s = 0;  // CLOCK_MONOTONIC
  double busy_s = 0;  // busy time of this process's CPUs (negative: /proc/stat unreadable)
  double own_s = 0;   // this process's CPU time
};
LoadSample sample_load();
// Cores' worth of other programs' work between two samples (0 when unknown).
double others_load(const LoadSample& before, const LoadSample& after);
// Threads for `full` threads on free cores when others use `others` cores' worth.
int threads_for_load(int full, double others);

}  // namespace xg
