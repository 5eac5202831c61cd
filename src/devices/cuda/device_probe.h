// CUDA device discovery and a smoke kernel. Without CUDA in the build these report no
// devices and every probe fails with kUnimplemented (device_probe_stub.cpp).
#pragma once

#include <vector>

#include "gearbox/device.h"
#include "gearbox/status.h"

namespace gearbox::internal {

bool cuda_built() noexcept;
/// Every CUDA device the driver reports; empty when there is no driver or GPU.
std::vector<DeviceInfo> cuda_devices();
/// Fills a buffer on device `index` with a kernel, copies it back and checks it.
Status cuda_probe(int index);
/// Bytes of the current device's memory in use by every process (total - free, as
/// cudaMemGetInfo sees it): differences of it measure what gearbox allocated.
Result<int64_t> cuda_memory_in_use();

}  // namespace gearbox::internal
