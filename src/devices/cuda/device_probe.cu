#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "devices/cuda/device_probe.h"

namespace gearbox::internal {
namespace {

// out[i] = i * 3 + 1 for i in [0, n): every element written, each a distinct value.
__global__ void probe_kernel(int* out, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) out[i] = i * 3 + 1;
}

Status cuda_status(cudaError_t err, const char* call) {
  return device_error(std::string(call) + " failed: " + cudaGetErrorString(err));
}

#define GEARBOX_CUDA_TRY(call)                                \
  do {                                                        \
    const cudaError_t err_ = (call);                          \
    if (err_ != cudaSuccess) return cuda_status(err_, #call); \
  } while (false)

}  // namespace

bool cuda_built() noexcept { return true; }

std::vector<DeviceInfo> cuda_devices() {
  std::vector<DeviceInfo> devices;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // no driver or no GPU: not an error for discovery
    return devices;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    DeviceInfo d;
    d.kind = DeviceKind::kCuda;
    d.index = i;
    d.name = prop.name;
    d.compute_capability = prop.major * 10 + prop.minor;
    d.memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
    d.compute_units = prop.multiProcessorCount;
    devices.push_back(std::move(d));
  }
  return devices;
}

Status cuda_probe(int index) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || index < 0 || index >= count) {
    (void)cudaGetLastError();
    return not_found("no CUDA device " + std::to_string(index) + " (this machine has " + std::to_string(count) + ")");
  }
  GEARBOX_CUDA_TRY(cudaSetDevice(index));
  constexpr int kN = 1000;  // not a multiple of the block size: the tail is checked too
  int* device_buffer = nullptr;
  GEARBOX_CUDA_TRY(cudaMalloc(&device_buffer, kN * sizeof(int)));
  std::vector<int> host(kN, -1);
  probe_kernel<<<(kN + 255) / 256, 256>>>(device_buffer, kN);
  cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) err = cudaMemcpy(host.data(), device_buffer, kN * sizeof(int), cudaMemcpyDeviceToHost);
  const cudaError_t free_err = cudaFree(device_buffer);
  if (err != cudaSuccess) return cuda_status(err, "probe_kernel / cudaMemcpy");
  if (free_err != cudaSuccess) return cuda_status(free_err, "cudaFree");
  for (int i = 0; i < kN; ++i) {
    if (host[i] != i * 3 + 1) {
      return device_error("CUDA probe read a wrong value at " + std::to_string(i) + ": the device code does not run");
    }
  }
  return Status();
}

Result<int64_t> cuda_memory_in_use() {
  size_t free = 0, total = 0;
  GEARBOX_CUDA_TRY(cudaMemGetInfo(&free, &total));
  return static_cast<int64_t>(total - free);
}

}  // namespace gearbox::internal
