// write_file_atomic: temporary file + fsync + rename + fsync of the folder (POSIX).
#include "io/atomic_file.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "autograd/settings.hpp"
#include "autograd/tensor.hpp"

namespace xg::io {

namespace {

// fsync of an existing path (a file, or a folder opened read-only); false on failure.
bool sync_path(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::fsync(fd) == 0;
  ::close(fd);
  return ok;
}

std::string parent_dir(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// Fault injection for crash-safety tests: XGRAD_FAULT_KILL_IN_WRITE=<file name>:<n> makes
// the n-th write of a file with that name SIGKILL the process after the temporary file is
// written and before the rename, as a power cut or `kill -9` at the worst moment would.
void maybe_die_mid_write(const std::string& path) {
  const std::string& s = settings().fault_kill_in_write;
  static int writes = 0;
  if (s.empty()) return;
  const auto colon = s.rfind(':');
  const std::string name = s.substr(0, colon);
  if (path.size() < name.size() || path.compare(path.size() - name.size(), name.size(), name) != 0) return;
  if (++writes == std::atoi(s.c_str() + colon + 1)) ::raise(SIGKILL);
}

// The pid of a temporary's name, `<name>.tmp.<pid>` or `<name>.staged.<pid>` (save_adapter's),
// or -1 when `name` is not one.
pid_t temporary_pid(const std::string& name) {
  for (const char* mark : {".tmp.", ".staged."}) {
    const auto at = name.rfind(mark);
    if (at == std::string::npos) continue;
    const std::string digits = name.substr(at + std::strlen(mark));
    if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    return static_cast<pid_t>(std::stol(digits));
  }
  return -1;
}

// Seconds since the epoch when process `pid` started (/proc/<pid>/stat's starttime after
// /proc/stat's btime); -1 when /proc cannot say.
double process_start_time(pid_t pid) {
  std::ifstream stat(str_cat("/proc/", pid, "/stat")), system("/proc/stat");
  std::string line;
  if (!std::getline(stat, line)) return -1;
  // Fields after the command name, which may hold spaces and parentheses: state is field 3,
  // starttime field 22.
  std::istringstream rest(line.substr(line.rfind(')') + 1));
  std::string field;
  for (int i = 3; i <= 22 && rest >> field; ++i) {}
  double boot = -1;
  for (std::string key; system >> key;)
    if (key == "btime" && system >> boot) break;
  const long ticks = ::sysconf(_SC_CLK_TCK);
  if (!rest || boot < 0 || ticks <= 0) return -1;
  return boot + std::stod(field) / static_cast<double>(ticks);
}

// True when the temporary `path`, named for process `pid`, has no live writer: no such process
// exists (kill(pid, 0) fails with ESRCH; EPERM means it exists), it is a zombie its parent has
// not reaped yet (a `kill -9`ed run whose shell has not waited for it), or the process that
// now has the pid started after the file was last written, so it cannot be its writer (the pid
// was reused).
bool writer_gone(pid_t pid, const std::string& path) {
  if (::kill(pid, 0) != 0) return errno == ESRCH;
  std::ifstream stat(str_cat("/proc/", pid, "/stat"));
  std::string line;
  if (!std::getline(stat, line)) return false;
  const auto paren = line.rfind(')');
  if (paren != std::string::npos && paren + 2 < line.size() && (line[paren + 2] == 'Z' || line[paren + 2] == 'X'))
    return true;
  struct stat st {};
  const double started = process_start_time(pid);
  // NOTE: 2 s of slack for the clock ticks' rounding and a coarse file system clock.
  return started > 0 && ::stat(path.c_str(), &st) == 0 && started > static_cast<double>(st.st_mtime) + 2;
}

// Removes `e` when it is a temporary of a writer that is gone; returns whether it was.
bool remove_if_stale(const std::filesystem::directory_entry& e) {
  const pid_t pid = temporary_pid(e.path().filename().string());
  if (pid <= 0 || pid == ::getpid() || !writer_gone(pid, e.path().string())) return false;
  std::error_code ec;
  std::filesystem::remove_all(e.path(), ec);
  if (ec) throw Error(str_cat("remove_stale_temporaries: cannot remove ", e.path().string(), " (", ec.message(), ")"));
  return true;
}

// Removes `<path>.tmp.<pid>` left by dead writers of the same file: a run that never resumes
// still does not keep them once it writes the file again.
void remove_stale_siblings(const std::string& path) {
  const std::string prefix = path.substr(path.find_last_of('/') + 1) + ".tmp.";
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(parent_dir(path), ec)) {
    if (e.path().filename().string().rfind(prefix, 0) != 0) continue;
    const pid_t pid = temporary_pid(e.path().filename().string());
    if (pid > 0 && pid != ::getpid() && writer_gone(pid, e.path().string())) std::filesystem::remove_all(e.path(), ec);
  }
}

}  // namespace

void write_file_atomic(const std::string& path, const std::function<void(std::ostream&)>& write,
                       const std::string& who) {
  const std::string tmp = str_cat(path, ".tmp.", ::getpid());
  try {
    {
      std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
      if (!f) throw Error(str_cat(who, ": cannot open ", tmp, " for writing"));
      write(f);
      f.flush();
      if (!f) throw Error(str_cat(who, ": writing ", tmp, " failed (disk full?)"));
    }
    if (!sync_path(tmp, false)) throw Error(str_cat(who, ": cannot fsync ", tmp));
    maybe_die_mid_write(path);
    if (std::rename(tmp.c_str(), path.c_str()) != 0) throw Error(str_cat(who, ": cannot rename ", tmp, " to ", path));
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
  // The rename itself is durable once the folder's entry is on disk. A folder that cannot be
  // opened (rare: permissions) leaves the file complete, only its rename less durable.
  sync_path(parent_dir(path), true);
  remove_stale_siblings(path);
}

void write_file_atomic(const std::string& path, const std::string& bytes, const std::string& who) {
  write_file_atomic(path, [&](std::ostream& f) { f.write(bytes.data(), static_cast<std::streamsize>(bytes.size())); },
                    who);
}

std::vector<std::string> remove_stale_temporaries(const std::string& dir) {
  std::vector<std::string> removed;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (remove_if_stale(e)) removed.push_back(e.path().string());
  return removed;
}

}  // namespace xg::io
