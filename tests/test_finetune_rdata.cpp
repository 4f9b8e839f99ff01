// Tests for finetune/data/rdata: R's XDR serialization built byte by byte (R is not needed),
// a tiny lazy-load database (gzip index + zlib blobs), bounds checks, and the real package.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "finetune/data/rdata.hpp"
#include "torch_fixture.hpp"

using namespace xg::finetune::rdata;
namespace fs = std::filesystem;

namespace {

// Writes R serialization format 3 (R's serialize.c, XDR big-endian).
struct Xdr {
  std::string b;
  Xdr& i32(int64_t v) {
    const auto u = static_cast<uint32_t>(v);
    for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<char>((u >> s) & 0xFF));
    return *this;
  }
  Xdr& header() {
    b += "X\n";
    return i32(3).i32(0x040201).i32(0x030500).i32(5).raw("UTF-8");
  }
  Xdr& raw(const std::string& s) {
    b += s;
    return *this;
  }
  Xdr& chars(const std::string& s) { return i32(0x00040009).i32(static_cast<int64_t>(s.size())).raw(s); }  // ASCII CHARSXP
  Xdr& strsxp(const std::vector<std::string>& v, int flags = 0x10) {
    i32(flags).i32(static_cast<int64_t>(v.size()));
    for (const auto& s : v) chars(s);
    return *this;
  }
};

std::string zlib_compress(const std::string& s) {
  uLongf n = compressBound(s.size());
  std::string out(n, '\0');
  compress2(reinterpret_cast<Bytef*>(&out[0]), &n, reinterpret_cast<const Bytef*>(s.data()), s.size(), 6);
  out.resize(n);
  return out;
}

std::string gzip_compress(const std::string& s) {
  z_stream zs{};
  deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
  std::string out(deflateBound(&zs, s.size()) + 32, '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(s.data()));
  zs.avail_in = static_cast<uInt>(s.size());
  zs.next_out = reinterpret_cast<Bytef*>(&out[0]);
  zs.avail_out = static_cast<uInt>(out.size());
  deflate(&zs, Z_FINISH);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

std::string be32(uint32_t v) { return Xdr().i32(v).b; }

// A lazy-load database as R's makeLazyLoadDB writes it: each variable a blob
// (4-byte big-endian size + zlib stream) in .rdb; .rdx = saveRDS(list(variables =
// list(name = c(offset, length), ...), references = list(), compressed = TRUE)).
std::string write_db(const std::string& name, const std::vector<std::pair<std::string, std::string>>& vars) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string base = std::string(XGRAD_BINARY_DIR) + "/ft_rdata_" + info->name() + "_" + name;
  std::string rdb;
  Xdr rdx;
  rdx.header().i32(0x213).i32(3);            // VECSXP with attributes, 3 elements
  rdx.i32(0x213).i32(static_cast<int64_t>(vars.size()));  // variables
  for (const auto& [var, serialized] : vars) {
    const std::string blob = be32(static_cast<uint32_t>(serialized.size())) + zlib_compress(serialized);
    rdx.i32(0x0d).i32(2).i32(static_cast<int64_t>(rdb.size())).i32(static_cast<int64_t>(blob.size()));  // INTSXP
    rdb += blob;
  }
  std::vector<std::string> names;
  for (const auto& v : vars) names.push_back(v.first);
  rdx.i32(0x402).i32(1).chars("names").strsxp(names).i32(0xFE);  // attributes: names (symbol ref #1)
  rdx.i32(0x213).i32(0).i32(0x402).i32(0x1FF).strsxp({}).i32(0xFE);  // references = named list()
  rdx.i32(0x0a).i32(1).i32(1);                                      // compressed = TRUE
  rdx.i32(0x402).i32(0x1FF).strsxp({"variables", "references", "compressed"}).i32(0xFE);
  std::ofstream(base + ".rdx", std::ios::binary) << gzip_compress(rdx.b);
  std::ofstream(base + ".rdb", std::ios::binary) << rdb;
  return base;
}

}  // namespace

TEST(FinetuneRdata, UnserializesACharacterVectorWithNaAndUtf8) {
  Xdr x;
  x.header().i32(0x10).i32(3).chars("It is a truth").i32(0x00008009).i32(2).raw("\xC3\xA9").i32(0x9).i32(-1);
  const RObjectPtr o = unserialize(x.b, "vec");
  ASSERT_EQ(o->type, RObject::String);
  EXPECT_EQ(o->strings, (std::vector<std::string>{"It is a truth", "\xC3\xA9", ""}));
}

TEST(FinetuneRdata, ReadsNamedListsPairlistsAndSymbolReferences) {
  Xdr x;  // list(a = 1:2, b = "z") with attributes names
  x.header().i32(0x213).i32(2).i32(0x0d).i32(2).i32(1).i32(2).strsxp({"z"});
  x.i32(0x402).i32(1).chars("names").strsxp({"a", "b"}).i32(0xFE);
  const RObjectPtr o = unserialize(x.b, "list");
  ASSERT_EQ(o->type, RObject::List);
  EXPECT_EQ(o->names(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(o->items[0]->ints, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(o->items[1]->strings, (std::vector<std::string>{"z"}));
}

TEST(FinetuneRdata, ReadsALazyLoadDatabase) {
  const std::string base = write_db("db", {{"emma", Xdr().header().strsxp({"EMMA", "", "By Jane Austen"}).b},
                                           {"persuasion", Xdr().header().strsxp({"Persuasion"}).b}});
  const auto vars = read_lazyload_character_vectors(base);
  ASSERT_EQ(vars.size(), 2u);
  EXPECT_EQ(vars.at("emma"), (std::vector<std::string>{"EMMA", "", "By Jane Austen"}));
  EXPECT_EQ(vars.at("persuasion"), (std::vector<std::string>{"Persuasion"}));
}

TEST(FinetuneRdata, RejectsWhatItDoesNotKnowNamingTheInput) {
  EXPECT_XG_ERROR(unserialize("A\n", "f"), "f: byte 0: not R's XDR serialization");
  EXPECT_XG_ERROR(unserialize(Xdr().raw("X\n").i32(4).b, "f"), "f: byte 2: serialization format version 4 (expected 2 or 3)");
  EXPECT_XG_ERROR(unserialize(Xdr().header().i32(3).b, "f"), "f: byte 23: unsupported R object CLOSXP (function)");
  EXPECT_XG_ERROR(unserialize(Xdr().header().i32(0x1FF).b, "f"), "reference 1 to an object not read yet (0 known)");
  // Lengths beyond the bytes left are rejected before anything is allocated.
  EXPECT_XG_ERROR(unserialize(Xdr().header().i32(0x10).i32(0x7FFFFFFF).b, "f"),
                  "f: byte 27: length 2147483647 of a character vector exceeds the 0 bytes left");
  // Found by fuzz_rdata: a long-vector length whose high word has the sign bit (was a left
  // shift of a negative number, undefined behaviour).
  EXPECT_XG_ERROR(unserialize(Xdr().header().i32(0x10).i32(-1).i32(-1).i32(0).b, "f"),
                  "f: byte 27: long-vector length with high word 4294967295 (past 2^63) of a character vector");
  EXPECT_XG_ERROR(unserialize(Xdr().header().i32(0x10).i32(-1).i32(1).i32(0).b, "f"),
                  "f: byte 27: length 4294967296 of a character vector exceeds the 0 bytes left");
  EXPECT_XG_ERROR(unserialize(Xdr().header().i32(0x10).i32(1).i32(0x40009).i32(1000).raw("abc").b, "f"),
                  "truncated: a string needs 1000 bytes, 3 left");
  EXPECT_XG_ERROR(unserialize(Xdr().header().strsxp({"a"}).raw("zz").b, "f"), "2 trailing bytes after the object");
  EXPECT_XG_ERROR(inflate("not zlib at all", "blob", 10), "blob: corrupt zlib stream");
  EXPECT_XG_ERROR(inflate(zlib_compress("hello world"), "blob", 4), "blob: zlib stream truncated or larger than 4 bytes");
  EXPECT_XG_ERROR(inflate(zlib_compress("hello"), "blob", 6), "blob: inflated to 5 bytes, the header says 6");
  EXPECT_XG_ERROR(inflate(zlib_compress("hello"), "blob", 4), "blob: inflated to 5 bytes, the header says 4");
  EXPECT_EQ(inflate(zlib_compress("hello"), "blob", 5), "hello");

  const std::string base = write_db("ints", {{"x", Xdr().header().i32(0x0d).i32(1).i32(7).b}});
  EXPECT_XG_ERROR(read_lazyload_character_vectors(base), "('x'): not a character vector (INTSXP (integer vector))");
  EXPECT_XG_ERROR(read_lazyload_character_vectors(base + "_absent"), "_absent.rdx: cannot open file");
}

TEST(FinetuneRdata, RealJaneAustenIfExtracted) {
  const std::string base =
      std::string(XGRAD_BINARY_DIR) + "/data/pkgs/usr/lib/R/site-library/janeaustenr/data/Rdata";
  if (!fs::exists(base + ".rdb")) GTEST_SKIP() << "run scripts/data.sh " << XGRAD_BINARY_DIR << " first";
  const auto novels = read_lazyload_character_vectors(base);
  ASSERT_EQ(novels.size(), 6u);
  const auto& pp = novels.at("prideprejudice");
  EXPECT_EQ(pp.at(0), "PRIDE AND PREJUDICE");
  bool truth = false;
  for (const auto& l : pp) truth = truth || l.rfind("It is a truth universally acknowledged", 0) == 0;
  EXPECT_TRUE(truth);
  EXPECT_EQ(novels.at("persuasion").at(0), "Persuasion");
  std::size_t bytes = 0;
  for (const auto& [name, lines] : novels)
    for (const auto& l : lines) bytes += l.size() + 1;
  EXPECT_EQ(bytes, 4025029u);  // the six novels, one '\n' per line
}
