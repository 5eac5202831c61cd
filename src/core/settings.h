// The run-time settings gearbox reads from the environment, in one table: each variable's
// name, default, audience (what users set, or a switch for debugging and measuring) and
// meaning. The values are read once per process, on first use, and never change after.
//
//   if (internal::settings().cuda_pdl) launch_with_pdl();
//   const std::string& dir = internal::settings().tactic_cache_dir;  // empty: not set
//
// Tests parse a table of their own instead of changing the process's environment:
//
//   const Settings s = parse_settings([](const char* name) -> const char* {
//     return std::string_view(name) == "GEARBOX_CUDA_PDL" ? "0" : nullptr;
//   });
#pragma once

#include <functional>
#include <span>
#include <string>

#include "gearbox/export.h"
#include "gearbox/logging.h"

namespace gearbox::internal {

/// Who a setting is for: users (README), or debugging and measurement (docs/DEBUGGING.md).
enum class SettingAudience { kUser, kDebug };

/// One environment variable gearbox reads.
struct SettingInfo {
  const char* name;           ///< GEARBOX_...
  const char* default_value;  ///< what applies when the variable is unset, as a user would write it
  SettingAudience audience;
  const char* meaning;  ///< one line: what it sets and which values it takes
};

/// Every setting, users' first; each name once.
std::span<const SettingInfo> setting_table() noexcept;

/// The settings' values, parsed. Each field names its variable.
struct Settings {
  /// GEARBOX_LOG_LEVEL: debug, info, warning, error or off; anything else is info.
  LogLevel log_level = LogLevel::kInfo;
  /// GEARBOX_DEVICE: the ExecuTorch delegate's device (cpu, cuda, auto), over its compile
  /// spec; empty when unset or empty (the compile spec's applies). Checked where it is used.
  std::string device;
  /// GEARBOX_TACTIC_CACHE_DIR: where the delegate keeps the tactics it tuned at init, for
  /// the next process; empty when unset (no cache).
  std::string tactic_cache_dir;
  /// GEARBOX_CUDA_FUSION: fused chains of nodes on the CUDA device; off only for "0".
  bool cuda_fusion = true;
  /// GEARBOX_CUDA_PDL: programmatic dependent launch on the CUDA device; off only for "0".
  bool cuda_pdl = true;
  /// GEARBOX_CUDA_SHAPE_GRAPHS: graphs replayed per shape for profiles whose shapes vary
  /// (CUDA); off only for "0".
  bool cuda_shape_graphs = true;

  bool operator==(const Settings&) const = default;
};

/// std::getenv's contract: the variable's value, or null when it is unset.
using EnvironmentReader = std::function<const char*(const char* name)>;

/// The settings as `read` gives the variables of setting_table(). Pure: reads nothing else.
Settings parse_settings(const EnvironmentReader& read);

/// The process's settings: parse_settings(std::getenv) on the first call, the same values on
/// every later one. Thread-safe. Exported from libgearbox so that the ExecuTorch delegate's
/// library reads the one copy of the process.
GEARBOX_API const Settings& settings();

}  // namespace gearbox::internal
