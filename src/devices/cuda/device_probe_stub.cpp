// The CUDA device entry points for a build without CUDA.
#include "devices/cuda/device_probe.h"
#include "devices/cuda/host_outputs.h"
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

void finish_device_background_work() {}

}  // namespace gearbox::internal

namespace gearbox::cuda {

HostMemoryKind host_memory_kind(const void* /*p*/, int64_t /*bytes*/) { return HostMemoryKind::kPageable; }
bool writes_output_to_host(const ir::Network& /*net*/, std::span<const uint32_t> /*tactics*/, size_t /*output*/) {
  return false;
}

}  // namespace gearbox::cuda
