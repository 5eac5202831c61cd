// device_limits (launch.h): each device's limits queried once and kept for the process.
#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <mutex>

#include "devices/cuda/launch.h"

namespace gearbox::cuda {
namespace {

/// Attribute `attr` of `device`, or 0 where the query fails (its error cleared).
int attribute(cudaDeviceAttr attr, int device) {
  int value = 0;
  if (cudaDeviceGetAttribute(&value, attr, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return value;
}

DeviceLimits query(int device) {
  DeviceLimits limits;
  limits.device = device;
  limits.sm_count = attribute(cudaDevAttrMultiProcessorCount, device);
  limits.max_smem_per_block_optin = attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  limits.max_smem_per_sm = attribute(cudaDevAttrMaxSharedMemoryPerMultiprocessor, device);
  limits.cc_major = attribute(cudaDevAttrComputeCapabilityMajor, device);
  limits.cc_minor = attribute(cudaDevAttrComputeCapabilityMinor, device);
  limits.hopper_code_runs = limits.cc_major == 9;
  return limits;
}

}  // namespace

const DeviceLimits& device_limits(int device) {
  static std::mutex mutex;
  static std::map<int, std::unique_ptr<const DeviceLimits>> cache;  // never shrinks: references stay valid
  const std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<const DeviceLimits>& limits = cache[device];
  if (limits == nullptr) limits = std::make_unique<const DeviceLimits>(query(device));
  return *limits;
}

}  // namespace gearbox::cuda
