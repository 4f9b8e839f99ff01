// Frozen weights in low precision (weight_dtype.hpp).
#include "nn/weight_dtype.hpp"

#include <cstdio>
#include <map>

#include "autograd/error.hpp"
#include "autograd/graph.hpp"
#include "nn/linear.hpp"

namespace xg::nn {

const char* weight_dtype_name(WeightDtype d) {
  switch (d) {
    case WeightDtype::Auto: return "auto";
    case WeightDtype::F32: return "f32";
    case WeightDtype::BF16: return "bf16";
    case WeightDtype::F16: return "f16";
    case WeightDtype::Q8_0: return "q8_0";
    case WeightDtype::Q4_0: return "q4_0";
  }
  return "?";
}

WeightDtype parse_weight_dtype(const std::string& value, const std::string& who) {
  for (WeightDtype d :
       {WeightDtype::Auto, WeightDtype::F32, WeightDtype::BF16, WeightDtype::F16, WeightDtype::Q8_0, WeightDtype::Q4_0})
    if (value == weight_dtype_name(d)) return d;
  throw Error(str_cat(who, ": '", value, "' is not a weight dtype (auto, f32, bf16, f16, q8_0 or q4_0)"));
}

Dtype weight_dtype_tensor(WeightDtype d) {
  switch (d) {
    case WeightDtype::F32: return kFloat32;
    case WeightDtype::BF16: return kBFloat16;
    case WeightDtype::F16: return kF16;
    case WeightDtype::Q8_0: return kQ8_0;
    case WeightDtype::Q4_0: return kQ4_0;
    case WeightDtype::Auto: break;
  }
  throw Error("weight_dtype_tensor: 'auto' is decided by the file (resolve it first)");
}

std::vector<std::string> weight_matrix_names(const DecoderLM& model, Dtype dtype) {
  std::vector<std::string> names;
  for (const auto& [path, m] : model.named_modules()) {
    Tensor w;
    if (const auto* l = dynamic_cast<const Linear*>(m.get())) w = l->weight();
    else if (const auto* e = dynamic_cast<const Embedding*>(m.get())) w = e->weight();
    else continue;
    if (is_blocked(dtype) && w.size(-1) % block_values(dtype) != 0) continue;
    names.push_back(path.empty() ? "weight" : path + ".weight");
  }
  return names;
}

double store_weights_in(DecoderLM& model, Dtype dtype, bool values) {
  check(dtype == kFloat32 || dtype == kBFloat16 || is_blocked(dtype), "store_weights_in: weights are stored as ",
        "float32, bfloat16, q8_0 or q4_0, not ", dtype_name(dtype));
  const TensorMap params = model.state_dict();
  for (const std::string& name : weight_matrix_names(model, dtype)) {
    Tensor w = params.at(name);
    w.requires_grad_(false);
    if (w.dtype() == dtype) continue;
    Tensor stored;
    if (!values) {
      stored = empty(w.shape(), dtype);
    } else {
      try {
        NoGradGuard no_grad;
        stored = w.to(dtype);
      } catch (const Error& e) {
        throw Error(str_cat("store_weights_in: parameter '", name, "': ", e.what()));
      }
    }
    w.set_data(stored);
  }
  model.set_widen_embeddings(dtype != kFloat32);
  double bytes = 0;
  for (const auto& [name, t] : model.named_parameters()) bytes += static_cast<double>(storage_bytes(t.dtype(), t.numel()));
  return bytes;
}

std::string weights_summary(const Module& model) {
  std::map<std::string, int64_t> count;
  double bytes = 0;
  for (const auto& [name, t] : model.named_parameters()) {
    ++count[dtype_name(t.dtype())];
    bytes += static_cast<double>(storage_bytes(t.dtype(), t.numel()));
  }
  std::string s;
  for (const auto& [d, n] : count) s += str_cat(s.empty() ? "" : ", ", d, " x ", n);
  char mb[32];
  std::snprintf(mb, sizeof mb, "%.1f MB", bytes / 1e6);
  return s + ": " + mb;
}

}  // namespace xg::nn
