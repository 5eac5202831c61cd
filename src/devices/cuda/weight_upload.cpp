#include "devices/cuda/weight_upload.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <memory>
#include <thread>
#include <vector>

#include "devices/cuda/backend.h"

namespace gearbox::internal {
namespace {

constexpr int32_t kMaxLanes = 4;
constexpr int32_t kBuffersPerLane = 2;
constexpr int64_t kChunkBytes = int64_t{8} << 20;

// One lane: its share of the page-locked staging, a stream of its own and an event per
// buffer that says when the copy out of it has finished.
class CudaStagingLane final : public StagingLane {
 public:
  CudaStagingLane(int device, uint8_t* dst, uint8_t* staging, const StagingPlan& plan)
      : device_(device),
        dst_(dst),
        staging_(staging),
        chunk_bytes_(plan.chunk_bytes),
        events_(static_cast<size_t>(plan.buffers), nullptr),
        sent_(static_cast<size_t>(plan.buffers), false) {}
  CudaStagingLane(const CudaStagingLane&) = delete;
  CudaStagingLane& operator=(const CudaStagingLane&) = delete;
  ~CudaStagingLane() override {
    if (stream_ != nullptr) {
      (void)cudaStreamSynchronize(stream_);
      (void)cudaStreamDestroy(stream_);
    }
    for (cudaEvent_t e : events_) {
      if (e != nullptr) (void)cudaEventDestroy(e);
    }
  }

  /// Creates the stream and the events (on the calling thread's current device).
  Status create() {
    GEARBOX_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    for (cudaEvent_t& e : events_) GEARBOX_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return {};
  }

  Status begin() override { return cuda_check(cudaSetDevice(device_), "cudaSetDevice"); }
  uint8_t* buffer(int32_t b) override { return staging_ + static_cast<int64_t>(b) * chunk_bytes_; }
  Status wait(int32_t b) override {
    if (!sent_[static_cast<size_t>(b)]) return {};
    return cuda_check(cudaEventSynchronize(events_[static_cast<size_t>(b)]), "cudaEventSynchronize");
  }
  Status send(int32_t b, int64_t offset, int64_t bytes) override {
    GEARBOX_CUDA(
        cudaMemcpyAsync(dst_ + offset, buffer(b), static_cast<size_t>(bytes), cudaMemcpyHostToDevice, stream_));
    GEARBOX_CUDA(cudaEventRecord(events_[static_cast<size_t>(b)], stream_));
    sent_[static_cast<size_t>(b)] = true;
    return {};
  }
  Status finish() override { return cuda_check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }

 private:
  int device_;
  uint8_t* dst_;
  uint8_t* staging_;
  int64_t chunk_bytes_;
  cudaStream_t stream_ = nullptr;
  std::vector<cudaEvent_t> events_;
  std::vector<bool> sent_;
};

// Page-locked host memory, freed with cudaFreeHost (the caller holds cuda_capture_mutex).
struct PinnedFree {
  void operator()(uint8_t* p) const { (void)cudaFreeHost(p); }
};

}  // namespace

StagingPlan weight_upload_plan(int64_t bytes) {
  const auto cores = static_cast<int32_t>(std::thread::hardware_concurrency());
  return plan_staging(bytes, std::clamp(cores / 2, 1, kMaxLanes), kBuffersPerLane, kChunkBytes);
}

Status upload_to_device(void* dst, std::span<const uint8_t> src, const StagingPlan& plan) {
  if (src.empty()) return {};
  void* staging = nullptr;
  const int64_t staging_bytes = int64_t{plan.lanes} * plan.buffers * plan.chunk_bytes;
  const cudaError_t err = cudaHostAlloc(&staging, static_cast<size_t>(staging_bytes), cudaHostAllocDefault);
  if (err == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();  // not sticky; clears the error state
    GEARBOX_CUDA(cudaMemcpy(dst, src.data(), src.size(), cudaMemcpyHostToDevice));
    return {};
  }
  GEARBOX_CUDA(err);
  // Declared before the lanes: the lanes (which wait for their streams) go first.
  const std::unique_ptr<uint8_t, PinnedFree> owned(static_cast<uint8_t*>(staging));
  int device = 0;
  GEARBOX_CUDA(cudaGetDevice(&device));
  std::vector<std::unique_ptr<CudaStagingLane>> lanes;
  std::vector<StagingLane*> views;
  for (int32_t l = 0; l < plan.lanes; ++l) {
    uint8_t* lane_staging = owned.get() + int64_t{l} * plan.buffers * plan.chunk_bytes;
    lanes.push_back(std::make_unique<CudaStagingLane>(device, static_cast<uint8_t*>(dst), lane_staging, plan));
    GEARBOX_RETURN_IF_ERROR(lanes.back()->create());
    views.push_back(lanes.back().get());
  }
  return staged_copy(src, plan, views);
}

Status upload_to_device(void* dst, std::span<const uint8_t> src) {
  return upload_to_device(dst, src, weight_upload_plan(static_cast<int64_t>(src.size())));
}

}  // namespace gearbox::internal
