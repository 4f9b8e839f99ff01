// What the model-file fuzzers (GGUF, safetensors, HF folders) share for low-precision tensor
// data: choices drawn from a hash of the input (so a corpus file stays a plain file, and each
// input replays the same way), a poke that puts a NaN, an Inf or a huge value into one F16 /
// BF16 / F32 element or one Q8_0 or Q4_0 block's scale, and the rule that a NaN or Inf read into
// any destination (float32, bfloat16, q8_0, q4_0) is an xg::Error naming the tensor.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "autograd/tensor.hpp"
#include "nn/weight_dtype.hpp"

namespace xg::fuzz {

// FNV-1a of the input: the source of every choice below.
inline uint64_t input_hash(const uint8_t* data, std::size_t size) {
  uint64_t h = 1469598103934665603ull;
  for (std::size_t i = 0; i < size; ++i) h = (h ^ data[i]) * 1099511628211ull;
  return h;
}

// A choice among n from the bits of h from `at` up (each choice starts at other bits).
inline uint64_t pick(uint64_t h, int at, uint64_t n) { return n == 0 ? 0 : (h >> at) % n; }

// The dtype a tensor is read into: float32, bfloat16, q8_0 or q4_0.
inline Dtype destination_dtype(uint64_t h) {
  const Dtype all[] = {kFloat32, kBFloat16, kQ8_0, kQ4_0};
  return all[pick(h, 0, 4)];
}

// How a model's matrices are stored on load.
inline nn::LoadOptions load_options(uint64_t h) {
  const nn::WeightDtype all[] = {nn::WeightDtype::Auto, nn::WeightDtype::F32, nn::WeightDtype::BF16,
                                 nn::WeightDtype::Q8_0, nn::WeightDtype::Q4_0};
  return nn::LoadOptions{all[pick(h, 8, 5)]};
}

// The element kinds a poke understands, by their size in the file. Block: one of GGUF's other
// block types, whose half scale sits somewhere in each block (BlockScale says where).
enum class Stored { F32, F16, BF16, Q8_0, Q4_0, Block, Other };
struct BlockScale {
  uint64_t bytes = 0;  // a block's size
  uint64_t at = 0;     // where a half scale (d, or a k-quant's dmin) starts in it
};

// Writes a special value over one element (or, for a block type, one block's scale), chosen by h,
// of a tensor whose `size` bytes of data start at `offset` in `bytes`: NaN, +Inf, -Inf, or a huge
// finite value (F16's 65504, BF16's and F32's largest). Returns true when the value written is
// NaN or Inf, which every reader must refuse; false when nothing was written or it is finite.
inline bool poke(std::string& bytes, uint64_t offset, uint64_t size, Stored kind, uint64_t h, BlockScale block = {}) {
  const int which = static_cast<int>(pick(h, 16, 4));  // 0 NaN, 1 +Inf, 2 -Inf, 3 huge
  const uint32_t f32[] = {0x7fc00000u, 0x7f800000u, 0xff800000u, 0x7f7fffffu};
  const uint16_t f16[] = {0x7e00, 0x7c00, 0xfc00, 0x7bff}, bf16[] = {0x7fc0, 0x7f80, 0xff80, 0x7f7f};
  const void* value = nullptr;
  uint64_t width = 0, stride = 0;
  switch (kind) {
    case Stored::F32: value = &f32[which], width = stride = 4; break;
    case Stored::F16: value = &f16[which], width = stride = 2; break;
    case Stored::BF16: value = &bf16[which], width = stride = 2; break;
    case Stored::Q8_0: value = &f16[which], width = 2, stride = static_cast<uint64_t>(kQ8BlockBytes); break;
    case Stored::Q4_0: value = &f16[which], width = 2, stride = static_cast<uint64_t>(kQ4BlockBytes); break;
    case Stored::Block: value = &f16[which], width = 2, stride = block.bytes, offset += block.at; break;
    case Stored::Other: return false;
  }
  const uint64_t units = size / stride;
  if (units == 0) return false;
  const uint64_t at = offset + pick(h, 40, units) * stride;  // a large tensor's far elements too
  if (at + width > bytes.size()) return false;
  std::memcpy(&bytes[at], value, width);  // little-endian, as both formats store
  return which < 3;
}

// A safetensors dtype as a poke sees it.
inline Stored stored(const std::string& safetensors_dtype) {
  if (safetensors_dtype == "F32") return Stored::F32;
  if (safetensors_dtype == "F16") return Stored::F16;
  if (safetensors_dtype == "BF16") return Stored::BF16;
  return Stored::Other;
}

// Where a safetensors file's data starts: after the 8-byte little-endian header length and the
// header (`bytes` opened as a safetensors file, so both are there).
inline uint64_t safetensors_data_start(const std::string& bytes) {
  uint64_t header = 0;
  for (int i = 7; i >= 0; --i) header = header << 8 | static_cast<uint8_t>(bytes[static_cast<std::size_t>(i)]);
  return 8 + header;
}

// True when `message` (an xg::Error's what()) names `tensor`: what a refused NaN or Inf must
// say. NOTE: what() is a C string, so a name holding a NUL byte shows up to it only.
inline bool names(const std::string& message, const std::string& tensor) {
  return message.find(tensor.substr(0, tensor.find('\0'))) != std::string::npos;
}

}  // namespace xg::fuzz

namespace xg::fuzz {

// Reads tensor `name` of `reader` (a GgufReader or SafetensorsReader) into a new tensor of
// `shape` and dtype `dst` (skipped when that dtype cannot hold the shape: q8_0 and q4_0 rows of
// whole blocks). When the tensor holds a poked NaN or Inf (`nonfinite`), the read must throw an
// xg::Error naming it; anything else is a crash.
template <class Reader>
void read_refusing_nonfinite(Reader& reader, const std::string& name, const Shape& shape, Dtype dst, bool nonfinite) {
  Tensor into;
  try {
    into = empty(shape, dst);
  } catch (const Error&) {
    return;
  }
  try {
    reader.read_into(name, into);
  } catch (const Error& e) {
    if (nonfinite && !names(e.what(), name)) __builtin_trap();
    return;
  }
  if (nonfinite) __builtin_trap();  // a NaN or Inf read without a word
}

}  // namespace xg::fuzz
