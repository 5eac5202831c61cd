// What the runtime and the builder need from a device: tactics per op, weight upload,
// memory, streams, and running a planned network. The CPU device implements it in
// devices/cpu/cpu_backend.cpp; the CUDA device slots in behind the same interface.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "gearbox/device.h"
#include "gearbox/engine.h"
#include "gearbox/status.h"
#include "ir/network.h"
#include "runtime/stream_impl.h"

namespace gearbox::internal {

/// A kernel choice for one op kind. Ids are stored in engine files: never reuse one.
struct TacticInfo {
  uint32_t id = 0;
  const char* name = "";
};

/// Device memory. Freed by its owner's deleter.
using DeviceBuffer = std::unique_ptr<void, void (*)(void*)>;

/// Weights resident on a device, shared (read-only) by every context and profile.
class DeviceWeights {
 public:
  virtual ~DeviceWeights() = default;
  /// Bytes the weights take on the device.
  virtual int64_t bytes() const noexcept = 0;
};

/// Per-context device state: what a device keeps between calls of one execution context
/// (the CUDA device: a cuBLASLt workspace, captured graphs per profile). Null on the CPU.
class DeviceContextState {
 public:
  virtual ~DeviceContextState() = default;
};

/// How a call's outputs reach the caller's memory (the execute path, steps 7 and 9). The
/// runtime says where each output goes; the device decides how it gets there. Per call:
///
///   for every output o: bind the network's output o to bind(o, profile, memory, dst, bytes)
///   enqueue the network on `stream`
///   if any output is in host memory: deliver(stream)
///
/// The default (DeviceBackend::create_host_outputs) has the network write a host output into
/// device staging and copies it to the caller's memory after the network; a device may have
/// its kernels store it into host memory instead and copy it on as it lands (CUDA). One per
/// execution context; calls are serialized by its owner.
class HostOutputs {
 public:
  virtual ~HostOutputs() = default;
  /// Where the network writes output `output` of this call, which the caller takes at `dst`
  /// (`bytes` at this call's shape) in `memory`: `dst` itself for device memory; for host
  /// memory, memory of the device's choosing that deliver brings to `dst`. Called for every
  /// output of a call, before deliver and before the network is enqueued, with no earlier work
  /// of the context still running.
  virtual void* bind(size_t output, int32_t profile, MemoryKind memory, void* dst, int64_t bytes) = 0;
  /// Once the network is enqueued on `stream`, when an output of the call is in host memory:
  /// brings each host output bound for this call to the caller's memory. Returns with the
  /// stream drained, whatever the outcome (nothing of the call is then in flight). Errors: a
  /// copy that could not be enqueued, or the stream's error (the caller's memory may then be
  /// partly written, as a failed call may leave it).
  virtual Status deliver(StreamImpl& stream) = 0;
};

/// What a device learns about an execution context when it creates its HostOutputs. Every
/// pointer and span must outlive the HostOutputs.
struct HostOutputsSpec {
  const ir::Network* net = nullptr;
  std::vector<std::span<const uint32_t>> tactics;  ///< per profile: a tactic per node
  std::vector<int64_t> max_bytes;                  ///< per network output: its bytes at the largest shapes
  DeviceContextState* context = nullptr;           ///< the context's (create_context_state), may be null
};

/// One node's tensors at one call.
struct NodeArgs {
  std::span<void* const> tensors;  ///< every network tensor's address (index = tensor id)
  std::span<const Dims> dims;      ///< every network tensor's dims
  void* scratch = nullptr;         ///< at least scratch_bytes() of the node's tactic
  std::span<void* const> states;   ///< per state slot: K cache, V cache (2 per slot)
  DeviceContextState* context = nullptr;
};

/// Everything one enqueue of a network needs, by value (the work runs later).
struct NetworkLaunch {
  std::vector<uint32_t> tactics;  ///< per node
  std::vector<void*> tensors;
  std::vector<Dims> dims;
  void* scratch = nullptr;
  std::vector<void*> states;
  DeviceContextState* context = nullptr;
  int32_t profile = 0;
  /// Every input's shape is fixed by the profile (min == max): the device may capture the
  /// launch once and replay it (a CUDA graph) while the addresses stay the same.
  bool static_shapes = false;
  /// The call is Session::warm_up's: it prepares what later calls of this shape need and
  /// must leave no per-shape trace that changes how a later call runs (a shape it met).
  bool warm_up = false;
};

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;

  virtual DeviceKind kind() const noexcept = 0;
  virtual std::string device_name() const = 0;
  virtual std::string library_versions() const = 0;

  /// How this device stores tensors declared as `declared` (the CPU keeps floats in f32).
  virtual DataType storage_type(DataType declared) const noexcept = 0;
  /// The tactics this device has for `node`'s op, best-known default first.
  virtual std::vector<TacticInfo> tactics(const ir::Node& node) const = 0;
  /// The name `tactic` goes by for `node` (gearbox inspect): its entry in tactics(node), or
  /// what the device calls a tactic refine_tactic made; "?" for an id it does not know.
  virtual std::string tactic_name(const ir::Node& node, uint32_t tactic) const {
    for (const TacticInfo& t : tactics(node)) {
      if (t.id == tactic) return t.name;
    }
    return "?";
  }
  /// Shared by the refine_tactic calls of one tuning pass: what the device measured, by
  /// whatever key it chooses (nodes of the same shape need not be timed again).
  using TuningMemo = std::map<std::string, uint32_t>;
  /// Called by the builder once it has chosen `tactic` for `node` by timing at a profile's
  /// opt dims: a tactic that also holds choices for the other shapes of the profile, from
  /// `min_dims` to `max_dims` (all tensors), timed now; `tactic` itself where the device has
  /// none. The CUDA device chooses cuBLASLt's heuristic per bucket of row counts.
  virtual Result<uint32_t> refine_tactic(const ir::Network& /*net*/, const DeviceWeights& /*weights*/, size_t /*node*/,
                                         uint32_t tactic, std::span<const Dims> /*min_dims*/,
                                         std::span<const Dims> /*max_dims*/, TuningMemo& /*memo*/) const {
    return tactic;
  }
  /// True when `tactic` can run `node` of `net` for every shape up to `max_dims` (all
  /// tensors) at the precision `net` asks for (e.g. bf16 attention only for bf16 weights).
  virtual bool tactic_valid(const ir::Network& net, const ir::Node& node, uint32_t tactic,
                            std::span<const Dims> max_dims) const = 0;
  /// tactic_valid without the tuner's preferences: whether `tactic` can run, whatever the
  /// debug settings that narrow what the builder tries (e.g. GEARBOX_CUDA_FUSION=0, which
  /// stops tuning stacked linears but still runs an engine that chose them). The check an
  /// engine's tactics pass at load.
  virtual bool tactic_runnable(const ir::Network& net, const ir::Node& node, uint32_t tactic,
                               std::span<const Dims> max_dims) const {
    return tactic_valid(net, node, tactic, max_dims);
  }
  /// Scratch bytes `tactic` needs for `node` at `dims` (all tensors), monotonic in dims.
  virtual int64_t scratch_bytes(const ir::Network& net, const ir::Node& node, uint32_t tactic,
                                std::span<const Dims> dims) const = 0;

  /// Converts and uploads the weights once.
  virtual Result<std::shared_ptr<DeviceWeights>> upload_weights(const ir::Network& net,
                                                                std::span<const uint8_t> payload) const = 0;
  /// Allocates device memory (64-byte aligned). Errors: kResourceExhausted.
  virtual Result<DeviceBuffer> allocate(int64_t bytes) const = 0;
  /// Allocates page-locked host memory that copies to and from this device move by DMA
  /// without a bounce through a driver buffer (a session stages callers' host inputs in it;
  /// Engine::allocate_host). A null buffer means the device gains nothing from it (the CPU
  /// device, whose memory is the host's); the caller then copies directly.
  virtual Result<DeviceBuffer> allocate_pinned(int64_t bytes) const {
    (void)bytes;
    return DeviceBuffer(nullptr, [](void*) {});
  }
  /// Per-context state for `profiles` profiles; null when the device keeps none.
  virtual Result<std::unique_ptr<DeviceContextState>> create_context_state(int32_t profiles) const = 0;
  /// The extents Session::warm_up runs a profile's varying extent at, given its bounds: the
  /// shapes whose first call would otherwise load kernels, choose algorithms or capture
  /// graphs inside a request. The default runs the smallest only (nothing of this device
  /// depends on the shape).
  virtual std::vector<int64_t> warm_up_extents(int64_t min, int64_t /*opt*/, int64_t /*max*/) const { return {min}; }
  /// How the outputs of the execution context described by `spec` reach host memory. The
  /// default: each host output is written into device staging of its largest size
  /// (allocated here) and copied to the caller's memory after the network. Errors: those of
  /// allocate.
  virtual Result<std::unique_ptr<HostOutputs>> create_host_outputs(const HostOutputsSpec& spec) const;
  /// A new stream on this device.
  virtual Result<std::shared_ptr<StreamImpl>> create_stream() const = 0;
  /// Called once the context's enqueued work has been waited for: a bad value its kernels
  /// met in a device-resident input (a token id outside the vocabulary, a position outside
  /// the KV cache; the host cannot check those before enqueueing without waiting), recorded
  /// in device memory while the work ran; reported once, then cleared. The default reports
  /// none (the CPU device's kernels fail their stream instead).
  virtual Status take_input_fault(DeviceContextState* context) const {
    (void)context;
    return {};
  }

  /// Copies host memory `src` to device memory `dst`, ordered on `stream`; `src` may be
  /// reused as soon as this returns (the caller's input buffers).
  virtual Status copy_from_host(void* dst, const void* src, int64_t bytes, StreamImpl& stream) const = 0;
  /// Enqueues a copy of `bytes` from `src` to `dst` (device or host memory) on `stream`.
  virtual Status enqueue_copy(void* dst, const void* src, int64_t bytes, StreamImpl& stream) const = 0;
  /// Per node, the last node of the launch it runs in (node n itself unless the device fuses
  /// n with the nodes after it). The memory plan keeps every tensor a launch reads alive
  /// until the launch's last node, so no output of a fused launch overlaps its inputs.
  virtual std::vector<size_t> launch_group_ends(const ir::Network& net) const {
    std::vector<size_t> ends(net.nodes.size());
    for (size_t n = 0; n < ends.size(); ++n) ends[n] = n;
    return ends;
  }
  /// Enqueues the whole network on `stream`.
  virtual Status enqueue_network(const ir::Network& net, const DeviceWeights& weights, NetworkLaunch launch,
                                 StreamImpl& stream) const = 0;
  /// Runs one node now, on the calling thread (the builder's timing loop).
  virtual Status run_node(const ir::Network& net, const DeviceWeights& weights, size_t node, uint32_t tactic,
                          const NodeArgs& args) const = 0;
  /// Runs one node now and returns how long it took, in microseconds (the builder ranks
  /// tactics by it). The default times run_node with the host's clock; a device with its
  /// own timers measures the device's work without the host's launch costs.
  virtual Result<double> time_node(const ir::Network& net, const DeviceWeights& weights, size_t node, uint32_t tactic,
                                   const NodeArgs& args) const {
    const auto start = std::chrono::steady_clock::now();
    if (Status s = run_node(net, weights, node, tactic, args); !s.ok()) return s;
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  }
};

/// Page-locked host buffers from one device, for a holder that asks for several over its life
/// (a session's input staging, the CUDA device's host outputs). Each is optional: a device
/// that gives none (the CPU, whose memory is the host's) is not asked again, and one that
/// cannot give it now logs a warning naming what it was for; the holder then copies directly.
class PinnedSource {
 public:
  PinnedSource() = default;  // gives none
  explicit PinnedSource(const DeviceBackend& device) : device_(&device) {}
  /// Page-locked memory of `bytes` into `into`, or false (`into` unchanged).
  bool take(DeviceBuffer& into, int64_t bytes, const std::string& what);

 private:
  const DeviceBackend* device_ = nullptr;
  bool unavailable_ = false;
};

/// The backend for `kind`. Errors: kUnimplemented when this build lacks the device,
/// kNotFound when the machine has none.
Result<std::shared_ptr<const DeviceBackend>> device_backend(DeviceKind kind);

/// The CPU backend (always there) and the CUDA backend (kUnimplemented without CUDA in
/// the build, kNotFound without a GPU).
std::shared_ptr<const DeviceBackend> cpu_backend();
Result<std::shared_ptr<const DeviceBackend>> cuda_backend();

/// Waits for the work the CUDA backend starts on a thread of its own when it is created
/// (cuBLASLt's load and warm-up beside the engine's load); returns at once where none runs.
/// A process that exits while that thread is inside cuBLASLt crashes, so an engine waits as
/// it goes and the CLI before it exits.
void finish_device_background_work();

}  // namespace gearbox::internal
