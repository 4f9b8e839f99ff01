// libFuzzer target: GgufReader on arbitrary bytes (header, metadata, tensor table), then every
// tensor read and the file's model and tokenizer interpreted; a file that reads must write
// and read again to the same metadata and tensors.
#include "autograd/gguf.hpp"
#include "fuzz/fuzz_util.hpp"
#include "nn/gguf_model.hpp"
#include "text/gguf_vocab.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  return xg::fuzz::expect_only_xg_errors([&] {
    xg::GgufReader r(xg::fuzz::scratch_file("in.gguf", xg::fuzz::as_string(data, size)));
    std::vector<xg::GgufTensorData> tensors;
    for (const xg::GgufTensorInfo& t : r.tensors())
      if (t.bytes <= (1u << 22)) tensors.push_back({t.name, r.read(t.name), xg::GgmlType::F32});
    const std::string again = (xg::fuzz::scratch_dir() / "again.gguf").string();
    xg::save_gguf(again, r.metadata(), tensors);
    xg::GgufReader back(again);
    if (back.metadata().size() != r.metadata().size() || back.tensors().size() != tensors.size()) __builtin_trap();
    try {
      xg::text::load_gguf_tokenizer(r);
    } catch (const xg::Error&) {
    }
    xg::nn::load_gguf_model(r);
  });
}
