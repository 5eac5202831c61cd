// The builder: for every profile and node, time the device's tactics that are valid for
// the profile's whole [min, max] range at the profile's opt dims, and keep the fastest.
//
//   internal::BuildOptions options;
//   options.progress = [](std::string_view line) { std::puts(line.data()); };
//   Result<format::EngineDesc> desc = internal::build_engine(network, profiles, payload, options);
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "format/engine_file.h"
#include "gearbox/status.h"
#include "ir/network.h"
#include "runtime/device_backend.h"

namespace gearbox::internal {

struct BuildOptions {
  DeviceKind device = DeviceKind::kCpu;
  int warmup = 1;       ///< untimed runs per tactic
  int repetitions = 5;  ///< timed runs per tactic; the median is kept
  /// Receives one line per profile and per finished tenth of its nodes.
  std::function<void(std::string_view)> progress;
  /// Written into the engine's metadata.
  std::vector<std::pair<std::string, std::string>> metadata;
};

/// Checks the profiles against the network's inputs: one bound per input, ranks equal to
/// the input's, 1 <= min <= opt <= max, static extents fixed, names unique and non-empty.
Status validate_profiles(const ir::Network& net, std::span<const format::ProfileDesc> profiles);

/// Times the tactics of every node for every profile on `device` (weights uploaded).
Result<format::TacticTable> tune(const ir::Network& net, std::span<const format::ProfileDesc> profiles,
                                 const DeviceBackend& device, const DeviceWeights& weights,
                                 const BuildOptions& options);

/// Validates, uploads the weights to the device, tunes, and returns the engine description.
Result<format::EngineDesc> build_engine(const ir::Network& net, std::vector<format::ProfileDesc> profiles,
                                        std::span<const uint8_t> payload, const BuildOptions& options);

}  // namespace gearbox::internal
