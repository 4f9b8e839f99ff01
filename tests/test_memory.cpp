// autograd/memory.cpp: the machine's memory (or XGRAD_MEMORY_LIMIT), byte sizes for messages,
// and the one-line refusal of a setting that needs more.
#include <gtest/gtest.h>

#include <cstdlib>

#include "autograd/memory.hpp"
#include "autograd/settings.hpp"
#include "tests/torch_fixture.hpp"

TEST(Memory, ByteSizesForMessages) {
  EXPECT_EQ(xg::byte_size(100), "100 B");
  EXPECT_EQ(xg::byte_size(12 * 1024), "12 KB");
  EXPECT_EQ(xg::byte_size(1.5 * 1024 * 1024 * 1024), "1.5 GB");
  EXPECT_EQ(xg::byte_size(3e15), "2.66 PB");
}

TEST(Memory, RefusesWhatTheMachineCannotHold) {
  EXPECT_GT(xg::physical_memory_bytes(), 64.0 * 1024 * 1024);  // any machine that runs the suite
  xg::Settings small = xg::settings();
  small.memory_limit = "2147483648";  // XGRAD_MEMORY_LIMIT=2147483648
  {
    xg::SettingsGuard guard(small);
    EXPECT_EQ(xg::physical_memory_bytes(), 2147483648.0);
    xg::check_memory(2147483648.0, "--batch 4");  // exactly fits
    EXPECT_XG_ERROR(xg::check_memory(3 * 1073741824.0, "--batch 100000000"),
                    "--batch 100000000 needs about 3 GB, more than this machine's 2 GB of memory");
  }
  EXPECT_GT(xg::physical_memory_bytes(), 64.0 * 1024 * 1024);  // the guard put the machine's back
  small.memory_limit = "lots";
  xg::SettingsGuard guard(small);
  EXPECT_XG_ERROR(xg::physical_memory_bytes(), "XGRAD_MEMORY_LIMIT: expected a positive number of bytes, got 'lots'");
}
