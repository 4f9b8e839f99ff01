// physical_memory_bytes, byte_size, check_memory (see memory.hpp).
#include "autograd/memory.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
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

void check_memory(double bytes, const std::string& what) {
  const double have = physical_memory_bytes();
  check(bytes <= have, what, " needs about ", byte_size(bytes), ", more than this machine's ", byte_size(have),
        " of memory");
}

}  // namespace xg
