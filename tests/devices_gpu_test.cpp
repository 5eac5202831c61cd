// The CUDA smoke probe. Label `gpu`: skipped where there is no CUDA device.
#include <gtest/gtest.h>

#include <algorithm>

#include "gearbox/device.h"

namespace gearbox {
namespace {

TEST(CudaDevice, EveryDeviceRunsTheProbeKernel) {
  Result<std::vector<DeviceInfo>> devices = list_devices();
  ASSERT_TRUE(devices.ok());
  int cuda = 0;
  for (const DeviceInfo& d : *devices) {
    if (d.kind != DeviceKind::kCuda) continue;
    ++cuda;
    const Status s = probe_device(d);
    EXPECT_TRUE(s.ok()) << d.name << ": " << s.to_string();
  }
  if (cuda == 0) GTEST_SKIP() << "no CUDA device (built with CUDA: " << built_with_cuda() << ")";
}

TEST(CpuDevice, IsAlwaysListedAndProbes) {
  Result<std::vector<DeviceInfo>> devices = list_devices();
  ASSERT_TRUE(devices.ok());
  ASSERT_FALSE(devices->empty());
  EXPECT_EQ(devices->front().kind, DeviceKind::kCpu);
  EXPECT_TRUE(probe_device(devices->front()).ok());
  DeviceInfo missing;
  missing.kind = DeviceKind::kCuda;
  missing.index = 1 << 20;
  EXPECT_FALSE(probe_device(missing).ok());
}

TEST(DeviceNames, NameTheDeviceKinds) {
  EXPECT_EQ(*device_from_name("cpu"), DeviceKind::kCpu);
  EXPECT_EQ(*device_from_name("cuda"), DeviceKind::kCuda) << "named, not looked for";
  // auto: CUDA exactly when a CUDA device is listed (this build has the device code and the
  // machine a GPU), else the CPU.
  Result<std::vector<DeviceInfo>> devices = list_devices();
  ASSERT_TRUE(devices.ok());
  const bool gpu =
      std::any_of(devices->begin(), devices->end(), [](const DeviceInfo& d) { return d.kind == DeviceKind::kCuda; });
  EXPECT_EQ(*device_from_name("auto"), gpu ? DeviceKind::kCuda : DeviceKind::kCpu);
  for (const char* bad : {"gpu", "", "CPU", "cuda:0"}) {
    Result<DeviceKind> d = device_from_name(bad);
    ASSERT_FALSE(d.ok()) << bad;
    EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(d.status().message().find("is not cpu, cuda or auto"), std::string::npos) << d.status().to_string();
  }
}

}  // namespace
}  // namespace gearbox
