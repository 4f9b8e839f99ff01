// Thread count, its adjustment to other programs' load, and the wait policy (threads.hpp).
#include "autograd/threads.hpp"

#include <omp.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>

#include "autograd/error.hpp"
#include "autograd/settings.hpp"

// libxgrad_wait_policy.so (autograd/startup/wait_policy.cpp).
extern "C" int xgrad_wait_policy_defaulted();

namespace xg {

namespace {

// The thread count follows the load unless someone chose it: OMP_NUM_THREADS in the
// environment, or set_num_threads (--threads N).
std::atomic<bool> g_chosen{settings().threads > 0};
std::atomic<int64_t> g_next_check_ns{0};
std::mutex g_load_mutex;
std::atomic<int> g_full{0};  // the threads on free cores (libgomp's count before any change)
LoadSample g_last;    // the previous sample (wall_s == 0: none yet)
// set_num_threads' count (0: never called) and how many times it was called; each thread
// remembers the call it applied last.
std::atomic<int> g_set_count{0};
std::atomic<unsigned> g_set_calls{0};
thread_local unsigned t_applied_calls = 0;

constexpr int64_t kWindowNs = 100'000'000;  // 0.1 s between looks at the load

double seconds(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Busy time (everything but idle and iowait) of the CPUs this process may run on, from
// /proc/stat's per-CPU lines (in clock ticks). Negative when it cannot be read.
double busy_seconds_of_my_cpus() {
  cpu_set_t mine;
  if (sched_getaffinity(0, sizeof mine, &mine) != 0) return -1;
  std::ifstream f("/proc/stat");
  if (!f) return -1;
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  std::string line;
  double busy = 0;
  while (std::getline(f, line)) {
    if (line.compare(0, 3, "cpu") != 0) break;  // the cpu lines come first
    if (line.size() < 4 || line[3] < '0' || line[3] > '9') continue;  // the all-CPU total
    std::istringstream in(line.substr(3));
    int cpu = 0;
    unsigned long long user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
    in >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal;
    if (!in || cpu < 0 || cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &mine)) continue;
    busy += static_cast<double>(user + nice + system + irq + softirq + steal) / tick;
  }
  return busy;
}

}  // namespace

int threads_for_load(int full, double others) {
  // A core counts as taken when other programs use more than a quarter of it: two threads
  // against a busy core show it as half taken (this process gets half of the shared core),
  // one thread beside it as wholly taken, so the count does not swing back and forth.
  const int taken = others > 0.25 ? static_cast<int>(std::ceil(others - 0.25)) : 0;
  return std::max(1, full - taken);
}

LoadSample sample_load() {
  return {seconds(CLOCK_MONOTONIC), busy_seconds_of_my_cpus(), seconds(CLOCK_PROCESS_CPUTIME_ID)};
}

double others_load(const LoadSample& a, const LoadSample& b) {
  const double wall = b.wall_s - a.wall_s;
  if (wall <= 0 || a.busy_s < 0 || b.busy_s < 0) return 0;
  return std::max(0.0, ((b.busy_s - a.busy_s) - (b.own_s - a.own_s)) / wall);
}

void apply_thread_count() {
  const unsigned calls = g_set_calls.load(std::memory_order_acquire);
  if (calls == t_applied_calls) return;
  if (omp_in_parallel()) return;  // a team's thread: its count is the team's
  t_applied_calls = calls;
  omp_set_num_threads(g_set_count.load(std::memory_order_relaxed));
}

void follow_load() {
  apply_thread_count();
  if (g_chosen.load(std::memory_order_relaxed) || omp_in_parallel()) return;
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
  const int64_t ns = static_cast<int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
  if (ns < g_next_check_ns.load(std::memory_order_relaxed)) return;
  std::lock_guard<std::mutex> lock(g_load_mutex);
  if (ns < g_next_check_ns.load(std::memory_order_relaxed) || g_chosen.load()) return;
  g_next_check_ns.store(ns + kWindowNs, std::memory_order_relaxed);
  if (g_full.load() == 0) g_full = omp_get_max_threads();
  if (g_full.load() < 2) return;
  const LoadSample s = sample_load();
  if (g_last.wall_s > 0 && s.busy_s >= 0) {
    const int want = threads_for_load(g_full.load(), others_load(g_last, s));
    if (want != omp_get_max_threads()) omp_set_num_threads(want);
  }
  g_last = s;
}

void set_num_threads(int n) {
  check(n >= 1, "set_num_threads: expected at least 1 thread, got ", n);
  g_chosen = true;
  detail::record_threads(n);
  omp_set_num_threads(n);
  g_set_count.store(n, std::memory_order_relaxed);
  t_applied_calls = g_set_calls.fetch_add(1, std::memory_order_acq_rel) + 1;
}

int num_threads() {
  apply_thread_count();
  return omp_get_max_threads();
}

std::string threads_description() {
  const bool follows = !g_chosen.load();
  const int n = follows && g_full.load() > 0 ? g_full.load() : num_threads();
  std::string s = std::to_string(n) + (n == 1 ? " thread" : " threads");
  if (follows && n > 1) s += " (fewer while other programs keep these cores busy)";
  if (xgrad_wait_policy_defaulted())
    return s + ", short spin wait (xgrad's default, GOMP_SPINCOUNT=10000; OMP_WAIT_POLICY=passive to sleep at once)";
  if (!settings().omp_wait_policy.empty()) return s + ", OMP_WAIT_POLICY=" + settings().omp_wait_policy;
  if (!settings().gomp_spincount.empty()) return s + ", GOMP_SPINCOUNT=" + settings().gomp_spincount;
  return s + ", libgomp's default wait (spin, then sleep)";
}

}  // namespace xg
