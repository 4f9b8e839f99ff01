// Tests for io/safetensors.cpp: round trips, PyTorch-written files, and validation.
#include "io/safetensors.hpp"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>

#include "autograd/random.hpp"
#include "tests/torch_fixture.hpp"

using namespace xg;

namespace {

std::string tmp_path(const std::string& name) { return std::string(XGRAD_BINARY_DIR) + "/" + name; }

// Writes a file with the given JSON header and `data_bytes` zero bytes of data.
std::string write_raw(const std::string& name, const std::string& header, std::size_t data_bytes,
                      uint64_t claimed_len = UINT64_MAX) {
  const std::string path = tmp_path(name);
  std::ofstream f(path, std::ios::binary);
  const uint64_t len = claimed_len == UINT64_MAX ? header.size() : claimed_len;
  for (int i = 0; i < 8; ++i) f.put(static_cast<char>(len >> (8 * i)));
  f << header << std::string(data_bytes, '\0');
  return path;
}

}  // namespace

TEST(Safetensors, RoundTripsEveryDtypeAndMetadata) {
  Generator gen(1);
  TensorMap in{{"w", randn({3, 4}, kFloat32, &gen)},
               {"d", randn({2}, kFloat64, &gen)},
               {"i", arange(5)},
               {"b", tensor({1.0, 0.0, 1.0}) > 0.5},
               {"s", scalar_tensor(2.5)}};
  const std::string path = tmp_path("roundtrip.safetensors");
  io::save_safetensors(path, in, {{"format", "pt"}});
  std::map<std::string, std::string> meta;
  TensorMap out = io::load_safetensors(path, &meta);
  EXPECT_EQ(meta.at("format"), "pt");
  ASSERT_EQ(out.size(), in.size());
  for (const auto& [name, t] : in) {
    EXPECT_EQ(out.at(name).dtype(), t.dtype()) << name;
    EXPECT_EQ(out.at(name).shape(), t.shape()) << name;
    EXPECT_EQ(out.at(name).to_vector(), t.to_vector()) << name;
  }
}

// bfloat16 and float16 tensors are written as they are held (BF16, F16: 2 bytes each, the same
// bits), and read back into tensors of their dtype as stored. (A bf16 tensor used to be written
// with the dtype BOOL and twice its bytes, a file that no reader took; the save reported success.)
TEST(Safetensors, Bf16AndFloat16TensorsAreWrittenAsHeldAndABlockedOneIsRefused) {
  Generator gen(2);
  const Tensor w = randn({3, 64}, kFloat32, &gen);
  TensorMap in{{"bf", w.to(kBFloat16)}, {"h", w.to(kF16)}, {"f", w}};
  const std::string path = tmp_path("halves.safetensors");
  io::save_safetensors(path, in);
  io::SafetensorsReader r(path);
  EXPECT_EQ(r.entry("bf").dtype, "BF16");
  EXPECT_EQ(r.entry("h").dtype, "F16");
  EXPECT_EQ(r.entry("bf").end - r.entry("bf").begin, 3u * 64 * 2);
  EXPECT_EQ(r.entry("h").end - r.entry("h").begin, 3u * 64 * 2);
  for (const auto& [name, d] : std::map<std::string, Dtype>{{"bf", kBFloat16}, {"h", kF16}}) {
    Tensor back = empty({3, 64}, d);
    r.read_into(name, back);
    EXPECT_EQ(std::memcmp(back.raw_data(), in.at(name).raw_data(), 3 * 64 * 2), 0) << name;
    EXPECT_EQ(r.read(name).to_vector(), in.at(name).to(kFloat32).to_vector()) << name;  // widened exactly
  }
  const std::string bad = tmp_path("blocked.safetensors");
  std::remove(bad.c_str());
  EXPECT_XG_ERROR(io::save_safetensors(bad, {{"q", w.to(kQ8_0)}}),
                  "save_safetensors: tensor 'q' is q8_0, which safetensors has no dtype for; widen it with .to(kFloat32) first");
  EXPECT_FALSE(std::ifstream(bad).good());
}

// A float32 value past float16's largest, read into a float16 tensor, is refused naming the
// file, the tensor and the element (rounding would make it Inf).
TEST(SafetensorsErrors, AValueFloat16CannotHoldIsNamedOnReadInto) {
  Tensor w = zeros({2, 32});
  w.data<float>()[37] = 70000.0f;
  const std::string path = tmp_path("too_large.safetensors");
  io::save_safetensors(path, {{"w", w}});
  io::SafetensorsReader r(path);
  Tensor h = empty({2, 32}, kF16);
  EXPECT_XG_ERROR(r.read_into("w", h), "tensor 'w' element 37 is 70000, beyond float16's largest (65504)");
}

TEST(Safetensors, ReadsFilesWrittenByPyTorch) {
  // elementwise.safetensors was written by tests/fixtures/fixture_util.py from torch tensors.
  const TensorMap& fx = test::fixture("elementwise");
  const Tensor& mask = fx.at("masked_fill.f64.in1");
  EXPECT_EQ(mask.dtype(), kBool);
  EXPECT_EQ(mask.shape(), (Shape{4, 4}));
  EXPECT_EQ(mask.to_vector()[1], 1.0);  // above the diagonal: masked
  EXPECT_EQ(mask.to_vector()[4], 0.0);
  EXPECT_EQ(fx.at("add.f32.out").dtype(), kFloat32);
}

TEST(SafetensorsErrors, NamesFileAndRule) {
  EXPECT_XG_ERROR(io::load_safetensors(tmp_path("missing.safetensors")), "missing.safetensors: cannot open file");
  {
    const std::string p = tmp_path("tiny.st");
    std::ofstream(p) << "abc";
    EXPECT_XG_ERROR(io::load_safetensors(p), "tiny.st: file is 3 bytes, shorter than the 8-byte header length");
  }
  EXPECT_XG_ERROR(io::load_safetensors(write_raw("huge.st", "{}", 0, 200000000)), "exceeds the 100 MB limit");
  EXPECT_XG_ERROR(io::load_safetensors(write_raw("past.st", "{}", 0, 50)), "runs past the end of the");
  EXPECT_XG_ERROR(io::load_safetensors(write_raw("notobj.st", "[1]", 0)), "header does not start with '{'");
  EXPECT_XG_ERROR(io::load_safetensors(write_raw("badjson.st", "{\"a\":", 0)), "header is not valid JSON");
  EXPECT_XG_ERROR(io::load_safetensors(write_raw("dtype.st", R"({"a":{"dtype":"X9","shape":[1],"data_offsets":[0,1]}})", 1)),
                  "tensor 'a': unsupported dtype X9");
  EXPECT_XG_ERROR(io::load_safetensors(write_raw("size.st", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4)),
                  "tensor 'a': data_offsets span 4 bytes but shape [2] of F32 needs 8");
  EXPECT_XG_ERROR(
      io::load_safetensors(write_raw("gap.st",
                                 R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                 R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                                 12)),
      "tensor 'b' starts at byte 8 of the data, expected 4");
  EXPECT_XG_ERROR(
      io::load_safetensors(write_raw("dup.st",
                                 R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                 R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                                 8)),
      "duplicate tensor name 'a'");
  EXPECT_XG_ERROR(io::load_safetensors(write_raw("cover.st", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 8)),
                  "tensors cover 4 bytes of data but the file holds 8");
  EXPECT_XG_ERROR(io::load_safetensors(write_raw("meta.st", R"({"__metadata__":{"k":1}})", 0)),
                  "__metadata__ value of 'k' is not a string");
  EXPECT_XG_ERROR(
      io::load_safetensors(write_raw("overlap.st",
                                 R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                 R"("b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                                 4)),
      "starts at byte 0 of the data, expected 4 (offsets must be contiguous and non-overlapping)");
  // A zero-element tensor with a dimension past int64: the element count (0) checks out.
  EXPECT_XG_ERROR(
      io::load_safetensors(write_raw("bigdim.st", R"({"a":{"dtype":"F32","shape":[0,9223372036854775808],"data_offsets":[0,0]}})", 0)),
      "tensor 'a': shape entry 9223372036854775808 is too large");
}

TEST(Safetensors, BoolBytesOtherThanOneReadAsTrue) {
  const std::string path = tmp_path("bool_bytes.safetensors");
  {
    const std::string header = R"({"m":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}})";
    std::ofstream f(path, std::ios::binary);
    for (int i = 0; i < 8; ++i) f.put(static_cast<char>(header.size() >> (8 * i)));
    f << header << std::string("\x00\x02\xff", 3);
  }
  EXPECT_EQ(io::load_safetensors(path).at("m").to_vector(), (std::vector<double>{0, 1, 1}));
}

TEST(SafetensorsErrors, FailedSaveLeavesNoFile) {
  EXPECT_XG_ERROR(io::save_safetensors("/nonexistent-dir/x.safetensors", {{"a", ones({1})}}), "cannot open");
  EXPECT_XG_ERROR(io::save_safetensors(tmp_path("undef.safetensors"), {{"a", Tensor()}}), "tensor 'a' is undefined");
  std::ifstream f(tmp_path("undef.safetensors"));
  EXPECT_FALSE(f.good());
}

// xgrad's files carry a CRC32 per tensor in __metadata__ (any safetensors reader still loads
// them: it is one more string there), and every single-bit flip in any tensor's data is found on
// load, naming the file and the tensor. Files without checksums (PyTorch's) load as before.
TEST(Safetensors, ChecksumsFindEveryFlippedBitOfTheData) {
  Generator gen(2);
  TensorMap in{{"a", randn({5}, kFloat32, &gen)}, {"b", randn({3}, kFloat64, &gen)}, {"c", arange(4)},
               {"h", randn({6}, kFloat32, &gen)}};
  const std::string path = tmp_path("checksums.safetensors");
  io::save_safetensors(path, in, {{"format", "pt"}});
  std::string bytes;
  {
    std::ifstream f(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  uint64_t header_len = 0;
  for (int i = 0; i < 8; ++i) header_len |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  const auto header = nlohmann::json::parse(bytes.substr(8, header_len));
  ASSERT_TRUE(header["__metadata__"]["xgrad_crc32"].is_string());  // a string, as the format requires
  std::map<std::string, std::string> meta;
  io::load_safetensors(path, &meta);
  EXPECT_EQ(meta, (std::map<std::string, std::string>{{"format", "pt"}}));  // the checksums are not user metadata

  const std::size_t data = 8 + header_len;
  int caught = 0, flips = 0;
  for (std::size_t at = data; at < bytes.size(); at += 3) {
    for (int bit : {0, 7}) {
      std::string bad = bytes;
      bad[at] = static_cast<char>(bad[at] ^ (1 << bit));
      std::ofstream(path, std::ios::binary | std::ios::trunc) << bad;
      ++flips;
      try {
        io::load_safetensors(path);
      } catch (const Error& e) {
        const std::string what = e.what();
        caught += what.find("safetensors: " + path + ": tensor '") == 0 && what.find("' is damaged: the CRC32") != std::string::npos;
      }
    }
  }
  EXPECT_EQ(caught, flips);
  // read_into (a model's load) checks too, also when converting.
  std::string bad = bytes;
  bad[data + 1] = static_cast<char>(bad[data + 1] ^ 4);  // in "a", the first tensor by offset
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bad;
  io::SafetensorsReader reader(path);
  EXPECT_XG_ERROR(reader.read_into("a", zeros({5}, kFloat64)), "tensor 'a' is damaged");
  EXPECT_XG_ERROR(io::save_safetensors(path, in, {{"xgrad_crc32", "{}"}}), "metadata key 'xgrad_crc32' is reserved");
  // BF16 storage: the checksum is of the stored (rounded) bytes.
  io::save_safetensors(path, in, {}, io::StoredFloat::BFloat16);
  EXPECT_EQ(io::load_safetensors(path).at("h").numel(), 6);
}

// A checksum that is eight characters but not eight hex digits is refused with the file's
// name, as every other header fault (the fuzzer found "8 characters" let std::stoul throw
// std::invalid_argument, and accept a sign, spaces or a trailing non-digit).
TEST(Safetensors, ChecksumsThatAreNotHexDigitsAreRefused) {
  const std::string path = tmp_path("bad_checksum.safetensors");
  io::save_safetensors(path, {{"a", ones({2})}});
  std::string bytes;
  {
    std::ifstream f(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  uint64_t header_len = 0;
  for (int i = 0; i < 8; ++i) header_len |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  for (const char* sum : {"zzzzzzzz", "-1234567", " 1234567", "12g45678", "0x123456"}) {
    SCOPED_TRACE(sum);
    auto header = nlohmann::json::parse(bytes.substr(8, header_len));
    header["__metadata__"]["xgrad_crc32"] = nlohmann::json{{"a", sum}}.dump();
    const std::string text = header.dump();
    std::string file(8, '\0');
    for (int i = 0; i < 8; ++i) file[i] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
    std::ofstream(path, std::ios::binary | std::ios::trunc) << file << text << bytes.substr(8 + header_len);
    EXPECT_XG_ERROR(io::load_safetensors(path), "safetensors: " + path +
                                                ": __metadata__ 'xgrad_crc32': the checksum of 'a' is not 8 hex digits");
  }
}

// save_safetensors_streamed: the lazy tensors are made one at a time, in name order among all
// the tensors, and the file is byte for byte save_safetensors's of them all.
TEST(Safetensors, StreamedLazyTensorsGiveTheSameBytesMadeInNameOrder) {
  Generator gen(2);
  const TensorMap all{{"a", randn({3, 4}, kFloat32, &gen)}, {"b.x", randn({5}, kFloat64, &gen)},
                      {"b.y", arange(4)},                   {"c", randn({2, 2}, kFloat32, &gen)},
                      {"d", scalar_tensor(1.5)}};
  const std::map<std::string, std::string> meta{{"step", "7"}};
  const std::string whole = tmp_path("whole.safetensors"), streamed = tmp_path("streamed.safetensors");
  io::save_safetensors(whole, all, meta);
  TensorMap eager{{"a", all.at("a")}, {"b.y", all.at("b.y")}, {"d", all.at("d")}};
  std::vector<std::string> made;
  std::map<std::string, io::LazyTensor> lazy;
  for (const char* name : {"c", "b.x"}) {
    const Tensor t = all.at(name);
    lazy[name] = io::LazyTensor{t.dtype(), t.shape(), [&made, name, t] {
                                  made.push_back(name);
                                  return t.clone();
                                }};
  }
  io::save_safetensors_streamed(streamed, eager, lazy, meta);
  EXPECT_EQ(made, (std::vector<std::string>{"b.x", "c"}));
  auto bytes = [](const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  EXPECT_EQ(bytes(streamed), bytes(whole));
  EXPECT_EQ(io::load_safetensors(streamed).at("c").to_vector(), all.at("c").to_vector());

  // A lazy tensor that is not what it announced, or a name given twice: an error, no file.
  const std::string bad = tmp_path("streamed_bad.safetensors");
  std::map<std::string, io::LazyTensor> wrong{{"c", io::LazyTensor{kFloat32, {3}, [] { return ones({2}); }}}};
  EXPECT_XG_ERROR(io::save_safetensors_streamed(bad, eager, wrong), "tensor 'c' was made as float32 [2], announced as float32 [3]");
  std::map<std::string, io::LazyTensor> twice{{"a", io::LazyTensor{kFloat32, {3, 4}, [] { return ones({3, 4}); }}}};
  EXPECT_XG_ERROR(io::save_safetensors_streamed(bad, eager, twice), "tensor 'a' is given twice");
  std::ifstream f(bad);
  EXPECT_FALSE(f.good());
}
