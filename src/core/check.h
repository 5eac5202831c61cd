// Internal invariant checks. A failed check is a bug in gearbox, not bad input: it
// prints the condition with file and line and aborts. Bad input gets a Status instead.
#pragma once

#include <cstdio>
#include <cstdlib>

namespace gearbox::internal {

[[noreturn]] void check_failed(const char* condition, const char* file, int line, const char* detail);

}  // namespace gearbox::internal

#define GEARBOX_CHECK(cond)                                                  \
  do {                                                                       \
    if (!(cond)) [[unlikely]] {                                              \
      ::gearbox::internal::check_failed(#cond, __FILE__, __LINE__, nullptr); \
    }                                                                        \
  } while (false)

#define GEARBOX_CHECK_MSG(cond, detail)                                       \
  do {                                                                        \
    if (!(cond)) [[unlikely]] {                                               \
      ::gearbox::internal::check_failed(#cond, __FILE__, __LINE__, (detail)); \
    }                                                                         \
  } while (false)

/// Returns the Status of `expr` from the enclosing function when it is an error.
#define GEARBOX_RETURN_IF_ERROR(expr)                  \
  do {                                                 \
    ::gearbox::Status gearbox_status_ = (expr);        \
    if (!gearbox_status_.ok()) return gearbox_status_; \
  } while (false)
