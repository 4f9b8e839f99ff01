// libFuzzer target: GgufReader on arbitrary bytes (header, metadata, tensor table), then every
// tensor read and the file's model and tokenizer interpreted; a file that reads must write
// and read again to the same metadata and tensors. Then its low-precision data attacked (see
// fuzz/low_precision.hpp): one F32 / F16 / BF16 value or Q8_0 / Q4_0 block scale set to NaN, Inf
// or a huge value, each tensor read into a float32, bfloat16, q8_0 or q4_0 destination and the model
// loaded with its matrices so stored; a NaN or Inf must be refused naming the tensor, and a
// file cut inside a tensor's data must be refused when opened.
#include "fuzz/fuzz_util.hpp"
#include "fuzz/low_precision.hpp"
#include "io/gguf.hpp"
#include "nn/gguf_model.hpp"
#include "text/gguf_vocab.hpp"

namespace {

xg::fuzz::Stored stored(xg::io::GgmlType t) {
  switch (t) {
    case xg::io::GgmlType::F32: return xg::fuzz::Stored::F32;
    case xg::io::GgmlType::F16: return xg::fuzz::Stored::F16;
    case xg::io::GgmlType::BF16: return xg::fuzz::Stored::BF16;
    case xg::io::GgmlType::Q8_0: return xg::fuzz::Stored::Q8_0;
    case xg::io::GgmlType::Q4_0: return xg::fuzz::Stored::Q4_0;
    default: return xg::fuzz::Stored::Block;
  }
}

// Where the read-only block types keep a half scale (ggml-common.h): d, or for the types with a
// min (Q4_1, Q5_1, Q2_K, Q4_K, Q5_K) d or the min's scale, chosen by h.
xg::fuzz::BlockScale block_scale(xg::io::GgmlType t, uint64_t h) {
  const uint64_t second = 2 * xg::fuzz::pick(h, 60, 2);
  switch (t) {
    case xg::io::GgmlType::Q2_K: return {84, 80 + second};
    case xg::io::GgmlType::Q3_K: return {110, 108};
    case xg::io::GgmlType::Q6_K: return {210, 208};
    case xg::io::GgmlType::Q4_1: case xg::io::GgmlType::Q5_1: case xg::io::GgmlType::Q4_K: case xg::io::GgmlType::Q5_K:
      return {xg::io::ggml_block_bytes(t), second};
    default: return {xg::io::ggml_block_bytes(t), 0};
  }
}

// The attack on the low-precision data of `r` (a file that opened as `bytes`).
void attack_tensor_data(const xg::io::GgufReader& r, std::string bytes, uint64_t h) {
  if (r.tensors().empty()) return;
  const xg::io::GgufTensorInfo& t = r.tensors()[xg::fuzz::pick(h, 24, r.tensors().size())];
  const uint64_t offset = r.file_offset(t.name);
  if (t.bytes > 0 && xg::fuzz::pick(h, 32, 8) == 0) {  // cut inside the tensor's data
    bytes.resize(offset + xg::fuzz::pick(h, 40, t.bytes));
    try {
      xg::io::GgufReader cut(xg::fuzz::scratch_file("cut.gguf", bytes));
    } catch (const xg::Error&) {
      return;
    }
    __builtin_trap();  // a truncated tensor opened
  }
  const bool nonfinite = xg::fuzz::poke(bytes, offset, t.bytes, stored(t.type), h, block_scale(t.type, h));
  xg::io::GgufReader p(xg::fuzz::scratch_file("poked.gguf", bytes));
  const xg::Dtype dst = xg::fuzz::destination_dtype(h);
  for (const xg::io::GgufTensorInfo& u : p.tensors())
    if (u.bytes <= (1u << 22)) xg::fuzz::read_refusing_nonfinite(p, u.name, u.shape, dst, nonfinite && u.name == t.name);
  xg::nn::load_gguf_model(p, xg::fuzz::load_options(h));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const uint64_t h = xg::fuzz::input_hash(data, size);
  return xg::fuzz::expect_only_xg_errors([&] {
    const std::string bytes = xg::fuzz::as_string(data, size);
    xg::io::GgufReader r(xg::fuzz::scratch_file("in.gguf", bytes));
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
    try {
      xg::nn::load_gguf_model(r);
    } catch (const xg::Error&) {
    }
    attack_tensor_data(r, bytes, h);
  });
}
