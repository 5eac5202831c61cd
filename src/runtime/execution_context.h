// An execution context: the TensorRT-style low-level interface over one engine.
// Owns the per-context state (KV caches) and the activation arena, sized at creation for
// the largest profile, so that switching profiles never allocates.
//
// Order of use per call, as TensorRT requires: set_optimization_profile_async (when the
// profile changes) -> set_input_shape for every input -> output_shape ->
// set_tensor_address for every binding -> enqueue.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "runtime/engine_core.h"

namespace gearbox::internal {

class ExecutionContext {
 public:
  static Result<std::unique_ptr<ExecutionContext>> create(std::shared_ptr<const EngineCore> engine);

  const EngineCore& engine() const noexcept { return *engine_; }
  /// The profile the context is on; a fresh context is on profile 0.
  int32_t profile() const noexcept { return profile_; }

  /// Switches to `profile`: a plan swap (profiles share weights and the arena, so nothing
  /// is copied or allocated). Callers treat work as possibly in flight on `stream`
  /// afterwards, as TensorRT's setOptimizationProfileAsync requires; the test hook below
  /// puts a real marker there. Clears the input shapes. Errors: kNotFound for an index
  /// outside the engine.
  Status set_optimization_profile_async(int32_t profile, StreamImpl& stream);
  /// Sets input `input`'s dims. Errors: kOutOfRange naming the input, dim, value and the
  /// active profile's bounds; kInvalidArgument for a wrong rank.
  Status set_input_shape(size_t input, const Dims& dims);
  /// Output `output`'s dims for the current input shapes. Errors: kFailedPrecondition when
  /// an input shape is missing.
  Result<Dims> output_shape(size_t output);
  /// Binds `binding` (inputs first, then outputs) to device memory at `address`.
  Status set_tensor_address(size_t binding, void* address);
  /// Enqueues the network on `stream`. Errors: kFailedPrecondition for a missing shape or
  /// address, or the stream's sticky error. warm_up: NetworkLaunch::warm_up.
  Status enqueue(StreamImpl& stream, bool warm_up = false);
  /// After waiting for the enqueued work: the fault the device recorded for a device-resident
  /// input, once (DeviceBackend::take_input_fault).
  Status take_input_fault() { return engine_->device().take_input_fault(device_state_.get()); }
  /// The device's state of this context (DeviceBackend::create_context_state), or null.
  DeviceContextState* device_state() noexcept { return device_state_.get(); }

  /// Per network state: its K cache, then its V cache (device memory; tests poison them).
  std::span<void* const> states() const noexcept { return states_; }

  /// Test hook: runs on the stream inside the switch marker.
  std::function<void()> on_device_switch;

 private:
  explicit ExecutionContext(std::shared_ptr<const EngineCore> engine) : engine_(std::move(engine)) {}
  Status infer();

  std::shared_ptr<const EngineCore> engine_;
  DeviceBuffer arena_{nullptr, nullptr};
  std::unique_ptr<DeviceContextState> device_state_;
  std::vector<bool> static_profile_;  // per profile: min == max for every input
  std::vector<DeviceBuffer> state_buffers_;
  std::vector<void*> states_;
  int32_t profile_ = 0;
  std::vector<Dims> input_dims_;
  std::vector<bool> input_set_;
  std::vector<void*> addresses_;  // inputs then outputs
  std::vector<Dims> dims_;        // every tensor, valid when dims_valid_
  bool dims_valid_ = false;
};

}  // namespace gearbox::internal
