#include "runtime/device_backend.h"

namespace gearbox::internal {

Result<std::shared_ptr<const DeviceBackend>> device_backend(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::kCpu: return cpu_backend();
    case DeviceKind::kCuda: return cuda_backend();
  }
  return invalid_argument("unknown device kind " + std::to_string(static_cast<int>(kind)));
}

Status check_device_runs(const DeviceBackend& device, const ir::Network& net) {
  if (net.slots == 0 || device.runs_batched_networks()) return {};
  return unimplemented("the network is batched (" + std::to_string(net.slots) + " KV-cache slots) and the " +
                       device_kind_name(device.kind()) +
                       " device has no batched kernels yet; use the cpu device, or build the engine with batch-1 "
                       "profiles (sequence bounds N, not BxS)");
}

}  // namespace gearbox::internal
