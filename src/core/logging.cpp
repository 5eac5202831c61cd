#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <mutex>
#include <string>

#include "core/log.h"
#include "core/settings.h"

namespace gearbox {
namespace {

std::atomic<int>& level_storage() noexcept {
  // GEARBOX_LOG_LEVEL sets the initial level; set_log_level changes it.
  static std::atomic<int> level{static_cast<int>(internal::settings().log_level)};
  return level;
}

struct SinkState {
  std::mutex mutex;
  LogSink sink;
};

SinkState& sink_state() {
  static SinkState* state = new SinkState();  // never destroyed: logging may run at exit
  return *state;
}

const char* level_tag(LogLevel level) noexcept {
  switch (level) {
    case LogLevel::kDebug: return "debug";
    case LogLevel::kInfo: return "info";
    case LogLevel::kWarning: return "warning";
    case LogLevel::kError: return "error";
    case LogLevel::kOff: return "off";
  }
  return "?";
}

}  // namespace

void set_log_level(LogLevel level) noexcept { level_storage().store(static_cast<int>(level)); }

LogLevel log_level() noexcept { return static_cast<LogLevel>(level_storage().load()); }

void set_log_sink(LogSink sink) {
  SinkState& state = sink_state();
  std::lock_guard<std::mutex> lock(state.mutex);
  state.sink = std::move(sink);
}

namespace internal {

bool log_enabled(LogLevel level) noexcept {
  return level != LogLevel::kOff && static_cast<int>(level) >= level_storage().load(std::memory_order_relaxed);
}

void log_line(LogLevel level, const char* format, ...) noexcept {
  char buffer[1024];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buffer, sizeof(buffer), format, args);
  va_end(args);
  try {
    SinkState& state = sink_state();
    std::lock_guard<std::mutex> lock(state.mutex);
    if (state.sink) {
      state.sink(level, buffer);
    } else {
      std::fprintf(stderr, "gearbox %s: %s\n", level_tag(level), buffer);
    }
  } catch (...) {
    // A throwing sink must not take the runtime down; the line is lost.
  }
}

}  // namespace internal
}  // namespace gearbox
