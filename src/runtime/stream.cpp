#include "gearbox/stream.h"

#include "runtime/device_backend.h"
#include "runtime/stream_impl.h"

namespace gearbox {
namespace internal {
namespace {

class CpuEvent final : public EventImpl {
 public:
  CpuEvent(std::shared_ptr<CpuQueueState> state, uint64_t target) : state_(std::move(state)), target_(target) {}
  Status synchronize() override {
    std::unique_lock<std::mutex> lock(state_->mutex);
    state_->changed.wait(lock, [&] { return state_->completed >= target_; });
    return state_->error;
  }
  bool query() override {
    std::lock_guard<std::mutex> lock(state_->mutex);
    return state_->completed >= target_;
  }

 private:
  std::shared_ptr<CpuQueueState> state_;
  uint64_t target_;
};

}  // namespace

CpuStream::CpuStream() : state_(std::make_shared<CpuQueueState>()), worker_([this] { run(); }) {}

CpuStream::~CpuStream() {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    stopping_ = true;
  }
  state_->changed.notify_all();
  worker_.join();
}

Status CpuStream::enqueue(std::function<Status()> task) {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    if (!state_->error.ok()) return state_->error;
    queue_.push_back(std::move(task));
    ++state_->enqueued;
  }
  state_->changed.notify_all();
  return {};
}

Status CpuStream::record(Event& event) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  if (!state_->error.ok()) return state_->error;
  event.impl() = std::make_shared<CpuEvent>(state_, state_->enqueued);
  return {};
}

Status CpuStream::synchronize() {
  std::unique_lock<std::mutex> lock(state_->mutex);
  state_->changed.wait(lock, [&] { return state_->completed == state_->enqueued; });
  return state_->error;
}

void CpuStream::run() {
  std::unique_lock<std::mutex> lock(state_->mutex);
  for (;;) {
    state_->changed.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and everything has run
    std::function<Status()> task = std::move(queue_.front());
    queue_.pop_front();
    const bool skip = !state_->error.ok();  // a failed stream runs nothing more
    lock.unlock();
    Status status = skip ? Status() : task();
    task = nullptr;  // release captures outside the lock
    lock.lock();
    if (!status.ok() && state_->error.ok()) state_->error = std::move(status);
    ++state_->completed;
    state_->changed.notify_all();
  }
}

}  // namespace internal

Result<Stream> Stream::create(DeviceKind kind, int32_t index) {
  if (index != 0) {
    return not_found(std::string("gearbox uses ") + device_kind_name(kind) + " device 0 only, not " +
                     std::to_string(index));
  }
  Result<std::shared_ptr<const internal::DeviceBackend>> backend = internal::device_backend(kind);
  if (!backend.ok()) return backend.status();
  Result<std::shared_ptr<internal::StreamImpl>> impl = (*backend)->create_stream();
  if (!impl.ok()) return impl.status();
  return Stream(std::move(*impl));
}

Status Stream::synchronize() { return impl_->synchronize(); }

DeviceKind Stream::device() const noexcept { return impl_->kind(); }

}  // namespace gearbox
