// write_file_atomic: temporary file + fsync + rename + fsync of the folder (POSIX).
#include "io/atomic_file.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

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
}

void write_file_atomic(const std::string& path, const std::string& bytes, const std::string& who) {
  write_file_atomic(path, [&](std::ostream& f) { f.write(bytes.data(), static_cast<std::streamsize>(bytes.size())); },
                    who);
}

std::vector<std::string> remove_stale_temporaries(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<std::string> removed;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const auto at = name.rfind(".tmp.");
    if (at == std::string::npos || at + 5 == name.size()) continue;
    const std::string digits = name.substr(at + 5);
    if (digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 9) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(digits));
    // kill(pid, 0) fails with ESRCH only when no such process exists (EPERM: it exists).
    if (pid <= 0 || ::kill(pid, 0) == 0 || errno != ESRCH) continue;
    fs::remove_all(e.path(), ec);
    if (ec) throw Error(str_cat("remove_stale_temporaries: cannot remove ", e.path().string(), " (", ec.message(), ")"));
    removed.push_back(e.path().string());
  }
  return removed;
}

}  // namespace xg::io
