// physical_memory_bytes, byte_size, check_memory (see memory.hpp).
#include "autograd/memory.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "autograd/error.hpp"
#include "autograd/settings.hpp"

namespace xg {

double physical_memory_bytes() {
  if (const std::string& limit = settings().memory_limit; !limit.empty()) {
    char* end = nullptr;
    const double v = std::strtod(limit.c_str(), &end);
    check(end != limit.c_str() && *end == '\0' && v > 0, "XGRAD_MEMORY_LIMIT: expected a positive number of bytes, got '",
          limit, "'");
    return v;
  }
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  // NOTE: a system that cannot say has no limit here rather than a made-up one.
  if (pages <= 0 || page <= 0) return 1e300;
  return static_cast<double>(pages) * static_cast<double>(page);
}

std::string byte_size(double bytes) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB", "PB", "EB"};
  int u = 0;
  while (bytes >= 1024 && u < 6) {
    bytes /= 1024;
    ++u;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3g %s", bytes, units[u]);
  return buf;
}

namespace {

// Pages of this process's address space (statm's size) and of its data and stack (statm's
// data), which RLIMIT_AS and RLIMIT_DATA count; 0 when /proc cannot say.
std::pair<double, double> used_pages() {
  std::ifstream statm("/proc/self/statm");
  double size = 0, resident = 0, shared = 0, text = 0, lib = 0, data = 0;
  statm >> size >> resident >> shared >> text >> lib >> data;
  return statm ? std::pair{size, data} : std::pair{0.0, 0.0};
}

// The soft limit `resource` of this process minus what it already uses; -1 when unlimited.
double rlimit_left(int resource, double used_bytes) {
  rlimit lim{};
  if (::getrlimit(resource, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY) return -1;
  return std::max(0.0, static_cast<double>(lim.rlim_cur) - used_bytes);
}

// The cgroup (v2) memory.max of this process's group, as a container's limit; -1 when "max" or
// no such file.
double cgroup_limit() {
  std::ifstream f("/sys/fs/cgroup/memory.max");
  double v = -1;
  if (!(f >> v)) return -1;
  return v;
}

}  // namespace

double usable_memory_bytes(std::string* which) {
  double have = physical_memory_bytes();
  std::string what = "this machine's";
  if (!settings().memory_limit.empty()) {  // a test standing for a small machine: that alone
    if (which) *which = what;
    return have;
  }
  const auto [size, data] = used_pages();
  const double page = static_cast<double>(::sysconf(_SC_PAGE_SIZE));
  auto lower = [&](double v, const char* name) {
    if (v >= 0 && v < have) {
      have = v;
      what = name;
    }
  };
  lower(cgroup_limit(), "this container's (cgroup memory.max)");
  lower(rlimit_left(RLIMIT_AS, size * page), "this process's remaining (ulimit -v)");
  lower(rlimit_left(RLIMIT_DATA, data * page), "this process's remaining (ulimit -d)");
  if (which) *which = what;
  return have;
}

void check_memory(double bytes, const std::string& what) {
  std::string which;
  const double have = usable_memory_bytes(&which);
  check(bytes <= have, what, " needs about ", byte_size(bytes), ", more than ", which, " ", byte_size(have),
        " of memory");
}

}  // namespace xg
