#include "runtime/device_backend.h"

#include "core/log.h"

namespace gearbox::internal {

bool PinnedSource::take(DeviceBuffer& into, int64_t bytes, const std::string& what) {
  if (device_ == nullptr || unavailable_) return false;
  Result<DeviceBuffer> buf = device_->allocate_pinned(bytes);
  if (!buf.ok()) {
    GEARBOX_LOG(kWarning, "no page-locked memory for %s (%s)", what.c_str(), buf.status().to_string().c_str());
    return false;
  }
  if (*buf == nullptr) {
    unavailable_ = true;
    return false;
  }
  into = std::move(*buf);
  return true;
}

Result<std::shared_ptr<const DeviceBackend>> device_backend(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::kCpu: return cpu_backend();
    case DeviceKind::kCuda: return cuda_backend();
  }
  return invalid_argument("unknown device kind " + std::to_string(static_cast<int>(kind)));
}

}  // namespace gearbox::internal
