#include "devices/cuda/host_progress.h"

#include <algorithm>
#include <atomic>
#include <cstring>

namespace gearbox::internal {

bool copy_landed(LandingCopy& c) {
  // The device raises the slots while this reads them; an acquire load of a slot orders the
  // reads of the bytes it vouches for after it.
  const auto read = [&](int32_t i) {
    return static_cast<int64_t>(std::atomic_ref<uint32_t>(c.slots[i]).load(std::memory_order_acquire));
  };
  int64_t least = read(c.lowest);
  for (int32_t i = 0; i < c.count && least > c.copied; ++i) {
    if (const int64_t v = read(i); v < least) {
      least = v;
      c.lowest = i;
    }
  }
  const int64_t there = std::min(least, c.bytes);
  if (there <= c.copied) return false;
  std::memcpy(static_cast<char*>(c.dst) + c.copied, static_cast<const char*>(c.landed) + c.copied,
              static_cast<size_t>(there - c.copied));
  c.copied = there;
  return true;
}

void spin_pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace gearbox::internal
