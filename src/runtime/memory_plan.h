// Activation memory of one profile: an arena offset for every intermediate tensor, sized
// at the profile's max dims, with tensors whose lifetimes do not overlap sharing bytes.
// Network inputs and outputs are bound by the caller and get no arena space.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "gearbox/dims.h"
#include "ir/network.h"
#include "runtime/device_backend.h"

namespace gearbox::internal {

struct MemoryPlan {
  std::vector<int64_t> tensor_offset;  ///< per tensor; -1 for bound tensors
  int64_t scratch_offset = 0;          ///< node scratch (the largest any node needs)
  int64_t arena_bytes = 0;             ///< total, 64-byte multiple
};

/// Plans `net` at `max_dims` (every tensor's dims at the profile's max input dims) with
/// `tactics` (per node) on `device`.
MemoryPlan plan_memory(const ir::Network& net, std::span<const Dims> max_dims, std::span<const uint32_t> tactics,
                       const DeviceBackend& device);

}  // namespace gearbox::internal
