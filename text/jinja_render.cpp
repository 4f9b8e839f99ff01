// Renders a parsed Jinja template: scopes as Jinja2 keeps them (a for loop, a macro call and
// a with block open one, if does not, so {% set %} in a loop stays there and namespace() is
// how a template carries state out), Python's operators, attribute lookup (methods first for
// `.`, keys first for `[]`), loops with `loop.*` (recursive ones too), macros and call blocks.
#include <cmath>

#include "autograd/error.hpp"
#include "text/detail/jinja_ast.hpp"
#include "text/detail/jinja_budget.hpp"
#include "text/detail/jinja_builtins.hpp"
#include "text/detail/jinja_utf8.hpp"

namespace xg::text::jinja {
namespace detail {
namespace {

struct Frame {
  Dict vars;
  std::shared_ptr<Frame> parent;
};
using FramePtr = std::shared_ptr<Frame>;

enum class Flow { Normal, Break, Continue };

}  // namespace

Value get_attr(const Value& obj, const std::string& name) {
  check_defined(obj);
  switch (obj.kind()) {
    case Value::Kind::Dict: {
      Value m = method(obj, name);
      if (!m.is_undefined()) return m;
      const Value* v = obj.as_dict().find(name);
      return v ? *v : Value::undefined("'dict object' has no attribute '" + name + "'");
    }
    case Value::Kind::Namespace: {
      const Value* v = obj.as_dict().find(name);
      return v ? *v : Value::undefined("'Namespace object' has no attribute '" + name + "'");
    }
    case Value::Kind::List:
      if (obj.seq() == Value::Seq::GroupTuple && (name == "grouper" || name == "list"))
        return obj.as_list()[name == "grouper" ? 0 : 1];
      return method(obj, name);
    default: return method(obj, name);
  }
}

Value get_item(const Value& obj, const Value& key) {
  using S = Value::Seq;
  check_defined(obj);
  if (obj.is_dict() || obj.kind() == Value::Kind::Namespace) {
    if (key.is_hashable())
      if (const Value* v = obj.as_dict().find(key)) return *v;
    if (key.is_string()) return get_attr(obj, key.as_string());
    return Value::undefined(str_cat("'dict object' has no attribute ", key.repr()));
  }
  const bool indexable = obj.is_string() || (obj.is_list() && (obj.seq() == S::List || obj.is_tuple() || obj.seq() == S::Range));
  if (indexable && key.is_number() && key.kind() != Value::Kind::Float) {
    int64_t n = length(obj), k = key.as_int();
    if (k < 0) k += n;
    if (k < 0 || k >= n) return Value::undefined(str_cat(obj.type_name(), " index out of range"));
    if (obj.is_list()) return obj.as_list()[size_t(k)];
    const std::string& s = obj.as_string();
    size_t at = 0;
    for (int64_t skipped = 0; skipped < k; ++skipped) next_code_point(s, at);
    size_t end = at;
    next_code_point(s, end);
    return Value(s.substr(at, end - at));
  }
  if (key.is_string()) return get_attr(obj, key.as_string());
  return Value::undefined(str_cat("'", obj.type_name(), " object' has no item ", key.repr()));
}

namespace {

// Python's seq[start:stop:step] on a list or string.
Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  check_defined(obj);
  using S = Value::Seq;
  if (obj.is_list() && obj.seq() == S::Range) throw Error("unsupported construct: slicing a range (convert it with |list first)");
  if (!obj.is_string() && !(obj.is_list() && (obj.seq() == S::List || obj.is_tuple())))
    throw Error(str_cat("'", obj.type_name(), "' object is not subscriptable"));
  auto as_index = [](const Value& v, const char* what) -> const Value& {
    if (!v.is_none() && !v.is_undefined() && v.kind() != Value::Kind::Int)
      throw Error(str_cat("slice ", what, " must be an integer or None, not ", v.type_name()));
    return v;
  };
  const Value& a = as_index(start, "start");
  const Value& b = as_index(stop, "stop");
  const Value& c = as_index(step, "step");
  // A string is cut at its code points' byte offsets (an ASCII string's are its indices).
  std::vector<size_t> starts;
  if (obj.is_string()) {
    const std::string& s = obj.as_string();
    if (!std::all_of(s.begin(), s.end(), [](char ch) { return static_cast<unsigned char>(ch) < 0x80; })) {
      need_bytes(int64_t(s.size() * sizeof(size_t)));
      for (size_t i = 0; i < s.size();) starts.push_back(i), next_code_point(s, i);
    }
  }
  const int64_t n = obj.is_list() ? int64_t(obj.as_list().size())
                    : starts.empty() ? int64_t(obj.as_string().size()) : int64_t(starts.size());
  int64_t st = c.kind() == Value::Kind::Int ? c.as_int() : 1;
  if (st == 0) throw Error("slice step cannot be zero");
  auto clamp = [&](const Value& v, int64_t def, int64_t lo, int64_t hi) {
    if (v.kind() != Value::Kind::Int) return def;
    int64_t x = v.as_int();
    if (x < 0) x += n;
    return std::min(std::max(x, lo), hi);
  };
  int64_t from = st > 0 ? clamp(a, 0, 0, n) : clamp(a, n - 1, -1, n - 1);
  int64_t to = st > 0 ? clamp(b, n, 0, n) : clamp(b, -1, -1, n - 1);
  // k stays within [-1, n]: a step past the end stops the walk before k + st could overflow
  // (k >= 0 while a negative step walks, so k + st cannot).
  std::vector<int64_t> picked;
  for (int64_t k = from; st > 0 ? k < to : k > to; k = (st > 0 ? to - k <= st : k + st <= to) ? to : k + st)
    picked.push_back(k);
  if (obj.is_list()) {
    need_bytes(int64_t(picked.size() * sizeof(Value)));
    List out;
    for (int64_t k : picked) out.push_back(obj.as_list()[size_t(k)]);
    return obj.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
  }
  const std::string& s = obj.as_string();
  std::string out;
  auto start_of = [&](int64_t k) {
    return starts.empty() ? size_t(k) : k < int64_t(starts.size()) ? starts[size_t(k)] : s.size();
  };
  for (int64_t k : picked) out.append(s, start_of(k), start_of(k + 1) - start_of(k));
  return Value(std::move(out));
}

// NOTE: integers are 64-bit here (Python's are unbounded): overflow is an error.
[[noreturn]] void overflow() { throw Error("integer overflow (integers are 64-bit here)"); }
int64_t add(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) overflow();
  return r;
}
int64_t sub(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_sub_overflow(a, b, &r)) overflow();
  return r;
}
int64_t mul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) overflow();
  return r;
}

// Python's floor division (the sign of a remainder follows the divisor).
int64_t floor_div(int64_t a, int64_t b) {
  if (a == INT64_MIN && b == -1) overflow();
  return a / b - ((a % b != 0) && ((a < 0) != (b < 0)));
}

// x + y, refused before it is built when the result would pass the memory bound.
Value concat(const std::string& x, const std::string& y) {
  need_bytes(int64_t(x.size() + y.size()) + kObjectBytes);
  std::string out;
  out.reserve(x.size() + y.size());
  out += x;
  out += y;
  return Value(std::move(out));
}

// An error when `count` items of `bytes` each would pass the memory bound (no overflow).
void need_repeated(int64_t count, int64_t bytes) {
  if (count > 0 && bytes > 0) need_bytes(count > kMaxHeldBytes / bytes ? kMaxHeldBytes + 1 : count * bytes);
}

Value arithmetic(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") {
    const std::string x = a.is_string() ? std::string() : a.str(), y = b.is_string() ? std::string() : b.str();
    return concat(a.is_string() ? a.as_string() : x, b.is_string() ? b.as_string() : y);
  }
  check_defined(a);
  check_defined(b);
  if (op == "%" && a.is_string()) return Value(percent_format(a.as_string(), b));
  auto unsupported = [&]() -> Value {
    throw Error(str_cat("unsupported operand type(s) for ", op, ": '", a.type_name(), "' and '", b.type_name(), "'"));
  };
  const bool nums = a.is_number() && b.is_number();
  const bool floats = nums && (a.kind() == Value::Kind::Float || b.kind() == Value::Kind::Float);
  if (op == "+") {
    if (nums) return floats ? Value(a.as_float() + b.as_float()) : Value(add(a.as_int(), b.as_int()));
    if (a.is_string() && b.is_string()) {
      // markupsafe's Markup escapes the plain string it is added to, and stays Markup.
      if (a.is_markup() != b.is_markup()) {
        Value joined = concat(a.is_markup() ? a.as_string() : html_escape(a.as_string()), b.is_markup() ? b.as_string() : html_escape(b.as_string()));
        return Value::markup(joined.as_string());
      }
      return concat(a.as_string(), b.as_string());
    }
    if (a.is_list() && b.is_list()) {
      const bool tuples = a.is_tuple() && b.is_tuple();
      if (!tuples && !(a.seq() == Value::Seq::List && b.seq() == Value::Seq::List))
        throw Error(str_cat("can only concatenate ", a.type_name(), " (not \"", b.type_name(), "\") to ", a.type_name()));
      need_repeated(int64_t(a.as_list().size() + b.as_list().size()), sizeof(Value));
      List out = a.as_list();
      out.insert(out.end(), b.as_list().begin(), b.as_list().end());
      return tuples ? Value::tuple(std::move(out)) : Value::list(std::move(out));
    }
    return unsupported();
  }
  if (op == "*") {
    if (nums) return floats ? Value(a.as_float() * b.as_float()) : Value(mul(a.as_int(), b.as_int()));
    const Value& seq = a.is_number() ? b : a;
    const Value& times = a.is_number() ? a : b;
    if (times.is_number() && times.kind() != Value::Kind::Float && (seq.is_string() || (seq.is_list() && (seq.seq() == Value::Seq::List || seq.is_tuple())))) {
      int64_t size = seq.is_string() ? int64_t(seq.as_string().size()) : int64_t(seq.as_list().size());
      // Nothing repeated any number of times is nothing ('' * 10**15 must not loop).
      const int64_t count = size == 0 ? 0 : std::max<int64_t>(0, times.as_int());
      need_repeated(count, seq.is_string() ? size : size * int64_t(sizeof(Value)));
      if (seq.is_string()) {
        std::string out;
        out.reserve(size_t(size * count));  // exactly: doubling from empty would overshoot it by half
        for (int64_t k = 0; k < count; ++k) out += seq.as_string();
        return Value(std::move(out));
      }
      List out;
      for (int64_t k = 0; k < count; ++k) out.insert(out.end(), seq.as_list().begin(), seq.as_list().end());
      return seq.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
    }
    return unsupported();
  }
  if (!nums) return unsupported();
  if (op == "-") return floats ? Value(a.as_float() - b.as_float()) : Value(sub(a.as_int(), b.as_int()));
  if (op == "**") {
    if (!floats && b.as_int() >= 0) {
      int64_t r = 1, base = a.as_int();
      for (int64_t e = b.as_int(); e > 0; e >>= 1) {  // by squaring: 2 ** 62 is 7 products
        if (e & 1) r = mul(r, base);
        if (e > 1) base = mul(base, base);
      }
      return Value(r);
    }
    return Value(std::pow(a.as_float(), b.as_float()));
  }
  if (b.as_float() == 0) throw Error(op == "/" ? "division by zero" : "integer division or modulo by zero");
  if (op == "/") return Value(a.as_float() / b.as_float());
  if (op == "//") return floats ? Value(std::floor(a.as_float() / b.as_float())) : Value(floor_div(a.as_int(), b.as_int()));
  // op == "%"
  if (floats) {
    double r = std::fmod(a.as_float(), b.as_float());
    if (r != 0 && ((r < 0) != (b.as_float() < 0))) r += b.as_float();
    return Value(r);
  }
  return Value(sub(a.as_int(), mul(floor_div(a.as_int(), b.as_int()), b.as_int())));
}

bool compare(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return equals(a, b);
  if (op == "!=") return !equals(a, b);
  if (op == "<") return less(a, b);
  if (op == ">") return less(b, a);
  if (op == "<=") return !less(b, a);
  if (op == ">=") return !less(a, b);
  if (op == "in") return contains(b, a);
  return !contains(b, a);  // "not in"
}

// One step, and one more per 64 bytes of each string an operation reads (the rest of its
// work is counted where it is done: lists where they are walked, results where they are
// built).
int64_t reading(const Value& v) { return v.is_string() ? int64_t(v.as_string().size()) / kBytesPerStep : 0; }
void spend_reading(const Value& v, const List& args = {}) {
  int64_t steps = 1 + reading(v);
  for (const Value& a : args) steps += reading(a);
  spend(steps);
}

class Renderer {
 public:
  Renderer(const Program& p, const Dict& context) : p_(p), context_(context), budget_(*current_budget()) {}

  // generation (optional) receives the byte range of each {% generation %} block's output.
  std::string run(std::vector<std::pair<std::size_t, std::size_t>>* generation = nullptr) {
    auto top = std::make_shared<Frame>();
    std::string out;
    root_ = &out;
    generation_ = generation;
    try {
      exec(p_.body, top, out);
    } catch (const Error& e) {
      throw Error(str_cat(p_.opts.name, " line ", line_, ": ", e.what()));
    }
    return out;
  }

 private:
  // Appends to an output buffer (the render's, a macro's or a block's), which the memory
  // bound counts while it is open.
  void emit(std::string& out, const std::string& text) { budget_.hold(append_bounded(out, text, true)); }

  Value lookup(const std::string& name, const FramePtr& frame) const {
    for (const Frame* f = frame.get(); f; f = f->parent.get())
      if (const Value* v = f->vars.find(name)) return *v;
    if (const Value* v = context_.find(name)) return *v;
    if (const Value* v = builtin_globals().find(name)) return *v;
    return Value::undefined("'" + name + "' is undefined");
  }

  void assign(Frame& frame, const std::vector<std::string>& targets, const Value& v) {
    if (targets.size() == 1) return frame.vars.set(targets[0], v);
    List items = iterate(v);
    if (items.size() != targets.size())
      throw Error(str_cat(items.size() < targets.size() ? "not enough" : "too many", " values to unpack (expected ",
                          targets.size(), ", got ", items.size(), ")"));
    for (size_t k = 0; k < targets.size(); ++k) frame.vars.set(targets[k], items[k]);
  }

  // A body's output, no longer counted as an open buffer: the caller makes it a value,
  // which the budget holds instead.
  std::string render_body(const Body& body, const FramePtr& frame) {
    std::string out;
    if (exec(body, frame, out) != Flow::Normal) throw Error("'break' or 'continue' outside a loop");
    budget_.release(int64_t(out.capacity()));
    return out;
  }

  Flow exec(const Body& body, const FramePtr& frame, std::string& out) {
    for (const StmtPtr& sp : body) {
      const Stmt& s = *sp;
      line_ = s.line;
      switch (s.kind) {
        case Stmt::Kind::Text: emit(out, s.text); break;
        case Stmt::Kind::Output: {
          Value v = eval(*s.expr, frame);
          emit(out, v.is_string() ? v.as_string() : v.str());
          break;
        }
        case Stmt::Kind::If: {
          size_t k = 0;
          while (k < s.conds.size() && !eval(*s.conds[k], frame).truthy()) ++k;
          if (k < s.bodies.size()) {
            Flow f = exec(s.bodies[k], frame, out);
            if (f != Flow::Normal) return f;
          }
          break;
        }
        case Stmt::Kind::For: exec_for(s, frame, out); break;
        case Stmt::Kind::Set: {
          Value v = eval(*s.expr, frame);
          line_ = s.line;
          if (s.attr.empty()) {
            assign(*frame, s.targets, v);
          } else {
            Value target = lookup(s.targets[0], frame);
            if (target.kind() != Value::Kind::Namespace)
              throw Error(str_cat("cannot assign attribute '", s.attr, "' on '", s.targets[0], "' (a ",
                                  target.type_name(), ", not a namespace())"));
            target.namespace_entries().set(s.attr, v);
          }
          break;
        }
        case Stmt::Kind::SetBlock: {
          Value text(render_body(s.bodies[0], frame));
          if (s.expr) {
            Value saved = block_text_;
            block_text_ = text;
            text = eval(*s.expr, frame);
            block_text_ = saved;
          }
          frame->vars.set(s.targets[0], text);
          break;
        }
        case Stmt::Kind::With: {
          auto scope = std::make_shared<Frame>();
          scope->parent = frame;
          List values;
          for (const auto& [name, value] : s.params) values.push_back(eval(*value, frame));
          for (size_t k = 0; k < values.size(); ++k) scope->vars.set(s.params[k].first, values[k]);
          Flow f = exec(s.bodies[0], scope, out);
          if (f != Flow::Normal) return f;
          break;
        }
        case Stmt::Kind::CallBlock: {
          // The call with one more keyword, caller: a macro of the block's body.
          const Expr& call = *s.expr;
          Value fn = eval(*call.args[0], frame);
          List args;
          Kwargs kwargs;
          for (size_t k = 1; k < call.args.size(); ++k) args.push_back(eval(*call.args[k], frame));
          for (const auto& [key, x] : call.kwargs) kwargs.emplace_back(key, eval(*x, frame));
          kwargs.emplace_back("caller", make_macro(s, frame, "caller"));
          line_ = s.line;
          check_defined(fn);
          if (fn.kind() != Value::Kind::Function) throw Error(str_cat("'", fn.type_name(), "' object is not callable"));
          emit(out, fn.as_function()(args, kwargs).str());
          break;
        }
        case Stmt::Kind::Macro: frame->vars.set(s.name, make_macro(s, frame, s.name)); break;
        case Stmt::Kind::Break:
        case Stmt::Kind::Continue:
          if (loop_depth_ == 0) throw Error(str_cat("'", s.kind == Stmt::Kind::Break ? "break" : "continue", "' outside a loop"));
          return s.kind == Stmt::Kind::Break ? Flow::Break : Flow::Continue;
        case Stmt::Kind::FilterBlock: {
          Value saved = block_text_;
          block_text_ = Value(render_body(s.bodies[0], frame));
          emit(out, eval(*s.expr, frame).str());
          block_text_ = saved;
          break;
        }
        case Stmt::Kind::Generation: {
          const std::size_t start = out.size();
          Flow f = exec(s.bodies[0], frame, out);
          // NOTE: only a block printed straight into the output has a place in it (inside a
          // macro or a set block its text lands elsewhere, and transformers' tracker, which
          // counts what was printed so far, would misplace it).
          if (s.generation && generation_ && &out == root_) generation_->push_back({start, out.size()});
          if (f != Flow::Normal) return f;
          break;
        }
      }
    }
    return Flow::Normal;
  }

  void exec_for(const Stmt& s, const FramePtr& frame, std::string& out) {
    Value seq = eval(*s.expr, frame);
    run_loop(s, frame, seq, 1, out);
  }

  // One pass of a for loop over seq at recursion depth `depth` (a recursive loop's loop(x)
  // runs another, one deeper, into its own output).
  void run_loop(const Stmt& s, const FramePtr& frame, const Value& seq, int64_t depth, std::string& out) {
    if (!seq.is_undefined() && !seq.is_list() && !seq.is_dict() && !seq.is_string() && seq.kind() != Value::Kind::Iterator)
      throw Error(str_cat("'", seq.type_name(), "' object is not iterable"));
    auto scope = std::make_shared<Frame>();
    scope->parent = frame;
    // The items, shared with seq when it is a list: a loop keeps no copy of what it walks
    // (lists never change in place).
    Value all = seq.is_list() ? seq : Value::list(iterate(seq));
    if (s.cond) {
      List kept;
      for (const Value& item : all.as_list()) {
        line_ = s.line;
        budget_.spend(1);
        assign(*scope, s.targets, item);
        if (eval(*s.cond, scope).truthy()) kept.push_back(item);
      }
      all = Value::list(std::move(kept));
    }
    const List& items = all.as_list();
    const int64_t n = int64_t(items.size());
    // loop.cycle(*values): the value at this iteration's index, modulo their count.
    auto index = std::make_shared<int64_t>(0);
    Value cycle = Value::function("loop.cycle", [index](const List& a, const Kwargs&) {
      if (a.empty()) throw Error("no items for cycling given");
      return a[size_t(*index) % a.size()];
    });
    // loop.changed(*values): true when the values differ from the last call's.
    auto last_changed = std::make_shared<Value>();
    Value changed = Value::function("loop.changed", [last_changed](const List& a, const Kwargs&) {
      Value now = Value::tuple(a);
      if (!last_changed->is_undefined() && equals(*last_changed, now)) return Value(false);
      *last_changed = now;
      return Value(true);
    });
    Value recurse = Value::function("loop", [](const List&, const Kwargs&) -> Value {
      throw Error("the loop must have the 'recursive' marker to be called recursively");
    });
    if (s.recursive) {
      const Stmt* stmt = &s;
      std::weak_ptr<Frame> outer = frame;
      recurse = Value::function("loop", [this, stmt, outer, depth](const List& a, const Kwargs& k) {
        if (a.size() != 1 || !k.empty()) throw Error("loop() takes the items to loop over");
        auto parent = outer.lock();
        if (!parent) throw Error("loop() called after its loop ended");
        if (macro_depth_ >= kMaxMacroDepth) throw Error(str_cat("recursive loop nested more than ", kMaxMacroDepth, " calls deep"));
        budget_.spend(3);
        int saved_line = line_;
        ++macro_depth_;
        std::string text;
        try {
          run_loop(*stmt, parent, a[0], depth + 1, text);
        } catch (...) {
          --macro_depth_;
          throw;
        }
        --macro_depth_;
        budget_.release(int64_t(text.capacity()));
        line_ = saved_line;
        return Value(std::move(text));
      });
    }
    // Jinja2 runs the else block unless some iteration's body ran to its end (one left by
    // break or continue does not count).
    bool completed = false;
    ++loop_depth_;
    for (int64_t k = 0; k < n; ++k) {
      line_ = s.line;
      budget_.spend(1);
      // The keys are made once, outside any render (they are not counted), and set in order
      // without a lookup: a loop iteration stays about one step's worth of work.
      static const std::vector<Value> keys = [] {
        auto uncounted = BudgetScope::uncounted();
        return std::vector<Value>{"index", "index0", "revindex", "revindex0", "first", "last", "length",
                                  "depth", "depth0", "previtem", "nextitem", "cycle", "changed", "__call__"};
      }();
      Dict loop;
      loop.items.reserve(keys.size());
      auto put = [&](size_t i, Value v) { loop.items.emplace_back(keys[i], std::move(v)); };
      put(0, Value(k + 1));
      put(1, Value(k));
      put(2, Value(n - k));
      put(3, Value(n - k - 1));
      put(4, Value(k == 0));
      put(5, Value(k == n - 1));
      put(6, Value(n));
      put(7, Value(depth));
      put(8, Value(depth - 1));
      put(9, k > 0 ? items[size_t(k - 1)] : Value::undefined("there is no previous item"));
      put(10, k + 1 < n ? items[size_t(k + 1)] : Value::undefined("there is no next item"));
      *index = k;
      put(11, cycle);
      put(12, changed);
      put(13, recurse);
      scope->vars.set("loop", Value::dict(std::move(loop)));
      assign(*scope, s.targets, items[size_t(k)]);
      Flow f = exec(s.bodies[0], scope, out);
      if (f == Flow::Break) break;
      if (f == Flow::Normal) completed = true;
    }
    --loop_depth_;
    if (!completed && s.bodies.size() > 1) {
      Flow f = exec(s.bodies[1], frame, out);
      (void)f;
    }
  }

  // A macro (or a call block's caller) is a function that renders its body in a new scope
  // over the one it was defined in (held weakly: the scope holds the macro). Extra positional
  // arguments go to `varargs` and unknown keywords to `kwargs` when the body reads them, as
  // Jinja2 decides; `caller` is a keyword a {% call %} block passes.
  Value make_macro(const Stmt& s, const FramePtr& frame, const std::string& name) {
    std::weak_ptr<Frame> defined_in = frame;
    const Stmt* def = &s;
    return Value::function(name, [this, def, defined_in, name](const List& a, const Kwargs& k) {
      auto parent = defined_in.lock();
      if (!parent) throw Error(str_cat("macro '", name, "' called outside the scope that defined it"));
      if (a.size() > def->params.size() && !def->uses_varargs)
        throw Error(str_cat("macro '", name, "' takes not more than ", def->params.size(), " argument(s)"));
      auto scope = std::make_shared<Frame>();
      scope->parent = parent;
      Dict extra;
      for (const auto& [key, v] : k) {
        bool known = false;
        for (size_t i = 0; i < def->params.size(); ++i) {
          if (def->params[i].first != key) continue;
          if (i < a.size()) throw Error(str_cat("macro '", name, "' got multiple values for argument '", key, "'"));
          known = true;
        }
        if (known || (key == "caller" && def->uses_caller)) scope->vars.set(key, v);
        else if (def->uses_kwargs) extra.set(Value(key), v);
        else throw Error(str_cat("macro '", name, "' takes no keyword argument '", key, "'"));
      }
      for (size_t i = 0; i < def->params.size(); ++i) {
        const auto& [pname, pdef] = def->params[i];
        if (i < a.size()) scope->vars.set(pname, a[i]);
        else if (!scope->vars.find(pname))
          scope->vars.set(pname, pdef ? eval(*pdef, scope) : Value::undefined("'" + pname + "' is undefined"));
      }
      if (def->uses_varargs)
        scope->vars.set("varargs", Value::tuple(a.size() > def->params.size() ? List(a.begin() + int64_t(def->params.size()), a.end()) : List()));
      if (def->uses_kwargs) scope->vars.set("kwargs", Value::dict(std::move(extra)));
      if (def->uses_caller && !scope->vars.find("caller")) scope->vars.set("caller", Value::undefined("'caller' is undefined"));
      // NOTE: a macro call makes a scope, binds its parameters and renders into a buffer of its
      // own, about as long as four other steps take; it is counted so.
      budget_.spend(3);
      // Python stops a runaway recursion with a RecursionError; so does this.
      if (macro_depth_ >= kMaxMacroDepth)
        throw Error(str_cat("macro '", name, "' nested more than ", kMaxMacroDepth, " calls deep"));
      int saved_line = line_;
      int saved_depth = loop_depth_;
      loop_depth_ = 0;
      ++macro_depth_;
      std::string text;
      try {
        text = render_body(def->bodies[0], scope);
      } catch (...) {
        --macro_depth_;
        loop_depth_ = saved_depth;
        throw;
      }
      --macro_depth_;
      loop_depth_ = saved_depth;
      line_ = saved_line;
      return Value(text);
    });
  }

  Value eval(const Expr& e, const FramePtr& frame) {
    line_ = e.line;
    switch (e.kind) {
      case Expr::Kind::Literal: return e.value;
      case Expr::Kind::Name: return lookup(e.name, frame);
      case Expr::Kind::ListLit:
      case Expr::Kind::TupleLit: {
        List items;
        for (const ExprPtr& x : e.args) items.push_back(eval(*x, frame));
        return e.kind == Expr::Kind::TupleLit ? Value::tuple(std::move(items)) : Value::list(std::move(items));
      }
      case Expr::Kind::DictLit: {
        Dict d;
        for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
          Value key = eval(*e.args[k], frame);
          d.set(key, eval(*e.args[k + 1], frame));
        }
        return Value::dict(std::move(d));
      }
      case Expr::Kind::Attr: {
        Value obj = eval(*e.args[0], frame);
        line_ = e.line;
        spend_reading(obj);  // a string's method reads it
        return get_attr(obj, e.name);
      }
      case Expr::Kind::Item: {
        Value obj = eval(*e.args[0], frame);
        Value key = eval(*e.args[1], frame);
        line_ = e.line;
        spend_reading(obj);  // a string is walked to its k-th code point
        return get_item(obj, key);
      }
      case Expr::Kind::Slice: {
        Value obj = eval(*e.args[0], frame);
        auto part = [&](const ExprPtr& p) { return p ? eval(*p, frame) : Value::none(); };
        Value a = part(e.args[1]), b = part(e.args[2]), c = part(e.args[3]);
        line_ = e.line;
        return slice(obj, a, b, c);
      }
      case Expr::Kind::Call: {
        Value fn = eval(*e.args[0], frame);
        List args;
        Kwargs kwargs;
        for (size_t k = 1; k < e.args.size(); ++k) args.push_back(eval(*e.args[k], frame));
        for (const auto& [key, x] : e.kwargs) kwargs.emplace_back(key, eval(*x, frame));
        line_ = e.line;
        spend_reading(Value(), args);
        check_defined(fn);
        if (fn.is_dict())  // a recursive loop's loop(items)
          if (const Value* call = fn.as_dict().find("__call__")) fn = *call;
        if (fn.kind() != Value::Kind::Function) throw Error(str_cat("'", fn.type_name(), "' object is not callable"));
        return fn.as_function()(args, kwargs);
      }
      case Expr::Kind::Filter: {
        Value operand = e.args[0] ? eval(*e.args[0], frame) : block_text_;
        List args;
        Kwargs kwargs;
        for (size_t k = 1; k < e.args.size(); ++k) args.push_back(eval(*e.args[k], frame));
        for (const auto& [key, x] : e.kwargs) kwargs.emplace_back(key, eval(*x, frame));
        line_ = e.line;
        spend_reading(operand, args);
        return apply_filter(e.name, operand, args, kwargs);
      }
      case Expr::Kind::Test: {
        Value operand = eval(*e.args[0], frame);
        List args;
        for (size_t k = 1; k < e.args.size(); ++k) args.push_back(eval(*e.args[k], frame));
        line_ = e.line;
        spend_reading(operand, args);
        return Value(apply_test(e.name, operand, args) != e.negate);
      }
      case Expr::Kind::Unary: {
        Value v = eval(*e.args[0], frame);
        line_ = e.line;
        if (e.name == "not") return Value(!v.truthy());
        check_defined(v);
        if (!v.is_number()) throw Error(str_cat("bad operand type for unary ", e.name, ": '", v.type_name(), "'"));
        if (e.name == "+") return v.kind() == Value::Kind::Float ? v : Value(v.as_int());
        return v.kind() == Value::Kind::Float ? Value(-v.as_float()) : Value(sub(0, v.as_int()));
      }
      case Expr::Kind::Binary: {
        Value a = eval(*e.args[0], frame);
        if (e.name == "and") return a.truthy() ? eval(*e.args[1], frame) : a;
        if (e.name == "or") return a.truthy() ? a : eval(*e.args[1], frame);
        Value b = eval(*e.args[1], frame);
        line_ = e.line;
        spend_reading(a, {b});
        return arithmetic(e.name, a, b);
      }
      case Expr::Kind::Compare: {
        Value a = eval(*e.args[0], frame);
        for (size_t k = 0; k < e.ops.size(); ++k) {
          Value b = eval(*e.args[k + 1], frame);
          line_ = e.line;
          spend_reading(a, {b});
          if (!compare(e.ops[k], a, b)) return Value(false);
          a = std::move(b);
        }
        return Value(true);
      }
      case Expr::Kind::Cond:
        if (eval(*e.args[0], frame).truthy()) return eval(*e.args[1], frame);
        return e.args[2] ? eval(*e.args[2], frame) : Value::undefined("the condition was false and there is no else");
    }
    return Value();
  }

  const Program& p_;
  const Dict& context_;
  Budget& budget_;
  Value block_text_;
  std::string* root_ = nullptr;  // the render's own output
  std::vector<std::pair<std::size_t, std::size_t>>* generation_ = nullptr;
  int line_ = 0;
  int loop_depth_ = 0;
  int macro_depth_ = 0;
  static constexpr int kMaxMacroDepth = 100;
};

}  // namespace
}  // namespace detail

Template::Template(const std::string& source, TemplateOptions opts) : program_(detail::parse(source, opts)) {}

std::string Template::render(const Dict& context) const {
  detail::BudgetScope budget;
  return detail::Renderer(*program_, context).run();
}

std::string Template::render(const Dict& context, std::vector<std::pair<std::size_t, std::size_t>>* generation) const {
  detail::BudgetScope budget;
  return detail::Renderer(*program_, context).run(generation);
}

bool Template::has_generation() const { return program_->has_generation; }

}  // namespace xg::text::jinja
