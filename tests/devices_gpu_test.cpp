// The CUDA smoke probe. Label `gpu`: skipped where there is no CUDA device.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace gearbox
