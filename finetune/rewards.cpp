// The built-in GRPO rewards (exact, prefix, format, numeric), --reward's NAME[:WEIGHT], and the
// weighted sum TRL takes of several.
#include "finetune/rewards.hpp"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <memory>

#include "autograd/error.hpp"
#include "finetune/objectives.hpp"
#include "finetune/reward_process.hpp"
#include "text/regex.hpp"

namespace xg::finetune {

namespace {

// The number a piece of text spells, commas between digits dropped ("1,234" -> 1234); nullopt
// when it is not one number (strtod reads it whole).
std::optional<double> as_number(std::string s) {
  std::string t;
  for (std::size_t i = 0; i < s.size(); ++i)
    if (!(s[i] == ',' && i > 0 && i + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[i - 1])) &&
          std::isdigit(static_cast<unsigned char>(s[i + 1]))))
      t += s[i];
  const auto b = t.find_first_not_of(" \t\n$"), e = t.find_last_not_of(" \t\n.");
  if (b == std::string::npos || e < b) return std::nullopt;
  t = t.substr(b, e - b + 1);
  char* end = nullptr;
  const double v = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

// The content of the last \boxed{...}, braces balanced; nullopt when there is none (or it is not closed).
std::optional<std::string> last_boxed(const std::string& text) {
  const std::size_t at = text.rfind("\\boxed{");
  if (at == std::string::npos) return std::nullopt;
  int depth = 1;
  for (std::size_t i = at + 7; i < text.size(); ++i) {
    depth += text[i] == '{' ? 1 : text[i] == '}' ? -1 : 0;
    if (depth == 0) return text.substr(at + 7, i - at - 7);
  }
  return std::nullopt;
}

}  // namespace

std::optional<double> numeric_answer(const std::string& text) {
  if (const auto boxed = last_boxed(text)) return as_number(*boxed);
  // The last run of a sign, digits, commas between digits and one decimal point.
  std::optional<double> last;
  for (std::size_t i = 0; i < text.size();) {
    if (!std::isdigit(static_cast<unsigned char>(text[i]))) {
      ++i;
      continue;
    }
    std::size_t b = i;
    if (b > 0 && text[b - 1] == '-') --b;
    std::size_t e = i;
    bool point = false;
    while (e < text.size() && (std::isdigit(static_cast<unsigned char>(text[e])) ||
                               (text[e] == ',' && e + 1 < text.size() && std::isdigit(static_cast<unsigned char>(text[e + 1]))) ||
                               (text[e] == '.' && !point && e + 1 < text.size() &&
                                std::isdigit(static_cast<unsigned char>(text[e + 1]))))) {
      point = point || text[e] == '.';
      ++e;
    }
    last = as_number(text.substr(b, e - b));
    i = e;
  }
  return last;
}

Reward builtin_reward(const std::string& name, double weight, const std::string& format_regex) {
  check(std::isfinite(weight), "--reward ", name, ": the weight must be a finite number, got ", weight);
  if (name == "exact" || name == "prefix")
    return {name, [name](const RewardInput& in) { return grpo_reward(name, in.completion, in.answers); }, weight};
  if (name == "format") {
    auto re = std::make_shared<const text::Regex>(format_regex, "--format-regex");
    return {name,
            [re](const RewardInput& in) {
              bool at_start = false, first = true;
              re->for_each_match(in.completion, [&](std::size_t begin, std::size_t) {
                if (first) at_start = begin == 0;
                first = false;
              });
              return at_start ? 1.0 : 0.0;
            },
            weight};
  }
  if (name == "numeric")
    return {name,
            [](const RewardInput& in) {
              const std::optional<double> got = numeric_answer(in.completion);
              if (!got) return 0.0;
              for (const std::string& a : in.answers) {
                const std::optional<double> want = numeric_answer(a);
                if (want && std::abs(*got - *want) <= 1e-6 * std::max(1.0, std::abs(*want))) return 1.0;
              }
              return 0.0;
            },
            weight};
  throw Error(str_cat("--reward: expected exact, prefix, format or numeric (NAME or NAME:WEIGHT), got '", name, "'"));
}

Reward parse_reward(const std::string& spec, const std::string& format_regex) {
  const std::size_t colon = spec.find(':');
  if (colon == std::string::npos) return builtin_reward(spec, 1.0, format_regex);
  const std::string name = spec.substr(0, colon), w = spec.substr(colon + 1);
  char* end = nullptr;
  const double weight = std::strtod(w.c_str(), &end);
  check(!w.empty() && end == w.c_str() + w.size(), "--reward ", spec, ": expected NAME:WEIGHT with a number for WEIGHT");
  return builtin_reward(name, weight, format_regex);
}

double weighted_reward(const std::vector<Reward>& rewards, const RewardInput& in) {
  double total = 0;
  for (const Reward& r : rewards) total += r.weight * r.fn(in);
  return total;
}

Reward command_reward(const std::string& command, double timeout_seconds, double weight) {
  check(std::isfinite(weight), "--reward cmd: the weight must be a finite number, got ", weight);
  auto program = std::make_shared<RewardProcess>(command, timeout_seconds);
  return {"cmd",
          [program](const RewardInput& in) {
            nlohmann::ordered_json request = in.row.is_object() ? in.row : nlohmann::ordered_json::object();
            if (!request.contains("prompt")) request["prompt"] = in.prompt;
            if (!request.contains("answers")) request["answers"] = in.answers;
            request["completion"] = in.completion;
            return program->score(request, in.where.empty() ? std::string("a row") : in.where);
          },
          weight};
}

}  // namespace xg::finetune
