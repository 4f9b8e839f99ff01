// libFuzzer target: command-line values. The input is an argv (NUL-separated) parsed as the
// trainers parse theirs: the loop flags and the run folder's, every number flag checked
// (NaN, Inf, negative seeds), LoopOptions::validate, and the comma-list helpers on each value.
// Only usage errors (cli::UsageError, Boost's po::error) or xg::Error may come out.
#include <vector>

#include "fuzz/fuzz_util.hpp"
#include "tools/cli/flags.hpp"
#include "tools/cli/loop_flags.hpp"
#include "tools/cli/run_dir.hpp"

namespace cli = xg::cli;
namespace po = boost::program_options;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  std::vector<std::string> args{"prog"};
  std::string cur;
  for (std::size_t i = 0; i < size && args.size() < 64; ++i) {
    if (data[i] == 0) {
      args.push_back(cur);
      cur.clear();
    } else {
      cur += static_cast<char>(data[i]);
    }
  }
  args.push_back(cur);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  try {
    xg::finetune::LoopOptions o;
    cli::RunDirOptions r;
    int64_t batch = 1;
    double scale = 1;
    std::string list = "1";
    po::options_description opts("fuzz");
    opts.add_options()("help", "")("batch", po::value(&batch), "")("scale", po::value(&scale), "")(
        "list", po::value(&list), "");
    opts.add(cli::loop_flags(o, "seed"));
    opts.add(cli::run_dir_flags(r));
    po::variables_map vm;
    if (cli::parse(static_cast<int>(argv.size()), argv.data(), opts, vm, "usage")) return 0;
    cli::validate_loop(o, "prog");
    cli::parse_doubles("list", list, batch > 0, scale > 0);
    cli::parse_ints("list", list, batch);
    cli::flags_json(vm).dump(2, ' ', false, nlohmann::json::error_handler_t::replace);  // as RunDir writes args.json
  } catch (const cli::UsageError&) {
  } catch (const po::error&) {
  } catch (const xg::Error&) {
  }
  return 0;
}
