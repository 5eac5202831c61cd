// Process start to first token, as a user's fresh process meets it: `gearbox generate` run
// as a child process with a prompt of ids and one new token, timed from the spawn to the
// first line on its standard output (generate flushes it as soon as the token is known)
// and to its exit. `gearbox bench` reports the median over a few processes.
#pragma once

#include <string>
#include <vector>

#include "gearbox/status.h"

namespace gearbox::cli {

struct ChildTiming {
  double first_line_ms = 0;  ///< from the spawn to the first line on the child's stdout
  double exit_ms = 0;        ///< from the spawn to the child's exit
};

/// Runs `argv` (argv[0] a path to the program) as a child process, its stdout into a pipe
/// and its stderr into a temporary file, and times it. kInternal with the child's stderr
/// (its tail) where it cannot start, prints no line, or exits with a status other than 0.
Result<ChildTiming> time_child(const std::vector<std::string>& argv);

/// This executable's own path (/proc/self/exe).
Result<std::string> own_executable();

}  // namespace gearbox::cli
