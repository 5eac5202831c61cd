// A host output that the CUDA device's kernels store into page-locked staging while they say,
// in progress slots, how much of it is there (cuda::GemvProgress): the host copies it on to
// the caller's memory as it lands, so that only its last part waits for the end of the work
// (host_outputs.h). Plain C++, built without CUDA too, so that its tests run on the CPU.
#pragma once

#include <cstdint>

namespace gearbox::internal {

/// One output on its way: `bytes` of `landed` (the staging the kernels store into) to go to
/// `dst`, of which the first `copied` have gone.
struct LandingCopy {
  uint32_t* slots = nullptr;  ///< `count` progress slots, raised by the device as it stores
  int32_t count = 0;
  const void* landed = nullptr;
  void* dst = nullptr;
  int64_t bytes = 0;
  int64_t copied = 0;
  int32_t lowest = 0;  ///< the slot that held the least at the last poll (read first next time)
};

/// Copies what the slots say has landed beyond `copied`; returns whether it copied anything.
/// A poll that finds nothing new reads one slot.
bool copy_landed(LandingCopy& c);

/// A pause in a loop that polls memory another agent writes.
void spin_pause();

}  // namespace gearbox::internal
