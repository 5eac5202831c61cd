// A large host-to-device copy (an engine's weights) through a few small staging buffers:
// the source is cut into chunks, and several lanes (threads) each copy their chunks into
// their own buffers while the device copies out of the buffers filled before, so that
// reading the source (from the page cache, or the disk through a mapping) overlaps the
// transfers and runs on several cores. The device side is a StagingLane: the CUDA device's
// holds page-locked buffers, a stream and an event per buffer (weight_upload.h); tests hold
// host memory. Plain C++, built without CUDA too, so that its tests run on the CPU.
//
//   const StagingPlan plan = plan_staging(bytes, kLanes, kBuffers, kChunkBytes);
//   // make plan.lanes lanes of plan.buffers buffers of plan.chunk_bytes each, then
//   GEARBOX_RETURN_IF_ERROR(staged_copy(src, plan, lanes));
#pragma once

#include <cstdint>
#include <span>

#include "gearbox/status.h"

namespace gearbox::internal {

/// How a copy of `bytes` is cut: `chunks` chunks of `chunk_bytes` (the last one shorter),
/// chunk i staged by lane i % lanes in its buffer (i / lanes) % buffers.
struct StagingPlan {
  int32_t lanes = 0;
  int32_t buffers = 0;  ///< per lane
  int64_t chunk_bytes = 0;
  int64_t chunks = 0;
};

/// The plan for `bytes` with at most `max_lanes` lanes of `max_buffers` buffers of
/// `max_chunk_bytes` (each >= 1): no more lanes than chunks, no more buffers than a lane has
/// chunks, and one chunk of exactly `bytes` when they fit in one. Zero bytes: all zeros.
StagingPlan plan_staging(int64_t bytes, int32_t max_lanes, int32_t max_buffers, int64_t max_chunk_bytes);

/// One lane's buffers and the device copies out of them. Each lane's calls come from one
/// thread: begin(), then per chunk wait(b), a host copy into buffer(b), send(b, ...), and
/// finish() last (also after an error, so that nothing is in flight when staged_copy returns).
class StagingLane {
 public:
  virtual ~StagingLane() = default;
  /// Prepares the calling thread (the CUDA lane makes its device current).
  virtual Status begin() = 0;
  /// Buffer `b` (< plan.buffers), plan.chunk_bytes long.
  virtual uint8_t* buffer(int32_t b) = 0;
  /// Returns once the last copy out of buffer `b` has finished (at once when there is none).
  virtual Status wait(int32_t b) = 0;
  /// Starts the copy of the first `bytes` of buffer `b` to `offset` of the destination.
  virtual Status send(int32_t b, int64_t offset, int64_t bytes) = 0;
  /// Returns once every copy this lane started has finished.
  virtual Status finish() = 0;
};

/// Copies `src` through `lanes` (plan.lanes of them, `plan` from plan_staging(src.size(),
/// ...)): lane 0 on the calling thread, the others on threads of their own. Returns the first
/// error of any lane; after it every lane stops at its next chunk, and when staged_copy
/// returns every lane has finished (no copy is in flight) and its threads have ended.
Status staged_copy(std::span<const uint8_t> src, const StagingPlan& plan, std::span<StagingLane* const> lanes);

}  // namespace gearbox::internal
