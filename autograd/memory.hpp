// What a setting would allocate, checked before the work starts: this machine's memory and a
// one-line refusal naming the setting and the bytes it needs, instead of a bare std::bad_alloc
// (or minutes of swapping) after files were written.
#pragma once

#include <cstdint>
#include <string>

namespace xg {

// This machine's physical memory in bytes (sysconf); XGRAD_MEMORY_LIMIT (bytes) overrides it, so
// that a test can stand for a small machine.
double physical_memory_bytes();

// "1.5 GB", "320 MB", "12 KB", "100 B" (powers of 1024, 3 significant digits).
std::string byte_size(double bytes);

// The memory this process may still allocate: the least of physical_memory_bytes(), its
// container's limit (cgroup v2 memory.max) and what its address-space and data limits (ulimit -v,
// ulimit -d) leave beside what it already uses. `which` (optional) is set to the words naming the
// bound ("this machine's", "this process's remaining (ulimit -v)", ...). XGRAD_MEMORY_LIMIT, when
// set, is the only bound.
double usable_memory_bytes(std::string* which = nullptr);

// An xg::Error "WHAT needs about N GB, more than this machine's M GB of memory" when `bytes`
// exceed usable_memory_bytes() (the words name the bound). `what` names the setting and its value
// ("--batch 100000000").
void check_memory(double bytes, const std::string& what);

}  // namespace xg
