// safetensors reader (validating) and writer (temporary file, fsync, rename).
#include "autograd/safetensors.hpp"

#include "autograd/atomic_file.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>
#include <vector>

#include <nlohmann/json.hpp>

namespace xg {

namespace {

constexpr uint64_t kMaxHeader = 100ull * 1000 * 1000;  // as the reference implementation

struct Entry {
  std::string name;
  std::string dtype;
  Shape shape;
  uint64_t begin = 0, end = 0;
};

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw Error(str_cat("safetensors: ", path, ": ", what));
}

uint64_t file_itemsize(const std::string& dt) {
  if (dt == "F64" || dt == "I64") return 8;
  if (dt == "F32" || dt == "I32") return 4;
  if (dt == "F16" || dt == "BF16") return 2;
  if (dt == "BOOL") return 1;
  return 0;
}

float half_to_float(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: renormalise
      int e = -1;
      uint32_t m = man;
      do { ++e; m <<= 1; } while (!(m & 0x400));
      bits = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (m & 0x3ff) << 13;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | man << 13;
  } else {
    bits = sign | (exp + 127 - 15) << 23 | man << 13;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Reads entry `e` (the stream is at its first byte) into a new tensor. F32/F64/I64/BOOL go
// straight into the tensor's storage; I32/F16/BF16 are widened from a buffer of that one tensor.
Tensor read_tensor(std::istream& f, const Entry& e, const std::string& path) {
  const int64_t n = shape_numel(e.shape);
  auto read = [&](void* dst, uint64_t nbytes) {
    f.read(static_cast<char*>(dst), static_cast<std::streamsize>(nbytes));
    if (!f) fail(path, str_cat("short read in tensor '", e.name, "'"));
  };
  if (e.dtype == "F32" || e.dtype == "F64" || e.dtype == "I64" || e.dtype == "BOOL") {
    const Dtype dt = e.dtype == "F32" ? kFloat32 : e.dtype == "F64" ? kFloat64 : e.dtype == "I64" ? kInt64 : kBool;
    Tensor t = empty(e.shape, dt);
    read(t.raw_data(), e.end - e.begin);  // little-endian host
    if (dt == kBool) {  // any nonzero byte is true; store canonical 0/1
      unsigned char* b = static_cast<unsigned char*>(t.raw_data());
      for (int64_t i = 0; i < n; ++i) b[i] = b[i] != 0;
    }
    return t;
  }
  std::vector<unsigned char> buf(e.end - e.begin);
  read(buf.data(), buf.size());
  const unsigned char* p = buf.data();
  if (e.dtype == "I32") {
    Tensor t = empty(e.shape, kInt64);
    int64_t* d = t.data<int64_t>();
    for (int64_t i = 0; i < n; ++i) {
      int32_t v;
      std::memcpy(&v, p + 4 * i, 4);
      d[i] = v;
    }
    return t;
  }
  Tensor t = empty(e.shape, kFloat32);  // F16 / BF16 widened
  float* d = t.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    uint16_t v;
    std::memcpy(&v, p + 2 * i, 2);
    if (e.dtype == "BF16") {
      const uint32_t bits = static_cast<uint32_t>(v) << 16;
      std::memcpy(&d[i], &bits, 4);
    } else {
      d[i] = half_to_float(v);
    }
  }
  return t;
}

}  // namespace

TensorMap load_safetensors(const std::string& path, std::map<std::string, std::string>* metadata) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(path, "cannot open file");
  f.seekg(0, std::ios::end);
  const auto file_size = static_cast<uint64_t>(f.tellg());
  f.seekg(0);
  if (file_size < 8) fail(path, str_cat("file is ", file_size, " bytes, shorter than the 8-byte header length"));
  unsigned char len_bytes[8];
  f.read(reinterpret_cast<char*>(len_bytes), 8);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = header_len << 8 | len_bytes[i];
  if (header_len > kMaxHeader) fail(path, str_cat("header length ", header_len, " exceeds the 100 MB limit"));
  if (header_len > file_size - 8)
    fail(path, str_cat("header length ", header_len, " runs past the end of the ", file_size, "-byte file"));
  std::string header(header_len, '\0');
  f.read(header.data(), static_cast<std::streamsize>(header_len));
  if (header.empty() || header[0] != '{') fail(path, "header does not start with '{'");

  // Parse, rejecting duplicate top-level names (nlohmann would keep the last silently).
  std::set<std::string> seen;
  std::string duplicate;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(header, [&](int depth, nlohmann::json::parse_event_t ev, nlohmann::json& parsed) {
      if (depth == 1 && ev == nlohmann::json::parse_event_t::key && !seen.insert(parsed.get<std::string>()).second)
        duplicate = parsed.get<std::string>();
      return true;
    });
  } catch (const nlohmann::json::exception& ex) {
    fail(path, str_cat("header is not valid JSON: ", ex.what()));
  }
  if (!duplicate.empty()) fail(path, str_cat("duplicate tensor name '", duplicate, "'"));
  if (!j.is_object()) fail(path, "header is not a JSON object");

  const uint64_t data_size = file_size - 8 - header_len;
  std::vector<Entry> entries;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it.value().is_object()) fail(path, "__metadata__ is not an object");
      for (auto m = it.value().begin(); m != it.value().end(); ++m) {
        if (!m.value().is_string()) fail(path, str_cat("__metadata__ value of '", m.key(), "' is not a string"));
        if (metadata) (*metadata)[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const auto& v = it.value();
    Entry e;
    e.name = it.key();
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
      fail(path, str_cat("tensor '", e.name, "' needs dtype, shape and data_offsets"));
    if (!v["dtype"].is_string()) fail(path, str_cat("tensor '", e.name, "': dtype is not a string"));
    e.dtype = v["dtype"].get<std::string>();
    const uint64_t isz = file_itemsize(e.dtype);
    if (!isz) fail(path, str_cat("tensor '", e.name, "': unsupported dtype ", e.dtype));
    if (!v["shape"].is_array()) fail(path, str_cat("tensor '", e.name, "': shape is not a list"));
    uint64_t numel = 1;
    for (const auto& s : v["shape"]) {
      if (!s.is_number_unsigned()) fail(path, str_cat("tensor '", e.name, "': shape entries must be non-negative integers"));
      const uint64_t d = s.get<uint64_t>();
      if (d > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        fail(path, str_cat("tensor '", e.name, "': shape entry ", d, " is too large"));
      if (d != 0 && numel > std::numeric_limits<uint64_t>::max() / d)
        fail(path, str_cat("tensor '", e.name, "': element count overflows"));
      numel *= d;
      e.shape.push_back(static_cast<int64_t>(d));
    }
    const auto& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      fail(path, str_cat("tensor '", e.name, "': data_offsets must be two non-negative integers"));
    e.begin = off[0].get<uint64_t>();
    e.end = off[1].get<uint64_t>();
    if (e.end < e.begin) fail(path, str_cat("tensor '", e.name, "': data_offsets end before they begin"));
    if (numel > std::numeric_limits<uint64_t>::max() / isz || e.end - e.begin != numel * isz)
      fail(path, str_cat("tensor '", e.name, "': data_offsets span ", e.end - e.begin, " bytes but shape ",
                     shape_str(e.shape), " of ", e.dtype, " needs ", numel * isz));
    entries.push_back(e);
  }
  // Offsets must tile the data region exactly: sorted, contiguous, no gaps or overlaps.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t pos = 0;
  for (const Entry& e : entries) {
    if (e.begin != pos)
      fail(path, str_cat("tensor '", e.name, "' starts at byte ", e.begin, " of the data, expected ", pos,
                     " (offsets must be contiguous and non-overlapping)"));
    pos = e.end;
  }
  if (pos != data_size)
    fail(path, str_cat("tensors cover ", pos, " bytes of data but the file holds ", data_size));

  // Tensors are read one by one in file order, into their own storage: the data is not held twice.
  TensorMap out;
  for (const Entry& e : entries) out.emplace(e.name, read_tensor(f, e, path));
  return out;
}

void save_safetensors(const std::string& path, const TensorMap& tensors,
                      const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    check(name != "__metadata__", "save_safetensors: '__metadata__' is reserved and cannot name a tensor");
    check(t.defined(), "save_safetensors: tensor '", name, "' is undefined");
    const char* dt = t.dtype() == kFloat32 ? "F32" : t.dtype() == kFloat64 ? "F64" : t.dtype() == kInt64 ? "I64" : "BOOL";
    const uint64_t nbytes = static_cast<uint64_t>(t.numel()) * itemsize(t.dtype());
    header[name] = {{"dtype", dt}, {"shape", t.shape()}, {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');

  write_file_atomic(
      path,
      [&](std::ostream& f) {
        unsigned char len_bytes[8];
        for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<unsigned char>(h.size() >> (8 * i));
        f.write(reinterpret_cast<const char*>(len_bytes), 8);
        f.write(h.data(), static_cast<std::streamsize>(h.size()));
        for (const auto& [name, t] : tensors) {
          if (t.dtype() == kBool) {
            std::vector<unsigned char> b(static_cast<std::size_t>(t.numel()));
            const bool* p = t.data<bool>();
            for (std::size_t i = 0; i < b.size(); ++i) b[i] = p[i] ? 1 : 0;
            f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
          } else {
            f.write(static_cast<const char*>(t.raw_data()),
                    static_cast<std::streamsize>(static_cast<uint64_t>(t.numel()) * itemsize(t.dtype())));
          }
        }
      },
      "save_safetensors");
}

}  // namespace xg
