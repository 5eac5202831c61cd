// The CUDA device entry points for a build without CUDA.
#include "devices/cuda/device_probe.h"
#include "runtime/device_backend.h"

namespace gearbox::internal {

bool cuda_built() noexcept { return false; }
std::vector<DeviceInfo> cuda_devices() { return {}; }
Status cuda_probe(int /*index*/) {
  return unimplemented(
      "this gearbox was built without CUDA; rebuild with -DGEARBOX_WITH_CUDA=ON on a machine with nvcc");
}

Result<int64_t> cuda_memory_in_use() { return unimplemented("this gearbox was built without CUDA"); }

Result<std::shared_ptr<const DeviceBackend>> cuda_backend() {
  return unimplemented("this gearbox was built without CUDA; use --device cpu, or rebuild with -DGEARBOX_WITH_CUDA=ON");
}

}  // namespace gearbox::internal
