// Process start to first token, as a user's fresh process meets it: `gearbox generate` run
// as a child process with a prompt of ids and one new token, timed from the spawn to the
// first line on its standard output (generate flushes it as soon as the token is known)
// and to its exit. `gearbox bench` reports the median over a few processes.
#pragma once

#include <string>
#include <vector>

#include "gearbox/status.h"

namespace gearbox::cli {

/// A line the child wrote to its stderr, and when it arrived.
struct ChildLine {
  double ms = 0;  ///< from the spawn
  std::string text;
};

struct ChildTiming {
  double first_line_ms = 0;         ///< from the spawn to the first line on the child's stdout
  double exit_ms = 0;               ///< from the spawn to the child's exit
  std::vector<ChildLine> messages;  ///< the child's stderr, a line each
};

/// Runs `argv` (argv[0] a path to the program) as a child process, with this process's
/// environment and `env` ("NAME=VALUE" entries, which replace inherited ones of the same
/// name), its stdout and stderr into pipes, and times it. kInternal with the child's stderr
/// (its tail) where it cannot start, prints no line, or exits with a status other than 0.
Result<ChildTiming> time_child(const std::vector<std::string>& argv, const std::vector<std::string>& env = {});

/// This executable's own path (/proc/self/exe).
Result<std::string> own_executable();

}  // namespace gearbox::cli
