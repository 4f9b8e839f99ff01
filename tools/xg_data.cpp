// xg-data: prepares the finetune datasets from Debian's packages extracted with dpkg -x
// (r-cran-janeaustenr: pre-training text; wordnet-base: SFT, DPO and GRPO rows).
#include <boost/program_options.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "autograd/error.hpp"
#include "finetune/data/rdata.hpp"
#include "finetune/data/wordnet.hpp"
#include "tools/cli/flags.hpp"
#include "tools/cli/output.hpp"
#include "tools/cli/threads.hpp"

namespace po = boost::program_options;
namespace fs = std::filesystem;
namespace wn = xg::finetune::wordnet;
using json = nlohmann::ordered_json;  // keys in the order written: prompt first
using xg::str_cat;

namespace {

// Publication order; the held-out novel is left out of austen_train.txt.
const std::vector<std::pair<std::string, std::string>> kNovels = {
    {"sensesensibility", "Sense and Sensibility"}, {"prideprejudice", "Pride and Prejudice"},
    {"mansfieldpark", "Mansfield Park"},           {"emma", "Emma"},
    {"northangerabbey", "Northanger Abbey"},       {"persuasion", "Persuasion"}};

using xg::cli::UsageError;

// Files are written as <name>.tmp and renamed only once every file was written.
class Writer {
 public:
  explicit Writer(fs::path dir) : dir_(std::move(dir)) {}
  ~Writer() {
    for (const auto& [name, tmp] : pending_) fs::remove(tmp);
  }
  void write(const std::string& name, const std::string& text) {
    const fs::path tmp = dir_ / (name + ".tmp");
    std::ofstream f(tmp, std::ios::binary);
    if (!f) throw xg::Error(str_cat(tmp.string(), ": cannot create file"));
    pending_.emplace_back(name, tmp);
    f.write(text.data(), static_cast<std::streamsize>(text.size()));
    f.close();
    if (!f) throw xg::Error(str_cat(tmp.string(), ": write failed"));
    sizes_[name] = text.size();
  }
  void commit() {
    for (const auto& [name, tmp] : pending_) fs::rename(tmp, dir_ / name);
    pending_.clear();
  }
  std::size_t size(const std::string& name) const { return sizes_.at(name); }

 private:
  fs::path dir_;
  std::vector<std::pair<std::string, fs::path>> pending_;
  std::map<std::string, std::size_t> sizes_;
};

std::string dump_line(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n"; }

template <class Rows, class ToJson>
std::string jsonl(const Rows& rows, ToJson to_json) {
  std::string s;
  for (const auto& r : rows) s += dump_line(to_json(r));
  return s;
}

// "wordnet-base 1:3.0-37": the version from the package's changelog.Debian.gz ("<pkg>" when absent).
std::string package_version(const fs::path& pkgs, const std::string& pkg) {
  const fs::path p = pkgs / "usr/share/doc" / pkg / "changelog.Debian.gz";
  std::ifstream f(p, std::ios::binary);
  if (!f) return pkg;
  std::string gz((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const std::string text = xg::finetune::rdata::inflate(gz, p.string(), -1, true, std::size_t(16) << 20);
  const std::string first = text.substr(0, text.find('\n'));
  const std::size_t open = first.find('('), close = first.find(')');
  return open == std::string::npos || close < open ? pkg : pkg + " " + first.substr(open + 1, close - open - 1);
}

int run(const fs::path& pkgs, const fs::path& out, const std::string& heldout_novel, double fraction, uint64_t seed) {
  const fs::path austen_base = pkgs / "usr/lib/R/site-library/janeaustenr/data/Rdata";
  const fs::path wordnet_dir = pkgs / "usr/share/wordnet";
  fs::create_directories(out);
  Writer w(out);
  json manifest = {{"generator", str_cat("xg-data ", xg::cli::git_revision())},
                   {"heldout_novel", heldout_novel},
                   {"heldout_fraction", fraction},
                   {"seed", seed}};

  // --- Jane Austen: one line per R string, novels separated by a blank line.
  const auto novels = xg::finetune::rdata::read_lazyload_character_vectors(austen_base.string());
  std::string train, heldout;
  json novel_info = json::object();
  for (const auto& [key, title] : kNovels) {
    auto it = novels.find(key);
    if (it == novels.end()) throw xg::Error(str_cat(austen_base.string(), ".rdx: no variable '", key, "'"));
    std::string text;
    for (const auto& line : it->second) text += line + "\n";
    novel_info[key] = {{"title", title}, {"lines", it->second.size()}, {"bytes", text.size()}};
    std::string& dst = key == heldout_novel ? heldout : train;
    if (!dst.empty()) dst += "\n";
    dst += text;
  }
  w.write("austen_train.txt", train);
  w.write("austen_heldout.txt", heldout);
  manifest["austen"] = {{"source", str_cat(package_version(pkgs, "r-cran-janeaustenr"), " ",
                                           fs::relative(austen_base, pkgs).string(), ".rdb/.rdx")},
                        {"novels", novel_info},
                        {"train_bytes", train.size()},
                        {"heldout_bytes", heldout.size()}};

  // --- WordNet 3.0.
  const wn::WordNet net = wn::WordNet::load(wordnet_dir.string());
  const wn::Datasets d = wn::build_datasets(net, wn::LemmaSplit{fraction, seed});
  auto sft = [](const wn::SftRow& r) { return json{{"prompt", r.prompt}, {"response", r.response}}; };
  auto dpo = [](const wn::DpoRow& r) { return json{{"prompt", r.prompt}, {"chosen", r.chosen}, {"rejected", r.rejected}}; };
  auto grpo = [](const wn::GrpoRow& r) { return json{{"prompt", r.prompt}, {"answers", r.answers}}; };
  std::map<std::string, std::size_t> rows;  // file -> rows, for the manifest and the summary
  auto write_split = [&](const std::string& stem, const auto& split, const auto& to_json) {
    w.write(stem + "_train.jsonl", jsonl(split.train, to_json));
    w.write(stem + "_heldout.jsonl", jsonl(split.heldout, to_json));
    rows[stem + "_train.jsonl"] = split.train.size();
    rows[stem + "_heldout.jsonl"] = split.heldout.size();
  };
  write_split("sft", d.sft, sft);
  write_split("dpo", d.dpo, dpo);
  write_split("dpo_antonym", d.dpo_antonym, dpo);
  write_split("grpo", d.grpo, grpo);
  write_split("pos_sft", d.pos_sft, sft);
  write_split("pos_dpo", d.pos_dpo, dpo);
  write_split("pos_grpo", d.pos_grpo, grpo);
  manifest["wordnet"] = {
      {"source", str_cat(package_version(pkgs, "wordnet-base"), " ", fs::relative(wordnet_dir, pkgs).string(),
                         "/{data,index}.{noun,verb,adj,adv}")},
      {"synsets", net.synset_count()}};

  json files = json::object();
  files["austen_train.txt"] = {{"bytes", w.size("austen_train.txt")}};
  files["austen_heldout.txt"] = {{"bytes", w.size("austen_heldout.txt")}};
  for (const auto& [name, n] : rows) files[name] = {{"rows", n}, {"bytes", w.size(name)}};
  manifest["files"] = files;
  w.write("manifest.json", manifest.dump(2) + "\n");
  w.commit();

  std::string held_title;
  for (const auto& [key, title] : kNovels) if (key == heldout_novel) held_title = title;
  std::printf("austen_train.txt: %zu bytes (%zu novels)\n", train.size(), kNovels.size() - 1);
  std::printf("austen_heldout.txt: %zu bytes (%s)\n", heldout.size(), held_title.c_str());
  for (const auto& [name, n] : rows) std::printf("%s: %zu rows, %zu bytes\n", name.c_str(), n, w.size(name));
  std::printf("manifest.json: %zu synsets, seed %llu, held-out fraction %g\n", net.synset_count(),
              static_cast<unsigned long long>(seed), fraction);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string pkgs, out, heldout_novel;
  double fraction = 0.05;
  uint64_t seed = 0;
  po::options_description opts = xg::cli::flag_group(
      "xg-data: writes the finetune datasets (austen_*.txt, sft/dpo/grpo_*.jsonl, pos_*.jsonl,\n"
      "manifest.json)\n"
      "from r-cran-janeaustenr and wordnet-base extracted with dpkg -x (see scripts/data.sh)");
  opts.add_options()
    ("help", "show this help")
    ("pkgs", po::value<std::string>(&pkgs), "folder the .deb packages were extracted into (dpkg -x)")
    ("out", po::value<std::string>(&out), "folder to write the datasets into")
    ("heldout-novel", po::value<std::string>(&heldout_novel)->default_value("persuasion"),
     "janeaustenr name of the novel held out of austen_train.txt")
    ("heldout-fraction", po::value<double>(&fraction)->default_value(0.05),
     "fraction of WordNet lemmas held out of every *_train.jsonl")
    ("seed", po::value<uint64_t>(&seed)->default_value(0), "seed of the lemma split and DPO sibling choice");
  int threads = 0;
  opts.add(xg::cli::threads_flag(threads));
  try {
    po::variables_map vm;
    xg::cli::store_checked(po::parse_command_line(argc, argv, opts), vm);
    po::notify(vm);
    xg::cli::apply_threads(threads);
    if (vm.count("help")) {
      std::cout << xg::cli::help_text(opts) << "\n";
      return 0;
    }
    if (pkgs.empty()) throw UsageError("--pkgs is required");
    if (out.empty()) throw UsageError("--out is required");
    if (!(fraction > 0 && fraction < 1)) throw UsageError(str_cat("--heldout-fraction ", fraction, " must be in (0, 1)"));
    bool known = false;
    for (const auto& [key, title] : kNovels) known = known || key == heldout_novel;
    if (!known)
      throw UsageError(str_cat("--heldout-novel '", heldout_novel, "' is not one of sensesensibility, prideprejudice, "
                               "mansfieldpark, emma, northangerabbey, persuasion"));
    if (!fs::is_directory(pkgs)) throw UsageError(str_cat("--pkgs ", pkgs, ": not a directory"));
  } catch (const std::exception& e) {
    std::cerr << "xg-data: " << e.what() << " (see --help)\n";
    return 2;
  }
  try {
    return run(pkgs, out, heldout_novel, fraction, seed);
  } catch (const std::exception& e) {
    std::cerr << "xg-data: " << e.what() << "\n";
    return 1;
  }
}
