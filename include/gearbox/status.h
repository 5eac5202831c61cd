// gearbox/status.h: errors as values.
//
// Every fallible public call in gearbox returns a Status or a Result<T>. No exception
// crosses the public API. A Status carries a code (what kind of failure, for programs)
// and a message (what happened and what to do about it, for people).
//
//   gearbox::Result<gearbox::Engine> engine = gearbox::Engine::load("model.gbx");
//   if (!engine.ok()) {
//     std::fprintf(stderr, "%s\n", engine.status().to_string().c_str());
//     return 1;
//   }
#pragma once

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "gearbox/export.h"

namespace gearbox {

/// Kinds of failure. The numeric values are stable: they may be stored or compared.
enum class StatusCode : int32_t {
  kOk = 0,
  /// The caller passed a bad value: wrong rank, dtype, token id, flag.
  kInvalidArgument = 1,
  /// A named or indexed thing (profile, tensor, file) does not exist.
  kNotFound = 2,
  /// A value is outside the range the engine was built for (a shape no profile covers).
  kOutOfRange = 3,
  /// The call is not valid in the current state (e.g. reconfiguring during a run).
  kFailedPrecondition = 4,
  /// A file or buffer is malformed, truncated or corrupted.
  kDataLoss = 5,
  /// The feature is not supported by this build or device.
  kUnimplemented = 6,
  /// Memory (host or device) could not be allocated.
  kResourceExhausted = 7,
  /// A device or library call failed (CUDA, cuBLAS, the OS).
  kDeviceError = 8,
  /// A broken internal invariant that could be reported instead of aborting.
  kInternal = 9,
};

/// The name of a code, e.g. "InvalidArgument". Never null.
GEARBOX_API const char* status_code_name(StatusCode code) noexcept;

/// The outcome of a fallible call: kOk, or a code with an actionable message.
class [[nodiscard]] GEARBOX_API Status {
 public:
  /// A successful status.
  Status() = default;
  /// A status with `code` and `message`. A kOk code ignores the message.
  Status(StatusCode code, std::string message);

  /// A successful status (reads better at call sites than `Status()`).
  static Status ok_status() { return Status(); }

  /// True for success.
  bool ok() const noexcept { return code_ == StatusCode::kOk; }
  /// The kind of failure (kOk for success).
  StatusCode code() const noexcept { return code_; }
  /// What went wrong and what to do about it; empty for success.
  const std::string& message() const noexcept { return message_; }
  /// "InvalidArgument: <message>" or "Ok".
  std::string to_string() const;

  /// Returns a copy whose message is `context + ": " + message()`. Ok stays ok.
  Status with_context(std::string_view context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

/// Makes an error Status; a short spelling for `Status(StatusCode::k..., msg)`.
inline Status invalid_argument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status not_found(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status out_of_range(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status failed_precondition(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
inline Status data_loss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status resource_exhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
inline Status device_error(std::string m) { return {StatusCode::kDeviceError, std::move(m)}; }
inline Status internal_error(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

/// A value of type T, or the error Status explaining why there is none.
///
/// Constructing a Result from an ok Status is a programming error and aborts.
template <typename T>
class [[nodiscard]] Result {
 public:
  /// A successful result holding `value`.
  Result(T value) : value_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  /// A failed result; `status` must be an error.
  Result(Status status) : status_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    if (status_.ok()) std::abort();                     // a Result without a value needs a reason
  }

  /// True when a value is present.
  bool ok() const noexcept { return value_.has_value(); }
  /// The error, or an ok Status when a value is present.
  const Status& status() const noexcept { return status_; }

  // Access to the value: each accessor aborts when the result holds an error.

  /// The value.
  T& value() & { return checked(); }
  /// The value.
  const T& value() const& { return const_cast<Result*>(this)->checked(); }
  /// The value, moved out.
  T&& value() && { return std::move(checked()); }
  /// Member access to the value.
  T* operator->() { return &checked(); }
  /// Member access to the value.
  const T* operator->() const { return &const_cast<Result*>(this)->checked(); }
  /// The value.
  T& operator*() & { return checked(); }
  /// The value.
  const T& operator*() const& { return const_cast<Result*>(this)->checked(); }

 private:
  T& checked() {
    if (!value_.has_value()) std::abort();  // read the status before the value
    return *value_;
  }
  std::optional<T> value_;
  Status status_;
};

}  // namespace gearbox
