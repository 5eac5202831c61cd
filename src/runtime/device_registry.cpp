#include "runtime/device_backend.h"

namespace gearbox::internal {

Result<std::shared_ptr<const DeviceBackend>> device_backend(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::kCpu: return cpu_backend();
    case DeviceKind::kCuda: return cuda_backend();
  }
  return invalid_argument("unknown device kind " + std::to_string(static_cast<int>(kind)));
}

}  // namespace gearbox::internal
