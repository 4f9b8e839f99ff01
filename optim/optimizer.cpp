// The optimizer base: parameter bookkeeping, zero_grad, and state dicts (the state of each
// parameter by its index, plus each group's options) written as safetensors.
#include "optim/optimizer.hpp"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <set>

namespace xg::optim {

namespace detail {
void check_option(bool ok, const std::string& opt, const char* option, double value, const char* rule) {
  check(ok, opt, ": invalid ", option, " = ", value, " (", rule, ")");
}
}  // namespace detail

namespace {

// "state.12.exp_avg" -> (12, "exp_avg"); false for any other shape of key.
bool split_indexed(const std::string& key, const std::string& prefix, int64_t& index, std::string& rest) {
  if (key.compare(0, prefix.size(), prefix) != 0) return false;
  const std::size_t dot = key.find('.', prefix.size());
  if (dot == std::string::npos || dot == prefix.size() || dot + 1 >= key.size()) return false;
  const std::string num = key.substr(prefix.size(), dot - prefix.size());
  if (!std::all_of(num.begin(), num.end(), [](unsigned char c) { return std::isdigit(c); })) return false;
  index = std::stoll(num);
  rest = key.substr(dot + 1);
  return true;
}

// Elements [s.begin, s.end) of a full state buffer, flattened, as a tensor of their own.
Tensor cut_to_shard(const Tensor& full, Shard s) {
  Tensor out = empty({s.size()}, full.dtype());
  const std::size_t item = itemsize(full.dtype());
  if (s.size() > 0)
    std::memcpy(out.raw_data(), static_cast<const char*>(full.raw_data()) + static_cast<std::size_t>(s.begin) * item,
                static_cast<std::size_t>(s.size()) * item);
  return out;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

void Optimizer::zero_grad(bool set_to_none) {
  grad_slices_.clear();
  for (std::size_t g = 0; g < num_groups(); ++g) {
    for (const Tensor& p : group_params(g)) {
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      if (set_to_none) {
        Tensor(p).zero_grad();
      } else {
        grad.fill_(0.0);
      }
    }
  }
}

std::vector<Tensor> Optimizer::parameters() const {
  std::vector<Tensor> out;
  for (std::size_t g = 0; g < num_groups(); ++g) {
    const auto& ps = group_params(g);
    out.insert(out.end(), ps.begin(), ps.end());
  }
  return out;
}

const ParamState* Optimizer::state(std::size_t index) const {
  check(index < state_.size(), name_, ".state: parameter index ", index, " out of range (the optimizer holds ",
        state_.size(), " parameters)");
  return state_[index].step > 0 ? &state_[index] : nullptr;
}

void Optimizer::shard(std::vector<Shard> owned) {
  check(can_shard(), name_, ": cannot shard its state (ZeRO is for Adam and AdamW)");
  const std::vector<Tensor> params = parameters();
  check(owned.size() == params.size(), name_, ".shard: ", owned.size(), " slices for ", params.size(), " parameters");
  for (std::size_t i = 0; i < params.size(); ++i)
    check(owned[i].begin >= 0 && owned[i].begin <= owned[i].end && owned[i].end <= params[i].numel(), name_,
          ".shard: slice [", owned[i].begin, ", ", owned[i].end, ") of parameter ", i, " is outside its ",
          params[i].numel(), " elements");
  check(!sharded(), name_, ".shard: already sharded");
  for (std::size_t i = 0; i < state_.size(); ++i)
    for (auto& [key, buf] : state_[i].buffers) buf = cut_to_shard(buf, owned[i]);
  shards_ = std::move(owned);
}

void Optimizer::set_grad_slices(std::vector<Tensor> slices) {
  const std::vector<Tensor> params = parameters();
  check(slices.empty() || (sharded() && slices.size() == params.size()), name_, ".set_grad_slices: ", slices.size(),
        " slices for ", params.size(), " parameters", sharded() ? "" : " (the optimizer is not sharded)");
  for (std::size_t i = 0; i < slices.size(); ++i)
    check(!slices[i].defined() || (slices[i].numel() == shards_[i].size() && slices[i].dtype() == params[i].dtype()),
          name_, ".set_grad_slices: the slice of parameter ", i, " holds ", slices[i].numel(), " ",
          dtype_name(slices[i].dtype()), " elements, its shard ", shards_[i].size(), " ", dtype_name(params[i].dtype()));
  grad_slices_ = std::move(slices);
}

std::pair<Tensor, int64_t> Optimizer::owned_grad(std::size_t i, const Tensor& p) const {
  if (!grad_slices_.empty()) return {grad_slices_[i], 0};
  return {p.grad(), owned(i, p).begin};
}

int64_t Optimizer::state_bytes() const {
  int64_t bytes = 0;
  for (const ParamState& s : state_)
    for (const auto& [key, buf] : s.buffers) bytes += buf.numel() * static_cast<int64_t>(itemsize(buf.dtype()));
  return bytes;
}

void Optimizer::register_params(const std::vector<Tensor>& params) {
  std::size_t k = 0;
  for (const Tensor& p : params) {
    check(p.defined(), name_, ": parameter ", k, " of a new group is an undefined tensor");
    check(is_floating(p.dtype()), name_, ": can only optimize float32/float64 tensors, parameter ", k,
          " of a new group is ", dtype_name(p.dtype()), " ", shape_str(p.shape()));
    check(p.is_leaf(), name_, ": can't optimize a non-leaf tensor (parameter ", k, " of a new group, ",
          shape_str(p.shape()), ", was made by '", p.op_name(), "')");
    ++k;
  }
  std::unordered_set<const Node*> mine;
  for (const Tensor& p : params) {
    check(!seen_.count(p.node()) && mine.insert(p.node()).second, name_, ": a parameter of shape ",
          shape_str(p.shape()), " appears more than once (in one group or in two groups)");
  }
  seen_.insert(mine.begin(), mine.end());
  state_.resize(state_.size() + params.size());
}

void Optimizer::check_not_empty() const { check(!state_.empty(), name_, ": got an empty parameter list"); }

TensorMap Optimizer::state_dict(bool buffers) const {
  TensorMap out;
  int64_t index = 0;
  for (std::size_t g = 0; g < num_groups(); ++g) {
    const std::string prefix = str_cat("param_groups.", g, ".");
    std::vector<int64_t> ids;
    for (std::size_t k = 0; k < group_params(g).size(); ++k) ids.push_back(index++);
    out[prefix + "params"] = from_vector(ids, {static_cast<int64_t>(ids.size())});
    for (const auto& [key, value] : group_options(g)) out[prefix + key] = scalar_tensor(value, kFloat64);
  }
  for (std::size_t i = 0; i < state_.size(); ++i) {
    const ParamState& s = state_[i];
    if (s.step == 0) continue;
    const std::string prefix = str_cat("state.", i, ".");
    out[prefix + "step"] = from_vector(std::vector<int64_t>{s.step}, {});
    if (buffers)
      for (const auto& [key, buf] : s.buffers) out[prefix + key] = buf.detach().clone();
  }
  return out;
}

void Optimizer::load_state_dict(const TensorMap& dict) {
  const std::vector<Tensor> params = parameters();
  std::vector<std::map<std::string, double>> options(num_groups());
  std::vector<ParamState> state(params.size());
  std::set<std::string> used;

  int64_t index = 0;
  for (std::size_t g = 0; g < num_groups(); ++g) {
    const std::string key = str_cat("param_groups.", g, ".params");
    auto it = dict.find(key);
    check(it != dict.end(), name_, ".load_state_dict: missing '", key, "' (the optimizer has ", num_groups(),
          " parameter groups)");
    const Tensor& ids = it->second;
    const int64_t n = static_cast<int64_t>(group_params(g).size());
    check(ids.dtype() == kInt64 && ids.dim() == 1 && ids.numel() == n, name_, ".load_state_dict: group ", g, " holds ",
          n, " parameters but '", key, "' is ", dtype_name(ids.dtype()), " ", shape_str(ids.shape()));
    for (int64_t k = 0; k < n; ++k) {
      check(ids.data<int64_t>()[k] == index + k, name_, ".load_state_dict: '", key, "' lists parameter ",
            ids.data<int64_t>()[k], " at position ", k, ", expected ", index + k);
    }
    index += n;
    used.insert(key);
  }
  for (const auto& [key, value] : dict) {
    int64_t i = 0;
    std::string rest;
    if (split_indexed(key, "param_groups.", i, rest)) {
      check(i < static_cast<int64_t>(num_groups()), name_, ".load_state_dict: '", key, "' is for group ", i,
            " but the optimizer has ", num_groups(), " groups");
      if (rest == "params") continue;
      check(value.numel() == 1 && is_floating(value.dtype()), name_, ".load_state_dict: option '", key,
            "' must be a one-element float tensor, got ", shape_str(value.shape()));
      options[i][rest] = value.item();
      used.insert(key);
    } else if (split_indexed(key, "state.", i, rest)) {
      check(i < static_cast<int64_t>(params.size()), name_, ".load_state_dict: '", key, "' is for parameter ", i,
            " but the optimizer holds ", params.size(), " parameters");
      const Tensor& p = params[i];
      if (rest == "step") {
        check(value.numel() == 1, name_, ".load_state_dict: '", key, "' must hold one number");
        state[i].step = static_cast<int64_t>(value.item());
      } else if (std::find(buffers_.begin(), buffers_.end(), rest) == buffers_.end()) {
        continue;  // not one of ours: reported below as unexpected
      } else {
        check(value.shape() == p.shape() && is_floating(value.dtype()), name_, ".load_state_dict: '", key, "' is ",
              dtype_name(value.dtype()), " ", shape_str(value.shape()), " but parameter ", i, " is ",
              shape_str(p.shape()));
        // As torch does, state follows the parameter's dtype. A sharded optimizer keeps its slice.
        Tensor buf = value.dtype() == p.dtype() ? value.detach().clone() : value.detach().to(p.dtype());
        state[i].buffers[rest] = sharded() ? cut_to_shard(buf, shards_[i]) : buf;
      }
      used.insert(key);
    }
  }
  for (std::size_t g = 0; g < num_groups(); ++g) {
    // Every option of this optimizer must be present (an SGD state does not load into Adam).
    const OptionValues mine = group_options(g);
    for (const auto& kv : mine) {
      check(options[g].count(kv.first), name_, ".load_state_dict: missing 'param_groups.", g, ".", kv.first,
            "' (is this state from another kind of optimizer?)");
    }
    for (const auto& kv : options[g]) {
      check(std::any_of(mine.begin(), mine.end(), [&](const auto& m) { return m.first == kv.first; }), name_,
            ".load_state_dict: unknown option 'param_groups.", g, ".", kv.first,
            "' (is this state from another kind of optimizer?)");
    }
  }
  std::vector<std::string> unexpected;
  for (const auto& kv : dict)
    if (!used.count(kv.first)) unexpected.push_back(kv.first);
  if (!unexpected.empty()) {
    std::string list;
    for (const auto& k : unexpected) list += (list.empty() ? "" : ", ") + k;
    throw Error(str_cat(name_, ".load_state_dict: unexpected keys: ", list));
  }
  for (std::size_t i = 0; i < state.size(); ++i) {
    check(state[i].step > 0 || state[i].buffers.empty(), name_, ".load_state_dict: parameter ", i,
          " has state buffers but no 'state.", i, ".step'");
  }
  // All or nothing: if a group's options are invalid, the earlier groups get theirs back.
  std::vector<std::map<std::string, double>> before(num_groups());
  for (std::size_t g = 0; g < num_groups(); ++g)
    for (const auto& kv : group_options(g)) before[g][kv.first] = kv.second;
  std::size_t done = 0;
  try {
    for (; done < num_groups(); ++done) set_group_options(done, options[done]);
  } catch (...) {
    for (std::size_t g = 0; g < done; ++g) set_group_options(g, before[g]);
    throw;
  }
  state_ = std::move(state);
}

void Optimizer::save(const std::string& path) const {
  io::save_safetensors(path, state_dict(), {{"format", "xgrad.optim"}, {"optimizer", name_}});
}

void Optimizer::load(const std::string& path) {
  std::map<std::string, std::string> meta;
  TensorMap dict = io::load_safetensors(path, &meta);
  auto it = meta.find("optimizer");
  check(it != meta.end(), name_, ".load: ", path, " holds no optimizer state (no 'optimizer' in its metadata)");
  check(it->second == name_, name_, ".load: ", path, " holds the state of a ", it->second, " optimizer, not ", name_);
  load_state_dict(dict);
}

bool default_no_decay(const std::string& name, const Tensor& p) {
  if (p.dim() < 2) return true;
  std::size_t start = 0;
  while (start <= name.size()) {
    std::size_t dot = name.find('.', start);
    if (dot == std::string::npos) dot = name.size();
    const std::string part = lower(name.substr(start, dot - start));
    if (part.find("embed") != std::string::npos || part == "wte" || part == "wpe" || part == "pos") return true;
    start = dot + 1;
  }
  return false;
}

}  // namespace xg::optim
