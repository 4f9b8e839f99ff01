// safetensors reader (validating) and writer (temporary file, fsync, rename).
#include "io/safetensors.hpp"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>
#include <vector>

#include <nlohmann/json.hpp>
#include <zlib.h>

#include "autograd/float16.hpp"
#include "io/atomic_file.hpp"
#include "io/detail/store_floats.hpp"

namespace xg::io {

namespace {

constexpr uint64_t kMaxHeader = 100ull * 1000 * 1000;  // as the reference implementation

// The __metadata__ key of xgrad's per-tensor checksums: {"name": "<CRC32 of its data, 8 hex>"}
// as one JSON string (metadata values must be strings), so any safetensors reader still loads
// the file. NOTE: CRC32 (zlib's, a dependency already) rather than a faster hash: it detects
// every error of up to 32 adjacent bits, so every single-bit flip, which is the damage a disk
// or a copy does; at GB/s it costs less than reading the file.
constexpr const char* kChecksumKey = "xgrad_crc32";

uint32_t crc32_of(uint32_t crc, const void* p, uint64_t n) {
  return static_cast<uint32_t>(::crc32_z(crc, static_cast<const Bytef*>(p), static_cast<z_size_t>(n)));
}

std::string hex32(uint32_t v) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

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

// Converts n elements of file dtype `dt` at p into floats at d (T = float or double).
template <class T>
void widen(const std::string& dt, const unsigned char* p, int64_t n, T* d) {
  if (dt == "F32") {
    for (int64_t i = 0; i < n; ++i) {
      float v;
      std::memcpy(&v, p + 4 * i, 4);
      d[i] = static_cast<T>(v);
    }
    return;
  }
  if (dt == "F64") {
    for (int64_t i = 0; i < n; ++i) {
      double v;
      std::memcpy(&v, p + 8 * i, 8);
      d[i] = static_cast<T>(v);
    }
    return;
  }
  const bool bf16 = dt == "BF16";
  for (int64_t i = 0; i < n; ++i) {
    uint16_t v;
    std::memcpy(&v, p + 2 * i, 2);
    d[i] = static_cast<T>(bf16 ? bfloat16_to_float(v) : half_to_float(v));
  }
}

// A bfloat16 or float16 tensor is written as it is held (BF16, F16); the block formats have no
// safetensors dtype (save_safetensors refuses them by name).
const char* stored_dtype(Dtype d, StoredFloat stored) {
  if (is_floating(d) && stored == StoredFloat::BFloat16) return "BF16";
  switch (d) {
    case Dtype::Float32: return "F32";
    case Dtype::Float64: return "F64";
    case Dtype::Int64: return "I64";
    case Dtype::Bool: return "BOOL";
    case Dtype::BFloat16: return "BF16";
    case Dtype::F16: return "F16";
    default: break;
  }
  throw Error(str_cat("save_safetensors: a ", dtype_name(d), " tensor has no safetensors dtype"));
}

uint64_t stored_bytes(Dtype d, int64_t numel, StoredFloat stored) {
  const uint64_t isz = (is_floating(d) && stored == StoredFloat::BFloat16) || d == kF16 ? 2 : itemsize(d);
  return static_cast<uint64_t>(numel) * isz;
}
uint64_t stored_bytes(const Tensor& t, StoredFloat stored) { return stored_bytes(t.dtype(), t.numel(), stored); }

// What the header says of one tensor.
struct HeaderEntry {
  std::string name;
  Dtype dtype;
  Shape shape;
  std::string crc;  // 8 hex digits
};

// The padded JSON header: `metadata` with the checksums, then each tensor's dtype, shape and
// offsets, end to end in the order given (name order).
std::string header_text(const std::vector<HeaderEntry>& entries, const std::map<std::string, std::string>& metadata,
                        StoredFloat stored) {
  check(!metadata.count(kChecksumKey), "save_safetensors: metadata key '", kChecksumKey, "' is reserved for xgrad's checksums");
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  nlohmann::ordered_json sums = nlohmann::ordered_json::object();
  for (const HeaderEntry& e : entries) {
    check(e.name != "__metadata__", "save_safetensors: '__metadata__' is reserved and cannot name a tensor");
    sums[e.name] = e.crc;
  }
  std::map<std::string, std::string> meta = metadata;
  meta[kChecksumKey] = sums.dump();
  header["__metadata__"] = meta;
  uint64_t offset = 0;
  for (const HeaderEntry& e : entries) {
    const uint64_t nbytes = stored_bytes(e.dtype, shape_numel(e.shape), stored);
    header[e.name] = {{"dtype", stored_dtype(e.dtype, stored)}, {"shape", e.shape}, {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  return h;
}

// The 8-byte little-endian header length, then the header.
void write_header(std::ostream& f, const std::string& h) {
  unsigned char len_bytes[8];
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<unsigned char>(h.size() >> (8 * i));
  f.write(reinterpret_cast<const char*>(len_bytes), 8);
  f.write(h.data(), static_cast<std::streamsize>(h.size()));
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// SafetensorsReader

SafetensorsReader::SafetensorsReader(const std::string& path) : path_(path), f_(path, std::ios::binary) {
  std::ifstream& f = f_;
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
  data_start_ = 8 + header_len;

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
  std::vector<std::pair<std::string, SafetensorsEntry>> entries;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it.value().is_object()) fail(path, "__metadata__ is not an object");
      for (auto m = it.value().begin(); m != it.value().end(); ++m) {
        if (!m.value().is_string()) fail(path, str_cat("__metadata__ value of '", m.key(), "' is not a string"));
        metadata_[m.key()] = m.value().get<std::string>();
      }
      auto sums = metadata_.find(kChecksumKey);
      if (sums != metadata_.end()) {
        const auto parsed = nlohmann::json::parse(sums->second, nullptr, false);
        if (!parsed.is_object()) fail(path, str_cat("__metadata__ '", kChecksumKey, "' is not a JSON object"));
        for (const auto& [k, v] : parsed.items()) {
          // Exactly 8 hex digits: from_chars takes no space, no 0x prefix and, into an unsigned
          // type, no sign (std::stoul took all three, and threw on the rest).
          uint32_t sum = 0;
          const std::string text = v.is_string() ? v.get<std::string>() : std::string();
          const auto [end, err] = std::from_chars(text.data(), text.data() + text.size(), sum, 16);
          const bool hex = text.size() == 8 && err == std::errc() && end == text.data() + text.size();
          if (!hex) fail(path, str_cat("__metadata__ '", kChecksumKey, "': the checksum of '", k, "' is not 8 hex digits"));
          checksums_[k] = sum;
        }
        metadata_.erase(sums);
      }
      continue;
    }
    const auto& v = it.value();
    const std::string name = it.key();
    SafetensorsEntry e;
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
      fail(path, str_cat("tensor '", name, "' needs dtype, shape and data_offsets"));
    if (!v["dtype"].is_string()) fail(path, str_cat("tensor '", name, "': dtype is not a string"));
    e.dtype = v["dtype"].get<std::string>();
    const uint64_t isz = file_itemsize(e.dtype);
    if (!isz) fail(path, str_cat("tensor '", name, "': unsupported dtype ", e.dtype));
    if (!v["shape"].is_array()) fail(path, str_cat("tensor '", name, "': shape is not a list"));
    uint64_t numel = 1;
    for (const auto& s : v["shape"]) {
      if (!s.is_number_unsigned()) fail(path, str_cat("tensor '", name, "': shape entries must be non-negative integers"));
      const uint64_t d = s.get<uint64_t>();
      if (d > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        fail(path, str_cat("tensor '", name, "': shape entry ", d, " is too large"));
      if (d != 0 && numel > std::numeric_limits<uint64_t>::max() / d)
        fail(path, str_cat("tensor '", name, "': element count overflows"));
      numel *= d;
      e.shape.push_back(static_cast<int64_t>(d));
    }
    const auto& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      fail(path, str_cat("tensor '", name, "': data_offsets must be two non-negative integers"));
    e.begin = off[0].get<uint64_t>();
    e.end = off[1].get<uint64_t>();
    if (e.end < e.begin) fail(path, str_cat("tensor '", name, "': data_offsets end before they begin"));
    if (numel > std::numeric_limits<uint64_t>::max() / isz || e.end - e.begin != numel * isz)
      fail(path, str_cat("tensor '", name, "': data_offsets span ", e.end - e.begin, " bytes but shape ",
                         shape_str(e.shape), " of ", e.dtype, " needs ", numel * isz));
    entries.emplace_back(name, e);
  }
  // Offsets must tile the data region exactly: sorted, contiguous, no gaps or overlaps.
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
    return a.second.begin != b.second.begin ? a.second.begin < b.second.begin : a.second.end < b.second.end;
  });
  uint64_t pos = 0;
  for (const auto& [name, e] : entries) {
    if (e.begin != pos)
      fail(path, str_cat("tensor '", name, "' starts at byte ", e.begin, " of the data, expected ", pos,
                         " (offsets must be contiguous and non-overlapping)"));
    pos = e.end;
  }
  if (pos != data_size) fail(path, str_cat("tensors cover ", pos, " bytes of data but the file holds ", data_size));
  for (auto& [name, e] : entries) entries_.emplace(name, std::move(e));
}

const SafetensorsEntry& SafetensorsReader::entry(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) fail(path_, str_cat("no tensor named '", name, "'"));
  return it->second;
}

void SafetensorsReader::seek(const SafetensorsEntry& e, const std::string& name) {
  f_.clear();
  f_.seekg(static_cast<std::streamoff>(data_start_ + e.begin));
  if (!f_) fail(path_, str_cat("cannot seek to tensor '", name, "'"));
}

// F32/F64/I64/BOOL go straight into the tensor's storage; I32 is widened from a buffer of
// that one tensor, F16/BF16 a block at a time.
Tensor SafetensorsReader::read(const std::string& name) {
  const SafetensorsEntry& e = entry(name);
  const int64_t n = shape_numel(e.shape);
  auto read_bytes = [&](void* dst, uint64_t nbytes) {
    f_.read(static_cast<char*>(dst), static_cast<std::streamsize>(nbytes));
    if (!f_) fail(path_, str_cat("short read in tensor '", name, "'"));
    verify(name, crc32_of(0, dst, nbytes));
  };
  if (e.dtype == "F32" || e.dtype == "F64" || e.dtype == "I64" || e.dtype == "BOOL") {
    const Dtype dt = e.dtype == "F32" ? kFloat32 : e.dtype == "F64" ? kFloat64 : e.dtype == "I64" ? kInt64 : kBool;
    Tensor t = empty(e.shape, dt);
    seek(e, name);
    read_bytes(t.raw_data(), e.end - e.begin);  // little-endian host
    if (dt == kBool) {  // any nonzero byte is true; store canonical 0/1
      unsigned char* b = static_cast<unsigned char*>(t.raw_data());
      for (int64_t i = 0; i < n; ++i) b[i] = b[i] != 0;
    }
    return t;
  }
  if (e.dtype == "I32") {
    std::vector<unsigned char> buf(e.end - e.begin);
    seek(e, name);
    read_bytes(buf.data(), buf.size());
    Tensor t = empty(e.shape, kInt64);
    int64_t* d = t.data<int64_t>();
    for (int64_t i = 0; i < n; ++i) {
      int32_t v;
      std::memcpy(&v, buf.data() + 4 * i, 4);
      d[i] = v;
    }
    return t;
  }
  Tensor t = empty(e.shape, kFloat32);  // F16 / BF16 widened
  read_into(name, t);
  return t;
}

void SafetensorsReader::read_into(const std::string& name, const Tensor& dst) {
  const SafetensorsEntry& e = entry(name);
  if (e.dtype != "F32" && e.dtype != "F64" && e.dtype != "F16" && e.dtype != "BF16")
    fail(path_, str_cat("tensor '", name, "' is ", e.dtype, ", not a float dtype (F32, F64, F16, BF16)"));
  const bool into = dst.defined() && (is_floating(dst.dtype()) || is_blocked(dst.dtype()));
  if (!into || dst.shape() != e.shape)
    fail(path_, str_cat("tensor '", name, "' is ", e.dtype, " ", shape_str(e.shape), " but the destination is ",
                        dst.defined() ? str_cat(dtype_name(dst.dtype()), " ", shape_str(dst.shape()))
                                      : std::string("undefined")));
  seek(e, name);
  const uint64_t isz = file_itemsize(e.dtype);
  const int64_t n = shape_numel(e.shape);
  // Stored as the destination holds it: read in place, then checked for NaN and Inf.
  if ((e.dtype == "F32" && dst.dtype() == kFloat32) || (e.dtype == "F64" && dst.dtype() == kFloat64) ||
      (e.dtype == "BF16" && dst.dtype() == kBFloat16) || (e.dtype == "F16" && dst.dtype() == kF16)) {
    f_.read(static_cast<char*>(dst.raw_data()), static_cast<std::streamsize>(e.end - e.begin));
    if (!f_) fail(path_, str_cat("short read in tensor '", name, "'"));
    verify(name, crc32_of(0, dst.raw_data(), e.end - e.begin));
    constexpr int64_t kCheck = 1 << 16;
    const bool halves = dst.dtype() == kBFloat16 || dst.dtype() == kF16;
    std::vector<float> widened(halves ? static_cast<std::size_t>(std::min<int64_t>(n, kCheck)) : 0);
    for (int64_t at = 0; at < n; at += kCheck) {
      const int64_t len = std::min(kCheck, n - at);
      if (dst.dtype() == kFloat32) {
        detail::check_finite(dst.data<float>() + at, at, len, path_, name);
      } else if (dst.dtype() == kFloat64) {
        detail::check_finite(dst.data<double>() + at, at, len, path_, name);
      } else {  // bf16 or float16 (IEEE halves, 2 bytes each)
        const auto* h = static_cast<const uint16_t*>(dst.raw_data()) + at;
        for (int64_t i = 0; i < len; ++i)
          widened[i] = dst.dtype() == kF16 ? half_to_float(h[i]) : bfloat16_to_float(h[i]);
        detail::check_finite(widened.data(), at, len, path_, name);
      }
    }
    return;
  }
  // Otherwise a chunk at a time through float32 (float64 for a float64 destination), never a
  // second copy of the whole tensor. A chunk is a whole number of q8_0 or q4_0 blocks.
  uint32_t crc = 0;
  constexpr int64_t kBlock = 1 << 16;  // elements converted per read
  std::vector<unsigned char> buf(static_cast<std::size_t>(std::min<int64_t>(n, kBlock)) * isz);
  std::vector<float> values(dst.dtype() == kFloat64 ? 0 : static_cast<std::size_t>(std::min<int64_t>(n, kBlock)));
  for (int64_t at = 0; at < n; at += kBlock) {
    const int64_t len = std::min(kBlock, n - at);
    f_.read(reinterpret_cast<char*>(buf.data()), static_cast<std::streamsize>(static_cast<uint64_t>(len) * isz));
    if (!f_) fail(path_, str_cat("short read in tensor '", name, "'"));
    crc = crc32_of(crc, buf.data(), static_cast<uint64_t>(len) * isz);
    if (dst.dtype() == kFloat64) {
      double* d = Tensor(dst).data<double>() + at;
      widen(e.dtype, buf.data(), len, d);
      detail::check_finite(d, at, len, path_, name);
    } else {
      widen(e.dtype, buf.data(), len, values.data());
      detail::store_floats(values.data(), at, len, dst, path_, name);
    }
  }
  verify(name, crc);
}

void SafetensorsReader::verify(const std::string& name, uint32_t crc) const {
  auto it = checksums_.find(name);
  if (it != checksums_.end() && it->second != crc)
    fail(path_, str_cat("tensor '", name, "' is damaged: the CRC32 of its data is ", hex32(crc), ", the header says ",
                        hex32(it->second)));
}

std::string crc32_hex(const std::string& bytes) { return hex32(crc32_of(0, bytes.data(), bytes.size())); }

TensorMap load_safetensors(const std::string& path, std::map<std::string, std::string>* metadata) {
  SafetensorsReader reader(path);
  if (metadata)
    for (const auto& [k, v] : reader.metadata()) (*metadata)[k] = v;
  // Tensors are read one by one in file order, into their own storage: the data is not held twice.
  std::vector<std::pair<uint64_t, std::string>> order;
  for (const auto& [name, e] : reader.entries()) order.emplace_back(e.begin, name);
  std::sort(order.begin(), order.end());
  TensorMap out;
  for (const auto& [begin, name] : order) out.emplace(name, reader.read(name));
  return out;
}

// ---------------------------------------------------------------------------------------------
// Writing

uint64_t safetensors_data_bytes(const TensorMap& tensors, StoredFloat stored) {
  uint64_t total = 0;
  for (const auto& [name, t] : tensors) total += t.defined() ? stored_bytes(t, stored) : 0;
  return total;
}

namespace {

// Calls emit(bytes, n) on the bytes save_safetensors stores for `t`, in order.
template <class Emit>
void stored_chunks(const Tensor& t, StoredFloat stored, Emit emit) {
  if (t.dtype() == kBool) {
    std::vector<unsigned char> b(static_cast<std::size_t>(t.numel()));
    const bool* p = t.data<bool>();
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = p[i] ? 1 : 0;
    emit(b.data(), b.size());
  } else if (std::string(stored_dtype(t.dtype(), stored)) == "BF16" && t.dtype() != kBFloat16) {
    // Rounded a block at a time: no bfloat16 copy of the whole tensor.
    constexpr int64_t kBlock = 1 << 16;
    const int64_t n = t.numel();
    std::vector<uint16_t> b(static_cast<std::size_t>(std::min<int64_t>(n, kBlock)));
    for (int64_t at = 0; at < n; at += kBlock) {
      const int64_t len = std::min(kBlock, n - at);
      for (int64_t i = 0; i < len; ++i)
        b[static_cast<std::size_t>(i)] = float_to_bfloat16(
            t.dtype() == kFloat32 ? t.data<float>()[at + i] : static_cast<float>(t.data<double>()[at + i]));
      emit(b.data(), static_cast<std::size_t>(2 * len));
    }
  } else {
    emit(t.raw_data(), static_cast<std::size_t>(stored_bytes(t, stored)));
  }
}

}  // namespace

void save_safetensors(const std::string& path, const TensorMap& tensors,
                      const std::map<std::string, std::string>& metadata, StoredFloat stored) {
  std::vector<HeaderEntry> entries;
  for (const auto& [name, t] : tensors) {
    check(t.defined(), "save_safetensors: tensor '", name, "' is undefined");
    check(!is_blocked(t.dtype()) || t.dtype() == kF16, "save_safetensors: tensor '", name, "' is ", dtype_name(t.dtype()),
          ", which safetensors has no dtype for; widen it with .to(kFloat32) first");
    uint32_t crc = 0;
    stored_chunks(t, stored, [&](const void* p, std::size_t n) { crc = crc32_of(crc, p, n); });
    entries.push_back({name, t.dtype(), t.shape(), hex32(crc)});
  }
  const std::string h = header_text(entries, metadata, stored);
  write_file_atomic(
      path,
      [&](std::ostream& f) {
        write_header(f, h);
        for (const auto& [name, t] : tensors)
          stored_chunks(t, stored, [&](const void* p, std::size_t n) {
            f.write(static_cast<const char*>(p), static_cast<std::streamsize>(n));
          });
      },
      "save_safetensors");
}

void save_safetensors_streamed(const std::string& path, const TensorMap& tensors,
                               const std::map<std::string, LazyTensor>& lazy,
                               const std::map<std::string, std::string>& metadata) {
  std::vector<HeaderEntry> entries;  // name order, both kinds together
  std::vector<const Tensor*> ready;
  std::vector<const LazyTensor*> later;
  auto t = tensors.begin();
  auto l = lazy.begin();
  while (t != tensors.end() || l != lazy.end()) {
    const bool take_t = l == lazy.end() || (t != tensors.end() && t->first < l->first);
    if (take_t) {
      check(t->second.defined(), "save_safetensors: tensor '", t->first, "' is undefined");
      check(!is_blocked(t->second.dtype()) || t->second.dtype() == kF16, "save_safetensors: tensor '", t->first, "' is ",
            dtype_name(t->second.dtype()), ", which safetensors has no dtype for; widen it with .to(kFloat32) first");
      entries.push_back({t->first, t->second.dtype(), t->second.shape(), "00000000"});
      ready.push_back(&t->second);
      later.push_back(nullptr);
      ++t;
    } else {
      check(t == tensors.end() || t->first != l->first, "save_safetensors: tensor '", l->first, "' is given twice");
      entries.push_back({l->first, l->second.dtype, l->second.shape, "00000000"});
      ready.push_back(nullptr);
      later.push_back(&l->second);
      ++l;
    }
  }
  // NOTE: the checksums go in the header, before the data they sum: the header is written with
  // placeholders of the same length and written again once every tensor has passed.
  const std::string placeholder = header_text(entries, metadata, StoredFloat::Native);
  write_file_atomic(
      path,
      [&](std::ostream& f) {
        write_header(f, placeholder);
        for (std::size_t k = 0; k < entries.size(); ++k) {
          const Tensor made = later[k] ? later[k]->make() : Tensor();
          const Tensor& x = later[k] ? made : *ready[k];
          check(x.defined(), "save_safetensors: tensor '", entries[k].name, "' was made undefined");
          check(x.dtype() == entries[k].dtype && x.shape() == entries[k].shape, "save_safetensors: tensor '",
                entries[k].name, "' was made as ", dtype_name(x.dtype()), " ", shape_str(x.shape()), ", announced as ",
                dtype_name(entries[k].dtype), " ", shape_str(entries[k].shape));
          uint32_t crc = 0;
          stored_chunks(x, StoredFloat::Native, [&](const void* p, std::size_t n) {
            crc = crc32_of(crc, p, n);
            f.write(static_cast<const char*>(p), static_cast<std::streamsize>(n));
          });
          entries[k].crc = hex32(crc);
        }
        const std::string h = header_text(entries, metadata, StoredFloat::Native);
        check(h.size() == placeholder.size(), "save_safetensors: the header changed length");
        f.seekp(0);
        write_header(f, h);
        f.seekp(0, std::ios::end);
      },
      "save_safetensors");
}

}  // namespace xg::io
