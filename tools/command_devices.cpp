// gearbox devices [--probe]
#include <cstdio>

#include "commands.h"
#include "gearbox/device.h"

namespace gearbox::cli {

int run_devices(std::span<const std::string_view> args) {
  bool probe = false;
  for (std::string_view a : args) {
    if (a == "--probe") {
      probe = true;
    } else if (a == "--help" || a == "-h") {
      std::puts("usage: gearbox devices [--probe]");
      return 0;
    } else {
      std::fprintf(stderr, "gearbox devices: unknown flag '%.*s'\n", static_cast<int>(a.size()), a.data());
      return 2;
    }
  }
  Result<std::vector<DeviceInfo>> devices = list_devices();
  if (!devices.ok()) {
    std::fprintf(stderr, "gearbox devices: %s\n", devices.status().to_string().c_str());
    return 1;
  }
  std::printf("gearbox built with CUDA: %s\n", built_with_cuda() ? "yes" : "no");
  int failures = 0;
  for (const DeviceInfo& d : *devices) {
    std::printf("%s:%d  %s  memory %.1f GiB  units %d", device_kind_name(d.kind), d.index, d.name.c_str(),
                static_cast<double>(d.memory_bytes) / (1024.0 * 1024.0 * 1024.0), d.compute_units);
    if (d.kind == DeviceKind::kCuda) std::printf("  sm_%d", d.compute_capability);
    if (probe) {
      const Status s = probe_device(d);
      std::printf("  probe: %s", s.ok() ? "ok" : s.to_string().c_str());
      failures += s.ok() ? 0 : 1;
    }
    std::printf("\n");
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace gearbox::cli
