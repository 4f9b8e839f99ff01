// libFuzzer target: load_safetensors on arbitrary bytes; a file that loads must save and
// load again to the same tensors.
#include "fuzz/fuzz_util.hpp"
#include "io/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  return xg::fuzz::expect_only_xg_errors([&] {
    std::map<std::string, std::string> meta;
    const xg::TensorMap t = xg::io::load_safetensors(xg::fuzz::scratch_file("in.safetensors", xg::fuzz::as_string(data, size)), &meta);
    const std::string again = (xg::fuzz::scratch_dir() / "again.safetensors").string();
    xg::io::save_safetensors(again, t, meta);
    const xg::TensorMap back = xg::io::load_safetensors(again);
    if (back.size() != t.size()) __builtin_trap();
  });
}
