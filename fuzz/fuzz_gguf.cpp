// libFuzzer target: GgufReader on arbitrary bytes (header, metadata, tensor table), then every
// tensor read and the file's model and tokenizer interpreted; a file that reads must write
// and read again to the same metadata and tensors.
#include "fuzz/fuzz_util.hpp"
#include "io/gguf.hpp"
#include "nn/gguf_model.hpp"
#include "text/gguf_vocab.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  return xg::fuzz::expect_only_xg_errors([&] {
    xg::io::GgufReader r(xg::fuzz::scratch_file("in.gguf", xg::fuzz::as_string(data, size)));
    std::vector<xg::io::GgufTensorData> tensors;
    for (const xg::io::GgufTensorInfo& t : r.tensors())
      if (t.bytes <= (1u << 22)) tensors.push_back({t.name, r.read(t.name), xg::io::GgmlType::F32});
    const std::string again = (xg::fuzz::scratch_dir() / "again.gguf").string();
    xg::io::save_gguf(again, r.metadata(), tensors);
    xg::io::GgufReader back(again);
    if (back.metadata().size() != r.metadata().size() || back.tensors().size() != tensors.size()) __builtin_trap();
    try {
      xg::text::load_gguf_tokenizer(r);
    } catch (const xg::Error&) {
    }
    xg::nn::load_gguf_model(r);
  });
}
