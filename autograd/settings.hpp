// The run's settings in one place: every environment variable xgrad reads, read once (at the
// first use), and what the program set since (set_num_threads, --threads). Logs and benchmark
// JSON print it whole; README's "Environment variables" table says why each one exists.
// NOTE: libxgrad_wait_policy.so reads OMP_WAIT_POLICY and GOMP_SPINCOUNT before main, as libgomp
// does (autograd/startup/wait_policy.cpp); this struct records what they were when read.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace xg {

struct Settings {
  std::string gemm;               // XGRAD_GEMM: openblas or onednn; empty: chosen by the CPU (gemm_backend.hpp)
  std::string gemm_bf16;          // XGRAD_GEMM_BF16: onednn or widened; empty: chosen by the CPU (gemm_backend.hpp)
  std::string memory_limit;       // XGRAD_MEMORY_LIMIT: bytes taken for this machine's memory (memory.hpp)
  bool buffer_cache = true;       // XGRAD_NO_BUFFER_CACHE=1: every buffer mapped and unmapped (tensor.cpp)
  int threads = 0;                // OMP_NUM_THREADS, then set_num_threads / --threads; 0: follow the load
  std::string omp_wait_policy;    // OMP_WAIT_POLICY as libgomp read it
  std::string gomp_spincount;     // GOMP_SPINCOUNT as libgomp read it (xgrad's 10000 unless the user set one)
  std::string openblas_coretype;  // OPENBLAS_CORETYPE: OpenBLAS's kernels, pinned by the machine (never changed)
  bool user_malloc = false;       // GLIBC_TUNABLES glibc.malloc.*, MALLOC_MMAP_THRESHOLD_ or MALLOC_TRIM_THRESHOLD_ set
  std::string fault_kill_in_write;  // XGRAD_FAULT_KILL_IN_WRITE=<file>:<n>: crash-safety tests (io/atomic_file.cpp)
  std::string fault_kill_rank;    // XGRAD_FAULT_KILL_RANK=<rank>:<step>: a rank dying mid-step (finetune/train_loop.cpp)
  std::string fault_nan_rank;     // XGRAD_FAULT_NAN_RANK=<rank>:<step>[:grad]: a rank's NaN loss or gradient (train_loop.cpp)
  bool mpi_launched = false;      // OMPI_COMM_WORLD_SIZE, PMIX_RANK or PMI_RANK: an MPI launcher started us
  int mpi_local_ranks = 1;        // OMPI_COMM_WORLD_LOCAL_SIZE or MPI_LOCALNRANKS: ranks on this machine

  // Reads the environment now. It never throws (it may run before main): a malformed value is
  // an error naming the variable where the setting is used.
  static Settings from_environment();
  // Every setting as (environment variable, value), in the order above, for logs and JSON.
  std::vector<std::pair<std::string, std::string>> table() const;
};

// The process's settings: Settings::from_environment() at the first call, then kept.
const Settings& settings();

// Stands in other settings for a scope, and puts the previous ones back at its end: a test
// standing for a small machine (memory_limit). Not for use while other threads read them.
class SettingsGuard {
 public:
  explicit SettingsGuard(const Settings& s);
  ~SettingsGuard();
  SettingsGuard(const SettingsGuard&) = delete;
  SettingsGuard& operator=(const SettingsGuard&) = delete;

 private:
  Settings previous_;
};

namespace detail {
// set_num_threads records its count here (threads.cpp).
void record_threads(int n);
}  // namespace detail

}  // namespace xg
