// Command-line flags (see flags.hpp): checked storing, --help, comma-separated lists, flags as JSON.
#include "tools/cli/flags.hpp"

#include "autograd/error.hpp"
#include "autograd/gemm_backend.hpp"
#include "autograd/memory.hpp"
#include "autograd/threads.hpp"

#include <cmath>
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <regex>
#include <sstream>
#include <typeinfo>

namespace xg::cli {

namespace {

// Splits `text` at commas and converts each item whole with `convert` (std::stod, std::stoll);
// an item it cannot read whole, or that `ok` rejects, is a UsageError naming what was expected.
template <typename T, typename Convert, typename Ok>
std::vector<T> parse_list(const std::string& flag, const std::string& text, const std::string& expected,
                          Convert convert, Ok ok) {
  std::vector<T> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    std::size_t used = 0;
    T v = 0;
    try {
      v = convert(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || !ok(v))
      throw UsageError("--" + flag + ": expected a comma-separated list of " + expected + ", got '" + text + "'");
    out.push_back(v);
  }
  if (out.empty()) throw UsageError("--" + flag + ": expected at least one value");
  return out;
}

}  // namespace

void store_checked(const po::parsed_options& parsed, po::variables_map& vm) {
  po::store(parsed, vm);
  for (const po::option& o : parsed.options) {
    auto it = vm.find(o.string_key);
    if (it == vm.end()) continue;
    const std::type_info& type = it->second.value().type();
    if (type == typeid(uint64_t))
      for (const std::string& v : o.value)
        if (v.find('-') != std::string::npos)
          throw UsageError("--" + o.string_key + ": expected an integer >= 0, got '" + v + "'");
    // No flag means NaN or Inf: "nan" compares false with every bound a later check sets, and
    // "inf" epochs or steps end as a garbage cast.
    if (type == typeid(double) && !std::isfinite(it->second.as<double>()))
      throw UsageError("--" + o.string_key + ": expected a finite number, got '" + o.value.front() + "'");
  }
}

po::options_description flag_group(const std::string& caption) {
  return po::options_description(caption, 100000, 50000);
}

namespace {

// "(=0.10000000000000001)" -> "(=0.1)": a default Boost wrote with 17 significant digits.
std::string short_default(const std::string& name) {
  static const std::regex long_number(R"(\(=(-?[0-9]+\.[0-9]{12,}(e[-+][0-9]+)?|-?[0-9]\.[0-9]{12,}e[-+][0-9]+)\))");
  std::smatch m;
  if (!std::regex_search(name, m, long_number)) return name;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.15g", std::stod(m[1].str()));
  return m.prefix().str() + "(=" + buf + ")" + m.suffix().str();
}

// `text` split into lines of at most `width` characters at spaces (a longer word gets a line).
std::vector<std::string> wrap_words(const std::string& text, std::size_t width) {
  std::vector<std::string> lines;
  std::istringstream words(text);
  std::string word, line;
  while (words >> word) {
    if (!line.empty() && line.size() + 1 + word.size() > width) {
      lines.push_back(line);
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
  }
  if (!line.empty()) lines.push_back(line);
  return lines;
}

}  // namespace

std::string help_text(const po::options_description& opts, std::size_t width) {
  std::ostringstream raw;
  raw << opts;
  // Each flag is one line "  --name arg (=default)  description" (flag_group does not wrap).
  struct Line {
    std::string text, name, description;
    bool flag = false;
  };
  std::vector<Line> lines;
  std::size_t column = 0;
  // Boost prints a flag as "  " + format_name() [+ " " + format_parameter()], padded, then its
  // description; the names are known, so each flag line splits where its name ends.
  std::vector<std::string> names;
  for (const auto& o : opts.options()) {
    const std::string param = o->format_parameter();
    names.push_back("  " + o->format_name() + (param.empty() ? "" : " " + param));
  }
  std::istringstream in(raw.str());
  for (std::string text; std::getline(in, text);) {
    Line l{text, "", "", false};
    std::size_t name_end = 0;
    for (const std::string& n : names)
      if (n.size() > name_end && text.compare(0, n.size(), n) == 0 &&
          (text.size() == n.size() || text[n.size()] == ' '))
        name_end = n.size();
    if (name_end > 0) {
      l.flag = true;
      l.name = short_default(text.substr(0, name_end));
      const std::size_t start = text.find_first_not_of(' ', name_end);
      if (start != std::string::npos) l.description = text.substr(start);
      column = std::max(column, l.name.size() + 2);
    }
    lines.push_back(l);
  }
  // A name longer than the column (a long default) gets its description on the next lines.
  column = std::min(column, width * 2 / 5);
  const std::size_t room = std::max<std::size_t>(40, width > column ? width - column : 0);
  std::string out;
  for (const Line& l : lines) {
    if (!l.flag) {
      out += l.text + "\n";
      continue;
    }
    const std::vector<std::string> desc = wrap_words(l.description, room);
    const bool own_line = l.name.size() + 2 > column;
    out += l.name;
    if (desc.empty() || own_line) out += "\n";
    for (std::size_t i = 0; i < desc.size(); ++i)
      out += std::string(i == 0 && !own_line ? column - l.name.size() : column, ' ') + desc[i] + "\n";
  }
  return out;
}

bool parse(int argc, char** argv, const po::options_description& opts, po::variables_map& vm,
           const std::string& usage) {
  store_checked(po::parse_command_line(argc, argv, opts), vm);
  if (vm.count("help")) {
    std::string footer;
    for (const std::string& line : {"float32 matrix products: " + gemm_backend_description(),
                                    "bf16 matrix products: " + bf16_gemm_description(),
                                    "xgrad's own kernels: " + build_kernels_description(),
                                    "threads: " + threads_description()}) {
      const std::vector<std::string> parts = wrap_words(line, 98);
      for (std::size_t i = 0; i < parts.size(); ++i) footer += (i ? "  " : "") + parts[i] + "\n";
    }
    std::cout << usage << "\n\n" << help_text(opts) << "\n" << footer;
    return true;
  }
  po::notify(vm);
  return false;
}

void require_memory(double bytes, const std::string& what) {
  try {
    check_memory(bytes, what);
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
}

std::vector<double> parse_doubles(const std::string& flag, const std::string& text, bool positive, bool finite) {
  return parse_list<double>(
      flag, text, positive ? "positive numbers" : "numbers",
      [](const std::string& s, std::size_t* used) { return std::stod(s, used); },
      [&](double v) { return (!finite || std::isfinite(v)) && (!positive || v > 0); });
}

std::vector<int64_t> parse_ints(const std::string& flag, const std::string& text, int64_t min,
                                const std::string& what) {
  return parse_list<int64_t>(
      flag, text, what.empty() ? "integers >= " + std::to_string(min) : what,
      [](const std::string& s, std::size_t* used) { return static_cast<int64_t>(std::stoll(s, used)); },
      [&](int64_t v) { return v >= min; });
}

nlohmann::json flags_json(const po::variables_map& vm) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [name, v] : vm) {
    const auto& val = v.value();
    if (val.type() == typeid(int64_t)) j[name] = v.as<int64_t>();
    else if (val.type() == typeid(uint64_t)) j[name] = v.as<uint64_t>();
    else if (val.type() == typeid(double)) j[name] = v.as<double>();
    else if (val.type() == typeid(std::string)) j[name] = v.as<std::string>();  // also --sweep: ""
    else if (val.type() == typeid(bool)) j[name] = v.as<bool>();  // po::bool_switch (--quick, --resume)
    else j[name] = true;
  }
  return j;
}

nlohmann::ordered_json parse_assignments(const std::string& flag, const std::vector<std::string>& items) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const std::string& item : items) {
    const std::size_t eq = item.find('=');
    require(eq != std::string::npos && eq > 0, "--" + flag + ": expected NAME=VALUE, got '" + item + "'");
    const std::string name = item.substr(0, eq), text = item.substr(eq + 1);
    require(!out.contains(name), "--" + flag + ": " + name + " is given twice");
    // NOTE: json parses only complete documents, so "1 2" or "tr" fall back to a string.
    nlohmann::ordered_json value = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
    out[name] = value.is_discarded() ? nlohmann::ordered_json(text) : value;
  }
  return out;
}

}  // namespace xg::cli
