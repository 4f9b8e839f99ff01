// safetensors files (https://github.com/huggingface/safetensors format): an 8-byte
// little-endian header length, a JSON header {name: {dtype, shape, data_offsets}}, and
// raw little-endian data. Reading validates the format and names the file and the rule
// broken; writing goes to a temporary file renamed into place. xgrad's own files carry a CRC32
// of each tensor's data in __metadata__ ("xgrad_crc32"), verified as each tensor is read.
#pragma once

#include <fstream>
#include <functional>
#include <map>
#include <string>

#include "autograd/tensor.hpp"

namespace xg::io {

// One tensor of a safetensors header: its dtype string ("F32", "BF16", ...), shape, and byte
// range [begin, end) in the data that follows the header.
struct SafetensorsEntry {
  std::string dtype;
  Shape shape;
  uint64_t begin = 0, end = 0;
};

// A safetensors file opened to be read tensor by tensor: the constructor reads and validates
// the header (dtypes, shapes, offsets that tile the data exactly, the file's size), and a
// tensor's bytes are read only when asked for, so a model can load one tensor at a time.
class SafetensorsReader {
 public:
  explicit SafetensorsReader(const std::string& path);
  const std::string& path() const { return path_; }
  const std::map<std::string, SafetensorsEntry>& entries() const { return entries_; }
  // __metadata__ without xgrad's checksums.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool contains(const std::string& name) const { return entries_.count(name) > 0; }
  const SafetensorsEntry& entry(const std::string& name) const;  // throws naming the file
  // A new tensor: F32, F64, I64, BOOL as they are; I32 widened to int64, F16/BF16 to float32.
  // Data that does not match its checksum (a file xgrad wrote) is an error naming the file and
  // the tensor.
  Tensor read(const std::string& name);
  // Reads a float tensor (F32, F64, F16 or BF16) into dst's existing storage, converted to
  // dst's dtype a block at a time (never a second copy of the whole tensor): float32, float64,
  // bfloat16 (BF16 as stored, others rounded) or q8_0 (quantized as ggml does). dst must have
  // the entry's shape; anything else is an error naming the file. A NaN or Inf value is an
  // xg::Error naming the file, the tensor and the element.
  void read_into(const std::string& name, const Tensor& dst);

 private:
  void seek(const SafetensorsEntry& e, const std::string& name);
  void verify(const std::string& name, uint32_t crc) const;  // against checksums_, when it has one
  std::string path_;
  std::ifstream f_;
  uint64_t data_start_ = 0;
  std::map<std::string, SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
  std::map<std::string, uint32_t> checksums_;
};

// Reads every tensor (F32, F64, I64, BOOL; also I32/F16/BF16 widened to int64/float32).
TensorMap load_safetensors(const std::string& path, std::map<std::string, std::string>* metadata = nullptr);

// How save_safetensors stores float tensors: in their own dtype (F32 / F64), or rounded to
// bfloat16 (BF16, round to nearest even as torch's .to(torch.bfloat16); NaN stays NaN).
enum class StoredFloat { Native, BFloat16 };

// Writes tensors in name order; `metadata` goes under "__metadata__", with the tensors' CRC32s.
void save_safetensors(const std::string& path, const TensorMap& tensors,
                      const std::map<std::string, std::string>& metadata = {},
                      StoredFloat stored = StoredFloat::Native);
// A tensor made only when the file writer reaches it (then dropped once written): its dtype
// and shape up front, for the header, and `make`, called once.
struct LazyTensor {
  Dtype dtype = kFloat32;
  Shape shape;
  std::function<Tensor()> make;
};

// save_safetensors (Native floats) of `tensors` and `lazy` together, the same bytes, but each
// lazy tensor made when its turn to be written comes, in name order, and dropped after: the
// writer holds one of them at a time. Names must not repeat between the two.
void save_safetensors_streamed(const std::string& path, const TensorMap& tensors,
                               const std::map<std::string, LazyTensor>& lazy,
                               const std::map<std::string, std::string>& metadata = {});

// The number of bytes save_safetensors writes for the tensors' data (the header excluded).
uint64_t safetensors_data_bytes(const TensorMap& tensors, StoredFloat stored = StoredFloat::Native);

// The CRC32 (zlib's) of `bytes`, as xgrad's checksums compute it, as 8 hex digits.
std::string crc32_hex(const std::string& bytes);

}  // namespace xg::io
