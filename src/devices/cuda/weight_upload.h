// Weights from the host (an engine file's mapping) to CUDA device memory at disk and PCIe
// speed: page-locked staging buffers filled by a few threads while the device copies out of
// those filled before (staged_copy.h). A single cudaMemcpy from pageable memory stages
// through the driver's own buffers on one thread, and with a file mapping it also takes the
// page faults of reading the file on that thread, one after the other.
//
//   GEARBOX_RETURN_IF_ERROR(upload_to_device(weights_base, payload));
#pragma once

#include <cstdint>
#include <span>

#include "devices/cuda/staged_copy.h"
#include "gearbox/status.h"

namespace gearbox::internal {

/// The staging the weight upload uses for `bytes`: up to 4 lanes (half the host's cores),
/// each with 2 page-locked buffers of 8 MiB.
StagingPlan weight_upload_plan(int64_t bytes);

/// Copies `src` to device memory at `dst` (src.size() bytes) through page-locked staging cut
/// as `plan` says (from plan_staging(src.size(), ...)), on the current device, and returns
/// once every byte has arrived. Where the page-locked memory cannot be allocated it copies
/// with one cudaMemcpy from `src` instead. On an error no copy is in flight and the staging
/// is freed. The caller holds cuda_capture_mutex (the staging is allocated and freed under it).
Status upload_to_device(void* dst, std::span<const uint8_t> src, const StagingPlan& plan);

/// The same with weight_upload_plan(src.size()).
Status upload_to_device(void* dst, std::span<const uint8_t> src);

}  // namespace gearbox::internal
