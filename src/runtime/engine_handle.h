// The execute path, written once and shared by every front end (gearbox::Session and the
// ExecuTorch delegate). Private: front ends hold an EngineHandle, applications do not.
//
// execute() order (the contract in docs/ARCHITECTURE.md):
//   1 lock the handle; wait for this handle's in-flight work (and report a bad
//     device-resident input it met)
//   2 pick the stream (the caller's, else the handle's own)
//   3 collect every input's dims (before any switch)
//   4 select the profile (guard, else the default request)
//   5 validate the inputs against it (and token ids / positions against the model)
//   6 switch only when the profile changed; mark in-flight right after the switch
//   7 set shapes, infer and resize outputs, bind (inputs: device memory in place, host
//     memory through a staging buffer; outputs: where the device's HostOutputs binds them)
//   8 copy host inputs in (packed into page-locked host memory where the device has it,
//     one copy for all of them), enqueue
//   9 host outputs: delivered by the device (HostOutputs::deliver, which drains), then a bad
//     device-resident input the kernels met reported (DeviceBackend::take_input_fault);
//     otherwise record the in-flight event and return (the next wait reports it)
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "gearbox/engine.h"
#include "runtime/execution_context.h"
#include "runtime/slot_table.h"

namespace gearbox::internal {

/// One output as the execute path sees it: its dtype and memory, and a function that is
/// given the inferred dims and returns where to write (resizing the caller's tensor).
using OutputArg = OutputSink;

/// Test-only failure injection points in execute().
enum class ExecuteStage { kAfterSwitch, kBeforeEnqueue, kAfterEnqueue };

class EngineHandle {
 public:
  static Result<std::unique_ptr<EngineHandle>> create(std::shared_ptr<const EngineCore> engine,
                                                      ProfileRequest default_request);
  ~EngineHandle();  // waits for in-flight work before freeing anything

  /// The execute path. `stream` may be null (the handle's own stream).
  /// `default_request`, when given, replaces the handle's default for this call;
  /// `ran_profile`, when given, receives the profile a successful call ran.
  Status execute(std::span<const TensorView> inputs, std::span<const OutputArg> outputs, StreamImpl* stream,
                 const ProfileRequest* default_request = nullptr, int32_t* ran_profile = nullptr);
  /// Session::warm_up: runs every profile at warm_up_shapes with placeholder inputs and host
  /// outputs, then returns the context to the profile it was on.
  Status warm_up();
  /// Waits for in-flight work; returns its error.
  Status synchronize();
  /// The profile the context is on.
  int32_t active_profile() const;
  /// True while work this handle enqueued may still be running (recorded, not waited on).
  bool inflight_pending() const;
  /// Batched engines: frees KV-cache slot `slot` for a new sequence (SlotTable::release).
  Status release_slot(int64_t slot);
  /// Batched engines: the rows `slot`'s sequence has written (0 for a free slot).
  int64_t slot_length(int64_t slot) const;

  /// Test hooks: a failure returned at a stage, and the context's switch hook.
  std::function<Status(ExecuteStage)> fail_at;
  void set_on_device_switch(std::function<void()> hook) { context_->on_device_switch = std::move(hook); }
  /// Test access to the context (its KV caches).
  const ExecutionContext& context() const noexcept { return *context_; }

 private:
  EngineHandle() = default;

  /// Where this call's host inputs sit in the input staging (bind_inputs), for their copy.
  struct PackedInputs {
    std::vector<int64_t> offset;  // per input (host inputs only)
    int64_t bytes = 0;            // of the input staging in use
  };

  // The steps of execute, in order.
  /// 1: waits for this handle's in-flight work; its error, or a bad device-resident input.
  Status wait_inflight();
  /// 2: the caller's stream, else the handle's own; it must be on the engine's device.
  Result<StreamImpl*> pick_stream(StreamImpl* caller_stream) const;
  /// 2: the outputs' count and types, and that each has a prepare function.
  Status check_outputs(std::span<const OutputArg> outputs) const;
  /// 3: every input's count, type, data and rank, and its dims into `dims`.
  Status check_inputs(std::span<const TensorView> inputs, std::vector<Dims>& dims) const;
  /// 4: the profile for `dims` (the guard's request, else `default_request`, else the
  /// handle's default); an error naming the profiles there are when none fits.
  Result<int32_t> choose_profile(std::span<const Dims> dims, const ProfileRequest* default_request);
  /// 5 to 9 on `profile`; warm_up: the launch is Session::warm_up's (NetworkLaunch::warm_up).
  Status run_profile(std::span<const TensorView> inputs, std::span<const Dims> dims, std::span<const OutputArg> outputs,
                     int32_t profile, StreamImpl& stream, bool warm_up);
  /// The input shapes warm_up runs `profile` at: its opt shape where nothing varies, else
  /// one per extent DeviceBackend::warm_up_extents names for its varying extent.
  std::vector<std::vector<Dims>> warm_up_shapes(int32_t profile) const;
  /// 5: the inputs against the profile's bounds, and host token ids / positions against the model.
  Status validate(std::span<const TensorView> inputs, std::span<const Dims> dims, int32_t profile) const;
  /// 6: switches the context to `profile` when it is on another, and marks in-flight.
  Status switch_profile(int32_t profile, StreamImpl& stream);
  /// 7: sets the input shapes and binds the inputs, host ones packed into the input staging.
  Status bind_inputs(std::span<const TensorView> inputs, std::span<const Dims> dims, PackedInputs& packed);
  /// 7: prepares the outputs at their inferred shapes and binds them where host_outputs_ says;
  /// whether any of them is in host memory.
  Result<bool> bind_outputs(std::span<const OutputArg> outputs, int32_t profile);
  /// 8: copies the host inputs in and enqueues the network; a failure drains the stream.
  Status enqueue(std::span<const TensorView> inputs, std::span<const Dims> dims, const PackedInputs& packed,
                 StreamImpl& stream, bool warm_up);
  /// 9, with host outputs: delivers them (drained), then reports a bad device-resident input.
  Status deliver_host_outputs(StreamImpl& stream);
  /// 6 and 9 without host outputs: records the in-flight event; a failed record drains the
  /// stream and is returned.
  Status mark_inflight(StreamImpl& stream);
  /// After waiting for this handle's work: a bad device-resident input its kernels met,
  /// naming the ranges the inputs must hold (ExecutionContext::take_input_fault).
  Status input_fault();

  /// Page-locked host memory laid out as input_staging_ (allocated at its first use), or
  /// null where pinned_ gives none: each host input is then copied on its own.
  void* input_pinned();

  mutable std::mutex mutex_;
  std::shared_ptr<const EngineCore> engine_;
  std::unique_ptr<ExecutionContext> context_;
  std::shared_ptr<StreamImpl> own_stream_;
  ProfileRequest default_request_;
  ProfileTable table_;  // the engine's profiles with `active` tracking the context
  Event inflight_event_;
  bool inflight_pending_ = false;
  // Host inputs, packed in input order at 64-byte boundaries (execute, step 7), so that one
  // copy carries them all; sized for every input at its largest.
  DeviceBuffer input_staging_{nullptr, [](void*) {}};
  int64_t input_staging_bytes_ = 0;
  DeviceBuffer input_pinned_{nullptr, [](void*) {}};  // its page-locked twin (input_pinned)
  PinnedSource pinned_;
  // How the outputs reach the caller's memory (step 7 binds them, step 9 delivers host ones).
  // Declared after context_: it refers to the context's device state, so it goes first.
  std::unique_ptr<HostOutputs> host_outputs_;
  // Batched engines: each KV-cache slot's length (checked at step 5, moved after step 8).
  SlotTable slots_;
};

}  // namespace gearbox::internal
