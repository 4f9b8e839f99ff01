// GGUF v3: the header parser (every length checked against the bytes left in the file before
// anything is allocated), dequantization to float32 and the writer. Layout as llama.cpp's
// ggml/src/gguf.cpp reads and writes it: little-endian; strings are a uint64 length and the
// bytes; the data section starts at the header's end rounded up to the alignment, and each
// tensor's offset is a multiple of it.
#include "io/gguf.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>

#include "autograd/error.hpp"
#include "autograd/float16.hpp"
#include "autograd/blocks.hpp"
#include "io/atomic_file.hpp"
#include "io/detail/store_floats.hpp"
#include "io/safetensors.hpp"

namespace xg::io {

namespace {

constexpr char kMagic[4] = {'G', 'G', 'U', 'F'};
constexpr uint32_t kVersion = 3;
constexpr uint32_t kDefaultAlignment = 32;  // gguf.h's GGUF_DEFAULT_ALIGNMENT
constexpr uint32_t kMaxDims = 4;            // ggml.h's GGML_MAX_DIMS

// Bytes of one scalar of a numeric or bool type; 0 for String and Array.
uint64_t scalar_bytes(GgufType t) {
  switch (t) {
    case GgufType::UInt8: case GgufType::Int8: case GgufType::Bool: return 1;
    case GgufType::UInt16: case GgufType::Int16: return 2;
    case GgufType::UInt32: case GgufType::Int32: case GgufType::Float32: return 4;
    case GgufType::UInt64: case GgufType::Int64: case GgufType::Float64: return 8;
    default: return 0;
  }
}

bool is_float_type(GgufType t) { return t == GgufType::Float32 || t == GgufType::Float64; }

bool known_ggml_type(uint32_t t) {
  return t == 0 || t == 1 || t == 2 || t == 3 || t == 6 || t == 7 || t == 8 || (t >= 10 && t <= 14) || t == 20 || t == 23 || t == 30;
}

// ggml.h's type numbers past BF16 that a file may hold but xgrad does not read.
const char* other_ggml_type_name(uint32_t t) {
  static const char* const names[] = {"F32",  "F16",  "Q4_0", "Q4_1", "Q4_2", "Q4_3", "Q5_0", "Q5_1",
                                      "Q8_0", "Q8_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K",
                                      "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S",
                                      "IQ4_XS", "I8", "I16", "I32", "I64", "F64", "IQ1_M", "BF16"};
  return t < sizeof(names) / sizeof(names[0]) ? names[t] : "an unknown type";
}

// Reads the header through bounds checks: every read first asks whether that many bytes are
// left, so a corrupt length is an error, never a huge allocation.
class Cursor {
 public:
  Cursor(std::ifstream& f, const std::string& path, uint64_t size) : f_(f), path_(path), size_(size) {}
  uint64_t pos() const { return pos_; }
  uint64_t left() const { return size_ - pos_; }
  [[noreturn]] void fail(const std::string& what) const {
    throw Error(str_cat(path_, ": not a valid GGUF file: ", what, " (at byte ", pos_, ")"));
  }
  void need(uint64_t n, const std::string& what) const {
    if (n > left()) fail(str_cat(what, " needs ", n, " bytes but the file has ", left(), " left"));
  }
  void bytes(void* dst, uint64_t n, const std::string& what) {
    need(n, what);
    f_.read(static_cast<char*>(dst), static_cast<std::streamsize>(n));
    if (!f_) fail(str_cat("reading ", what, " failed"));
    pos_ += n;
  }
  template <class T>
  T scalar(const std::string& what) {
    T v;
    bytes(&v, sizeof v, what);
    return v;
  }
  std::string string(const std::string& what) {
    const uint64_t n = scalar<uint64_t>(what + "'s length");
    need(n, what);
    std::string s(static_cast<std::size_t>(n), '\0');
    bytes(s.data(), n, what);
    return s;
  }

 private:
  std::ifstream& f_;
  const std::string& path_;
  uint64_t size_, pos_ = 0;
};

// One scalar of type t appended to v.
void read_scalar(Cursor& c, GgufType t, GgufValue& v, const std::string& key) {
  switch (t) {
    case GgufType::UInt8: v.ints.push_back(c.scalar<uint8_t>(key)); break;
    case GgufType::Int8: v.ints.push_back(c.scalar<int8_t>(key)); break;
    case GgufType::UInt16: v.ints.push_back(c.scalar<uint16_t>(key)); break;
    case GgufType::Int16: v.ints.push_back(c.scalar<int16_t>(key)); break;
    case GgufType::UInt32: v.ints.push_back(c.scalar<uint32_t>(key)); break;
    case GgufType::Int32: v.ints.push_back(c.scalar<int32_t>(key)); break;
    case GgufType::Int64: v.ints.push_back(c.scalar<int64_t>(key)); break;
    case GgufType::UInt64: {
      const uint64_t u = c.scalar<uint64_t>(key);
      if (u > static_cast<uint64_t>(INT64_MAX)) c.fail(str_cat("key '", key, "' holds the uint64 ", u, ", above 2^63"));
      v.ints.push_back(static_cast<int64_t>(u));
      break;
    }
    case GgufType::Bool: {
      const uint8_t b = c.scalar<uint8_t>(key);
      if (b > 1) c.fail(str_cat("key '", key, "' holds the bool byte ", int(b), " (0 or 1)"));
      v.ints.push_back(b);
      break;
    }
    case GgufType::Float32: v.floats.push_back(c.scalar<float>(key)); break;
    case GgufType::Float64: v.floats.push_back(c.scalar<double>(key)); break;
    case GgufType::String: v.strings.push_back(c.string("the value of '" + key + "'")); break;
    default: c.fail(str_cat("key '", key, "' has value type ", static_cast<uint32_t>(t), ", which GGUF does not define"));
  }
}

bool valid_value_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::Float64); }

// Writing: little-endian scalars into a string.
template <class T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}
void put_string(std::string& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out += s;
}

void put_scalar(std::string& out, GgufType t, const GgufValue& v, std::size_t i) {
  switch (t) {
    case GgufType::UInt8: put<uint8_t>(out, static_cast<uint8_t>(v.ints.at(i))); break;
    case GgufType::Int8: put<int8_t>(out, static_cast<int8_t>(v.ints.at(i))); break;
    case GgufType::UInt16: put<uint16_t>(out, static_cast<uint16_t>(v.ints.at(i))); break;
    case GgufType::Int16: put<int16_t>(out, static_cast<int16_t>(v.ints.at(i))); break;
    case GgufType::UInt32: put<uint32_t>(out, static_cast<uint32_t>(v.ints.at(i))); break;
    case GgufType::Int32: put<int32_t>(out, static_cast<int32_t>(v.ints.at(i))); break;
    case GgufType::UInt64: put<uint64_t>(out, static_cast<uint64_t>(v.ints.at(i))); break;
    case GgufType::Int64: put<int64_t>(out, v.ints.at(i)); break;
    case GgufType::Bool: put<uint8_t>(out, v.ints.at(i) ? 1 : 0); break;
    case GgufType::Float32: put<float>(out, static_cast<float>(v.floats.at(i))); break;
    case GgufType::Float64: put<double>(out, v.floats.at(i)); break;
    case GgufType::String: put_string(out, v.strings.at(i)); break;
    case GgufType::Array: throw Error("save_gguf: arrays of arrays are not written");
  }
}

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

// Q8_0 or Q4_0 blocks of x appended to out (xg::quantize_blocks: ggml's quantize_row_q8_0_ref
// and quantize_row_q4_0_ref). x finite. Returns -1, or the first element of a block whose scale
// F16 cannot hold (max|x| / 127, or / 8, beyond 65504), where it stops.
int64_t append_blocks(Dtype d, const float* x, int64_t n, std::string& out) {
  const std::size_t at = out.size();
  out.resize(at + static_cast<std::size_t>(n / kQ8Block * block_bytes(d)));
  const int64_t bad = quantize_blocks(d, x, n, &out[at]);
  if (bad >= 0) out.resize(at + static_cast<std::size_t>(bad / kQ8Block * block_bytes(d)));
  return bad;
}

// A value no GGUF type should hold, refused before anything of the tensor is written: NaN or
// Inf (llama.cpp would compute with it; Q8_0's block maximum would skip a NaN and convert it to
// int8, which is undefined) and a float64 value beyond float32, which every type is written from.
// f: the tensor as float32 (`t.data` itself when it is float32).
void check_finite(const GgufTensorData& t, const Tensor& f, const std::string& who) {
  if (t.data.dtype() == kFloat64) {
    const double* v = t.data.data<double>();
    for (int64_t i = 0; i < t.data.numel(); ++i)
      if (!std::isfinite(v[i]) || std::fabs(v[i]) > std::numeric_limits<float>::max())
        throw Error(str_cat(who, ": tensor '", t.name, "' element ", i, " is ", v[i],
                            std::isfinite(v[i]) ? ", beyond float32's largest finite value, which GGUF's types are written from"
                                                : ", and an exported weight must be finite"));
  }
  const float* x = f.data<float>();
  for (int64_t i = 0; i < f.numel(); ++i)
    if (!std::isfinite(x[i]))
      throw Error(str_cat(who, ": tensor '", t.name, "' element ", i, " is ", x[i], ", and an exported weight must be finite"));
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// names and values

const char* gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::UInt8: return "uint8";
    case GgufType::Int8: return "int8";
    case GgufType::UInt16: return "uint16";
    case GgufType::Int16: return "int16";
    case GgufType::UInt32: return "uint32";
    case GgufType::Int32: return "int32";
    case GgufType::Float32: return "float32";
    case GgufType::Bool: return "bool";
    case GgufType::String: return "string";
    case GgufType::Array: return "array";
    case GgufType::UInt64: return "uint64";
    case GgufType::Int64: return "int64";
    case GgufType::Float64: return "float64";
  }
  return "?";
}

const char* ggml_type_name(GgmlType t) { return other_ggml_type_name(static_cast<uint32_t>(t)); }

int64_t ggml_block_values(GgmlType t) {
  switch (t) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16: return 1;
    case GgmlType::Q4_0: case GgmlType::Q4_1: case GgmlType::Q5_0: case GgmlType::Q5_1: case GgmlType::Q8_0:
    case GgmlType::IQ4_NL: return 32;
    case GgmlType::IQ4_XS:
    case GgmlType::Q2_K: case GgmlType::Q3_K: case GgmlType::Q4_K: case GgmlType::Q5_K: case GgmlType::Q6_K: return 256;
  }
  return 1;
}

uint64_t ggml_block_bytes(GgmlType t) {
  switch (t) {
    case GgmlType::F32: return 4;
    case GgmlType::F16: case GgmlType::BF16: return 2;
    case GgmlType::Q4_0: return kQ4BlockBytes;  // 18
    case GgmlType::Q4_1: return 20;
    case GgmlType::Q5_0: return 22;
    case GgmlType::Q5_1: return 24;
    case GgmlType::Q8_0: return kQ8BlockBytes;  // 34
    case GgmlType::Q2_K: return 84;
    case GgmlType::Q3_K: return 110;
    case GgmlType::Q4_K: return 144;
    case GgmlType::Q5_K: return 176;
    case GgmlType::Q6_K: return 210;
    case GgmlType::IQ4_NL: return 18;
    case GgmlType::IQ4_XS: return 136;
  }
  return 4;
}

uint64_t ggml_tensor_bytes(GgmlType type, int64_t numel) {
  return static_cast<uint64_t>(numel / ggml_block_values(type)) * ggml_block_bytes(type);
}

bool is_block_type(GgmlType t) {
  switch (t) {
    case GgmlType::Q8_0: case GgmlType::Q4_0: case GgmlType::Q4_1: case GgmlType::Q5_0: case GgmlType::Q5_1:
    case GgmlType::Q2_K: case GgmlType::Q3_K: case GgmlType::Q4_K: case GgmlType::Q5_K: case GgmlType::Q6_K:
    case GgmlType::IQ4_NL: case GgmlType::IQ4_XS: return true;
    default: return false;
  }
}

bool is_writable_type(GgmlType t) {
  return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16 || t == GgmlType::Q8_0 || t == GgmlType::Q4_0;
}

Dtype auto_dtype(GgmlType t) {
  if (is_block_type(t)) return block_dtype(t);  // as stored
  return t == GgmlType::BF16 ? kBFloat16 : t == GgmlType::F16 ? kF16 : kFloat32;
}

Dtype block_dtype(GgmlType t) {
  switch (t) {
    case GgmlType::Q8_0: return kQ8_0;
    case GgmlType::Q4_0: return kQ4_0;
    case GgmlType::Q2_K: return kQ2_K;
    case GgmlType::Q3_K: return kQ3_K;
    case GgmlType::Q4_K: return kQ4_K;
    case GgmlType::Q5_K: return kQ5_K;
    case GgmlType::Q6_K: return kQ6_K;
    case GgmlType::Q4_1: return kQ4_1;
    case GgmlType::Q5_0: return kQ5_0;
    case GgmlType::Q5_1: return kQ5_1;
    case GgmlType::IQ4_NL: return kIQ4_NL;
    case GgmlType::IQ4_XS: return kIQ4_XS;
    default: break;
  }
  throw Error(str_cat("block_dtype: ", ggml_type_name(t), " is not a type xgrad computes with as stored"));
}

std::size_t GgufValue::size() const {
  if (!is_array()) return 1;
  return element == GgufType::String ? strings.size() : is_float_type(element) ? floats.size() : ints.size();
}

GgufValue GgufValue::u32(uint32_t v) { GgufValue g; g.type = GgufType::UInt32; g.ints = {v}; return g; }
GgufValue GgufValue::i32(int32_t v) { GgufValue g; g.type = GgufType::Int32; g.ints = {v}; return g; }
GgufValue GgufValue::f32(float v) { GgufValue g; g.type = GgufType::Float32; g.floats = {v}; return g; }
GgufValue GgufValue::boolean(bool v) { GgufValue g; g.type = GgufType::Bool; g.ints = {v ? 1 : 0}; return g; }
GgufValue GgufValue::string(std::string v) {
  GgufValue g;
  g.type = GgufType::String;
  g.strings = {std::move(v)};
  return g;
}
namespace {
GgufValue array_of(GgufType element) {
  GgufValue g;
  g.type = GgufType::Array;
  g.element = element;
  return g;
}
}  // namespace
GgufValue GgufValue::strings_array(std::vector<std::string> v) {
  GgufValue g = array_of(GgufType::String);
  g.strings = std::move(v);
  return g;
}
GgufValue GgufValue::i32_array(std::vector<int32_t> v) {
  GgufValue g = array_of(GgufType::Int32);
  g.ints.assign(v.begin(), v.end());
  return g;
}
GgufValue GgufValue::bools_array(const std::vector<bool>& v) {
  GgufValue g = array_of(GgufType::Bool);
  g.ints.assign(v.begin(), v.end());
  return g;
}
GgufValue GgufValue::f32_array(std::vector<float> v) {
  GgufValue g = array_of(GgufType::Float32);
  g.floats.assign(v.begin(), v.end());
  return g;
}

// ---------------------------------------------------------------------------------------------
// GgufReader

GgufReader::GgufReader(const std::string& path) : path_(path), f_(path, std::ios::binary) {
  check(f_.good(), path, ": cannot open file");
  f_.seekg(0, std::ios::end);
  const uint64_t size = static_cast<uint64_t>(f_.tellg());
  f_.seekg(0);
  Cursor c(f_, path_, size);
  char magic[4];
  c.bytes(magic, 4, "the magic \"GGUF\"");
  if (std::memcmp(magic, kMagic, 4) != 0) c.fail("it does not start with \"GGUF\"");
  const uint32_t version = c.scalar<uint32_t>("the version");
  if (version != kVersion) c.fail(str_cat("version ", version, " (xgrad reads version 3)"));
  const uint64_t n_tensors = c.scalar<uint64_t>("the tensor count");
  const uint64_t n_kv = c.scalar<uint64_t>("the metadata count");
  // Each key/value takes at least 13 bytes (key length, type, a 1-byte value) and each tensor
  // at least 24 (name length, dims count, type, offset): counts beyond that cannot fit.
  if (n_kv > c.left() / 13) c.fail(str_cat("the header claims ", n_kv, " metadata keys, more than the file can hold"));
  if (n_tensors > c.left() / 24) c.fail(str_cat("the header claims ", n_tensors, " tensors, more than the file can hold"));

  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = c.string(str_cat("metadata key ", i));
    if (index_.count(key)) c.fail(str_cat("key '", key, "' appears twice"));
    const uint32_t type = c.scalar<uint32_t>("the type of '" + key + "'");
    if (!valid_value_type(type)) c.fail(str_cat("key '", key, "' has value type ", type, ", which GGUF does not define"));
    GgufValue v;
    v.type = static_cast<GgufType>(type);
    if (v.type == GgufType::Array) {
      const uint32_t et = c.scalar<uint32_t>("the element type of '" + key + "'");
      if (!valid_value_type(et)) c.fail(str_cat("array '", key, "' has element type ", et, ", which GGUF does not define"));
      v.element = static_cast<GgufType>(et);
      if (v.element == GgufType::Array) c.fail(str_cat("array '", key, "' holds arrays, which xgrad does not read"));
      const uint64_t n = c.scalar<uint64_t>("the length of '" + key + "'");
      const uint64_t min_bytes = v.element == GgufType::String ? 8 : scalar_bytes(v.element);
      if (n > c.left() / min_bytes) c.fail(str_cat("array '", key, "' claims ", n, " elements, more than the file holds"));
      for (uint64_t j = 0; j < n; ++j) read_scalar(c, v.element, v, key);
    } else {
      read_scalar(c, v.type, v, key);
    }
    index_[key] = metadata_.size();
    metadata_.emplace_back(std::move(key), std::move(v));
  }

  uint64_t alignment = kDefaultAlignment;
  if (has("general.alignment")) {
    const GgufValue& a = at("general.alignment");
    if (a.type != GgufType::UInt32 || a.ints[0] == 0 || (a.ints[0] & (a.ints[0] - 1)) != 0)
      c.fail("general.alignment must be a uint32 power of two");
    alignment = static_cast<uint64_t>(a.ints[0]);
  }

  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo t;
    t.name = c.string(str_cat("the name of tensor ", i));
    if (tensor_index_.count(t.name)) c.fail(str_cat("tensor '", t.name, "' appears twice"));
    const uint32_t n_dims = c.scalar<uint32_t>("the dims of '" + t.name + "'");
    if (n_dims > kMaxDims) c.fail(str_cat("tensor '", t.name, "' has ", n_dims, " dims (at most 4)"));
    std::vector<int64_t> ne(n_dims);
    int64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t n = c.scalar<uint64_t>("a dim of '" + t.name + "'");
      if (n > static_cast<uint64_t>(INT64_MAX) / 64 || (n > 0 && static_cast<uint64_t>(numel) > (static_cast<uint64_t>(INT64_MAX) / 64) / n))
        c.fail(str_cat("tensor '", t.name, "' has a dim of ", n, ", too large"));
      ne[d] = static_cast<int64_t>(n);
      numel *= ne[d];
    }
    t.shape.assign(ne.rbegin(), ne.rend());
    const uint32_t type = c.scalar<uint32_t>("the type of '" + t.name + "'");
    if (!known_ggml_type(type))
      throw Error(str_cat(path_, ": tensor '", t.name, "' has type ", other_ggml_type_name(type), " (", type,
                          "); xgrad reads F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K to Q6_K, IQ4_NL and IQ4_XS"));
    t.type = static_cast<GgmlType>(type);
    if (const int64_t per = ggml_block_values(t.type); per > 1 && (n_dims == 0 || ne[0] % per != 0))
      c.fail(str_cat(ggml_type_name(t.type), " tensor '", t.name, "' has rows of ", n_dims ? ne[0] : 1,
                     " values, not a multiple of ", per));
    t.offset = c.scalar<uint64_t>("the offset of '" + t.name + "'");
    if (t.offset % alignment != 0) c.fail(str_cat("tensor '", t.name, "' has offset ", t.offset, ", not a multiple of ", alignment));
    t.bytes = ggml_tensor_bytes(t.type, numel);
    tensor_index_[t.name] = tensors_.size();
    tensors_.push_back(std::move(t));
  }

  data_start_ = align_up(c.pos(), alignment);
  if (data_start_ > size) c.fail("the header ends past the file's end");
  const uint64_t data_size = size - data_start_;
  std::vector<std::pair<uint64_t, const GgufTensorInfo*>> by_offset;
  for (const GgufTensorInfo& t : tensors_) {
    if (t.offset > data_size || t.bytes > data_size - t.offset)
      throw Error(str_cat(path_, ": not a valid GGUF file: tensor '", t.name, "' (", t.bytes, " bytes at offset ", t.offset,
                          ") does not fit in the ", data_size, " bytes of data"));
    by_offset.emplace_back(t.offset, &t);
  }
  std::sort(by_offset.begin(), by_offset.end());
  for (std::size_t i = 1; i < by_offset.size(); ++i) {
    const GgufTensorInfo& a = *by_offset[i - 1].second;
    if (a.offset + a.bytes > by_offset[i].first)
      throw Error(str_cat(path_, ": not a valid GGUF file: tensors '", a.name, "' and '", by_offset[i].second->name,
                          "' overlap"));
  }
}

const GgufValue& GgufReader::at(const std::string& key) const {
  auto it = index_.find(key);
  check(it != index_.end(), path_, ": metadata key '", key, "' is missing");
  return metadata_[it->second].second;
}

namespace {
[[noreturn]] void wrong_type(const std::string& path, const std::string& key, const GgufValue& v, const char* want) {
  throw Error(str_cat(path, ": metadata key '", key, "' must be ", want, ", got ",
                      v.is_array() ? std::string("an array of ") + gguf_type_name(v.element) : gguf_type_name(v.type)));
}
}  // namespace

std::string GgufReader::get_string(const std::string& key) const {
  const GgufValue& v = at(key);
  if (v.type != GgufType::String) wrong_type(path_, key, v, "a string");
  return v.strings[0];
}

int64_t GgufReader::get_int(const std::string& key) const {
  const GgufValue& v = at(key);
  if (v.is_array() || v.type == GgufType::String || v.type == GgufType::Bool || is_float_type(v.type))
    wrong_type(path_, key, v, "an integer");
  return v.ints[0];
}

double GgufReader::get_float(const std::string& key) const {
  const GgufValue& v = at(key);
  if (v.is_array() || v.type == GgufType::String || v.type == GgufType::Bool) wrong_type(path_, key, v, "a number");
  return is_float_type(v.type) ? v.floats[0] : static_cast<double>(v.ints[0]);
}

bool GgufReader::get_bool(const std::string& key) const {
  const GgufValue& v = at(key);
  if (v.type != GgufType::Bool) wrong_type(path_, key, v, "a bool");
  return v.ints[0] != 0;
}

const GgufTensorInfo& GgufReader::tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  check(it != tensor_index_.end(), path_, ": no tensor '", name, "'");
  return tensors_[it->second];
}

void GgufReader::read_into(const std::string& name, const Tensor& dst) {
  const GgufTensorInfo& t = tensor(name);
  const Dtype d = dst.dtype();
  check((d == kFloat32 || d == kBFloat16 || is_blocked(d)) && dst.shape() == t.shape, path_, ": tensor '", name,
        "' is ",
        ggml_type_name(t.type), " ", shape_str(t.shape), ", read into a ", dtype_name(d), " ", shape_str(dst.shape()),
        " tensor");
  const int64_t n = dst.numel();
  f_.clear();
  f_.seekg(static_cast<std::streamoff>(data_start_ + t.offset));
  // Q8_0 into q8_0, Q4_0 into q4_0, BF16 into bfloat16 and F16 into float16 are the bytes as
  // stored (the scales, the values checked for NaN and Inf); anything else goes through float32
  // (detail::store_floats). A block of a few MB at a time: no second copy of a large tensor.
  const bool as_stored = (is_block_type(t.type) && d == block_dtype(t.type)) ||
                         (t.type == GgmlType::BF16 && d == kBFloat16) || (t.type == GgmlType::F16 && d == kF16);
  const int64_t per_block = 1 << 20;  // values (whole blocks of every type: a multiple of 256)
  std::vector<char> buf;
  std::vector<float> values;
  for (int64_t done = 0; done < n; done += per_block) {
    const int64_t m = std::min(per_block, n - done);
    const uint64_t bytes = ggml_tensor_bytes(t.type, m);
    char* p;
    if (as_stored) {
      p = static_cast<char*>(dst.raw_data()) + ggml_tensor_bytes(t.type, done);
    } else {
      buf.resize(bytes);
      p = buf.data();
    }
    f_.read(p, static_cast<std::streamsize>(bytes));
    check(f_.good(), path_, ": reading tensor '", name, "' failed");
    if (as_stored && is_block_type(t.type)) {
      const int64_t per = block_values(d);
      if (const int64_t b = first_nonfinite_block_scale(d, p, m / per); b >= 0)
        throw Error(str_cat(path_, ": tensor '", name, "' elements ", done + b * per, "..", done + (b + 1) * per - 1,
                            " (a ", ggml_type_name(t.type), " block) have a scale that is NaN or Inf",
                            "; a weight must be a finite number (the file is damaged)"));
      continue;
    }
    values.resize(static_cast<std::size_t>(m));
    float* o = values.data();
    switch (t.type) {
      case GgmlType::F32: std::memcpy(o, p, bytes); break;
      case GgmlType::F16:
      case GgmlType::BF16:
        for (int64_t i = 0; i < m; ++i) {
          uint16_t h;
          std::memcpy(&h, p + 2 * i, 2);
          o[i] = t.type == GgmlType::F16 ? half_to_float(h) : bfloat16_to_float(h);
        }
        break;
      default: dequantize_blocks(block_dtype(t.type), p, m, o); break;
    }
    if (as_stored)
      detail::check_finite(o, done, m, path_, name);
    else
      detail::store_floats(o, done, m, dst, path_, name);
  }
}

Tensor GgufReader::read(const std::string& name) {
  Tensor t = empty(tensor(name).shape, kFloat32);
  read_into(name, t);
  return t;
}

// ---------------------------------------------------------------------------------------------
// save_gguf

void save_gguf(const std::string& path, const GgufMetadata& metadata, const std::vector<GgufTensorData>& tensors,
               const std::string& who) {
  uint64_t alignment = kDefaultAlignment;
  std::set<std::string> keys, names;
  std::string header(kMagic, 4);
  put<uint32_t>(header, kVersion);
  put<uint64_t>(header, tensors.size());
  put<uint64_t>(header, metadata.size());
  for (const auto& [key, v] : metadata) {
    check(keys.insert(key).second, who, ": metadata key '", key, "' given twice");
    if (key == "general.alignment") {
      check(v.type == GgufType::UInt32 && v.ints.at(0) > 0 && (v.ints[0] & (v.ints[0] - 1)) == 0, who,
            ": general.alignment must be a uint32 power of two");
      alignment = static_cast<uint64_t>(v.ints[0]);
    }
    put_string(header, key);
    put<uint32_t>(header, static_cast<uint32_t>(v.type));
    if (v.is_array()) {
      put<uint32_t>(header, static_cast<uint32_t>(v.element));
      put<uint64_t>(header, v.size());
      for (std::size_t i = 0; i < v.size(); ++i) put_scalar(header, v.element, v, i);
    } else {
      put_scalar(header, v.type, v, 0);
    }
  }
  uint64_t offset = 0;
  for (const GgufTensorData& t : tensors) {
    check(names.insert(t.name).second, who, ": tensor '", t.name, "' given twice");
    check(t.data.dim() <= static_cast<int64_t>(kMaxDims), who, ": tensor '", t.name, "' has ", t.data.dim(), " dims (GGUF holds at most 4)");
    check(is_floating(t.data.dtype()), who, ": tensor '", t.name, "' is ", dtype_name(t.data.dtype()), ", not a float tensor");
    check(is_writable_type(t.type), who, ": tensor '", t.name, "': xgrad writes F32, F16, BF16, Q8_0 and Q4_0, not ",
          ggml_type_name(t.type));
    const int64_t row = t.data.dim() ? t.data.size(-1) : 1;
    check(!is_writable_type(t.type) || ggml_block_values(t.type) == 1 || row % kQ8Block == 0, who, ": tensor '", t.name,
          "' has rows of ", row, " values; ", ggml_type_name(t.type), " needs a multiple of 32");
    put_string(header, t.name);
    put<uint32_t>(header, static_cast<uint32_t>(t.data.dim()));
    for (int64_t d = t.data.dim() - 1; d >= 0; --d) put<uint64_t>(header, static_cast<uint64_t>(t.data.size(d)));
    put<uint32_t>(header, static_cast<uint32_t>(t.type));
    put<uint64_t>(header, offset);
    offset = align_up(offset + ggml_tensor_bytes(t.type, t.data.numel()), alignment);
  }
  header.resize(align_up(header.size(), alignment), '\0');
  write_file_atomic(
      path,
      [&](std::ostream& out) {
        out.write(header.data(), static_cast<std::streamsize>(header.size()));
        std::string block;
        for (const GgufTensorData& t : tensors) {
          const Tensor f = t.data.dtype() == kFloat32 ? t.data.contiguous() : t.data.to(kFloat32);
          check_finite(t, f, who);
          const float* x = f.data<float>();
          const int64_t n = f.numel();
          // A finite value that rounds past the type's largest is refused, naming it.
          const auto overflow = [&](int64_t i, const std::string& largest) {
            throw Error(str_cat(who, ": tensor '", t.name, "' element ", i, " is ", x[i], ", beyond ",
                                ggml_type_name(t.type), "'s largest finite value ", largest));
          };
          block.clear();
          switch (t.type) {
            case GgmlType::F32: block.assign(reinterpret_cast<const char*>(x), static_cast<std::size_t>(4 * n)); break;
            case GgmlType::F16:
              for (int64_t i = 0; i < n; ++i) {
                const uint16_t h = float_to_half(x[i]);
                if ((h & 0x7fffu) == 0x7c00u) overflow(i, "65504");
                put<uint16_t>(block, h);
              }
              break;
            case GgmlType::BF16:
              for (int64_t i = 0; i < n; ++i) {
                const uint16_t h = float_to_bfloat16(x[i]);
                if ((h & 0x7fffu) == 0x7f80u) overflow(i, str_cat(bfloat16_to_float(0x7f7f)));
                put<uint16_t>(block, h);
              }
              break;
            case GgmlType::Q8_0:
            case GgmlType::Q4_0:
              if (const int64_t b = append_blocks(block_dtype(t.type), x, n, block); b >= 0) {
                const float div = t.type == GgmlType::Q8_0 ? 127.0f : 8.0f;
                float amax = 0;
                for (int64_t j = b; j < b + kQ8Block; ++j) amax = std::max(amax, std::fabs(x[j]));
                throw Error(str_cat(who, ": tensor '", t.name, "' elements ", b, "..", b + kQ8Block - 1, " (a ",
                                    ggml_type_name(t.type), " block) reach ", amax, ": the block's F16 scale (max / ",
                                    div, " = ", amax / div, ") would overflow"));
              }
              break;
            default: throw Error(str_cat(who, ": internal error: ", ggml_type_name(t.type), " is not written"));
          }
          block.resize(align_up(block.size(), alignment), '\0');
          out.write(block.data(), static_cast<std::streamsize>(block.size()));
        }
      },
      who);
}

bool is_gguf_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  char magic[4] = {};
  return f.read(magic, 4) && std::memcmp(magic, kMagic, 4) == 0;
}

}  // namespace xg::io
