#include "core/settings.h"

#include <cstdlib>
#include <cstring>

namespace gearbox::internal {
namespace {

constexpr SettingInfo kSettings[] = {
    {"GEARBOX_LOG_LEVEL", "info", SettingAudience::kUser,
     "the lowest level of log line printed: debug, info, warning, error or off"},
    {"GEARBOX_DEVICE", "", SettingAudience::kUser,
     "the ExecuTorch delegate's device (cpu, cuda, auto), over the compile spec"},
    {"GEARBOX_TACTIC_CACHE_DIR", "", SettingAudience::kUser,
     "where the ExecuTorch delegate keeps the tactics it tuned at init, for the next process"},
    {"GEARBOX_CUDA_FUSION", "1", SettingAudience::kDebug,
     "0: every node its own CUDA launch (no fused chains), and no stacked-GEMM tactics at build time"},
    {"GEARBOX_CUDA_PDL", "1", SettingAudience::kDebug,
     "0: plain CUDA launches instead of programmatic dependent launch"},
    {"GEARBOX_CUDA_SHAPE_GRAPHS", "1", SettingAudience::kDebug,
     "0: a profile whose shapes vary always runs launch by launch, never a graph captured for a shape"},
};

/// A variable that is set to a non-empty value.
const char* value_of(const EnvironmentReader& read, const char* name) {
  const char* v = read(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

/// A switch: on unless set to "0".
bool switch_on(const EnvironmentReader& read, const char* name) {
  const char* v = read(name);
  return v == nullptr || std::strcmp(v, "0") != 0;
}

LogLevel parse_log_level(const char* v) {
  if (v == nullptr) return LogLevel::kInfo;
  if (std::strcmp(v, "debug") == 0) return LogLevel::kDebug;
  if (std::strcmp(v, "warning") == 0) return LogLevel::kWarning;
  if (std::strcmp(v, "error") == 0) return LogLevel::kError;
  if (std::strcmp(v, "off") == 0) return LogLevel::kOff;
  return LogLevel::kInfo;
}

}  // namespace

std::span<const SettingInfo> setting_table() noexcept { return kSettings; }

Settings parse_settings(const EnvironmentReader& read) {
  Settings s;
  s.log_level = parse_log_level(read("GEARBOX_LOG_LEVEL"));
  if (const char* v = value_of(read, "GEARBOX_DEVICE"); v != nullptr) s.device = v;
  if (const char* v = value_of(read, "GEARBOX_TACTIC_CACHE_DIR"); v != nullptr) s.tactic_cache_dir = v;
  s.cuda_fusion = switch_on(read, "GEARBOX_CUDA_FUSION");
  s.cuda_pdl = switch_on(read, "GEARBOX_CUDA_PDL");
  s.cuda_shape_graphs = switch_on(read, "GEARBOX_CUDA_SHAPE_GRAPHS");
  return s;
}

const Settings& settings() {
  static const Settings s = parse_settings([](const char* name) -> const char* { return std::getenv(name); });
  return s;
}

}  // namespace gearbox::internal
