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

/// One node's tensors at one call.
struct NodeArgs {
  std::span<void* const> tensors;  ///< every network tensor's address (index = tensor id)
  std::span<const Dims> dims;      ///< every network tensor's dims
  void* scratch = nullptr;         ///< at least scratch_bytes() of the node's tactic
  std::span<void* const> states;   ///< per state slot: K cache, V cache (2 per slot)
  DeviceContextState* context = nullptr;
  /// Per network tensor: the progress slots (DeviceBackend::host_output_progress_slots) of an
  /// output the kernels store into mapped host memory, null for any other; empty: none.
  std::span<uint32_t* const> progress = {};
};

/// Everything one enqueue of a network needs, by value (the work runs later).
struct NetworkLaunch {
  std::vector<uint32_t> tactics;  ///< per node
  std::vector<void*> tensors;
  std::vector<Dims> dims;
  void* scratch = nullptr;
  std::vector<void*> states;
  DeviceContextState* context = nullptr;
  std::vector<uint32_t*> progress;  ///< per tensor, as NodeArgs::progress (empty: none)
  int32_t profile = 0;
  /// Every input's shape is fixed by the profile (min == max): the device may capture the
  /// launch once and replay it (a CUDA graph) while the addresses stay the same.
  bool static_shapes = false;
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
  /// Scratch bytes `tactic` needs for `node` at `dims` (all tensors), monotonic in dims.
  virtual int64_t scratch_bytes(const ir::Network& net, const ir::Node& node, uint32_t tactic,
                                std::span<const Dims> dims) const = 0;

  /// Converts and uploads the weights once.
  virtual Result<std::shared_ptr<DeviceWeights>> upload_weights(const ir::Network& net,
                                                                std::span<const uint8_t> payload) const = 0;
  /// Allocates device memory (64-byte aligned). Errors: kResourceExhausted.
  virtual Result<DeviceBuffer> allocate(int64_t bytes) const = 0;
  /// Allocates page-locked host memory that copies to and from this device move by DMA
  /// without a bounce through a driver buffer (a session stages callers' host inputs and
  /// outputs in it); mapped (host_memory_kind) on a device whose kernels store outputs into
  /// host memory (writes_output_to_host). A null buffer means the device gains nothing from it (the CPU device,
  /// whose memory is the host's); the caller then copies directly.
  virtual Result<DeviceBuffer> allocate_pinned(int64_t bytes) const {
    (void)bytes;
    return DeviceBuffer(nullptr, [](void*) {});
  }
  /// What host memory [p, p + bytes) is to this device, each kind including the one before:
  /// page-locked (allocate_pinned, or registered by its owner), so that a copy into it is a
  /// DMA with no staging; mapped, so that the device's kernels can also store into it at
  /// those same addresses. The default (a device whose memory is the host's): pageable.
  enum class HostMemoryKind { kPageable, kPageLocked, kMapped };
  virtual HostMemoryKind host_memory_kind(const void* p, int64_t bytes) const {
    (void)p, (void)bytes;
    return HostMemoryKind::kPageable;
  }
  /// Whether the kernels that `tactics` choose for `net` may write network output `output`
  /// (an index into net.outputs) straight into mapped host memory (host_memory_kind), so
  /// that the output crosses to the host on the kernel's own stores, overlapped with its
  /// work, instead of by a copy after the network: the one kernel that writes it stores each
  /// element once and none reads it. The default: false.
  virtual bool writes_output_to_host(const ir::Network& net, std::span<const uint32_t> tactics, size_t output) const {
    (void)net, (void)tactics, (void)output;
    return false;
  }
  /// How many progress slots the kernels that store an output into mapped host memory
  /// (writes_output_to_host) fill while the network runs, so that the host can copy the
  /// output on as it lands (a session's pageable host outputs): uint32 each, in mapped host
  /// memory that the caller zeroes before every call and binds with the output
  /// (NetworkLaunch::progress). Each slot ends at the output's bytes; while the work runs,
  /// every byte of the output below the least slot is stored and visible to the host. 0: the
  /// device reports no progress (the output is whole once the work is done). The default: 0.
  virtual int32_t host_output_progress_slots() const { return 0; }
  /// The smallest host output (bytes) that a session should copy on as it lands: below it,
  /// what the progress costs the kernels and the host outweighs the copy after the drain
  /// that it would hide. The default: 0.
  virtual int64_t host_output_progress_min_bytes() const { return 0; }
  /// Per-context state for `profiles` profiles; null when the device keeps none.
  virtual Result<std::unique_ptr<DeviceContextState>> create_context_state(int32_t profiles) const = 0;
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

/// The backend for `kind`. Errors: kUnimplemented when this build lacks the device,
/// kNotFound when the machine has none.
Result<std::shared_ptr<const DeviceBackend>> device_backend(DeviceKind kind);

/// The CPU backend (always there) and the CUDA backend (kUnimplemented without CUDA in
/// the build, kNotFound without a GPU).
std::shared_ptr<const DeviceBackend> cpu_backend();
Result<std::shared_ptr<const DeviceBackend>> cuda_backend();

}  // namespace gearbox::internal
