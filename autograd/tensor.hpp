// xg::Tensor: an n-d array of one dtype with reverse-mode autograd.
//
// A Tensor is a cheap handle: a shared pointer to a Node that owns the data (a contiguous
// row-major buffer, itself shared so that reshape/view copies nothing), the gradient, and,
// for a tensor made by a differentiable op, the op's inputs and its backward closure.
// Copying a Tensor copies the pointer, never the data; `clone()` copies the data.
//
// The data lives as long as some handle to it does. A graph keeps its ops' inputs as edges
// (the node, for the gradient to flow back to) and keeps the data only of the tensors the
// op's backward reads (`record`'s Saves), as PyTorch's autograd saves tensors: once nothing
// else holds an input the backward does not read (the output of a frozen projection, the
// terms of a residual sum), its buffer is released and the node stays behind as shape only.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <iosfwd>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "autograd/dtype.hpp"
#include "autograd/error.hpp"

namespace xg {

struct Node;

// A flat, 64-byte aligned, uninitialised buffer. Shared by a tensor and its reshaped views.
struct Storage {
  explicit Storage(std::size_t nbytes);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data = nullptr;
  std::size_t nbytes = 0;
  std::size_t padded = 0;  // bytes actually allocated (a size class from 128 KB on)
};

// Freed buffers of 128 KB and more are cached for reuse, by size class, within the most that
// was live at once in the recent steps (see tensor.cpp). empty_cache() frees them, returns how
// many bytes it released and restarts that bound; cached_bytes() says how many bytes are held,
// allocated_bytes() how many the live tensors' buffers of 128 KB and more take.
std::size_t empty_cache();
std::size_t cached_bytes();
std::size_t allocated_bytes();

class Tensor {
 public:
  Tensor() noexcept : edge_(false) {}  // an undefined tensor (like an empty torch.Tensor handle / None grad)
  explicit Tensor(std::shared_ptr<Node> node);
  Tensor(const Tensor& other);
  Tensor(Tensor&& other) noexcept;
  Tensor& operator=(const Tensor& other);
  Tensor& operator=(Tensor&& other) noexcept;
  ~Tensor();

  // --- what it is -------------------------------------------------------------------
  bool defined() const { return node_ != nullptr; }
  const Shape& shape() const;
  const Shape& sizes() const { return shape(); }  // libtorch's name for shape()
  int64_t size(int64_t dim) const;  // negative dims count from the end
  int64_t dim() const;
  int64_t numel() const;
  Dtype dtype() const;

  // --- its data -------------------------------------------------------------------
  // Typed pointer to the contiguous data; throws if T is not the tensor's dtype.
  template <class T> T* data();
  template <class T> const T* data() const;
  void* raw_data() const;
  // The single value of a one-element tensor, converted to double (or T).
  double item() const;
  template <class T> T item() const { return static_cast<T>(item()); }
  // All values converted to double, row-major (handy in tests and printing).
  std::vector<double> to_vector() const;

  Tensor to(Dtype dtype) const;  // a copy in another dtype (differentiable between floats)
  Tensor clone() const;          // a copy of the data (differentiable)
  Tensor detach() const;         // shares the data, cut from the graph
  Tensor contiguous() const { return *this; }  // data is always contiguous here
  // In-place ops write the shared data outside autograd (for optimizers, initialisers and
  // load_state_dict, which must keep the storage others hold). As in libtorch they are const:
  // a const handle is still a handle to mutable data (`for (const Tensor& p : params)
  // p.zero_();`). Each returns *this.
  const Tensor& copy_(const Tensor& src) const;  // same shape and dtype
  const Tensor& fill_(double value) const;
  const Tensor& zero_() const { return fill_(0.0); }
  const Tensor& add_(const Tensor& other, double alpha = 1.0) const;  // += alpha * other (broadcast)
  const Tensor& mul_(double s) const;                                // *= s
  // Rebinds this leaf's data to src's (shape, dtype and storage, shared), keeping the node,
  // so that every handle to it sees the change (PyTorch's `p.data = src`). For Module::to.
  void set_data(const Tensor& src) const;

  // --- autograd -------------------------------------------------------------------
  bool requires_grad() const;
  Tensor& requires_grad_(bool on = true);  // only on leaves (tensors no op produced)
  bool is_leaf() const;
  Tensor grad() const;  // undefined until a backward pass reaches this tensor
  void set_grad(const Tensor& g);
  void zero_grad();     // drops the gradient, like PyTorch's set_to_none=True
  void retain_grad();   // keep the gradient of a non-leaf after backward
  // Backpropagates from this tensor. A non-scalar needs an explicit gradient of its shape.
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false) const;
  const char* op_name() const;  // the op that made it ("mul"), or "" for a leaf

  // --- methods that forward to the free functions, as in PyTorch ------------------------
  Tensor reshape(const Shape& shape) const;
  Tensor view(const Shape& shape) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor t() const;
  Tensor permute(const std::vector<int64_t>& dims) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor expand(const Shape& shape) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  // Reductions over one dim (negative counts from the end) or a list of dims.
  Tensor sum() const;
  Tensor sum(int64_t dim, bool keepdim = false) const;
  Tensor sum(const std::vector<int64_t>& dims, bool keepdim = false) const;
  Tensor mean() const;
  Tensor mean(int64_t dim, bool keepdim = false) const;
  Tensor mean(const std::vector<int64_t>& dims, bool keepdim = false) const;
  Tensor argmax(int64_t dim, bool keepdim = false) const;  // int64, not differentiable
  Tensor argmin(int64_t dim, bool keepdim = false) const;
  Tensor exp() const;
  Tensor log() const;
  Tensor sqrt() const;
  Tensor abs() const;
  Tensor neg() const;
  Tensor tanh() const;
  Tensor sigmoid() const;
  Tensor relu() const;
  Tensor pow(double exponent) const;
  Tensor matmul(const Tensor& other) const;
  Tensor softmax(int64_t dim) const;
  Tensor log_softmax(int64_t dim) const;
  Tensor masked_fill(const Tensor& mask, double value) const;

  Node* node() const { return node_.get(); }
  const std::shared_ptr<Node>& node_ptr() const { return node_; }

  // A graph edge to this tensor's node that does not hold its data (copies of it are edges
  // too). Its shape, dtype and grad work; reading its data is an error naming the op.
  Tensor edge() const;
  bool is_edge() const { return edge_; }

 private:
  void hold();     // counts this handle on the node's data
  void let_go();   // uncounts it; the last one releases the data of a node others still hold
  std::shared_ptr<Node> node_;
  bool edge_;  // initialised by every constructor (a default here would not serve default arguments above)
};

// The backward closure of an op. `g` is the gradient of the op's output `out`, `in` its
// inputs in order. It returns one gradient per input (an undefined Tensor for an input that
// needs none), either in the input's shape or in the broadcast shape of the output, which
// the engine sums back to the input's shape. It runs with grad mode off.
using BackwardFn =
    std::function<std::vector<Tensor>(const Tensor& g, const Tensor& out, const std::vector<Tensor>& in)>;

struct Node {
  Dtype dtype = Dtype::Float32;
  Shape shape;
  int64_t numel = 0;
  std::shared_ptr<Storage> storage;

  bool requires_grad = false;
  bool retains_grad = false;
  Tensor grad;

  // Set for the output of a recorded op; cleared after backward unless the graph is retained.
  const char* op = "";
  std::vector<Tensor> inputs;
  BackwardFn backward;
  bool freed = false;  // backward ran and released inputs/closure
  bool is_leaf() const { return backward == nullptr && !freed; }

  // Handles to the data (Tensors that are not edges, and the output's own pin when its
  // backward reads it). When the count falls to zero the storage is released.
  std::atomic<int64_t> handles{0};
  bool out_saved = false;  // the op's backward reads its output: pinned until backward ran
  // Under autocast, bf16 copies of saved float32 inputs (Saves::bf16_ok), by input slot; the
  // input itself is then an edge. Widened for the backward closure.
  std::vector<Tensor> packed;
};

inline void Tensor::hold() {
  if (node_ && !edge_) node_->handles.fetch_add(1, std::memory_order_relaxed);
}
inline void Tensor::let_go() {
  if (node_ && !edge_ && node_->handles.fetch_sub(1, std::memory_order_acq_rel) == 1) node_->storage.reset();
}
inline Tensor::Tensor(std::shared_ptr<Node> node) : node_(std::move(node)), edge_(false) { hold(); }
inline Tensor::Tensor(const Tensor& o) : node_(o.node_), edge_(o.edge_) { hold(); }
inline Tensor::Tensor(Tensor&& o) noexcept : node_(std::move(o.node_)), edge_(o.edge_) { o.edge_ = false; }
inline Tensor& Tensor::operator=(const Tensor& o) {
  if (this != &o) {
    Tensor copy(o);
    *this = std::move(copy);
  }
  return *this;
}
inline Tensor& Tensor::operator=(Tensor&& o) noexcept {
  if (this != &o) {
    let_go();
    node_ = std::move(o.node_);
    edge_ = o.edge_;
    o.edge_ = false;
  }
  return *this;
}
inline Tensor::~Tensor() { let_go(); }
inline Tensor Tensor::edge() const {
  Tensor e;
  e.node_ = node_;
  e.edge_ = true;
  return e;
}

// --- factories (dtype defaults to float32) --------------------------------------------
Tensor empty(const Shape& shape, Dtype dtype = kFloat32);  // uninitialised
Tensor zeros(const Shape& shape, Dtype dtype = kFloat32);
Tensor ones(const Shape& shape, Dtype dtype = kFloat32);
Tensor full(const Shape& shape, double value, Dtype dtype = kFloat32);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, double value);
Tensor scalar_tensor(double value, Dtype dtype = kFloat32);  // 0-d
// [start, end) with step, like torch.arange (int64 by default).
Tensor arange(double end, Dtype dtype = kInt64);
Tensor arange(double start, double end, double step = 1, Dtype dtype = kInt64);
// From values in row-major order and a shape.
Tensor from_vector(const std::vector<double>& values, const Shape& shape, Dtype dtype = kFloat32);
Tensor from_vector(const std::vector<int64_t>& values, const Shape& shape);  // int64
// Nested initializer lists, like torch.tensor([[1, 2], [3, 4]]).
Tensor tensor(std::initializer_list<double> v, Dtype dtype = kFloat32);
Tensor tensor(std::initializer_list<std::initializer_list<double>> v, Dtype dtype = kFloat32);
Tensor tensor(std::initializer_list<std::initializer_list<std::initializer_list<double>>> v,
              Dtype dtype = kFloat32);
// Integer lists, like torch::tensor({1, 2, 3}, torch::kInt64): the values reach an int64
// tensor exactly (no trip through double, which would round ids above 2^53).
// NOTE: without a dtype an integer list is float32, as the double lists here (libtorch
// infers int64); say xg::kInt64 for labels and ids.
Tensor tensor_from_ints(const std::vector<int64_t>& flat, const Shape& shape, Dtype dtype);
template <class I, std::enable_if_t<std::is_integral_v<I> && !std::is_same_v<I, bool>, int> = 0>
Tensor tensor(std::initializer_list<I> v, Dtype dtype = kFloat32) {
  return tensor_from_ints(std::vector<int64_t>(v.begin(), v.end()), {static_cast<int64_t>(v.size())}, dtype);
}
template <class I, std::enable_if_t<std::is_integral_v<I> && !std::is_same_v<I, bool>, int> = 0>
Tensor tensor(std::initializer_list<std::initializer_list<I>> v, Dtype dtype = kFloat32) {
  std::vector<int64_t> flat;
  const int64_t cols = v.size() ? static_cast<int64_t>(v.begin()->size()) : 0;
  for (const auto& row : v) {
    check(static_cast<int64_t>(row.size()) == cols, "tensor: ragged nested list (rows of ", cols, " and ",
          row.size(), " values)");
    flat.insert(flat.end(), row.begin(), row.end());
  }
  return tensor_from_ints(flat, {static_cast<int64_t>(v.size()), cols}, dtype);
}
// A tensor holding a copy of `numel(sizes)` values of `dtype` at `data` (libtorch's
// from_blob, which shares the memory instead; a copy here, since xgrad owns its aligned
// buffers). For int64 labels from a std::vector<int64_t>, an array or a memory-mapped file.
Tensor from_blob(const void* data, const Shape& sizes, Dtype dtype);

// torch-style printing: tensor([[1.0000, 2.0000]], dtype=float64, grad_fn=<mul>)
std::ostream& operator<<(std::ostream& os, const Tensor& t);

// Number of elements of a shape; throws on negative sizes.
int64_t shape_numel(const Shape& shape);

template <> float* Tensor::data<float>();
template <> double* Tensor::data<double>();
template <> int64_t* Tensor::data<int64_t>();
template <> bool* Tensor::data<bool>();
template <> const float* Tensor::data<float>() const;
template <> const double* Tensor::data<double>() const;
template <> const int64_t* Tensor::data<int64_t>() const;
template <> const bool* Tensor::data<bool>() const;

// Tensors by name: state dicts, and what the file formats (io/) read and write.
using TensorMap = std::map<std::string, Tensor>;

}  // namespace xg
