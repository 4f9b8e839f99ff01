// Crash-safe file writing: a temporary file in the same folder, flushed, fsynced and renamed
// over the target, so a reader (or a crash) sees either the old file or the new one, never half.
#pragma once

#include <functional>
#include <ostream>
#include <string>
#include <vector>

namespace xg::io {

// Calls `write` on a stream into `<path>.tmp.<pid>`, then flushes and fsyncs it, renames it
// to `path` and fsyncs the folder; then removes the `<path>.tmp.<pid>` of dead processes. On any failure (including an exception from `write`) the
// temporary file is removed, `path` is untouched and an xg::Error names `who` and the file.
void write_file_atomic(const std::string& path, const std::function<void(std::ostream&)>& write,
                       const std::string& who);

// The same for a string of bytes.
void write_file_atomic(const std::string& path, const std::string& bytes, const std::string& who);

// Removes what writers killed mid-write left in `dir`: each `<name>.tmp.<pid>` (or save_adapter's
// `<name>.staged.<pid>`) file or folder whose writer is gone: process <pid> does not exist, is a
// zombie, or started after the file was last written (its pid was reused). A live writer's file
// stays. Returns the paths removed.
std::vector<std::string> remove_stale_temporaries(const std::string& dir);

}  // namespace xg::io
