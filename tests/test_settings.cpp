// autograd/settings.cpp: every environment variable xgrad reads, read into one struct (and a
// malformed one reported where its setting is used); SettingsGuard puts the settings back.
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "autograd/memory.hpp"
#include "autograd/settings.hpp"
#include "autograd/threads.hpp"
#include "tests/torch_fixture.hpp"

namespace {

// Sets environment variables for the scope and restores them after.
struct SettingsTestEnv {
  std::vector<std::pair<std::string, std::optional<std::string>>> saved;
  void set(const char* name, const char* value) {
    const char* old = std::getenv(name);
    saved.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
    if (value) ::setenv(name, value, 1); else ::unsetenv(name);
  }
  ~SettingsTestEnv() {
    for (auto it = saved.rbegin(); it != saved.rend(); ++it)
      if (it->second) ::setenv(it->first.c_str(), it->second->c_str(), 1); else ::unsetenv(it->first.c_str());
  }
};

TEST(Settings, ReadsEveryVariableIntoOneStruct) {
  SettingsTestEnv env;
  env.set("XGRAD_GEMM", "onednn");
  env.set("XGRAD_GEMM_BF16", "widened");
  env.set("XGRAD_MEMORY_LIMIT", "1073741824");
  env.set("XGRAD_NO_BUFFER_CACHE", "1");
  env.set("OMP_NUM_THREADS", "3,1");
  env.set("OMP_WAIT_POLICY", "passive");
  env.set("OPENBLAS_CORETYPE", "Haswell");
  env.set("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=1");
  env.set("XGRAD_FAULT_KILL_IN_WRITE", "model.safetensors:2");
  env.set("XGRAD_FAULT_KILL_RANK", "1:3");
  env.set("XGRAD_FAULT_NAN_RANK", "0:2:grad");
  env.set("OMPI_COMM_WORLD_SIZE", "4");
  env.set("OMPI_COMM_WORLD_LOCAL_SIZE", "2");
  const xg::Settings s = xg::Settings::from_environment();
  EXPECT_EQ(s.gemm, "onednn");
  EXPECT_EQ(s.gemm_bf16, "widened");
  EXPECT_EQ(s.memory_limit, "1073741824");
  EXPECT_FALSE(s.buffer_cache);
  EXPECT_EQ(s.threads, 3);  // the outer level of a nested list
  EXPECT_EQ(s.omp_wait_policy, "passive");
  EXPECT_EQ(s.openblas_coretype, "Haswell");
  EXPECT_TRUE(s.user_malloc);
  EXPECT_EQ(s.fault_kill_in_write, "model.safetensors:2");
  EXPECT_EQ(s.fault_kill_rank, "1:3");
  EXPECT_EQ(s.fault_nan_rank, "0:2:grad");
  EXPECT_TRUE(s.mpi_launched);
  EXPECT_EQ(s.mpi_local_ranks, 2);
  const auto table = s.table();
  ASSERT_EQ(table.size(), 14u);
  EXPECT_EQ(table[0], (std::pair<std::string, std::string>{"XGRAD_GEMM", "onednn"}));
  EXPECT_EQ(table[1], (std::pair<std::string, std::string>{"XGRAD_GEMM_BF16", "widened"}));
  EXPECT_EQ(table[3], (std::pair<std::string, std::string>{"XGRAD_NO_BUFFER_CACHE", "1"}));
  EXPECT_EQ(table[4], (std::pair<std::string, std::string>{"threads", "3"}));

  env.set("XGRAD_NO_BUFFER_CACHE", "0");
  env.set("OMP_NUM_THREADS", nullptr);
  env.set("GLIBC_TUNABLES", "glibc.cpu.x86_shstk=on");  // not malloc's
  env.set("OMPI_COMM_WORLD_SIZE", nullptr);
  env.set("OMPI_COMM_WORLD_LOCAL_SIZE", nullptr);
  const xg::Settings d = xg::Settings::from_environment();
  EXPECT_TRUE(d.buffer_cache);
  EXPECT_EQ(d.threads, 0);
  EXPECT_EQ(d.table()[4].second, "follow the load");
  EXPECT_FALSE(d.user_malloc);
  EXPECT_FALSE(d.mpi_launched);
  EXPECT_EQ(d.mpi_local_ranks, 1);
}

TEST(Settings, AreReadOnceAndAGuardStandsInForAScope) {
  const xg::Settings before = xg::settings();
  {
    SettingsTestEnv env;
    env.set("XGRAD_MEMORY_LIMIT", "12345");  // too late: read at the first use
    EXPECT_EQ(xg::settings().memory_limit, before.memory_limit);
  }
  xg::Settings small = before;
  small.memory_limit = "1e9";
  {
    xg::SettingsGuard guard(small);
    EXPECT_EQ(xg::physical_memory_bytes(), 1e9);
  }
  EXPECT_EQ(xg::settings().memory_limit, before.memory_limit);
}

TEST(Settings, SetNumThreadsIsRecorded) {
  const int n = xg::num_threads();
  xg::set_num_threads(1);
  EXPECT_EQ(xg::settings().threads, 1);
  xg::set_num_threads(n);
  EXPECT_EQ(xg::settings().threads, n);
}

}  // namespace
