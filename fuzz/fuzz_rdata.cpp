// libFuzzer target: R's XDR unserialize and the zlib inflate in front of it (the first byte
// picks: even = unserialize the bytes, odd = inflate them, then unserialize what came out).
#include "finetune/data/rdata.hpp"
#include "fuzz/fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string bytes = xg::fuzz::as_string(data + 1, size - 1);
  return xg::fuzz::expect_only_xg_errors([&] {
    namespace r = xg::finetune::rdata;
    if (data[0] % 2 == 0) r::unserialize(bytes, "fuzz.rdb");
    else r::unserialize(r::inflate(bytes, "fuzz.rdb", -1, false, std::size_t(1) << 24), "fuzz.rdb");
  });
}
