// xg-tokenize: the token ids of each line of stdin, by a model folder's tokenizer (Hugging Face's
// tokenizer.json, or the byte tokenizer of an xgrad folder); with --decode, lines of ids back
// to text.
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/error.hpp"
#include "text/tokenizer.hpp"
#include "tools/cli/flags.hpp"
#include "tools/cli/run_main.hpp"
#include "tools/cli/threads.hpp"

namespace cli = xg::cli;
namespace po = boost::program_options;

namespace {

// The ids of one line of space-separated integers; line_no names it in an error.
std::vector<int64_t> parse_id_line(const std::string& line, int64_t line_no) {
  std::vector<int64_t> ids;
  std::istringstream in(line);
  for (std::string word; in >> word;) {
    std::size_t used = 0;
    int64_t id = -1;
    try {
      id = std::stoll(word, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    xg::check(used == word.size(), "stdin line ", line_no, ": \"", word, "\" is not a token id");
    ids.push_back(id);
  }
  return ids;
}

}  // namespace

int main(int argc, char** argv) {
  std::string folder;
  bool decode = false, add_special = false, skip_special = false;
  po::options_description opts = cli::flag_group("xg-tokenize options");
  // clang-format off
  opts.add_options()
    ("help", "show this help")
    ("tokenizer", po::value(&folder)->required(),
     "model folder: tokenizer.json (+ tokenizer_config.json), or an xgrad model (the byte tokenizer)")
    ("decode", po::bool_switch(&decode), "read lines of space-separated ids and print their text")
    ("add-special-tokens", po::bool_switch(&add_special), "add the tokenizer's special tokens (Llama's BOS) to each line")
    ("skip-special-tokens", po::bool_switch(&skip_special), "with --decode: leave the special tokens out of the text");
  // clang-format on
  int threads = 0;  // the tokenizers run on one thread; taken as every executable takes it
  opts.add(cli::threads_flag(threads));
  po::variables_map vm;
  return cli::run_main(
      "xg-tokenize",
      [&] {
        if (cli::parse(argc, argv, opts, vm,
                       "usage: xg-tokenize --tokenizer DIR [--decode] [--add-special-tokens] < lines"))
          return 0;
        cli::apply_threads(threads);
        cli::require(!(decode && add_special), "--add-special-tokens is for encoding; --decode takes ids");
        cli::require(decode || !skip_special, "--skip-special-tokens needs --decode");
        return -1;
      },
      [&] {
        const std::unique_ptr<xg::text::Tokenizer> tok = xg::text::load_tokenizer(folder);
        std::ios::sync_with_stdio(false);
        std::string line, out;
        int64_t line_no = 0;
        while (std::getline(std::cin, line)) {
          ++line_no;
          out.clear();
          if (decode) {
            out = tok->decode(parse_id_line(line, line_no), skip_special);
          } else {
            for (int64_t id : tok->encode(line, add_special)) {
              if (!out.empty()) out.push_back(' ');
              out += std::to_string(id);
            }
          }
          out.push_back('\n');
          std::cout << out;
        }
        std::cout.flush();
        return 0;
      });
}
