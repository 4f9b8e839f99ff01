// libFuzzer target: load_safetensors on arbitrary bytes; a file that loads must save and
// load again to the same tensors. Then its float data attacked (see fuzz/low_precision.hpp):
// one F32 / F16 / BF16 value set to NaN, Inf or a huge value, and every float tensor read
// into a float32, bfloat16, q8_0 or q4_0 destination; a NaN or Inf must be refused naming the tensor.
#include "fuzz/fuzz_util.hpp"
#include "fuzz/low_precision.hpp"
#include "io/safetensors.hpp"

namespace {

void attack_tensor_data(std::string bytes, uint64_t h) {
  xg::io::SafetensorsReader r(xg::fuzz::scratch_file("in.safetensors", bytes));
  if (r.entries().empty()) return;
  auto it = r.entries().begin();
  std::advance(it, static_cast<long>(xg::fuzz::pick(h, 24, r.entries().size())));
  const auto& [name, e] = *it;
  const bool nonfinite =
      xg::fuzz::poke(bytes, xg::fuzz::safetensors_data_start(bytes) + e.begin, e.end - e.begin, xg::fuzz::stored(e.dtype), h);
  xg::io::SafetensorsReader p(xg::fuzz::scratch_file("poked.safetensors", bytes));
  const xg::Dtype dst = xg::fuzz::destination_dtype(h);
  for (const auto& [n, u] : p.entries())
    if (u.end - u.begin <= (1u << 22) && xg::fuzz::stored(u.dtype) != xg::fuzz::Stored::Other)
      xg::fuzz::read_refusing_nonfinite(p, n, u.shape, dst, nonfinite && n == name);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const uint64_t h = xg::fuzz::input_hash(data, size);
  return xg::fuzz::expect_only_xg_errors([&] {
    std::map<std::string, std::string> meta;
    const xg::TensorMap t = xg::io::load_safetensors(xg::fuzz::scratch_file("in.safetensors", xg::fuzz::as_string(data, size)), &meta);
    const std::string again = (xg::fuzz::scratch_dir() / "again.safetensors").string();
    xg::io::save_safetensors(again, t, meta);
    const xg::TensorMap back = xg::io::load_safetensors(again);
    if (back.size() != t.size()) __builtin_trap();
    attack_tensor_data(xg::fuzz::as_string(data, size), h);
  });
}
