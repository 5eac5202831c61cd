// Streams and events behind gearbox::Stream. A StreamImpl is an in-order work queue;
// an Event marks a point in one and can be waited on. The CPU implementation runs work on
// a worker thread; the CUDA one (devices/cuda) wraps cudaStream_t / cudaEvent_t.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "gearbox/device.h"
#include "gearbox/status.h"

namespace gearbox::internal {

class Event;

class StreamImpl {
 public:
  virtual ~StreamImpl() = default;
  virtual DeviceKind kind() const noexcept = 0;
  /// Enqueues host-side work (CPU device). Returns the sticky error instead when the
  /// stream has already failed; the task is then not run.
  virtual Status enqueue(std::function<Status()> task) = 0;
  /// Marks the current end of the queue in `event`. Like cudaEventRecord after a fault,
  /// this fails with the sticky error once the stream knows it has failed.
  virtual Status record(Event& event) = 0;
  /// Waits for all enqueued work; returns the sticky error if any work failed.
  virtual Status synchronize() = 0;
};

/// Completion state shared by a CPU stream, its worker and the events recorded on it.
struct CpuQueueState {
  std::mutex mutex;
  std::condition_variable changed;
  uint64_t enqueued = 0;   // tasks ever enqueued
  uint64_t completed = 0;  // tasks finished (run or skipped)
  Status error;            // first failure (sticky)
};

/// The CPU stream: an in-order queue run by one worker thread.
class CpuStream final : public StreamImpl {
 public:
  CpuStream();
  ~CpuStream() override;  // drains the queue, then stops the worker
  CpuStream(const CpuStream&) = delete;
  CpuStream& operator=(const CpuStream&) = delete;

  DeviceKind kind() const noexcept override { return DeviceKind::kCpu; }
  Status enqueue(std::function<Status()> task) override;
  Status record(Event& event) override;
  Status synchronize() override;

 private:
  void run();

  std::shared_ptr<CpuQueueState> state_;
  std::deque<std::function<Status()>> queue_;  // guarded by state_->mutex
  bool stopping_ = false;                      // guarded by state_->mutex
  std::thread worker_;
};

/// A device's representation of a recorded point (a CPU queue index, a cudaEvent_t).
class EventImpl {
 public:
  virtual ~EventImpl() = default;
  virtual Status synchronize() = 0;
  virtual bool query() = 0;
};

/// A point in a stream's queue. Default-constructed events are complete. Recording again
/// moves the point; a stream may reuse the event's implementation.
class Event {
 public:
  /// Blocks until the recorded point has been reached. Returns the stream's sticky error
  /// when the work before it failed.
  Status synchronize() { return impl_ ? impl_->synchronize() : Status(); }
  /// True when the recorded point has been reached (or nothing was recorded).
  bool query() { return impl_ ? impl_->query() : true; }

  /// For StreamImpl::record implementations.
  std::shared_ptr<EventImpl>& impl() noexcept { return impl_; }

 private:
  std::shared_ptr<EventImpl> impl_;
};

}  // namespace gearbox::internal
