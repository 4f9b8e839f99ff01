// RunDir (see run_dir.hpp): the lock, the checks on --out and the comparison of a resumed
// run's flags with its args.json.
#include "tools/cli/run_dir.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "autograd/error.hpp"
#include "io/atomic_file.hpp"
#include "io/safetensors.hpp"
#include "tools/cli/flags.hpp"

namespace xg::cli {

namespace fs = std::filesystem;
namespace po = boost::program_options;

namespace {

constexpr const char* kLock = ".lock";
// What a run can be resumed from (TrainLoop's): once it is written, a failed run is kept.
constexpr const char* kCheckpoint = "checkpoint.safetensors";

// `p` made absolute with its symlinks resolved as far as it exists (it need not).
fs::path canonical_path(const std::string& p) {
  std::error_code ec;
  fs::path c = fs::weakly_canonical(fs::absolute(p), ec);
  return ec ? fs::absolute(p).lexically_normal() : c;
}

// True when `inner` is `outer` or lies below it.
bool is_within(const fs::path& inner, const fs::path& outer) {
  const std::string i = inner.generic_string(), o = outer.generic_string();
  return i == o || (i.size() > o.size() && i.compare(0, o.size(), o) == 0 && (o.back() == '/' || i[o.size()] == '/'));
}

// "steps,--lr" -> {"steps", "lr"}.
std::set<std::string> flag_names(const std::string& list) {
  std::set<std::string> names;
  std::stringstream ss(list);
  for (std::string item; std::getline(ss, item, ',');) {
    while (!item.empty() && item[0] == '-') item.erase(0, 1);
    if (!item.empty()) names.insert(item);
  }
  return names;
}

// The entries of `dir` other than the lock file, by name.
std::vector<std::string> contents(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename() != kLock) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// Which file `path` is, its contents' last change included: "" when there is none. A rewrite
// (atomic: a new inode; in place: a new mtime or size) makes another identity.
std::string identity(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return "";
  return str_cat(st.st_dev, ":", st.st_ino, ":", st.st_size, ":", st.st_mtim.tv_sec, ".", st.st_mtim.tv_nsec);
}

std::string joined(const std::vector<std::string>& names, std::size_t at_most) {
  std::string s;
  for (std::size_t i = 0; i < names.size() && i < at_most; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > at_most) s += ", ...";
  return s;
}

}  // namespace

std::string model_checksum(const std::string& path) {
  // NOTE: a file of more than 16 MiB (the weights) counts by its size and its first and last
  // MiB, so that a resume does not read gigabytes to compare.
  constexpr std::uintmax_t kWhole = 16u << 20, kEnd = 1u << 20;
  std::vector<fs::path> files;
  if (fs::is_directory(path)) {
    for (const auto& e : fs::directory_iterator(path))
      if (e.is_regular_file()) files.push_back(e.path());
  } else {
    files.push_back(path);
  }
  std::sort(files.begin(), files.end());
  std::string all;
  for (const fs::path& p : files) {
    std::ifstream f(p, std::ios::binary);
    const std::uintmax_t size = fs::file_size(p);
    std::string bytes(static_cast<std::size_t>(std::min(size, kWhole)), '\0');
    if (size <= kWhole) {
      f.read(bytes.data(), static_cast<std::streamsize>(size));
    } else {
      f.read(bytes.data(), kEnd);
      f.seekg(static_cast<std::streamoff>(size - kEnd));
      f.read(bytes.data() + kEnd, kEnd);
      bytes.resize(2 * kEnd);
    }
    check(f.good(), p.string(), ": cannot read file");
    all += str_cat(p.filename().string(), " ", size, " ", io::crc32_hex(bytes), "\n");
  }
  return "crc32:" + io::crc32_hex(all);
}

po::options_description run_dir_flags(RunDirOptions& o) {
  po::options_description g = cli::flag_group("output folder");
  // clang-format off
  g.add_options()
    ("overwrite", po::bool_switch(&o.overwrite), "replace the run already in --out (its files are removed first)")
    ("allow-change", po::value(&o.allow_change)->default_value(o.allow_change),
     "with --resume: flags (comma list, without --) that may differ from the run's args.json, e.g. steps,lr");
  // clang-format on
  return g;
}

const std::set<std::string>& flags_free_on_resume() {
  // NOTE: --grad-accum too: a checkpoint resumes under any ranks x grad-accum with the same
  // product (the same micro-batches per step), which TrainLoop checks itself; and --zero, since
  // a checkpoint holds the full optimizer state either way; --overlap-grad-sum and --bucket-mb
  // change only how the gradient sums travel, not their bits.
  static const std::set<std::string> free = {"resume",       "overwrite",  "allow-change",     "threads",
                                             "log-every",    "grad-accum", "checkpoint-every", "eval-every",
                                             "sample-every", "detect-anomaly", "zero", "overlap-grad-sum", "bucket-mb"};
  return free;
}

std::string input_checksum(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  check(f.good(), path, ": cannot open file");
  std::ostringstream bytes;
  bytes << f.rdbuf();
  return "crc32:" + io::crc32_hex(bytes.str());
}

RunDir::RunDir(std::string program, std::string out, bool resume, const RunDirOptions& o,
               const std::vector<std::pair<std::string, std::string>>& inputs)
    : program_(std::move(program)), out_(std::move(out)), exceptions_(std::uncaught_exceptions()), resume_(resume) {
  require(!out_.empty(), "--out: expected a folder, got ''");
  allowed_ = flag_names(o.allow_change);
  const fs::path here = canonical_path(out_);
  require(!(resume_ && o.overwrite), "--resume continues the run in --out, --overwrite replaces it: give one");
  for (const auto& [flag, folder] : inputs) {
    paths_.insert(flag);
    if (folder.empty()) continue;  // an optional input not given
    const fs::path there = canonical_path(folder);
    require(!is_within(here, there) && !is_within(there, here),
            str_cat("--out ", out_, (here == there ? " is" : is_within(here, there) ? " is inside" : " holds"), " --", flag,
                    " ", folder, ": a run never writes where its inputs are"));
  }
  std::error_code ec;
  require(!fs::exists(out_, ec) || fs::is_directory(out_, ec), str_cat("--out ", out_, " is a file, expected a folder"));
  for (fs::path p = fs::absolute(out_).lexically_normal(); !p.empty() && !fs::exists(p, ec); p = p.parent_path()) {
    made_.insert(made_.begin(), p.string());
    if (p == p.parent_path()) break;
  }
  fs::create_directories(out_, ec);
  if (ec) undo();
  check(!ec, program_, ": cannot create --out ", out_, " (", ec.message(), ")");

  // The lock: flock, so that the kernel releases it when the process dies, however it dies.
  const std::string lock = out_ + "/" + kLock;
  const bool lock_existed = fs::exists(lock, ec);
  lock_made_ = !lock_existed;
  lock_fd_ = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd_ < 0) {
    const int e = errno;
    undo();
    throw Error(str_cat(program_, ": cannot open ", lock, " (", std::strerror(e), ")"));
  }
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    std::ifstream holder(lock);
    std::string pid;
    std::getline(holder, pid);
    ::close(lock_fd_);
    lock_fd_ = -1;
    throw Error(str_cat(program_, ": --out ", out_, " is in use by another run (process ", pid.empty() ? "?" : pid,
                        " holds ", lock, ")"));
  }
  try {
    claim(o, lock);
  } catch (...) {
    undo();  // a constructor that throws runs no destructor: undo and release the lock here
    ::close(lock_fd_);
    lock_fd_ = -1;
    throw;
  }
}

void RunDir::claim(const RunDirOptions& o, const std::string& lock) {
  std::error_code ec;
  const std::vector<std::string> held = contents(out_);
  if (!held.empty() && !resume_) {
    const bool is_run = fs::exists(out_ + "/args.json", ec);
    if (!o.overwrite || !is_run) {
      // Refused: the folder is left as it was found (the constructor removes a lock it made).
      require(false, o.overwrite ? str_cat("--overwrite: --out ", out_, " holds files but no run (no args.json: ",
                                           joined(held, 5), "); not removing them")
                                 : str_cat("--out ", out_, " already holds a run (", joined(held, 5),
                                           "): --resume continues it, --overwrite replaces it"));
    }
    for (const std::string& name : held) fs::remove_all(out_ + "/" + name);
    std::cout << program_ << ": --overwrite: removed the previous run's " << held.size() << " files from " << out_
              << "\n";
  }
  // Leftovers of writers killed mid-write, here and one folder down (merged/).
  std::vector<std::string> removed = io::remove_stale_temporaries(out_);
  for (const auto& e : fs::directory_iterator(out_))
    if (e.is_directory())
      for (const std::string& r : io::remove_stale_temporaries(e.path().string())) removed.push_back(r);
  for (const std::string& r : removed) std::cout << program_ << ": removed " << r << ", left by a run killed while writing\n";
  // What the run found, so that a failure removes only what it added.
  for (const auto& e : fs::directory_iterator(out_)) found_.insert(e.path().filename().string());
  checkpoint_was_ = identity(out_ + "/" + kCheckpoint);
  claimed_ = true;
  // Who holds the lock, for the message of a run refused beside this one; written only now,
  // so that a refused command leaves the file as it was.
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(lock_fd_, 0) != 0 || ::pwrite(lock_fd_, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size()))
    throw Error(str_cat(program_, ": cannot write ", lock, " (", std::strerror(errno), ")"));
}

void RunDir::undo() noexcept {
  std::error_code ec;
  if (claimed_) {
    // NOTE: a checkpoint this run wrote is a run to resume: then nothing is removed.
    const std::string now = identity(out_ + "/" + kCheckpoint);
    if (!now.empty() && now != checkpoint_was_) return;
    std::vector<fs::path> added;
    for (fs::directory_iterator it(out_, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (name != kLock && !found_.count(name)) added.push_back(it->path());
    }
    for (const fs::path& p : added) fs::remove_all(p, ec);
  }
  if (lock_made_) fs::remove(out_ + "/" + kLock, ec);
  for (auto it = made_.rbegin(); it != made_.rend(); ++it) fs::remove(*it, ec);  // each only if empty
}

RunDir::~RunDir() {
  // Destroyed by an exception: the run failed. (The lock file goes before the lock is
  // released; a run that opens it meanwhile makes its own.)
  if (std::uncaught_exceptions() > exceptions_) undo();
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the flock; the file stays for the next run
}

void RunDir::record_args(const nlohmann::json& args) const {
  const std::string path = out_ + "/args.json";
  if (resume_ && fs::exists(path)) {
    nlohmann::json before;
    try {
      before = nlohmann::json::parse(std::ifstream(path));
    } catch (const nlohmann::json::exception& e) {
      throw Error(str_cat(program_, ": --resume: ", path, " is not valid JSON (", e.what(), ")"));
    }
    const nlohmann::json was = before.value("flags", nlohmann::json::object()), now = args.at("flags");
    for (const std::string& k : allowed_)
      require(now.contains(k), str_cat("--allow-change: '", k, "' is not a flag of ", program_));
    std::set<std::string> names;
    for (const auto& [k, v] : was.items()) names.insert(k);
    for (const auto& [k, v] : now.items()) names.insert(k);
    for (const std::string& k : names) {
      if (flags_free_on_resume().count(k) || allowed_.count(k)) continue;
      // A path is a record, not the run's identity: a copied run folder, or data moved
      // elsewhere, resumes. What the path holds is compared below ("inputs"); here only
      // whether it was given.
      const bool is_path = k == "out" || paths_.count(k);
      auto text = [is_path](const nlohmann::json& j, const std::string& k) {
        if (!j.contains(k)) return std::string("not given");
        return is_path ? std::string("given") : j[k].dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      };
      const std::string a = text(was, k), b = text(now, k);
      require(a == b, str_cat("--resume: --", k, " was ", a, " in ", path, ", now ", b,
                              " (a resumed run keeps its settings; --allow-change ", k, " accepts the change)"));
    }
    // The inputs' contents: the same file name holding other data is another run.
    const nlohmann::json had = before.value("inputs", nlohmann::json::object()),
                         has = args.value("inputs", nlohmann::json::object());
    for (const auto& [k, v] : has.items()) {
      if (allowed_.count(k) || !had.contains(k) || had[k] == v) continue;  // (an older args.json: no checksum)
      throw UsageError(str_cat("--resume: the contents of --", k, " changed since ", path, " was written (",
                               had[k].get<std::string>(), " then, ", v.get<std::string>(), " now; --allow-change ", k,
                               " accepts the change)"));
    }
  }
  // A flag's value need not be UTF-8 (a --sample-prompt in Latin-1): its bytes become U+FFFD
  // rather than an exception (found by fuzz_flags).
  io::write_file_atomic(path, args.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n", program_);
}

}  // namespace xg::cli
