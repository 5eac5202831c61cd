// Internal logging: printf-style lines through the sink of gearbox/logging.h.
#pragma once

#include "gearbox/logging.h"

namespace gearbox::internal {

bool log_enabled(LogLevel level) noexcept;
[[gnu::format(printf, 2, 3)]] void log_line(LogLevel level, const char* format, ...) noexcept;

}  // namespace gearbox::internal

#define GEARBOX_LOG(level, ...)                                               \
  do {                                                                        \
    if (::gearbox::internal::log_enabled(::gearbox::LogLevel::level)) {       \
      ::gearbox::internal::log_line(::gearbox::LogLevel::level, __VA_ARGS__); \
    }                                                                         \
  } while (false)
