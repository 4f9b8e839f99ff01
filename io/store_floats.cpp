// store_floats (detail/store_floats.hpp): a weight file's values checked and stored in the
// destination tensor's dtype.
#include "io/detail/store_floats.hpp"

#include <cmath>
#include <cstring>

#include "autograd/error.hpp"
#include "autograd/float16.hpp"
#include "autograd/blocks.hpp"

namespace xg::io::detail {

namespace {

template <class T>
void check_finite_values(const T* v, int64_t at, int64_t len, const std::string& file, const std::string& name) {
  bool bad = false;
  for (int64_t i = 0; i < len; ++i) bad |= !std::isfinite(v[i]);  // one branch-free pass; the slow search below
  if (!bad) return;
  for (int64_t i = 0; i < len; ++i)
    if (!std::isfinite(v[i]))
      throw Error(str_cat(file, ": tensor '", name, "' element ", at + i, " is ", v[i],
                          "; a weight must be a finite number (the file is damaged, or was written from a diverged model)"));
}

}  // namespace

void check_finite(const float* v, int64_t at, int64_t len, const std::string& file, const std::string& name) {
  check_finite_values(v, at, len, file, name);
}

void check_finite(const double* v, int64_t at, int64_t len, const std::string& file, const std::string& name) {
  check_finite_values(v, at, len, file, name);
}

void store_floats(const float* v, int64_t at, int64_t len, const Tensor& dst, const std::string& file,
                  const std::string& name) {
  check_finite(v, at, len, file, name);
  Tensor out = dst;  // a handle: writes go to dst's storage
  switch (out.dtype()) {
    case kFloat32: std::memcpy(out.data<float>() + at, v, sizeof(float) * static_cast<std::size_t>(len)); return;
    case kBFloat16: {
      bfloat16* d = out.data<bfloat16>() + at;
      for (int64_t i = 0; i < len; ++i) d[i] = bfloat16(v[i]);
      return;
    }
    case kF16: {  // each value rounded to the nearest half (to() rules); beyond 65504 refused
      check(len % kQ8Block == 0, "store_floats: internal error: float16 chunk not block aligned");
      auto* d = static_cast<uint16_t*>(dst.raw_data()) + at;
      if (quantize_blocks(kF16, v, len, d) >= 0) {  // v is finite (checked above): a value too large
        int64_t i = 0;
        while (std::fabs(v[i]) < 65520.0f) ++i;
        throw Error(str_cat(file, ": tensor '", name, "' element ", at + i, " is ", v[i],
                            ", beyond float16's largest (65504); load this base as bf16 or f32"));
      }
      return;
    }
    case kQ8_0:
    case kQ4_0: {
      const Dtype q = out.dtype();
      check(at % kQ8Block == 0 && len % kQ8Block == 0, "store_floats: internal error: ", dtype_name(q),
            " chunk not block aligned");
      auto* d = static_cast<uint8_t*>(dst.raw_data()) + at / kQ8Block * block_bytes(q);
      const int64_t bad = quantize_blocks(q, v, len, d);
      if (bad >= 0) {
        float amax = 0;
        for (int64_t j = bad; j < bad + kQ8Block; ++j) amax = std::max(amax, std::fabs(v[j]));
        throw Error(str_cat(file, ": tensor '", name, "' elements ", at + bad, "..", at + bad + kQ8Block - 1,
                            " reach ", amax, ", beyond what a ", dtype_name(q), " block holds (its half scale max / ",
                            q == kQ8_0 ? "127" : "8", " overflows); load this base as bf16 or f32"));
      }
      return;
    }
    default: break;
  }
  throw Error(str_cat(file, ": tensor '", name, "' cannot be read into a ", dtype_name(dst.dtype()), " tensor",
                      is_read_only_blocked(dst.dtype()) ? " (xgrad keeps it only as a GGUF file stores it)" : ""));
}

}  // namespace xg::io::detail
