// Settings::from_environment, the process's settings, and SettingsGuard.
#include "autograd/settings.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>


namespace xg {

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// Read at the first call (thread-safe).
Settings& current() {
  static Settings s = Settings::from_environment();
  return s;
}

}  // namespace

Settings Settings::from_environment() {
  Settings s;
  s.gemm = env("XGRAD_GEMM");
  s.gemm_bf16 = env("XGRAD_GEMM_BF16");
  s.memory_limit = env("XGRAD_MEMORY_LIMIT");
  const std::string no_cache = env("XGRAD_NO_BUFFER_CACHE");
  s.buffer_cache = no_cache.empty() || no_cache == "0";
  s.threads = std::max(0, std::atoi(env("OMP_NUM_THREADS").c_str()));  // "4,2" (nested levels): 4
  s.omp_wait_policy = env("OMP_WAIT_POLICY");
  s.gomp_spincount = env("GOMP_SPINCOUNT");
  s.openblas_coretype = env("OPENBLAS_CORETYPE");
  s.user_malloc = env("GLIBC_TUNABLES").find("glibc.malloc.") != std::string::npos ||
                  std::getenv("MALLOC_MMAP_THRESHOLD_") || std::getenv("MALLOC_TRIM_THRESHOLD_");
  s.fault_kill_in_write = env("XGRAD_FAULT_KILL_IN_WRITE");
  s.fault_kill_rank = env("XGRAD_FAULT_KILL_RANK");
  s.fault_nan_rank = env("XGRAD_FAULT_NAN_RANK");
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK"})
    if (std::getenv(v)) s.mpi_launched = true;
  std::string local = env("OMPI_COMM_WORLD_LOCAL_SIZE");
  if (local.empty()) local = env("MPI_LOCALNRANKS");
  s.mpi_local_ranks = std::max(1, std::atoi(local.c_str()));
  return s;
}

std::vector<std::pair<std::string, std::string>> Settings::table() const {
  const auto flag = [](bool b) { return std::string(b ? "1" : "0"); };
  return {{"XGRAD_GEMM", gemm},
          {"XGRAD_GEMM_BF16", gemm_bf16},
          {"XGRAD_MEMORY_LIMIT", memory_limit},
          {"XGRAD_NO_BUFFER_CACHE", flag(!buffer_cache)},
          {"threads", threads > 0 ? std::to_string(threads) : "follow the load"},
          {"OMP_WAIT_POLICY", omp_wait_policy},
          {"GOMP_SPINCOUNT", gomp_spincount},
          {"OPENBLAS_CORETYPE", openblas_coretype},
          {"user malloc settings", flag(user_malloc)},
          {"XGRAD_FAULT_KILL_IN_WRITE", fault_kill_in_write},
          {"XGRAD_FAULT_KILL_RANK", fault_kill_rank},
          {"XGRAD_FAULT_NAN_RANK", fault_nan_rank},
          {"MPI launcher", flag(mpi_launched)},
          {"MPI local ranks", std::to_string(mpi_local_ranks)}};
}

const Settings& settings() { return current(); }

SettingsGuard::SettingsGuard(const Settings& s) : previous_(current()) { current() = s; }
SettingsGuard::~SettingsGuard() { current() = previous_; }

namespace detail {
void record_threads(int n) { current().threads = n; }
}  // namespace detail

}  // namespace xg
