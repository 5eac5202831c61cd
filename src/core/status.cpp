#include "gearbox/status.h"

#include <cstdio>

#include "core/check.h"

namespace gearbox {

const char* status_code_name(StatusCode code) noexcept {
  switch (code) {
    case StatusCode::kOk: return "Ok";
    case StatusCode::kInvalidArgument: return "InvalidArgument";
    case StatusCode::kNotFound: return "NotFound";
    case StatusCode::kOutOfRange: return "OutOfRange";
    case StatusCode::kFailedPrecondition: return "FailedPrecondition";
    case StatusCode::kDataLoss: return "DataLoss";
    case StatusCode::kUnimplemented: return "Unimplemented";
    case StatusCode::kResourceExhausted: return "ResourceExhausted";
    case StatusCode::kDeviceError: return "DeviceError";
    case StatusCode::kInternal: return "Internal";
  }
  return "Unknown";
}

Status::Status(StatusCode code, std::string message) : code_(code) {
  if (code_ != StatusCode::kOk) message_ = std::move(message);
}

std::string Status::to_string() const {
  if (ok()) return "Ok";
  return std::string(status_code_name(code_)) + ": " + message_;
}

Status Status::with_context(std::string_view context) const {
  if (ok()) return *this;
  return Status(code_, std::string(context) + ": " + message_);
}

namespace internal {

void check_failed(const char* condition, const char* file, int line, const char* detail) {
  std::fprintf(stderr, "gearbox: internal check failed at %s:%d: %s%s%s\n", file, line, condition,
               detail != nullptr ? ": " : "", detail != nullptr ? detail : "");
  std::fflush(stderr);
  std::abort();
}

}  // namespace internal
}  // namespace gearbox
