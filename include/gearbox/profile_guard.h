// gearbox/profile_guard.h: pin the optimization profile for the calls in a scope.
//
// A guard records a request for the current thread and nothing more: it never touches
// an engine. Every gearbox engine (standalone or behind the ExecuTorch delegate) reads
// the innermost request of its calling thread at the start of each execution, selects
// a profile with it (see gearbox/profile_selection.h) and validates the inputs.
//
//   {
//     gearbox::OptimizationProfileGuard pin(1);            // profile index 1
//     module.forward(prefill_inputs);
//   }
//   {
//     auto pin = gearbox::OptimizationProfileGuard::named("decode");
//     module.forward(decode_inputs);
//   }
//   {
//     auto pick = gearbox::OptimizationProfileGuard::automatic();  // from the shapes
//     module.forward(inputs);
//   }
//
// Guards nest: destroying one restores the request that was current when it was
// created. Destroy guards in the reverse order of their creation (scopes do this).
//
// Indices are per engine: when one program holds several engines whose profile lists
// differ, index 1 may mean prefill in one and decode in another. A name means the same
// regime in every engine that has it, so prefer named() in multi-engine programs. An
// engine with a single profile runs it whatever the pin (and logs that once).
#pragma once

#include <concepts>
#include <cstdint>
#include <limits>
#include <string_view>
#include <type_traits>

#include "gearbox/export.h"
#include "gearbox/profile_selection.h"

namespace gearbox {

/// Scoped, thread-local profile request. Not copyable, not movable.
class [[nodiscard]] GEARBOX_API OptimizationProfileGuard {
 public:
  /// Pins profile `index` for this thread until the guard is destroyed. Any integer type
  /// is accepted except bool; a negative index, or one too large for int64_t, is kept as
  /// given and is rejected by every engine when it executes.
  template <std::integral I>
  requires(!std::same_as<std::remove_cv_t<I>, bool>) explicit OptimizationProfileGuard(I index)
      : OptimizationProfileGuard(to_request(index)) {}
  OptimizationProfileGuard(bool) = delete;

  /// Automatic selection from the input shapes (sticky first-fit) for this scope.
  [[nodiscard]] static OptimizationProfileGuard automatic();
  /// Pins the profile called `name` for this scope.
  [[nodiscard]] static OptimizationProfileGuard named(std::string_view name);

  /// Restores the request that was current when this guard was created.
  ~OptimizationProfileGuard();

  OptimizationProfileGuard(const OptimizationProfileGuard&) = delete;
  OptimizationProfileGuard& operator=(const OptimizationProfileGuard&) = delete;
  OptimizationProfileGuard(OptimizationProfileGuard&&) = delete;
  OptimizationProfileGuard& operator=(OptimizationProfileGuard&&) = delete;

  /// This thread's innermost request; unset when no guard is alive on this thread.
  static ProfileRequest current();

 private:
  explicit OptimizationProfileGuard(ProfileRequest request);

  template <std::integral I>
  static ProfileRequest to_request(I index) noexcept {
    if constexpr (std::is_unsigned_v<I> && sizeof(I) >= sizeof(int64_t)) {
      if (index > static_cast<I>(std::numeric_limits<int64_t>::max())) {
        return ProfileRequest::pinned_beyond_int64();
      }
    } else if constexpr (sizeof(I) > sizeof(int64_t)) {  // signed and wider than int64_t
      if (index > static_cast<I>(std::numeric_limits<int64_t>::max())) {
        return ProfileRequest::pinned_beyond_int64();
      }
      if (index < static_cast<I>(std::numeric_limits<int64_t>::min())) {
        return ProfileRequest::pinned(std::numeric_limits<int64_t>::min());
      }
    }
    return ProfileRequest::pinned(static_cast<int64_t>(index));
  }

  ProfileRequest previous_;
};

}  // namespace gearbox
