// gearbox devices: the devices this build can use, and a check of each.
#include <cstdio>
#include <memory>

#include <CLI/CLI.hpp>

#include "commands.h"
#include "gearbox/device.h"

namespace gearbox::cli {
namespace {

int run_devices(bool probe) {
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

}  // namespace

Command add_devices_command(CLI::App& gearbox) {
  auto probe = std::make_shared<bool>(false);
  CLI::App* app =
      gearbox.add_subcommand("devices", "list the devices this build can use (--probe runs a check on each)");
  app->add_flag("--probe", *probe, "run a small computation on each device and check its result");
  return {app, [probe] { return run_devices(*probe); }};
}

}  // namespace gearbox::cli
