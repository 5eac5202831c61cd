// A loaded engine: the parsed description, weights on the device, the tactics for this
// device, and a memory plan per profile. Immutable after load and shared by every
// context (except the once-per-engine log flag).
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "format/engine_file.h"
#include "gearbox/engine.h"
#include "runtime/device_backend.h"
#include "runtime/memory_plan.h"

namespace gearbox::internal {

/// Where an engine load's time went: each phase's end, in ms from the load's start. A load
/// logs them at debug level as one line (load_phases_line); `gearbox bench` reads them back
/// from its fresh processes' logs (parse_load_phases).
struct LoadPhases {
  double parsed_ms = 0;
  double device_ready_ms = 0;
  double uploaded_ms = 0;
  double checked_ms = 0;  ///< the payload's checksum verdict taken
  double planned_ms = 0;  ///< tactics and memory plans: the load's end
};

/// "engine load (BYTES MB, DEVICE device), ms from its start: parsed ..., device ready ...".
std::string load_phases_line(const LoadPhases& phases, size_t bytes, DeviceKind device);

/// The phases of a line load_phases_line wrote (a log line's prefix allowed); nullopt for
/// any other line.
std::optional<LoadPhases> parse_load_phases(std::string_view line);

class EngineCore {
 public:
  /// Parses `bytes`, uploads the weights to `options.device`, and picks the tactic table
  /// for this device (tuning now when the file has none that matches).
  static Result<std::shared_ptr<EngineCore>> load(std::span<const uint8_t> bytes, const EngineOptions& options);
  /// Waits for the device's background work (finish_device_background_work) before it goes:
  /// a program that drops its last engine and exits must not exit in the middle of it.
  ~EngineCore();
  EngineCore() = default;
  EngineCore(const EngineCore&) = delete;
  EngineCore& operator=(const EngineCore&) = delete;
  EngineCore(EngineCore&&) = delete;
  EngineCore& operator=(EngineCore&&) = delete;

  const format::EngineDesc& desc() const noexcept { return desc_; }
  const ir::Network& network() const noexcept { return desc_.network; }
  const DeviceBackend& device() const noexcept { return *device_; }
  const DeviceWeights& weights() const noexcept { return *weights_; }
  const ProfileTable& profiles() const noexcept { return profiles_; }
  std::span<const BindingInfo> inputs() const noexcept { return inputs_; }
  std::span<const BindingInfo> outputs() const noexcept { return outputs_; }
  /// Tactic per node for `profile`.
  /// True when load() had to tune (no tactics for the device in the file or its cache).
  bool tuned_at_load() const noexcept { return tuned_at_load_; }
  std::span<const uint32_t> tactics(int32_t profile) const {
    return tactics_->profiles[static_cast<size_t>(profile)].tactic_per_node;
  }
  const MemoryPlan& memory_plan(int32_t profile) const { return plans_[static_cast<size_t>(profile)]; }
  /// Every tensor's dims at `profile`'s max input dims.
  const std::vector<Dims>& max_dims(int32_t profile) const { return max_dims_[static_cast<size_t>(profile)]; }
  /// The largest arena any profile needs.
  int64_t arena_bytes() const noexcept { return arena_bytes_; }
  /// Largest bytes of input/output `binding` (inputs first) over all profiles.
  int64_t binding_max_bytes(size_t binding) const { return binding_max_bytes_[binding]; }

  /// Checks input `input`'s dims against `profile`'s bounds. Errors: kOutOfRange naming
  /// the input, the dim, its value, the bounds and the profile.
  Status check_bounds(int32_t profile, size_t input, const Dims& dims) const;
  /// For an input of token ids: the vocabulary size (ids must be in [0, limit)); for an
  /// input of positions: the maximum context; 0 for other inputs.
  int64_t input_value_limit(size_t input) const { return input_value_limit_[input]; }
  /// For a batched network (ir::Network::slots > 0): the inputs of its attention nodes'
  /// positions and slots; -1 for a network without slots.
  int32_t positions_input() const noexcept { return positions_input_; }
  int32_t slots_input() const noexcept { return slots_input_; }
  /// "tokens [1, 1]..[1, 1]" for every input of `profile`, for error messages.
  std::string describe_profile(int32_t profile) const;

  /// True the first time it is called for this engine (for once-per-engine logs).
  bool first_pin_ignored() const noexcept { return !pin_ignored_logged_.exchange(true); }

 private:
  format::EngineDesc desc_;
  std::shared_ptr<const DeviceBackend> device_;
  std::shared_ptr<DeviceWeights> weights_;
  format::TacticTable tuned_here_;  // used when the file has no table for this device
  bool tuned_at_load_ = false;

  Status tactics_from_cache_or_tuning(std::span<const uint8_t> bytes, const EngineOptions& options);
  const format::TacticTable* tactics_ = nullptr;
  ProfileTable profiles_;
  std::vector<BindingInfo> inputs_, outputs_;
  std::vector<MemoryPlan> plans_;
  std::vector<std::vector<Dims>> max_dims_;
  std::vector<int64_t> binding_max_bytes_;
  std::vector<int64_t> input_value_limit_;
  int32_t positions_input_ = -1;
  int32_t slots_input_ = -1;
  int64_t arena_bytes_ = 0;
  mutable std::atomic<bool> pin_ignored_logged_{false};
};

}  // namespace gearbox::internal
