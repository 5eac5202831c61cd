#include <unistd.h>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

#include "devices/cuda/device_probe.h"
#include "gearbox/device.h"
#include "runtime/device_backend.h"

namespace gearbox {
namespace {

std::string cpu_model_name() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos && colon + 2 <= line.size()) return line.substr(colon + 2);
    }
  }
  return "cpu";
}

DeviceInfo cpu_device() {
  DeviceInfo cpu;
  cpu.kind = DeviceKind::kCpu;
  cpu.name = cpu_model_name();
  cpu.compute_units = static_cast<int32_t>(std::thread::hardware_concurrency());
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page_size > 0) cpu.memory_bytes = static_cast<int64_t>(pages) * page_size;
  return cpu;
}

}  // namespace

const char* device_kind_name(DeviceKind kind) noexcept {
  switch (kind) {
    case DeviceKind::kCpu: return "cpu";
    case DeviceKind::kCuda: return "cuda";
  }
  return "?";
}

bool built_with_cuda() noexcept { return internal::cuda_built(); }

Result<DeviceKind> device_from_name(std::string_view name) {
  if (name == "cpu") return DeviceKind::kCpu;
  if (name == "cuda") return DeviceKind::kCuda;
  if (name != "auto") return invalid_argument("'" + std::string(name) + "' is not cpu, cuda or auto");
  return internal::device_backend(DeviceKind::kCuda).ok() ? DeviceKind::kCuda : DeviceKind::kCpu;
}

Result<std::vector<DeviceInfo>> list_devices() {
  std::vector<DeviceInfo> devices{cpu_device()};
  for (DeviceInfo& d : internal::cuda_devices()) devices.push_back(std::move(d));
  return devices;
}

Status probe_device(const DeviceInfo& device) {
  if (device.kind == DeviceKind::kCpu) {
    return device.index == 0 ? Status() : not_found("there is one CPU device, index 0");
  }
  return internal::cuda_probe(device.index);
}

}  // namespace gearbox
