// libFuzzer target: the answer line a --reward-cmd program prints back (parse_reward_answer), any
// bytes: a finite number or one short line of error; a crash, a non-finite reward, or an error
// over lines or past 2,000 bytes is a bug. The program's output is untrusted as any data file.
#include <cmath>

#include "finetune/reward_process.hpp"
#include "fuzz/fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::string line = xg::fuzz::as_string(data, size);
  return xg::fuzz::expect_one_line_xg_errors([&] {
    if (!std::isfinite(xg::finetune::parse_reward_answer(line))) __builtin_trap();
  });
}
