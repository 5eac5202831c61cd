// Host wall-clock time since a point on the steady clock: the one helper every timing of
// host work in gearbox (load phases, session creation, the CLI's benchmarks) reads.
#pragma once

#include <chrono>

namespace gearbox::internal {

/// Milliseconds from `start` to now on std::chrono::steady_clock.
inline double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace gearbox::internal
