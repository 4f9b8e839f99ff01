// GGUF files, version 3 (llama.cpp's format: ggml/include/gguf.h, ggml/src/gguf.cpp,
// gguf-py/gguf/constants.py): "GGUF", a version, typed key/value metadata, a table of tensors
// (name, dims, ggml type, offset) and the aligned tensor data. The container only; what the
// keys and tensor names mean for a model is nn/gguf_model.hpp's and text/gguf_vocab.hpp's.
#pragma once

#include <cstdint>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "autograd/tensor.hpp"

namespace xg::io {

// The metadata value types (gguf.h's enum gguf_type).
enum class GgufType : uint32_t {
  UInt8 = 0, Int8 = 1, UInt16 = 2, Int16 = 3, UInt32 = 4, Int32 = 5, Float32 = 6, Bool = 7,
  String = 8, Array = 9, UInt64 = 10, Int64 = 11, Float64 = 12
};
const char* gguf_type_name(GgufType t);  // "uint32", "string", ...

// The tensor types xgrad reads (ggml.h's enum ggml_type). It writes F32, F16, BF16, Q8_0 and
// Q4_0 (is_writable_type) and computes with every block type as stored (is_block_type).
enum class GgmlType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, IQ4_NL = 20, IQ4_XS = 23, BF16 = 30
};
const char* ggml_type_name(GgmlType t);  // "F32", "F16", "Q4_0", "Q4_K", ...
// Q8_0 (ggml-common.h's block_q8_0): blocks of 32 values (xg::kQ8Block), a half scale d and
// 32 int8 q; x = d q. xgrad's kQ8_0 tensors hold the same blocks (autograd/q8_0.hpp).
// Q4_0 (block_q4_0): blocks of 32 values, a half scale d and 16 bytes of 4-bit codes c;
// x = d (c - 8). xgrad's kQ4_0 tensors hold the same blocks (autograd/q4_0.hpp).
// Q2_K ... Q6_K (block_q2_K ...): super-blocks of 256 values; xgrad's kQ2_K ... kQ6_K tensors hold
// the same bytes (autograd/detail/k_formats.hpp has the layouts). Q4_1, Q5_0, Q5_1
// (block_q4_1 ...): blocks of 32 values, with a min or a fifth bit; xgrad's kQ4_1, kQ5_0 and
// kQ5_1 likewise (autograd/detail/legacy_formats.hpp). IQ4_NL (32 values) and IQ4_XS (256, with
// 6-bit sub-block scales): 4-bit codes that pick one of 16 fixed levels; kIQ4_NL and kIQ4_XS
// likewise (autograd/detail/iq4_formats.hpp).
bool is_block_type(GgmlType t);  // any but F32, F16 and BF16: kept as stored
Dtype block_dtype(GgmlType t);   // kQ8_0 for Q8_0, kQ4_0 for Q4_0, kQ4_K for Q4_K ... (anything else: an xg::Error)
bool is_writable_type(GgmlType t);    // F32, F16, BF16, Q8_0, Q4_0
int64_t ggml_block_values(GgmlType t);  // values a block holds: 1 (floats), 32, or 256 (the k-quants, IQ4_XS)
uint64_t ggml_block_bytes(GgmlType t);  // bytes a block takes
// The dtype a model's matrix of this type is kept in when the user asks for none (--base-dtype
// auto): the block types above as stored, BF16 as bfloat16, F16 as float16 (blocks of 32 halves:
// a matrix whose rows are not whole blocks is widened to float32 by the loader), F32 as float32.
Dtype auto_dtype(GgmlType t);

// One metadata value: a scalar or an array of scalars (arrays of arrays are refused on read).
// Integers and bools are kept as int64 (uint64 values must be below 2^63), floats as double.
struct GgufValue {
  GgufType type = GgufType::UInt32;     // Array for an array
  GgufType element = GgufType::UInt32;  // an array's element type
  std::vector<int64_t> ints;            // integer and bool values (one for a scalar)
  std::vector<double> floats;           // Float32 / Float64 values
  std::vector<std::string> strings;     // String values

  bool is_array() const { return type == GgufType::Array; }
  GgufType scalar_type() const { return is_array() ? element : type; }
  std::size_t size() const;  // elements of an array, 1 for a scalar

  static GgufValue u32(uint32_t v);
  static GgufValue i32(int32_t v);
  static GgufValue f32(float v);
  static GgufValue boolean(bool v);
  static GgufValue string(std::string v);
  static GgufValue strings_array(std::vector<std::string> v);
  static GgufValue i32_array(std::vector<int32_t> v);
  static GgufValue f32_array(std::vector<float> v);
  static GgufValue bools_array(const std::vector<bool>& v);
};

// Metadata in file order.
using GgufMetadata = std::vector<std::pair<std::string, GgufValue>>;

// One tensor of the table. shape is PyTorch's order (outermost first): GGUF's dims (ne, the
// innermost first) reversed, so a Linear weight [out, in] is stored with ne = {in, out}.
struct GgufTensorInfo {
  std::string name;
  Shape shape;
  GgmlType type = GgmlType::F32;
  uint64_t offset = 0;  // from the start of the data section
  uint64_t bytes = 0;
};

uint64_t ggml_tensor_bytes(GgmlType type, int64_t numel);  // numel a multiple of ggml_block_values(type)

// A GGUF file opened to be read tensor by tensor: the constructor reads and validates the
// header (magic, version 3, every length against the bytes left, value and tensor types,
// dims, alignment, tensors inside the data and not overlapping); a tensor's bytes are read
// when asked for. Every error is an xg::Error naming the file and what was wrong.
class GgufReader {
 public:
  explicit GgufReader(const std::string& path);
  const std::string& path() const { return path_; }
  const GgufMetadata& metadata() const { return metadata_; }
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  // Where a tensor's data starts in the file, in bytes (the fuzzers and tests aim at it).
  uint64_t file_offset(const std::string& name) const { return data_start_ + tensor(name).offset; }

  bool has(const std::string& key) const { return index_.count(key) > 0; }
  const GgufValue& at(const std::string& key) const;  // missing: an error naming the file and key
  // Typed reads of a scalar; the wrong type is an error naming the file, the key and the type.
  std::string get_string(const std::string& key) const;
  int64_t get_int(const std::string& key) const;  // any integer type
  double get_float(const std::string& key) const;  // Float32 / Float64 (or an integer)
  bool get_bool(const std::string& key) const;

  bool has_tensor(const std::string& name) const { return tensor_index_.count(name) > 0; }
  const GgufTensorInfo& tensor(const std::string& name) const;
  // Reads a tensor into dst's storage (the tensor's shape; float32, bfloat16, q8_0 or q4_0): Q8_0
  // into q8_0, Q4_0 into q4_0 and BF16 into bfloat16 as stored, anything else widened to float32
  // (the other block types as ggml widens them) and then rounded or quantized to dst's dtype. A
  // NaN or Inf value (or block scale) is an xg::Error naming the file, the tensor and the
  // element, found before the tensor is used.
  void read_into(const std::string& name, const Tensor& dst);
  Tensor read(const std::string& name);  // a new float32 tensor

 private:
  std::string path_;
  std::ifstream f_;
  uint64_t data_start_ = 0;
  GgufMetadata metadata_;
  std::map<std::string, std::size_t> index_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, std::size_t> tensor_index_;
};

// A tensor to write: float32 or float64 data in PyTorch's shape, stored as `type`.
struct GgufTensorData {
  std::string name;
  Tensor data;
  GgmlType type = GgmlType::F32;
};

// Writes a GGUF v3 file (alignment: general.alignment when the metadata has it, else 32),
// tensors in the given order, through a temporary file renamed into place (atomic_file.hpp).
// Duplicate keys or names, a type xgrad does not write, a Q8_0 or Q4_0 tensor whose rows are not
// a multiple of 32, or more than 4 dims are errors naming `who`.
void save_gguf(const std::string& path, const GgufMetadata& metadata, const std::vector<GgufTensorData>& tensors,
               const std::string& who = "save_gguf");

// True when the file starts with GGUF's magic.
bool is_gguf_file(const std::string& path);

}  // namespace xg::io
