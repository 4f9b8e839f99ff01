// libFuzzer target: WordNet's data.* and index.* line parsers (the first byte picks which).
#include "finetune/data/wordnet.hpp"
#include "fuzz/fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string line = xg::fuzz::as_string(data + 1, size - 1);
  return xg::fuzz::expect_only_xg_errors([&] {
    if (data[0] % 2 == 0) xg::finetune::wordnet::parse_data_line(line, "data.noun", 1);
    else xg::finetune::wordnet::parse_index_line(line, "index.noun", 1);
  });
}
