// Tensor storage, accessors, factories, dtype conversion and printing.
#include "autograd/tensor.hpp"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iomanip>
#include <map>
#include <mutex>
#include <ostream>

#include <malloc.h>
#include <sys/mman.h>

#include "autograd/detail/dispatch.hpp"
#include "autograd/detail/kernels.hpp"
#include "autograd/graph.hpp"
#include "autograd/blocks.hpp"
#include "autograd/settings.hpp"
#include "autograd/threads.hpp"

namespace xg {

// ---------------------------------------------------------------------------------------
// dtype, shapes

std::size_t itemsize(Dtype d) {
  switch (d) {
    case Dtype::Float32: return 4;
    case Dtype::Float64: return 8;
    case Dtype::Int64: return 8;
    case Dtype::Bool: return 1;
    case Dtype::BFloat16: return 2;
    case Dtype::Q8_0:
    case Dtype::Q4_0:
    case Dtype::Q4_K:
    case Dtype::Q5_K:
    case Dtype::Q6_K:
    case Dtype::Q4_1:
    case Dtype::Q5_0:
    case Dtype::Q5_1:
    case Dtype::IQ4_NL:
    case Dtype::IQ4_XS:
    case Dtype::Q2_K:
    case Dtype::Q3_K:
    case Dtype::F16: break;
  }
  throw Error(str_cat(dtype_name(d), " has no size per element: it stores blocks of ", block_values(d), " (storage_bytes)"));
}

std::size_t storage_bytes(Dtype d, int64_t numel) {
  if (is_blocked(d)) return static_cast<std::size_t>(numel / block_values(d) * block_bytes(d));
  return static_cast<std::size_t>(numel) * itemsize(d);
}

const char* dtype_name(Dtype d) {
  switch (d) {
    case Dtype::Float32: return "float32";
    case Dtype::Float64: return "float64";
    case Dtype::Int64: return "int64";
    case Dtype::Bool: return "bool";
    case Dtype::BFloat16: return "bfloat16";
    case Dtype::Q8_0: return "q8_0";
    case Dtype::Q4_0: return "q4_0";
    case Dtype::Q4_K: return "q4_k";
    case Dtype::Q5_K: return "q5_k";
    case Dtype::Q6_K: return "q6_k";
    case Dtype::Q4_1: return "q4_1";
    case Dtype::Q5_0: return "q5_0";
    case Dtype::Q5_1: return "q5_1";
    case Dtype::IQ4_NL: return "iq4_nl";
    case Dtype::IQ4_XS: return "iq4_xs";
    case Dtype::Q2_K: return "q2_k";
    case Dtype::Q3_K: return "q3_k";
    case Dtype::F16: return "float16";
  }
  return "?";
}

std::string ShapeStr::str() const {
  std::string out = "[";
  for (std::size_t i = 0; i < s_.size(); ++i) {
    if (i) out += ",";
    out += std::to_string(s_[i]);
  }
  return out + "]";
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape) {
    check(s >= 0, "invalid shape ", shape_str(shape), ": sizes must be non-negative");
    n *= s;
  }
  return n;
}

// ---------------------------------------------------------------------------------------
// Storage

namespace {

constexpr std::size_t kHuge = std::size_t{2} << 20;

// Buffers of 128 KB and more are mapped and unmapped by xgrad itself, in size classes: the
// size rounded up to a power of two or a quarter step between two (1, 1.25, 1.5, 1.75 MB,
// 2 MB, 2.5 MB, ...; at most 25% more than asked).
// NOTE: classes between 2 and 8 MB were once rounded up to a multiple of 2 MB (whole huge
// pages): a [2048, 576] bf16 activation (2.25 MB) then took 4 MB, and a LoRA SFT step of
// SmolLM2-135M's shape under --bf16 held 903 MB for its backward, 722 MB with these classes
// (bench/README). Such a buffer's first 2 MB are a huge page and its tail 4 KB pages; it is
// faulted in once and then reused from the cache.
// NOTE: not through malloc: glibc serves these from its heap once its mmap threshold has
// risen (it does after the first frees), and freed buffers of mixed sizes then stay resident
// as free heap, which glibc gives back only from the heap's top.
std::size_t size_class(std::size_t n) {
  std::size_t pow2 = std::size_t{1} << 17;  // kMin
  while (pow2 * 2 <= n) pow2 *= 2;
  const std::size_t quarter = pow2 / 4;
  return (n + quarter - 1) / quarter * quarter;
}

// Buffers of 2 MB and more are 2 MB aligned and marked for transparent huge pages: the first
// write of a large buffer (a gradient's zero-fill) then takes one fault per 2 MB, not one per
// 4 KB page. Mapped with 2 MB to spare, then the unaligned ends are unmapped.
void* map_buffer(std::size_t bytes) {
  const bool huge = bytes >= kHuge;
  const std::size_t span = huge ? bytes + kHuge : bytes;
  void* raw = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) throw Error(str_cat("out of memory mapping a buffer of ", bytes, " bytes"));
  if (!huge) return raw;
  char* lo = static_cast<char*>(raw);
  char* p = reinterpret_cast<char*>((reinterpret_cast<std::uintptr_t>(lo) + kHuge - 1) / kHuge * kHuge);
  if (p > lo) munmap(lo, static_cast<std::size_t>(p - lo));
  if (p + bytes < lo + span) munmap(p + bytes, static_cast<std::size_t>(lo + span - (p + bytes)));
  madvise(p, bytes, MADV_HUGEPAGE);
  return p;
}

// NOTE: freed buffers are kept for reuse, by size class: a fresh page costs a fault plus a
// zero-fill, and a training step frees and asks for the same sizes every step. The cache is
// bounded by the live working set: the bytes of live buffers plus the cached ones never pass
// the most that was live at once in the recent steps (bound(): two windows of allocation, each
// 16 times that many bytes) by more than a slack of a quarter of it, at most 8 MB. A buffer
// that cannot be served from the cache evicts the oldest cached ones to stay under it, so
// batches of varying length, whose sizes the cache cannot serve, make it turn over instead of
// grow; a freed buffer over it is unmapped.
// A request takes a cached buffer of its own class or of the next one up (at most 25% more;
// the buffer's whole size counts as live): batches of varying length ask for sizes a class
// apart from step to step, which the exact class alone would serve with fresh mappings. What
// is evicted for a fresh buffer gives it its pages (recycle).
// NOTE: why windows, not the high-water mark since empty_cache(): one batch longer than the
// rest would raise that mark for good, and the cache would hold its buffers to the end.
// NOTE: why a slack: a step asks for its size classes in an order in which some class is all
// in use while others sit cached, so a cache of exactly the peak would evict and re-map
// buffers every step. Why the cap: batches that vary in length fill any slack, so a slack
// without one raises the peak memory of such runs.
// XGRAD_NO_BUFFER_CACHE=1 turns it off (every buffer is mapped and unmapped), as
// PYTORCH_NO_CUDA_MEMORY_CACHING does for PyTorch's allocator. The measurements behind these
// choices: bench/README.md, "Design measurements behind the code".
class BufferCache {
 public:
  static constexpr std::size_t kMin = std::size_t{128} << 10;

  // A buffer of class size `bytes` or a little more, from the cache, or freshly mapped; sets
  // `bytes` to the size of the buffer it returns.
  void* allocate(std::size_t& bytes) {
    std::vector<Slot> evicted;
    void* p = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = free_.lower_bound(bytes);
      if (it != free_.end() && it->first > bytes / 4 * 5) it = free_.end();
      if (it != free_.end()) bytes = it->first;
      live_ += bytes;
      note_allocation(bytes);
      if (it != free_.end()) {
        p = it->second.back().data;
        it->second.pop_back();
        if (it->second.empty()) free_.erase(it);
        held_ -= bytes;
      } else {
        while (live_ + held_ > bound() + slack()) evicted.push_back(pop_oldest());
      }
    }
    if (p) return p;
    try {
      return recycle(evicted, bytes);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      live_ -= bytes;
      throw;
    }
  }
  void release(void* p, std::size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      live_ -= bytes;
      // Over the bound (a larger working set has passed out of the window): unmapped, so the
      // cache shrinks back to what the current steps use.
      if (enabled_ && live_ + held_ + bytes <= bound() + slack()) {
        free_[bytes].push_back({p, bytes, ++tick_});
        held_ += bytes;
        return;
      }
    }
    munmap(p, bytes);
  }
  std::size_t clear() {
    std::map<std::size_t, std::vector<Slot>> all;
    std::size_t n;
    {
      std::lock_guard<std::mutex> lock(mu_);
      all.swap(free_);
      n = held_;
      held_ = 0;
      peak_cur_ = peak_prev_ = live_;
      window_bytes_ = 0;
    }
    for (auto& [bytes, slots] : all)
      for (const Slot& s : slots) munmap(s.data, s.bytes);
    return n;
  }
  std::size_t held() {
    std::lock_guard<std::mutex> lock(mu_);
    return held_;
  }
  std::size_t live() {
    std::lock_guard<std::mutex> lock(mu_);
    return live_;
  }

 private:
  struct Slot {
    void* data;
    std::size_t bytes;
    uint64_t tick;  // when it was cached
  };
  // A buffer of `bytes` built from the pages of one evicted buffer, the rest unmapped: the
  // smallest that holds `bytes`, cut to size, or else the largest, moved (mremap) to the start
  // of a fresh mapping whose rest then faults in as usual.
  // NOTE: why: a step's backward asks for other sizes than its forward, so in a steady step the
  // cache evicts one class's buffers to map another's, each step again. Unmapped and mapped
  // afresh, their pages are zero-filled again on first touch. A LoRA step of SmolLM2-135M's
  // shape under --bf16 (whose bf16 copies add classes) mapped 795 MB a step so, 7% of a
  // one-thread profile of its steps in the kernel's page clearing; with this and
  // linear_cross_entropy's in-place blocks, 173 MB (two-thread tokens/s did not measurably
  // change). Pages moved between mappings keep their contents: no fault, no fill. Both
  // mappings of 2 MB and more start 2 MB aligned, so a move keeps their huge pages whole.
  static void* recycle(std::vector<Slot>& evicted, std::size_t bytes) {
    Slot* take = nullptr;
    for (Slot& s : evicted) {
      const bool fits = s.bytes >= bytes, took_fits = take && take->bytes >= bytes;
      if (!take || (fits && (!took_fits || s.bytes < take->bytes)) || (!fits && !took_fits && s.bytes > take->bytes))
        take = &s;
    }
    for (Slot& s : evicted)
      if (&s != take) munmap(s.data, s.bytes);
    if (!take) return map_buffer(bytes);
    if (take->bytes >= bytes) {
      if (take->bytes > bytes) munmap(static_cast<char*>(take->data) + bytes, take->bytes - bytes);
      return take->data;
    }
    void* fresh;
    try {
      fresh = map_buffer(bytes);
    } catch (...) {
      munmap(take->data, take->bytes);
      throw;
    }
    if (mremap(take->data, take->bytes, take->bytes, MREMAP_MAYMOVE | MREMAP_FIXED, fresh) == MAP_FAILED)
      munmap(take->data, take->bytes);  // the fresh mapping serves whole
    return fresh;
  }

  // The least recently cached buffer, taken out of the cache (caller holds mu_, held_ > 0).
  // Each class's slots are in the order they were cached, so the oldest is a front.
  Slot pop_oldest() {
    auto oldest = free_.begin();
    for (auto it = free_.begin(); it != free_.end(); ++it)
      if (it->second.front().tick < oldest->second.front().tick) oldest = it;
    Slot s = oldest->second.front();
    oldest->second.erase(oldest->second.begin());
    if (oldest->second.empty()) free_.erase(oldest);
    held_ -= s.bytes;
    return s;
  }

  // The working set the cache is bounded by: the most live at once over the last two windows
  // of allocation (caller holds mu_). A window closes once kWindowFactor times the bound has
  // been allocated in it, so both cover many training steps of any size, and a step's peak
  // (its largest batch) leaves the bound only after that much allocation without it.
  std::size_t bound() const { return std::max(peak_cur_, peak_prev_); }
  void note_allocation(std::size_t bytes) {
    if (live_ > peak_cur_) peak_cur_ = live_;
    window_bytes_ += bytes;
    if (window_bytes_ >= kWindowFactor * bound()) {
      peak_prev_ = peak_cur_;
      peak_cur_ = live_;
      window_bytes_ = 0;
    }
  }
  static constexpr std::size_t kWindowFactor = 16;
  // How far live plus cached bytes may pass the bound (caller holds mu_).
  std::size_t slack() const { return std::min(bound() / 4, kSlackMax); }
  static constexpr std::size_t kSlackMax = std::size_t{8} << 20;

  std::mutex mu_;
  std::map<std::size_t, std::vector<Slot>> free_;  // by class size; each oldest first
  std::size_t held_ = 0, live_ = 0;
  std::size_t peak_cur_ = 0, peak_prev_ = 0;  // the most live at once in this window, the last one
  std::size_t window_bytes_ = 0;              // allocated in this window
  uint64_t tick_ = 0;
  const bool enabled_ = settings().buffer_cache;
};

// NOTE: what xgrad does not allocate itself comes from glibc's malloc, and glibc hands freed
// memory back to the kernel: a block above its mmap threshold (dynamic, from 128 KB) is
// unmapped when freed, and free space at the top of the heap above the trim threshold is
// released. oneDNN's sgemm mallocs its packing buffers on every call and frees them after, so
// every call would fault them in again. So blocks up to 32 MB stay on the heap and it is
// trimmed only above 1 GB (what bench/compare's "malloc" setting gives PyTorch through
// GLIBC_TUNABLES); peak memory does not grow, as the heap keeps only memory that was once in
// use. A user's own malloc settings (GLIBC_TUNABLES, MALLOC_MMAP_THRESHOLD_,
// MALLOC_TRIM_THRESHOLD_) are left as they are.
const bool malloc_tuned = [] {
  if (settings().user_malloc) return false;
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  return true;
}();

BufferCache& buffer_cache() {
  static BufferCache* cache = new BufferCache;  // never destroyed: storages may outlive statics
  return *cache;
}

}  // namespace

std::size_t empty_cache() { return buffer_cache().clear(); }
std::size_t cached_bytes() { return buffer_cache().held(); }
std::size_t allocated_bytes() { return buffer_cache().live(); }

Storage::Storage(std::size_t n) : nbytes(n) {
  apply_thread_count();  // every op makes its result here, before its loops (threads.hpp)
  if (n >= BufferCache::kMin) {
    padded = size_class(n);
    data = buffer_cache().allocate(padded);
    return;
  }
  // Round up to the alignment so aligned_alloc accepts it; never allocate 0 bytes.
  padded = n == 0 ? 64 : (n + 63) / 64 * 64;
  data = std::aligned_alloc(64, padded);
  if (!data) throw Error(str_cat("out of memory allocating ", n, " bytes"));
}

Storage::~Storage() {
  if (nbytes >= BufferCache::kMin)
    buffer_cache().release(data, padded);
  else
    std::free(data);
}

// ---------------------------------------------------------------------------------------
// accessors

static Node& must(const std::shared_ptr<Node>& n) {
  if (!n) throw Error("use of an undefined Tensor (default-constructed or a gradient never computed)");
  return *n;
}

const Shape& Tensor::shape() const { return must(node_).shape; }
int64_t Tensor::dim() const { return static_cast<int64_t>(must(node_).shape.size()); }
int64_t Tensor::numel() const { return must(node_).numel; }
Dtype Tensor::dtype() const { return must(node_).dtype; }
namespace detail {
thread_local const char* g_backward_op = nullptr;
}

// The data, or an error when this handle is a graph edge or the buffer was released: an op's
// backward reading a tensor it did not save (a wrong Saves in its record call).
static void* data_of(const std::shared_ptr<Node>& n, bool edge) {
  Node& node = must(n);
  if (edge || !node.storage) {
    const char* running = detail::g_backward_op;
    throw Error(str_cat(running ? str_cat("backward of '", running, "': ") : std::string(), "the data of a ",
                        dtype_name(node.dtype), " tensor of shape ", shape_str(node.shape),
                        node.op[0] ? str_cat(" made by '", node.op, "'") : std::string(),
                        edge ? " is not held by this graph edge" : " was released",
                        " (the op's record call does not save it for backward)"));
  }
  return node.storage->data;
}

void* Tensor::raw_data() const { return data_of(node_, edge_); }

int64_t Tensor::size(int64_t d) const {
  int64_t n = dim();
  int64_t w = d < 0 ? d + n : d;
  check(w >= 0 && w < n, "size: dim ", d, " out of range for a ", n, "-d tensor of shape ",
        shape_str(shape()));
  return shape()[w];
}

template <class T>
static T* typed(const std::shared_ptr<Node>& n, bool edge) {
  Node& node = must(n);
  check(node.dtype == dtype_of<T>(), "data<", dtype_name(dtype_of<T>()), ">: tensor is ",
        dtype_name(node.dtype));
  return static_cast<T*>(data_of(n, edge));
}

template <> float* Tensor::data<float>() { return typed<float>(node_, edge_); }
template <> double* Tensor::data<double>() { return typed<double>(node_, edge_); }
template <> int64_t* Tensor::data<int64_t>() { return typed<int64_t>(node_, edge_); }
template <> bool* Tensor::data<bool>() { return typed<bool>(node_, edge_); }
template <> bfloat16* Tensor::data<bfloat16>() { return typed<bfloat16>(node_, edge_); }
template <> const float* Tensor::data<float>() const { return typed<float>(node_, edge_); }
template <> const double* Tensor::data<double>() const { return typed<double>(node_, edge_); }
template <> const int64_t* Tensor::data<int64_t>() const { return typed<int64_t>(node_, edge_); }
template <> const bool* Tensor::data<bool>() const { return typed<bool>(node_, edge_); }
template <> const bfloat16* Tensor::data<bfloat16>() const { return typed<bfloat16>(node_, edge_); }

std::vector<double> Tensor::to_vector() const {
  std::vector<double> out(static_cast<std::size_t>(numel()));
  if (is_blocked(dtype())) {
    dequantize_blocks(dtype(), raw_data(), numel(), out.data());
    return out;
  }
  dispatch_all(dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* p = data<T>();
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<double>(p[i]);
  });
  return out;
}

double Tensor::item() const {
  check(numel() == 1, "item: only a one-element tensor converts to a scalar, got shape ",
        shape_str(shape()));
  return to_vector()[0];
}

// ---------------------------------------------------------------------------------------
// factories

Tensor empty(const Shape& shape, Dtype dtype) {
  auto node = std::make_shared<Node>();
  node->dtype = dtype;
  node->shape = shape;
  node->numel = shape_numel(shape);
  check(!is_blocked(dtype) || (!shape.empty() && shape.back() % block_values(dtype) == 0), "a ", dtype_name(dtype),
        " tensor stores blocks of ", block_values(dtype), " along its last dim, which shape ", shape_str(shape),
        " does not hold");
  node->storage = std::make_shared<Storage>(storage_bytes(dtype, node->numel));
  return Tensor(std::move(node));
}

const Tensor& Tensor::fill_(double value) const {
  dispatch_all(dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(raw_data());  // dispatch_all checked the dtype
    const T v = static_cast<T>(value);
    for (int64_t i = 0, n = numel(); i < n; ++i) p[i] = v;
  });
  return *this;
}

Tensor full(const Shape& shape, double value, Dtype dtype) {
  Tensor t = empty(shape, dtype);
  t.fill_(value);
  return t;
}
Tensor zeros(const Shape& shape, Dtype dtype) { return full(shape, 0.0, dtype); }
Tensor ones(const Shape& shape, Dtype dtype) { return full(shape, 1.0, dtype); }
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), t.dtype()); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), t.dtype()); }
Tensor full_like(const Tensor& t, double value) { return full(t.shape(), value, t.dtype()); }
Tensor scalar_tensor(double value, Dtype dtype) { return full({}, value, dtype); }

Tensor arange(double end, Dtype dtype) { return arange(0, end, 1, dtype); }

Tensor arange(double start, double end, double step, Dtype dtype) {
  check(step != 0, "arange: step must be non-zero");
  check((end - start) / step >= 0 || start == end, "arange: upper bound ", end,
        " and lower bound ", start, " inconsistent with step sign ", step);
  auto n = static_cast<int64_t>(std::ceil((end - start) / step));
  if (n < 0) n = 0;
  Tensor t = empty({n}, dtype);
  dispatch_all(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = t.data<T>();
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(start + static_cast<double>(i) * step);
  });
  return t;
}

Tensor from_vector(const std::vector<double>& values, const Shape& shape, Dtype dtype) {
  check(static_cast<int64_t>(values.size()) == shape_numel(shape), "from_vector: ", values.size(),
        " values do not fill shape ", shape_str(shape));
  Tensor t = empty(shape, dtype);
  dispatch_all(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = t.data<T>();
    for (std::size_t i = 0; i < values.size(); ++i) p[i] = static_cast<T>(values[i]);
  });
  return t;
}

Tensor from_vector(const std::vector<int64_t>& values, const Shape& shape) {
  check(static_cast<int64_t>(values.size()) == shape_numel(shape), "from_vector: ", values.size(),
        " values do not fill shape ", shape_str(shape));
  Tensor t = empty(shape, kInt64);
  if (!values.empty()) std::memcpy(t.raw_data(), values.data(), values.size() * sizeof(int64_t));  // data() may be null
  return t;
}

Tensor tensor_from_ints(const std::vector<int64_t>& flat, const Shape& shape, Dtype dtype) {
  Tensor t = from_vector(flat, shape);
  return dtype == kInt64 ? t : t.to(dtype);
}

Tensor from_blob(const void* data, const Shape& sizes, Dtype dtype) {
  Tensor t = empty(sizes, dtype);
  const std::size_t n = storage_bytes(dtype, t.numel());
  check(n == 0 || data != nullptr, "from_blob: null data for shape ", shape_str(sizes));
  if (n) std::memcpy(t.raw_data(), data, n);
  return t;
}

Tensor tensor(std::initializer_list<double> v, Dtype dtype) {
  return from_vector(std::vector<double>(v), {static_cast<int64_t>(v.size())}, dtype);
}

Tensor tensor(std::initializer_list<std::initializer_list<double>> v, Dtype dtype) {
  std::vector<double> flat;
  const int64_t rows = static_cast<int64_t>(v.size());
  const int64_t cols = rows ? static_cast<int64_t>(v.begin()->size()) : 0;
  for (const auto& row : v) {
    check(static_cast<int64_t>(row.size()) == cols, "tensor: ragged nested list (rows of ", cols,
          " and ", row.size(), " values)");
    flat.insert(flat.end(), row.begin(), row.end());
  }
  return from_vector(flat, {rows, cols}, dtype);
}

Tensor tensor(std::initializer_list<std::initializer_list<std::initializer_list<double>>> v,
              Dtype dtype) {
  std::vector<double> flat;
  const int64_t d0 = static_cast<int64_t>(v.size());
  const int64_t d1 = d0 ? static_cast<int64_t>(v.begin()->size()) : 0;
  const int64_t d2 = d1 ? static_cast<int64_t>(v.begin()->begin()->size()) : 0;
  for (const auto& m : v) {
    check(static_cast<int64_t>(m.size()) == d1, "tensor: ragged nested list");
    for (const auto& row : m) {
      check(static_cast<int64_t>(row.size()) == d2, "tensor: ragged nested list");
      flat.insert(flat.end(), row.begin(), row.end());
    }
  }
  return from_vector(flat, {d0, d1, d2}, dtype);
}

// ---------------------------------------------------------------------------------------
// copies and conversions

const Tensor& Tensor::copy_(const Tensor& src) const {
  check(src.shape() == shape(), "copy_: source shape ", shape_str(src.shape()),
        " differs from destination shape ", shape_str(shape()));
  check(src.dtype() == dtype(), "copy_: source dtype ", dtype_name(src.dtype()),
        " differs from destination dtype ", dtype_name(dtype()));
  if (src.raw_data() != raw_data())
    std::memcpy(raw_data(), src.raw_data(), storage_bytes(dtype(), numel()));
  return *this;
}

void Tensor::set_data(const Tensor& src) const {
  Node& n = must(node_);
  check(n.is_leaf(), "set_data: only a leaf tensor's data can be replaced (this one was made by '", n.op, "')");
  check(!n.requires_grad || is_floating(src.dtype()), "set_data: a tensor that requires grad needs float data, got ",
        dtype_name(src.dtype()));
  const Node& s = must(src.node_ptr());
  n.dtype = s.dtype;
  n.shape = s.shape;
  n.numel = s.numel;
  n.storage = s.storage;
  if (n.grad.defined() && (n.grad.shape() != n.shape || n.grad.dtype() != n.dtype)) n.grad = Tensor();
}

// A blocked dtype <-> any float dtype, through float32 (float64 widened exactly). The read-only
// ones (the k-quants, q4_1, q5_0, q5_1, iq4_nl, iq4_xs) only widen: they come from GGUF files as
// stored (xgrad has not llama.cpp's searches for their scales, and makes only q8_0 and q4_0).
static Tensor convert_blocks(const Tensor& x, Dtype to) {
  if (is_blocked(x.dtype())) {
    check(!is_blocked(to), "to(", dtype_name(to), "): a ", dtype_name(x.dtype()),
          " tensor is widened first (.to(kFloat32)), then quantized again");
    if (to == kFloat64) {
      Tensor out = empty(x.shape(), kFloat64);
      dequantize_blocks(x.dtype(), x.raw_data(), x.numel(), out.data<double>());
      return out;
    }
    Tensor out = empty(x.shape(), kFloat32);
    dequantize_blocks(x.dtype(), x.raw_data(), x.numel(), out.data<float>());
    return to == kFloat32 ? out : out.to(to);
  }
  const char* name = dtype_name(to);
  check(is_floating(x.dtype()), "to(", name, "): only a float tensor quantizes, got ", dtype_name(x.dtype()));
  check(!is_read_only_blocked(to), "to(", name, "): xgrad reads ", name,
        " weights from GGUF files but does not make them; quantize to q8_0 or q4_0");
  const Tensor f = x.dtype() == kFloat32 ? x : x.detach().to(kFloat32);
  Tensor out = empty(x.shape(), to);  // checks the last dim
  const int64_t bad = quantize_blocks(to, f.data<float>(), f.numel(), out.raw_data());
  if (bad >= 0 && to == kF16) {  // a block of 32 halves: name the value
    const float* v = f.data<float>();
    int64_t i = bad;
    while (i + 1 < bad + kQ8Block && std::isfinite(v[i]) && std::fabs(v[i]) < 65520.0f) ++i;
    throw Error(str_cat("to(float16): element ", i, " of ", shape_str(x.shape()), " is ", v[i],
                        ", which float16 cannot hold (its largest is 65504)"));
  }
  if (bad >= 0) {
    const float* v = f.data<float>();
    for (int64_t i = bad; i < bad + kQ8Block; ++i)
      check(std::isfinite(v[i]), "to(", name, "): element ", i, " of ", shape_str(x.shape()), " is ", v[i],
            ", which ", to == kQ8_0 ? "8" : "4", "-bit blocks cannot hold");
    throw Error(str_cat("to(", name, "): elements ", bad, "..", bad + kQ8Block - 1, " of ", shape_str(x.shape()),
                        " are too large for a block's half scale (max / ", to == kQ8_0 ? "127" : "8",
                        " beyond 65504)"));
  }
  return out;
}

static Tensor convert(const Tensor& x, Dtype to) {
  if (is_blocked(x.dtype()) || is_blocked(to)) return convert_blocks(x, to);
  Tensor out = empty(x.shape(), to);
  dispatch_all(x.dtype(), [&](auto from_tag) {
    using S = decltype(from_tag);
    const S* src = x.data<S>();
    dispatch_all(to, [&](auto to_tag) {
      using D = decltype(to_tag);
      D* dst = out.data<D>();
      const int64_t n = x.numel();
      // bf16 <-> float32 conversions run on every autocast product's operands: threaded.
      // NOTE: `parallel for`, not `parallel for simd`: under `simd` GCC 12 keeps the bfloat16
      // temporaries in per-lane arrays and leaves the loop scalar (8x slower); without it the
      // loop auto-vectorizes.
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<D>(src[i]);
    });
  });
  return out;
}

// out = x in another dtype   =>   dx = g converted back
Tensor Tensor::to(Dtype target) const {
  if (target == dtype()) return *this;
  Tensor out = convert(*this, target);
  if (!is_floating(target) || !is_floating(dtype())) return out;  // not differentiable
  const Dtype from = dtype();
  return record(out, {*this}, "to", saves_nothing(), [from](const Tensor& g, const Tensor&, const std::vector<Tensor>&) {
    return std::vector<Tensor>{convert(g, from)};
  });
}

// out = x (a copy)   =>   dx = g
Tensor Tensor::clone() const {
  Tensor out = empty(shape(), dtype());
  out.copy_(*this);
  return record(out, {*this}, "clone", saves_nothing(), [](const Tensor& g, const Tensor&, const std::vector<Tensor>&) {
    return std::vector<Tensor>{g};
  });
}

Tensor Tensor::detach() const {
  auto node = std::make_shared<Node>();
  node->dtype = dtype();
  node->shape = shape();
  node->numel = numel();
  node->storage = must(node_).storage;
  return Tensor(std::move(node));
}

// ---------------------------------------------------------------------------------------
// autograd accessors

bool Tensor::requires_grad() const { return must(node_).requires_grad; }

Tensor& Tensor::requires_grad_(bool on) {
  Node& n = must(node_);
  check(n.is_leaf() || on, "requires_grad_: cannot turn off requires_grad of a non-leaf tensor (made by '",
        n.op, "'); use detach()");
  check(!on || is_floating(n.dtype), "requires_grad_: only float32/float64 tensors can require grad, got ",
        dtype_name(n.dtype));
  n.requires_grad = on;
  return *this;
}

bool Tensor::is_leaf() const { return must(node_).is_leaf(); }
Tensor Tensor::grad() const { return must(node_).grad; }
const char* Tensor::op_name() const { return must(node_).op; }

void Tensor::set_grad(const Tensor& g) {
  if (g.defined()) {
    check(g.shape() == shape() && g.dtype() == dtype(), "set_grad: gradient ", shape_str(g.shape()), " ",
          dtype_name(g.dtype()), " does not match tensor ", shape_str(shape()), " ", dtype_name(dtype()));
  }
  must(node_).grad = g;
}

void Tensor::zero_grad() { must(node_).grad = Tensor(); }

void Tensor::retain_grad() {
  Node& n = must(node_);
  check(n.requires_grad, "retain_grad: tensor does not require grad");
  n.retains_grad = true;
}

void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
  xg::backward({*this}, gradient.defined() ? std::vector<Tensor>{gradient} : std::vector<Tensor>{},
               retain_graph);
}

// ---------------------------------------------------------------------------------------
// printing, in the spirit of torch's repr

static void print_rec(std::ostream& os, const std::vector<double>& v, const Shape& s, std::size_t d,
                      int64_t offset, int indent, bool is_float, int width) {
  if (d == s.size()) {
    if (is_float) os << std::setw(width) << std::fixed << std::setprecision(4) << v[offset];
    else os << std::setw(width) << static_cast<long long>(v[offset]);
    return;
  }
  int64_t stride = 1;
  for (std::size_t k = d + 1; k < s.size(); ++k) stride *= s[k];
  os << "[";
  const int64_t n = s[d];
  const bool elide = n > 6;
  for (int64_t i = 0; i < n; ++i) {
    if (elide && i == 3) {
      os << (d + 1 == s.size() ? "..., " : "...,\n" + std::string(indent + 1, ' '));
      i = n - 3;
    }
    print_rec(os, v, s, d + 1, offset + i * stride, indent + 1, is_float, width);
    if (i + 1 < n) {
      if (d + 1 == s.size()) os << ", ";
      else os << "," << std::string(s.size() - d - 1, '\n') << std::string(indent + 1, ' ');
    }
  }
  os << "]";
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  if (!t.defined()) return os << "tensor(undefined)";
  std::vector<double> v = t.to_vector();
  const bool is_float = is_floating(t.dtype());
  int width = 1;
  for (double x : v) {
    std::ostringstream tmp;
    if (is_float) tmp << std::fixed << std::setprecision(4) << x;
    else tmp << static_cast<long long>(x);
    width = std::max(width, static_cast<int>(tmp.str().size()));
  }
  std::ios_base::fmtflags flags = os.flags();
  os << "tensor(";
  print_rec(os, v, t.shape(), 0, 0, 7, is_float, width);
  os.flags(flags);
  if (t.dtype() != kFloat32) os << ", dtype=" << dtype_name(t.dtype());
  if (!t.is_leaf()) os << ", grad_fn=<" << t.op_name() << ">";
  else if (t.requires_grad()) os << ", requires_grad=True";
  return os << ")";
}

}  // namespace xg
