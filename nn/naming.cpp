// Naming schemes: the tables, pattern matching, and Module's state_dict / load_state_dict
// under a scheme (packing, splitting and RoPE row permutation included).
#include "nn/naming.hpp"

#include <algorithm>
#include <set>

#include "autograd/graph.hpp"
#include "autograd/index.hpp"
#include "autograd/shape.hpp"
#include "nn/sublayer.hpp"

namespace xg::nn {

namespace {

std::vector<std::string> split_dots(const std::string& s) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= s.size(); ++i)
    if (i == s.size() || s[i] == '.') {
      out.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  return out;
}

std::string join_dots(const std::vector<std::string>& parts) {
  std::string s;
  for (const auto& p : parts) s += (s.empty() ? "" : ".") + p;
  return s;
}

// Matches `name` against `pattern`; on success the captures hold what "*" (one segment each)
// and a leading "**" (a dotted prefix, maybe empty) matched, in order.
bool match(const std::string& pattern, const std::string& name, std::vector<std::string>& captures) {
  std::vector<std::string> p = split_dots(pattern), n = split_dots(name);
  captures.clear();
  if (!p.empty() && p[0] == "**") {
    if (n.size() < p.size() - 1) return false;
    const std::size_t prefix = n.size() - (p.size() - 1);
    captures.push_back(join_dots(std::vector<std::string>(n.begin(), n.begin() + static_cast<std::ptrdiff_t>(prefix))));
    p.erase(p.begin());
    n.erase(n.begin(), n.begin() + static_cast<std::ptrdiff_t>(prefix));
  }
  if (p.size() != n.size()) return false;
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (p[i] == "*")
      captures.push_back(n[i]);
    else if (p[i] != n[i])
      return false;
  }
  return true;
}

// Fills `pattern`'s wildcards with `captures`, in order (an empty "**" prefix drops its dot).
std::string fill(const std::string& pattern, const std::vector<std::string>& captures) {
  std::vector<std::string> out;
  std::size_t c = 0;
  for (const std::string& seg : split_dots(pattern)) {
    if (seg == "**") {
      if (!captures.at(c).empty()) out.push_back(captures.at(c));
      ++c;
    } else if (seg == "*") {
      out.push_back(captures.at(c++));
    } else {
      out.push_back(seg);
    }
  }
  return join_dots(out);
}

// The kind (Module::name()) of the module that owns each parameter or buffer directly.
std::map<std::string, std::string> owner_kinds(const Module& m) {
  std::map<std::string, std::string> out;
  for (const auto& [n, t] : m.named_parameters(false)) out[n] = m.name();
  for (const auto& [n, t] : m.named_buffers(false)) out[n] = m.name();
  for (const auto& [path, child] : m.named_modules()) {
    for (const auto& [n, t] : child->named_parameters(false)) out[path + "." + n] = child->name();
    for (const auto& [n, t] : child->named_buffers(false)) out[path + "." + n] = child->name();
  }
  return out;
}

// One tensor of the external state dict: the xgrad tensors it is made of, in order.
struct Entry {
  std::vector<std::string> parts;
  int64_t dim = 0;
  bool transposed = false;
};

// The first of the scheme's rules that matches `name` (owned by a module of kind `owner`),
// with its captures; null when none does.
const NameRule* matching_rule(const NamingScheme& s, const std::string& name, const std::string& owner,
                              std::vector<std::string>& caps) {
  for (const NameRule& r : s.rules) {
    if (!r.module.empty() && owner != r.module) continue;
    if (match(r.xgrad, name, caps)) return &r;
  }
  return nullptr;
}

// The name that rule gives `name`; nullopt when no rule matches.
std::optional<std::string> apply_rules(const NamingScheme& s, const std::string& name, const std::string& owner) {
  std::vector<std::string> caps;
  const NameRule* r = matching_rule(s, name, owner, caps);
  return r ? std::optional<std::string>(fill(r->external, caps)) : std::nullopt;
}

// The shape a tensor of `shape` is stored in: its two dims swapped when transposed.
Shape stored_shape(Shape shape, bool transposed) {
  if (transposed) std::swap(shape.at(0), shape.at(1));
  return shape;
}

// external name -> its xgrad parts, for the model's own state dict.
std::map<std::string, Entry> plan(const Module& m, const NamingScheme& s) {
  const TensorMap own = m.state_dict();
  const std::map<std::string, std::string> kinds = owner_kinds(m);
  std::map<std::string, Entry> out;
  std::set<std::string> packed;
  std::vector<std::string> caps;
  for (const PackRule& pack : s.packs) {
    for (const auto& [name, t] : own) {
      if (packed.count(name) || !match(pack.xgrad.at(0), name, caps)) continue;
      Entry e{{}, pack.dim, pack.transposed};
      for (const std::string& part : pack.xgrad) e.parts.push_back(fill(part, caps));
      const bool all = std::all_of(e.parts.begin(), e.parts.end(), [&](const std::string& p) { return own.count(p) > 0; });
      if (!all) continue;  // e.g. in_proj_bias of attention without biases
      for (const std::string& p : e.parts) packed.insert(p);
      out[fill(pack.external, caps)] = e;
    }
  }
  for (const auto& [name, t] : own) {
    if (packed.count(name)) continue;
    const NameRule* rule = matching_rule(s, name, kinds.at(name), caps);
    std::string external = rule ? fill(rule->external, caps) : "";
    if (!rule) {
      if (s.complete) {  // the hint is built only for the error
        std::vector<std::string> patterns;
        for (const NameRule& r : s.rules) patterns.push_back(r.xgrad);
        throw Error(str_cat("naming scheme '", s.name, "': no name for the model's tensor '", name,
                            "' (closest rule: '", closest_name(name, patterns), "')"));
      }
      external = name;
    }
    check(!out.count(external), "naming scheme '", s.name, "': two of the model's tensors map to '", external, "'");
    out[external] = Entry{{name}, 0, rule && rule->transposed};
  }
  return out;
}

// --- RoPE row order ---------------------------------------------------------------------------

// A tensor whose rows are heads x head_dim features in one RoPE layout.
struct LaidOutRows {
  RopeRows rows;
  RopeLayout layout = RopeLayout::RotateHalf;
};

// xgrad name -> its rows' layout, for the parameters every attention with RoPE says hold
// rotated features (GQA's q/k projections, their biases and QK-Norm weights).
std::map<std::string, LaidOutRows> rope_rows(const Module& m) {
  std::map<std::string, LaidOutRows> out;
  for (const auto& [path, child] : m.named_modules()) {
    const std::optional<RopeParams> rope = rope_params_of(*child);
    if (!rope) continue;
    for (const auto& [name, rows] : rope->rows) out[path + "." + name] = LaidOutRows{rows, rope->layout};
  }
  return out;
}

// Reorders the rows of t ([heads * head_dim, ...]) from layout `from` to layout `to`. Within a
// head, interleaved pairs (2i, 2i+1) are rotate-half features (i, i + head_dim/2).
Tensor permute_rope_rows(const Tensor& t, const RopeRows& r, RopeLayout from, RopeLayout to) {
  if (from == to) return t;
  const int64_t hs = r.head_dim, half = hs / 2;
  std::vector<int64_t> index(static_cast<std::size_t>(r.n_heads * hs));
  for (int64_t h = 0; h < r.n_heads; ++h)
    for (int64_t i = 0; i < half; ++i)
      for (int64_t p = 0; p < 2; ++p) {
        const int64_t inter = h * hs + 2 * i + p, rot = h * hs + p * half + i;
        // out[row] = t[index[row]]
        if (to == RopeLayout::RotateHalf)
          index[static_cast<std::size_t>(rot)] = inter;
        else
          index[static_cast<std::size_t>(inter)] = rot;
      }
  NoGradGuard no_grad;
  return index_select(t.detach(), 0, from_vector(index, {r.n_heads * hs}));
}

// An attention whose RoPE rows cannot be permuted must already be in the scheme's layout.
void check_rope_supported(const Module& m, const NamingScheme& s) {
  if (!s.rope_layout) return;
  for (const auto& [path, child] : m.named_modules()) {
    const std::optional<RopeParams> rope = rope_params_of(*child);
    check(!rope || rope->permutable || rope->layout == *s.rope_layout, "naming scheme '", s.name,
          "' stores RoPE weights in the ", rope_layout_name(*s.rope_layout), " layout, but '", path, "' is a ",
          child->name(), " in the ", rope_layout_name(rope ? rope->layout : *s.rope_layout),
          " layout (convert its rows yourself or build the model in that layout)");
  }
}

// --- the schemes -------------------------------------------------------------------------------

NamingScheme torch_scheme(const std::string& name) {
  NamingScheme s;
  s.name = name;
  s.packs = {{{"**.w_q.weight", "**.w_k.weight", "**.w_v.weight"}, "**.in_proj_weight", 0},
             {{"**.w_q.bias", "**.w_k.bias", "**.w_v.bias"}, "**.in_proj_bias", 0}};
  s.rules = {{"**.w_o.weight", "**.out_proj.weight", ""}, {"**.w_o.bias", "**.out_proj.bias", ""}};
  return s;
}

NamingScheme meta_llama_scheme() {
  NamingScheme s;
  s.name = "meta_llama";
  s.complete = true;
  s.rope_layout = RopeLayout::Interleaved;
  const std::pair<const char*, const char*> attention[] = {{"w_q", "wq"}, {"w_k", "wk"}, {"w_v", "wv"}, {"w_o", "wo"}};
  for (const auto& [x, e] : attention)
    s.rules.push_back({std::string("layers.*.attention.") + x + ".weight", std::string("layers.*.attention.") + e + ".weight", ""});
  // SwiGLU in any of xgrad's namings: gate = w1, down = w2, up = w3.
  const std::pair<const char*, const char*> ffn[] = {{"W_gate", "w1"}, {"w_gate", "w1"}, {"w1", "w1"},
                                                     {"W_down", "w2"}, {"w_down", "w2"}, {"w2", "w2"},
                                                     {"W_up", "w3"},   {"w_up", "w3"},   {"w3", "w3"}};
  for (const auto& [x, e] : ffn)
    s.rules.push_back({std::string("layers.*.ffn.") + x + ".weight", std::string("layers.*.feed_forward.") + e + ".weight", ""});
  for (const char* n : {"norm_attn", "norm1"}) s.rules.push_back({std::string("layers.*.") + n + ".weight", "layers.*.attention_norm.weight", ""});
  for (const char* n : {"norm_ffn", "norm2"}) s.rules.push_back({std::string("layers.*.") + n + ".weight", "layers.*.ffn_norm.weight", ""});
  s.rules.push_back({"tok_embeddings.weight", "tok_embeddings.weight", ""});
  s.rules.push_back({"norm.weight", "norm.weight", ""});
  s.rules.push_back({"output.weight", "output.weight", ""});
  return s;
}

// hf_llama, and with sandwich=true hf_gemma2, whose block has four norms: input_layernorm,
// post_attention_layernorm (on the attention's output), pre_ and post_feedforward_layernorm.
NamingScheme hf_llama_scheme(bool sandwich = false) {
  NamingScheme s;
  s.name = sandwich ? "hf_gemma2" : "hf_llama";
  s.complete = true;
  s.rope_layout = RopeLayout::RotateHalf;
  const std::pair<const char*, const char*> attention[] = {
      {"w_q", "q_proj"}, {"w_k", "k_proj"}, {"w_v", "v_proj"}, {"w_o", "o_proj"}, {"q_norm", "q_norm"}, {"k_norm", "k_norm"}};
  for (const auto& [x, e] : attention)
    for (const char* p : {"weight", "bias"})
      s.rules.push_back({std::string("layers.*.attention.") + x + "." + p,
                         std::string("model.layers.*.self_attn.") + e + "." + p, ""});
  const std::pair<const char*, const char*> ffn[] = {
      {"W_gate", "gate_proj"}, {"w_gate", "gate_proj"}, {"w1", "gate_proj"}, {"W_down", "down_proj"}, {"w_down", "down_proj"},
      {"w2", "down_proj"},     {"W_up", "up_proj"},     {"w_up", "up_proj"}, {"w3", "up_proj"}};
  for (const auto& [x, e] : ffn)
    s.rules.push_back({std::string("layers.*.ffn.") + x + ".weight", std::string("model.layers.*.mlp.") + e + ".weight", ""});
  for (const char* n : {"norm_attn", "norm1"}) s.rules.push_back({std::string("layers.*.") + n + ".weight", "model.layers.*.input_layernorm.weight", ""});
  const std::string ffn_norm = sandwich ? "pre_feedforward_layernorm" : "post_attention_layernorm";
  for (const char* n : {"norm_ffn", "norm2"})
    s.rules.push_back({std::string("layers.*.") + n + ".weight", "model.layers.*." + ffn_norm + ".weight", ""});
  if (sandwich) {
    for (const char* n : {"post_norm_attn", "post_norm1"})
      s.rules.push_back({std::string("layers.*.") + n + ".weight", "model.layers.*.post_attention_layernorm.weight", ""});
    for (const char* n : {"post_norm_ffn", "post_norm2"})
      s.rules.push_back({std::string("layers.*.") + n + ".weight", "model.layers.*.post_feedforward_layernorm.weight", ""});
  }
  s.rules.push_back({"tok_embeddings.weight", "model.embed_tokens.weight", ""});
  s.rules.push_back({"norm.weight", "model.norm.weight", ""});
  s.rules.push_back({"output.weight", "lm_head.weight", ""});
  s.ignored = {"model.layers.*.self_attn.rotary_emb.inv_freq", "model.rotary_emb.inv_freq"};
  return s;
}

// hf_llama with Phi-3's fused projections: qkv_proj = cat(q, k, v), gate_up_proj = cat(gate, up).
NamingScheme hf_phi3_scheme() {
  NamingScheme s = hf_llama_scheme();
  s.name = "hf_phi3";
  s.packs = {{{"layers.*.attention.w_q.weight", "layers.*.attention.w_k.weight", "layers.*.attention.w_v.weight"},
              "model.layers.*.self_attn.qkv_proj.weight", 0}};
  for (const auto& [gate, up] : {std::pair{"W_gate", "W_up"}, std::pair{"w_gate", "w_up"}, std::pair{"w1", "w3"}})
    s.packs.push_back({{str_cat("layers.*.ffn.", gate, ".weight"), str_cat("layers.*.ffn.", up, ".weight")},
                       "model.layers.*.mlp.gate_up_proj.weight", 0});
  return s;
}

NamingScheme hf_gpt2_scheme() {
  NamingScheme s;
  s.name = "hf_gpt2";
  s.complete = true;
  s.optional_prefix = "transformer.";
  // c_attn is one Conv1D producing q, k and v side by side: [d_model, 3 d_model] as stored.
  s.packs = {{{"layers.*.attention.w_q.weight", "layers.*.attention.w_k.weight", "layers.*.attention.w_v.weight"},
              "transformer.h.*.attn.c_attn.weight", 0, true},
             {{"layers.*.attention.w_q.bias", "layers.*.attention.w_k.bias", "layers.*.attention.w_v.bias"},
              "transformer.h.*.attn.c_attn.bias", 0, false}};
  const std::pair<const char*, const char*> linears[] = {{"attention.w_o", "attn.c_proj"}, {"ffn.fc1", "mlp.c_fc"},
                                                         {"ffn.w_up", "mlp.c_fc"},        {"ffn.fc2", "mlp.c_proj"},
                                                         {"ffn.w_down", "mlp.c_proj"}};
  for (const auto& [x, e] : linears) {
    s.rules.push_back({str_cat("layers.*.", x, ".weight"), str_cat("transformer.h.*.", e, ".weight"), "", true});
    s.rules.push_back({str_cat("layers.*.", x, ".bias"), str_cat("transformer.h.*.", e, ".bias"), "", false});
  }
  for (const char* p : {"weight", "bias"}) {
    for (const char* n : {"norm_attn", "norm1"}) s.rules.push_back({str_cat("layers.*.", n, ".", p), str_cat("transformer.h.*.ln_1.", p), ""});
    for (const char* n : {"norm_ffn", "norm2"}) s.rules.push_back({str_cat("layers.*.", n, ".", p), str_cat("transformer.h.*.ln_2.", p), ""});
    s.rules.push_back({str_cat("norm.", p), str_cat("transformer.ln_f.", p), ""});
  }
  s.rules.push_back({"tok_embeddings.weight", "transformer.wte.weight", ""});
  s.rules.push_back({"pos.weight", "transformer.wpe.weight", ""});
  s.rules.push_back({"output.weight", "lm_head.weight", ""});
  // The causal-mask buffers older transformers saved beside the weights.
  s.ignored = {"transformer.h.*.attn.bias", "transformer.h.*.attn.masked_bias"};
  return s;
}

const std::map<std::string, NamingScheme>& schemes() {
  static const std::map<std::string, NamingScheme> all = [] {
    std::map<std::string, NamingScheme> m;
    NamingScheme xgrad;
    xgrad.name = "xgrad";
    m["xgrad"] = xgrad;
    m["torch"] = torch_scheme("torch");
    NamingScheme gamma = torch_scheme("gamma");
    gamma.rules.push_back({"**.weight", "**.gamma", "RMSNorm"});
    m["gamma"] = gamma;
    m["meta_llama"] = meta_llama_scheme();
    m["hf_llama"] = hf_llama_scheme();
    m["hf_gpt2"] = hf_gpt2_scheme();
    m["hf_gemma2"] = hf_llama_scheme(true);
    m["hf_phi3"] = hf_phi3_scheme();
    return m;
  }();
  return all;
}

}  // namespace

std::vector<std::string> naming_schemes() {
  std::vector<std::string> out;
  for (const auto& [n, s] : schemes()) out.push_back(n);
  return out;
}

const NamingScheme& NamingScheme::get(const std::string& name) {
  auto it = schemes().find(name);
  if (it == schemes().end()) {
    std::string known;
    for (const auto& n : naming_schemes()) known += (known.empty() ? "" : ", ") + n;
    throw Error(str_cat("unknown naming scheme '", name, "' (known: ", known, ")"));
  }
  return it->second;
}

std::optional<std::string> rename_tensor(const NamingScheme& scheme, const std::string& name, const std::string& owner) {
  if (std::optional<std::string> external = apply_rules(scheme, name, owner)) return external;
  if (scheme.complete) return std::nullopt;
  return name;
}

std::optional<std::string> packed_name(const NamingScheme& scheme, const std::string& name) {
  std::vector<std::string> caps;
  for (const PackRule& pack : scheme.packs)
    for (const std::string& part : pack.xgrad)
      if (match(part, name, caps)) return fill(pack.external, caps);
  return std::nullopt;
}

std::string NamingScheme::canonical(const std::string& external) const {
  if (optional_prefix.empty() || external.rfind(optional_prefix, 0) == 0) return external;
  std::vector<std::string> caps;
  for (const NameRule& r : rules)
    if (match(r.external, external, caps)) return external;
  for (const PackRule& p : packs)
    if (match(p.external, external, caps)) return external;
  return optional_prefix + external;
}

bool NamingScheme::ignores(const std::string& external) const {
  std::vector<std::string> caps;
  for (const std::string& p : ignored)
    if (match(p, external, caps)) return true;
  return false;
}

std::map<std::string, ExternalTensor> external_tensors(const Module& m, const NamingScheme& scheme) {
  check_rope_supported(m, scheme);
  const TensorMap own = m.state_dict();
  const std::map<std::string, LaidOutRows> rope = rope_rows(m);
  std::map<std::string, ExternalTensor> out;
  for (const auto& [external, e] : plan(m, scheme)) {
    ExternalTensor x{e.parts, e.dim, own.at(e.parts[0]).shape(), false, e.transposed};
    for (std::size_t i = 1; i < e.parts.size(); ++i)
      x.shape[static_cast<std::size_t>(e.dim)] += own.at(e.parts[i]).size(e.dim);
    x.shape = stored_shape(x.shape, e.transposed);
    for (const std::string& p : e.parts) {
      auto r = rope.find(p);
      if (scheme.rope_layout && r != rope.end() && r->second.layout != *scheme.rope_layout) x.rope_permuted = true;
    }
    out.emplace(external, std::move(x));
  }
  return out;
}

Tensor permute_rope_rows(const Tensor& t, int64_t n_heads, int64_t head_dim, RopeLayout from, RopeLayout to) {
  check(t.dim() >= 1 && t.size(0) == n_heads * head_dim, "permute_rope_rows: ", shape_str(t.shape()), " does not have ",
        n_heads, " x ", head_dim, " rows");
  return permute_rope_rows(t, RopeRows{n_heads, head_dim}, from, to);
}

std::string closest_name(const std::string& name, const std::vector<std::string>& candidates) {
  std::string best;
  std::size_t best_d = std::string::npos;
  std::vector<std::size_t> row;
  for (const std::string& c : candidates) {
    // Levenshtein distance, one row at a time.
    row.assign(c.size() + 1, 0);
    for (std::size_t j = 0; j <= c.size(); ++j) row[j] = j;
    for (std::size_t i = 1; i <= name.size(); ++i) {
      std::size_t diag = row[0];
      row[0] = i;
      for (std::size_t j = 1; j <= c.size(); ++j) {
        const std::size_t up = row[j];
        row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (name[i - 1] == c[j - 1] ? 0 : 1)});
        diag = up;
      }
    }
    if (row[c.size()] < best_d) {
      best_d = row[c.size()];
      best = c;
    }
  }
  return best;
}

// ---------------------------------------------------------------------------------------------
// Module under a scheme

TensorMap Module::state_dict(const NamingScheme& scheme) const {
  check_rope_supported(*this, scheme);
  const TensorMap own = state_dict();
  const std::map<std::string, LaidOutRows> rope = rope_rows(*this);
  NoGradGuard no_grad;
  auto out_tensor = [&](const std::string& name) {
    Tensor t = own.at(name);
    auto r = rope.find(name);
    if (scheme.rope_layout && r != rope.end())
      t = permute_rope_rows(t, r->second.rows, r->second.layout, *scheme.rope_layout);
    return t;
  };
  TensorMap out;
  for (const auto& [external, e] : plan(*this, scheme)) {
    Tensor t;
    if (e.parts.size() == 1) {
      t = out_tensor(e.parts[0]);
    } else {
      std::vector<Tensor> parts;
      for (const std::string& p : e.parts) parts.push_back(out_tensor(p).detach());
      t = cat(parts, e.dim);
    }
    out.emplace(external, e.transposed ? transpose(t.detach(), 0, 1) : t);
  }
  return out;
}

void Module::load_state_dict(const TensorMap& given, const NamingScheme& scheme) {
  check_rope_supported(*this, scheme);
  TensorMap dict;  // without the tensors the scheme ignores (handles: no data is copied)
  for (const auto& [n, t] : given)
    if (!scheme.ignores(n)) dict.emplace(n, t);
  const TensorMap own = state_dict();
  const std::map<std::string, Entry> expected = plan(*this, scheme);
  // The shape each external tensor must have: its parts' shapes joined along dim.
  auto expected_shape = [&](const Entry& e) {
    Shape shape = own.at(e.parts[0]).shape();
    for (std::size_t i = 1; i < e.parts.size(); ++i) shape[static_cast<std::size_t>(e.dim)] += own.at(e.parts[i]).size(e.dim);
    return stored_shape(shape, e.transposed);
  };
  // A hint pairs a missing name with the closest unexpected one (a misspelling) and the
  // other way round.
  std::vector<std::string> missing_names, unexpected_names;
  for (const auto& [n, e] : expected)
    if (!dict.count(n)) missing_names.push_back(n);
  for (const auto& [n, t] : dict)
    if (!expected.count(n)) unexpected_names.push_back(n);
  std::vector<std::string> expected_names;
  for (const auto& [n, e] : expected) expected_names.push_back(n);
  std::vector<std::string> problems;
  for (const auto& [n, e] : expected) {
    auto it = dict.find(n);
    if (it == dict.end()) {
      const std::string near = closest_name(n, unexpected_names);
      problems.push_back(str_cat("missing '", n, "'", near.empty() ? "" : " (closest given: '" + near + "')"));
    } else if (it->second.shape() != expected_shape(e)) {
      problems.push_back(str_cat("'", n, "' has shape ", shape_str(it->second.shape()), ", the model needs ",
                                 shape_str(expected_shape(e))));
    }
  }
  for (const auto& [n, t] : dict)
    if (!expected.count(n))
      problems.push_back(str_cat("unexpected '", n, "' (closest expected: '",
                                 closest_name(n, missing_names.empty() ? expected_names : missing_names), "')"));
  if (!problems.empty()) {
    std::string msg;
    for (const auto& p : problems) msg += (msg.empty() ? "" : "; ") + p;
    throw Error(str_cat("load_state_dict (naming scheme '", scheme.name, "', ", name(), "): ", msg));
  }
  const std::map<std::string, LaidOutRows> rope = rope_rows(*this);
  NoGradGuard no_grad;
  TensorMap internal;
  for (const auto& [external, e] : expected) {
    const Tensor t = e.transposed ? transpose(dict.at(external), 0, 1) : dict.at(external);
    int64_t offset = 0;
    for (const std::string& p : e.parts) {
      const int64_t len = own.at(p).size(e.dim);
      Tensor part = e.parts.size() == 1 ? t : narrow(t, e.dim, offset, len);
      offset += len;
      auto r = rope.find(p);
      if (scheme.rope_layout && r != rope.end())
        part = permute_rope_rows(part, r->second.rows, *scheme.rope_layout, r->second.layout);
      internal.emplace(p, part);
    }
  }
  load_state_dict(internal, true);
}

}  // namespace xg::nn
