// The output folder of a trainer (xg-train, xg-finetune), owned by one run at a time: a lock held
// for the process's life, no silent reuse of a folder holding another run, --out never a model
// folder the run reads, leftovers of killed writers removed, and a resume that keeps its flags.
#pragma once

#include <boost/program_options.hpp>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace xg::cli {

struct RunDirOptions {
  bool overwrite = false;   // --overwrite: replace the run in a non-empty --out
  std::string allow_change;  // --allow-change: flags a --resume may change (comma list)
};

// --overwrite and --allow-change bound to `o`.
boost::program_options::options_description run_dir_flags(RunDirOptions& o);

// The flags a resumed run may change without --allow-change: they decide what is printed and
// when, never what is computed.
const std::set<std::string>& flags_free_on_resume();

// "crc32:<8 hex>" of the file at `path` (an input whose contents a resume must find unchanged).
std::string input_checksum(const std::string& path);

// The same for a model (a folder or one file): each file's name, size and contents (of a file
// over 16 MiB, its first and last MiB).
std::string model_checksum(const std::string& path);

class RunDir {
 public:
  // Claims `out` for `program`, in this order, so that a refused command changes no file:
  // - `out` may not be, hold or lie inside one of `inputs` ({flag, folder}, e.g. {"base", ...});
  // - creates it, then takes `out`/.lock (flock, released when the process ends, however it
  //   ends): another live run in `out` is an error naming its process;
  // - a folder already holding files is refused unless `resume` (continue it) or
  //   o.overwrite (it must hold a run, args.json, whose files are then removed);
  // - removes what writers killed mid-write left (`*.tmp.<pid>`, also in its subfolders),
  //   printing each.
  // Usage mistakes are UsageErrors (exit status 2); a folder in use, an xg::Error (status 1).
  // A refused command changes no file; a run that fails (its RunDir is destroyed by an
  // exception) before writing a checkpoint (checkpoint.safetensors) leaves `out` as it found it:
  // the folders it made are removed, and of a folder that was there, what the run added.
  // Files it rewrote (args.json, a log it appended to) stay as they are.
  RunDir(std::string program, std::string out, bool resume, const RunDirOptions& o,
         const std::vector<std::pair<std::string, std::string>>& inputs = {});
  ~RunDir();  // releases the lock; during an exception, first undoes the run (above)
  RunDir(const RunDir&) = delete;
  RunDir& operator=(const RunDir&) = delete;

  const std::string& path() const { return out_; }

  // Writes `args` (with its "flags": flags_json, and optionally "inputs": {flag: checksum of the
  // file, input_checksum}) to args.json. On a resume, first compares the flags and the inputs
  // with the recorded ones (paths, --out and the inputs' flags, only by whether they were given:
  // a run folder copied elsewhere resumes; the inputs by their checksums): a changed one that is
  // neither free (flags_free_on_resume) nor in
  // --allow-change is a UsageError naming it, both values and how to allow it; args.json then
  // stays as it was.
  void record_args(const nlohmann::json& args) const;

 private:
  // The checks and clean-up once the lock is held.
  void claim(const RunDirOptions& o, const std::string& lock);
  // Removes what the run added to out_ (unless it wrote a checkpoint), then the lock it made,
  // then the folders it made; never throws.
  void undo() noexcept;

  std::string program_, out_;
  std::vector<std::string> made_;   // the folders this run created, outermost first
  std::set<std::string> found_;     // what out_ held once claimed
  bool claimed_ = false;            // found_ is known: what is not in it, the run added
  bool lock_made_ = false;          // out_/.lock was made by this run
  std::string checkpoint_was_;      // the checkpoint's identity when claimed ("" = none)
  int exceptions_ = 0;              // std::uncaught_exceptions() at construction
  bool resume_;
  std::set<std::string> allowed_;
  std::set<std::string> paths_;  // the inputs' flags: their values are paths, compared by content
  int lock_fd_ = -1;
};

}  // namespace xg::cli
