// libFuzzer target: tokenizer.json (text/hf_tokenizer.hpp). The first byte picks what follows
// a load that succeeds: nothing, or encoding and decoding a few texts (added tokens, bytes,
// long words) with and without special tokens.
#include "fuzz/fuzz_util.hpp"
#include "text/hf_tokenizer.hpp"

#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string path = xg::fuzz::scratch_file("tokenizer.json", xg::fuzz::as_string(data + 1, size - 1));
  return xg::fuzz::expect_only_xg_errors([&] {
    const xg::text::HfTokenizer tok(path, "");
    if (data[0] % 2 == 0) return;
    const std::vector<std::string> texts = {"Hello world, it's 1818!", "  a\tb\n\n<s>c</s><|im_start|>",
                                            "\xC3\xA9\xE4\xBD\xA0\xF0\x9F\x91\x8D", std::string(300, 'a') + " \xE2\x96\x81x"};
    for (const std::string& text : texts) {
      for (bool special : {false, true}) {
        const std::vector<int64_t> ids = tok.encode(text, special);
        tok.decode(ids, false);
        tok.decode(ids, true);
      }
    }
  });
}
