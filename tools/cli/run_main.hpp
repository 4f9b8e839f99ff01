// The main() of an executable as two steps, parsing its flags and running: every exception
// becomes one line on stderr and an exit status (2 for a usage error, 1 for any other failure).
#pragma once

#include <functional>

namespace xg::cli {

// Runs `parse_flags`, then `body` unless parse_flags returned a status >= 0 (0 after --help),
// turning exceptions into one line on stderr, "PROGRAM: WHAT":
// any exception while parsing (po::error, UsageError) -> 2, with " (see --help)";
// a UsageError in body -> 2, with " (see --help)"; any other exception in body -> 1 (an
// xg::Error already names the file, line or module). A message that already starts with
// "PROGRAM: " (the training loop's errors) is not prefixed twice.
// Under mpirun every rank parses the same flags, so only rank 0 reports a bad one; an error
// while running is reported by each rank that meets it (ranks other than 0 say which they are)
// and aborts the whole job, since the other ranks would wait for the failed one in a collective.
int run_main(const char* program, const std::function<int()>& parse_flags, const std::function<int()>& body);

}  // namespace xg::cli
