#include "devices/cuda/staged_copy.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

namespace gearbox::internal {

StagingPlan plan_staging(int64_t bytes, int32_t max_lanes, int32_t max_buffers, int64_t max_chunk_bytes) {
  if (bytes <= 0) return {};
  StagingPlan plan;
  plan.chunk_bytes = std::min(bytes, std::max<int64_t>(max_chunk_bytes, 1));
  plan.chunks = (bytes + plan.chunk_bytes - 1) / plan.chunk_bytes;
  plan.lanes = static_cast<int32_t>(std::min<int64_t>(std::max(max_lanes, 1), plan.chunks));
  const int64_t per_lane = (plan.chunks + plan.lanes - 1) / plan.lanes;
  plan.buffers = static_cast<int32_t>(std::min<int64_t>(std::max(max_buffers, 1), per_lane));
  return plan;
}

namespace {

// What the lanes share: the first error, and whether to stop.
class FirstError {
 public:
  void record(const Status& s) {
    if (s.ok()) return;
    const std::lock_guard<std::mutex> lock(mutex_);
    if (first_.ok()) first_ = s;
    stop_.store(true, std::memory_order_relaxed);
  }
  bool stopped() const { return stop_.load(std::memory_order_relaxed); }
  Status take() {
    const std::lock_guard<std::mutex> lock(mutex_);
    return first_;
  }

 private:
  std::mutex mutex_;
  Status first_;
  std::atomic<bool> stop_{false};
};

// Lane `l`'s chunks: l, l + lanes, ...
void run_lane(std::span<const uint8_t> src, const StagingPlan& plan, int32_t l, StagingLane& lane, FirstError& error) {
  Status s = lane.begin();
  int64_t k = 0;  // this lane's chunks so far
  for (int64_t chunk = l; s.ok() && chunk < plan.chunks && !error.stopped(); chunk += plan.lanes, ++k) {
    const auto b = static_cast<int32_t>(k % plan.buffers);
    const int64_t offset = chunk * plan.chunk_bytes;
    const int64_t bytes = std::min(plan.chunk_bytes, static_cast<int64_t>(src.size()) - offset);
    s = lane.wait(b);
    if (!s.ok()) break;
    std::memcpy(lane.buffer(b), src.data() + offset, static_cast<size_t>(bytes));
    s = lane.send(b, offset, bytes);
  }
  error.record(s);
  error.record(lane.finish());
}

}  // namespace

Status staged_copy(std::span<const uint8_t> src, const StagingPlan& plan, std::span<StagingLane* const> lanes) {
  if (plan.chunks == 0) return {};
  if (static_cast<int64_t>(lanes.size()) != plan.lanes || plan.buffers < 1 ||
      plan.chunks * plan.chunk_bytes < static_cast<int64_t>(src.size())) {
    return internal_error("staged_copy: a plan for " + std::to_string(plan.lanes) + " lanes with " +
                          std::to_string(lanes.size()) + " given, or one that does not cover the source");
  }
  FirstError error;
  std::vector<std::thread> threads;
  threads.reserve(lanes.size() - 1);
  for (int32_t l = 1; l < plan.lanes; ++l) {
    try {
      threads.emplace_back(run_lane, src, std::cref(plan), l, std::ref(*lanes[static_cast<size_t>(l)]),
                           std::ref(error));
    } catch (const std::system_error& e) {
      error.record(resource_exhausted(std::string("cannot start a thread to copy the weights: ") + e.what()));
      break;
    }
  }
  run_lane(src, plan, 0, *lanes[0], error);
  for (std::thread& t : threads) t.join();
  return error.take();
}

}  // namespace gearbox::internal
