// R's XDR unserialize (the subset janeaustenr's lazy-load database uses) and the lazy-load
// index/blob reader. Every length is checked against the bytes left before it is used.
#include "finetune/data/rdata.hpp"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>

#include "autograd/error.hpp"

namespace xg::finetune::rdata {

namespace {

// R's SEXPTYPE codes for the pseudo-types of serialize.c that we meet (or reject by name).
constexpr int kRefSxp = 255, kNilValueSxp = 254, kGlobalEnvSxp = 253, kEmptyEnvSxp = 242,
              kBaseEnvSxp = 241, kAltrepSxp = 238, kExprSxp = 20, kEnvSxp = 4;
constexpr int kMaxDepth = 256;  // nesting of lists/attributes; deeper input is rejected

std::string type_name(int t) {
  switch (t) {
    case RObject::Nil: return "NULL";
    case RObject::Symbol: return "SYMSXP (symbol)";
    case RObject::Pairlist: return "LISTSXP (pairlist)";
    case RObject::Logical: return "LGLSXP (logical vector)";
    case RObject::Integer: return "INTSXP (integer vector)";
    case RObject::Real: return "REALSXP (double vector)";
    case RObject::String: return "STRSXP (character vector)";
    case RObject::List: return "VECSXP (list)";
    case kEnvSxp: return "ENVSXP (environment)";
    case 3: return "CLOSXP (function)";
    case 6: return "LANGSXP (call)";
    case 15: return "CPLXSXP (complex vector)";
    case 24: return "RAWSXP (raw vector)";
    case 25: return "S4SXP";
    case kExprSxp: return "EXPRSXP (expression vector)";
    case kAltrepSxp: return "ALTREP_SXP (compact/ALTREP vector)";
    case kGlobalEnvSxp: return "GLOBALENV_SXP";
    case kEmptyEnvSxp: return "EMPTYENV_SXP";
    case kBaseEnvSxp: return "BASEENV_SXP";
    default: return str_cat("SEXPTYPE ", t);
  }
}

class XdrReader {
 public:
  XdrReader(const std::string& bytes, std::string source) : b_(bytes), src_(std::move(source)) {}

  RObjectPtr read_all() {
    need(2, "the format header");
    if (b_.compare(0, 2, "X\n") != 0)
      fail(0, "not R's XDR serialization (expected header \"X\\n\"; ascii/native formats are not supported)");
    pos_ = 2;
    const int32_t version = read_int("the format version");
    if (version != 2 && version != 3) fail(2, str_cat("serialization format version ", version, " (expected 2 or 3)"));
    read_int("the writer's R version");
    read_int("the minimal reader version");
    if (version == 3) {
      const int32_t n = read_int("the native-encoding length");
      if (n < 0) fail(pos_ - 4, str_cat("negative native-encoding length ", n));
      read_bytes(static_cast<std::size_t>(n), "the native encoding");
    }
    RObjectPtr obj = read_item(0);
    if (pos_ != b_.size()) fail(pos_, str_cat(b_.size() - pos_, " trailing bytes after the object"));
    return obj;
  }

 private:
  [[noreturn]] void fail(std::size_t at, const std::string& what) const {
    throw Error(str_cat(src_, ": byte ", at, ": ", what));
  }
  void need(std::size_t n, const char* what) const {
    if (n > b_.size() - pos_)
      fail(pos_, str_cat("truncated: ", what, " needs ", n, " bytes, ", b_.size() - pos_, " left"));
  }
  int32_t read_int(const char* what) {
    need(4, what);
    const auto* p = reinterpret_cast<const unsigned char*>(b_.data() + pos_);
    pos_ += 4;
    return static_cast<int32_t>((uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | p[3]);
  }
  double read_double() {
    need(8, "a double");
    uint64_t u = 0;
    for (int i = 0; i < 8; ++i) u = (u << 8) | static_cast<unsigned char>(b_[pos_ + i]);
    pos_ += 8;
    double d;
    std::memcpy(&d, &u, 8);
    return d;
  }
  std::string read_bytes(std::size_t n, const char* what) {
    need(n, what);
    std::string s = b_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  // A vector length (R's long vectors: -1 then two ints); checked so that `n` elements of at
  // least `min_bytes` each fit in what is left, before anything is allocated.
  std::size_t read_length(std::size_t min_bytes, const char* what) {
    const std::size_t at = pos_;
    int64_t n = read_int("a vector length");
    if (n == -1) {
      const uint64_t hi = static_cast<uint32_t>(read_int("a long-vector length")),
                     lo = static_cast<uint32_t>(read_int("a long-vector length"));
      if (hi >> 31) fail(at, str_cat("long-vector length with high word ", hi, " (past 2^63) of ", what));
      n = static_cast<int64_t>(hi << 32 | lo);
    }
    if (n < 0) fail(at, str_cat("negative length ", n, " of ", what));
    if (static_cast<uint64_t>(n) > (b_.size() - pos_) / min_bytes)
      fail(at, str_cat("length ", n, " of ", what, " exceeds the ", b_.size() - pos_, " bytes left"));
    return static_cast<std::size_t>(n);
  }

  RObjectPtr read_char(int32_t flags, std::size_t at) {
    auto o = std::make_shared<RObject>();
    o->type = RObject::Char;
    const int32_t n = read_int("a string length");
    if (n == -1) {
      o->na = true;
    } else if (n < 0) {
      fail(at, str_cat("negative string length ", n));
    } else {
      o->text = read_bytes(static_cast<std::size_t>(n), "a string");
    }
    // levels bit 1 = BYTES, 2 = LATIN1, 3 = UTF8, 6 = ASCII: we keep the bytes as they are.
    (void)flags;
    return o;
  }

  RObjectPtr read_item(int depth) {
    if (depth > kMaxDepth) fail(pos_, str_cat("objects nested deeper than ", kMaxDepth));
    const std::size_t at = pos_;
    const int32_t flags = read_int("an item's flags");
    const int type = flags & 0xFF;
    const bool has_attr = flags & (1 << 9);
    switch (type) {
      case kNilValueSxp: return std::make_shared<RObject>();
      case kRefSxp: {
        int64_t index = static_cast<uint32_t>(flags) >> 8;
        if (index == 0) index = read_int("a reference index");
        if (index < 1 || static_cast<std::size_t>(index) > refs_.size())
          fail(at, str_cat("reference ", index, " to an object not read yet (", refs_.size(), " known)"));
        return refs_[static_cast<std::size_t>(index - 1)];
      }
      case RObject::Symbol: {
        RObjectPtr name = read_item(depth + 1);
        if (name->type != RObject::Char) fail(at, "a symbol whose name is not a CHARSXP");
        auto o = std::make_shared<RObject>();
        o->type = RObject::Symbol;
        o->text = name->text;
        refs_.push_back(o);  // symbols enter the reference table as they are read
        return o;
      }
      case RObject::Pairlist: return read_pairlist(flags, depth);
      case RObject::Char: return read_char(flags, at);
      case RObject::Logical:
      case RObject::Integer: {
        auto o = std::make_shared<RObject>();
        o->type = static_cast<RObject::Type>(type);
        const std::size_t n = read_length(4, type == RObject::Logical ? "a logical vector" : "an integer vector");
        o->ints.resize(n);
        for (auto& v : o->ints) v = read_int("a vector element");
        if (has_attr) o->attributes = read_attributes(depth);
        return o;
      }
      case RObject::Real: {
        auto o = std::make_shared<RObject>();
        o->type = RObject::Real;
        o->reals.resize(read_length(8, "a double vector"));
        for (auto& v : o->reals) v = read_double();
        if (has_attr) o->attributes = read_attributes(depth);
        return o;
      }
      case RObject::String: {
        auto o = std::make_shared<RObject>();
        o->type = RObject::String;
        const std::size_t n = read_length(8, "a character vector");  // each element: flags + length
        o->strings.reserve(n);
        for (std::size_t i = 0; i < n; ++i) {
          const std::size_t el = pos_;
          const int32_t f = read_int("a string's flags");
          if ((f & 0xFF) != RObject::Char) fail(el, str_cat("character vector element ", i, " is ", type_name(f & 0xFF)));
          RObjectPtr c = read_char(f, el);
          o->strings.push_back(c->na ? std::string() : std::move(c->text));
        }
        if (has_attr) o->attributes = read_attributes(depth);
        return o;
      }
      case RObject::List: {
        auto o = std::make_shared<RObject>();
        o->type = RObject::List;
        const std::size_t n = read_length(4, "a list");
        o->items.reserve(n);
        for (std::size_t i = 0; i < n; ++i) o->items.push_back(read_item(depth + 1));
        if (has_attr) o->attributes = read_attributes(depth);
        return o;
      }
      default: fail(at, str_cat("unsupported R object ", type_name(type), " (flags 0x", std::hex, flags, ")"));
    }
  }

  RObjectPtr read_attributes(int depth) {
    const std::size_t at = pos_;
    RObjectPtr a = read_item(depth + 1);
    if (a->type != RObject::Pairlist) fail(at, "attributes that are not a pairlist");
    return a;
  }

  // Pairlist cells (attributes, tag, CAR, then the CDR) read in a loop, not recursively.
  RObjectPtr read_pairlist(int32_t flags, int depth) {
    auto o = std::make_shared<RObject>();
    o->type = RObject::Pairlist;
    for (;;) {
      if (flags & (1 << 9)) read_attributes(depth);  // attributes on a cell: not needed here
      std::string tag;
      if (flags & (1 << 10)) {
        const std::size_t at = pos_;
        RObjectPtr t = read_item(depth + 1);
        if (t->type != RObject::Symbol) fail(at, "a pairlist tag that is not a symbol");
        tag = t->text;
      }
      o->tags.push_back(tag);
      o->items.push_back(read_item(depth + 1));
      const std::size_t at = pos_;
      flags = read_int("a pairlist's CDR");
      const int type = flags & 0xFF;
      if (type == kNilValueSxp) return o;
      if (type != RObject::Pairlist) fail(at, str_cat("a dotted pairlist (CDR is ", type_name(type), ")"));
    }
  }

  const std::string& b_;
  std::string src_;
  std::size_t pos_ = 0;
  std::vector<RObjectPtr> refs_;
};

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(str_cat(path, ": cannot open file"));
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) throw Error(str_cat(path, ": read error"));
  return s;
}

uint32_t be32(const std::string& s, std::size_t at) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data() + at);
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | p[3];
}

const RObject& named_item(const RObject& list, const std::string& name, const std::string& src) {
  if (list.type != RObject::List) throw Error(str_cat(src, ": the index is not a named list"));
  const auto names = list.names();
  for (std::size_t i = 0; i < names.size() && i < list.items.size(); ++i)
    if (names[i] == name) return *list.items[i];
  throw Error(str_cat(src, ": the index has no '", name, "' entry"));
}

}  // namespace

std::vector<std::string> RObject::names() const {
  if (!attributes) return {};
  for (std::size_t i = 0; i < attributes->tags.size(); ++i)
    if (attributes->tags[i] == "names" && attributes->items[i]->type == String) return attributes->items[i]->strings;
  return {};
}

RObjectPtr unserialize(const std::string& bytes, const std::string& source) {
  return XdrReader(bytes, source).read_all();
}

std::string inflate(const std::string& compressed, const std::string& source, int64_t expected_size, bool gzip,
                    std::size_t max_size) {
  if (expected_size >= 0 && static_cast<uint64_t>(expected_size) > max_size)
    throw Error(str_cat(source, ": inflated size ", expected_size, " exceeds the limit of ", max_size, " bytes"));
  if (compressed.size() > (std::size_t(1) << 31))
    throw Error(str_cat(source, ": compressed stream of ", compressed.size(), " bytes is too large"));
  z_stream zs{};
  if (inflateInit2(&zs, gzip ? 15 + 16 : 15) != Z_OK) throw Error(str_cat(source, ": zlib inflateInit failed"));
  // One byte beyond the expected size tells a longer stream apart from an exact one.
  const std::size_t limit = expected_size >= 0 ? static_cast<std::size_t>(expected_size) + 1 : max_size;
  std::string out;
  out.resize(std::min(limit, std::size_t(1) << 16));
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(compressed.data()));
  zs.avail_in = static_cast<uInt>(compressed.size());
  std::size_t produced = 0;
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    if (produced == out.size()) {
      if (out.size() >= limit) break;
      out.resize(std::min(limit, out.size() * 2));
    }
    zs.next_out = reinterpret_cast<Bytef*>(&out[produced]);
    zs.avail_out = static_cast<uInt>(std::min<std::size_t>(out.size() - produced, 1u << 30));
    rc = ::inflate(&zs, Z_NO_FLUSH);
    produced = static_cast<std::size_t>(reinterpret_cast<char*>(zs.next_out) - out.data());
    if (rc == Z_BUF_ERROR && zs.avail_in == 0) break;  // input ended before the stream did
    if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR) {
      const std::string msg = zs.msg ? zs.msg : "unknown error";
      inflateEnd(&zs);
      throw Error(str_cat(source, ": corrupt ", gzip ? "gzip" : "zlib", " stream (", msg, ")"));
    }
  }
  inflateEnd(&zs);
  if (rc != Z_STREAM_END)
    throw Error(str_cat(source, ": ", gzip ? "gzip" : "zlib", " stream truncated or larger than ",
                        limit - (expected_size >= 0 ? 1 : 0), " bytes"));
  if (expected_size >= 0 && produced != static_cast<std::size_t>(expected_size))
    throw Error(str_cat(source, ": inflated to ", produced, " bytes, the header says ", expected_size));
  out.resize(produced);
  return out;
}

std::map<std::string, std::vector<std::string>> read_lazyload_character_vectors(const std::string& base) {
  const std::string rdx_path = base + ".rdx", rdb_path = base + ".rdb";
  // The index is saveRDS output: gzip-compressed serialization (or plain when uncompressed).
  std::string rdx = read_file(rdx_path);
  if (rdx.size() >= 2 && static_cast<unsigned char>(rdx[0]) == 0x1f && static_cast<unsigned char>(rdx[1]) == 0x8b)
    rdx = inflate(rdx, rdx_path, -1, /*gzip=*/true, std::size_t(64) << 20);
  const RObjectPtr index = unserialize(rdx, rdx_path);

  const RObject& compressed = named_item(*index, "compressed", rdx_path);
  if ((compressed.type != RObject::Logical && compressed.type != RObject::Integer) || compressed.ints.size() != 1 ||
      compressed.ints[0] != 1)
    throw Error(str_cat(rdx_path, ": only zlib-compressed databases are supported (compressed = TRUE); "
                                  "bzip2/xz (2/3) or uncompressed ones are not"));
  const RObject& refs = named_item(*index, "references", rdx_path);
  if (refs.type != RObject::List || !refs.items.empty())
    throw Error(str_cat(rdx_path, ": environment references are not supported (the index has ", refs.items.size(), ")"));
  const RObject& vars = named_item(*index, "variables", rdx_path);
  const auto names = vars.names();
  if (vars.type != RObject::List || names.size() != vars.items.size())
    throw Error(str_cat(rdx_path, ": 'variables' is not a named list"));

  const std::string rdb = read_file(rdb_path);
  std::map<std::string, std::vector<std::string>> out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    const RObject& pos = *vars.items[i];
    if (pos.type != RObject::Integer || pos.ints.size() != 2)
      throw Error(str_cat(rdx_path, ": variable '", names[i], "' has no (offset, length) pair"));
    const int64_t off = pos.ints[0], len = pos.ints[1];
    const std::string blob_name = str_cat(rdb_path, "[", off, "+", len, "] ('", names[i], "')");
    if (off < 0 || len < 5 || static_cast<uint64_t>(off) > rdb.size() || static_cast<uint64_t>(len) > rdb.size() - off)
      throw Error(str_cat(blob_name, ": outside the file's ", rdb.size(), " bytes"));
    const uint32_t size = be32(rdb, static_cast<std::size_t>(off));
    const std::string bytes =
        inflate(rdb.substr(static_cast<std::size_t>(off) + 4, static_cast<std::size_t>(len) - 4), blob_name, size);
    RObjectPtr obj = unserialize(bytes, blob_name);
    if (obj->type != RObject::String)
      throw Error(str_cat(blob_name, ": not a character vector (", type_name(obj->type), ")"));
    out[names[i]] = std::move(obj->strings);
  }
  return out;
}

}  // namespace xg::finetune::rdata
