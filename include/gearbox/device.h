// gearbox/device.h: the devices gearbox can run on, as this build and machine see them.
//
//   auto devices = gearbox::list_devices();
//   for (const gearbox::DeviceInfo& d : *devices) std::printf("%s\n", d.name.c_str());
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gearbox/export.h"
#include "gearbox/status.h"

namespace gearbox {

/// Kinds of device. The CPU device is the reference (and CI's); CUDA is the fast path.
enum class DeviceKind : int32_t { kCpu = 0, kCuda = 1 };

/// "cpu" or "cuda".
GEARBOX_API const char* device_kind_name(DeviceKind kind) noexcept;

/// One device.
struct DeviceInfo {
  /// CPU or CUDA.
  DeviceKind kind = DeviceKind::kCpu;
  /// The device ordinal within its kind (CUDA device index; 0 for the CPU).
  int32_t index = 0;
  /// "NVIDIA H200", or the CPU's model name.
  std::string name;
  /// Compute capability as major * 10 + minor (90 for sm_90); 0 for the CPU.
  int32_t compute_capability = 0;
  /// Device memory in bytes (host memory for the CPU).
  int64_t memory_bytes = 0;
  /// Multiprocessors (CUDA) or hardware threads (CPU).
  int32_t compute_units = 0;
};

/// True when this build of gearbox contains the CUDA device.
GEARBOX_API bool built_with_cuda() noexcept;

/// The device a name means: "cpu", "cuda", or "auto" (CUDA when this build has the CUDA
/// device and this machine a GPU it can use, else the CPU). "cuda" is returned without
/// looking for a GPU: loading an engine on it then says what is missing.
/// Errors: kInvalidArgument for any other name.
GEARBOX_API Result<DeviceKind> device_from_name(std::string_view name);

/// The CPU and every CUDA device this process can use. A build without CUDA, or a machine
/// without a driver or GPU, lists the CPU alone; that is not an error.
GEARBOX_API Result<std::vector<DeviceInfo>> list_devices();

/// Runs a small computation on `device` and checks its result: a smoke test that the
/// driver, the runtime and this build's device code (sm_90 or its PTX fallback) work.
/// Errors: kNotFound for a device that does not exist, kDeviceError with the CUDA error
/// text when the device fails.
GEARBOX_API Status probe_device(const DeviceInfo& device);

}  // namespace gearbox
