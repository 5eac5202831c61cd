// gearbox/logging.h: where gearbox's log lines go, and how many of them.
//
// gearbox logs rarely: once per engine for a pin it had to ignore, at debug level for
// profile switches, and on errors. By default lines at kInfo and above go to stderr.
// The environment variable GEARBOX_LOG_LEVEL (debug, info, warning, error, off) sets the
// initial level.
//
//   gearbox::set_log_sink([](gearbox::LogLevel level, std::string_view line) {
//     my_logger.write(line);
//   });
#pragma once

#include <functional>
#include <string_view>

#include "gearbox/export.h"

namespace gearbox {

/// Severity of a log line, lowest first.
enum class LogLevel : int { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3, kOff = 4 };

/// Receives each log line (without a trailing newline). Called under a lock: keep it short
/// and do not call back into gearbox's logging from it.
using LogSink = std::function<void(LogLevel level, std::string_view line)>;

/// Lines below `level` are dropped. Thread-safe.
GEARBOX_API void set_log_level(LogLevel level) noexcept;
/// The current threshold. Thread-safe.
GEARBOX_API LogLevel log_level() noexcept;
/// Replaces the sink; an empty function restores the default (stderr). Thread-safe.
GEARBOX_API void set_log_sink(LogSink sink);

}  // namespace gearbox
