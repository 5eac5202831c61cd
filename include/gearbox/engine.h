// gearbox/engine.h: load an engine and run it.
//
// An Engine is one model's weights (uploaded once to its device) plus its optimization
// profiles. A Session is one execution context on an Engine: its own KV cache and
// activation arena, and the execute path every gearbox front end shares (profile
// selection from the calling thread's OptimizationProfileGuard, validation, switching,
// binding, enqueueing, in-flight tracking). Sessions of one Engine share its weights.
//
//   auto engine = gearbox::Engine::load_file("mini.gbx");
//   auto session = gearbox::Session::create(*engine);
//   int64_t ids[] = {2, 651, 1000}, pos[] = {0, 1, 2};
//   gearbox::TensorView inputs[] = {
//       {ids, gearbox::DataType::kI64, gearbox::Dims{1, 3}},
//       {pos, gearbox::DataType::kI64, gearbox::Dims{1, 3}}};
//   gearbox::Tensor logits;
//   {
//     auto pick = gearbox::OptimizationProfileGuard::automatic();
//     if (auto s = session->run(inputs, std::span(&logits, 1)); !s.ok()) { ... }
//   }
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "gearbox/data_type.h"
#include "gearbox/device.h"
#include "gearbox/dims.h"
#include "gearbox/export.h"
#include "gearbox/profile_selection.h"
#include "gearbox/status.h"
#include "gearbox/stream.h"

namespace gearbox {

namespace internal {
class EngineCore;
class EngineHandle;
}  // namespace internal

/// Where a tensor's bytes live.
enum class MemoryKind : int32_t {
  /// Ordinary host memory: inputs are staged, outputs copied back and drained.
  kHost = 0,
  /// Memory of the engine's device (from Engine::allocate): used in place; a run that
  /// writes only device memory returns without waiting for the device.
  kDevice = 1,
};

/// A tensor the caller owns. For an output, `capacity_bytes` is the room at `data` and
/// `dims` receives the output's shape.
struct TensorView {
  void* data = nullptr;                   ///< the first element
  DataType dtype = DataType::kF32;        ///< element type; must match the binding
  Dims dims;                              ///< input: its shape; output: receives the shape
  MemoryKind memory = MemoryKind::kHost;  ///< where `data` lives
  int64_t capacity_bytes = 0;             ///< output only: bytes available at `data`
};

/// A host tensor that owns its bytes; outputs are resized to fit.
struct Tensor {
  DataType dtype = DataType::kF32;  ///< element type; must match the binding
  Dims dims;                        ///< the shape the run produced
  std::vector<std::byte> bytes;     ///< the elements, row-major
  /// The elements as T (T must match dtype's size).
  template <typename T>
  const T* data() const {
    return reinterpret_cast<const T*>(bytes.data());
  }
};

/// A network input or output as the engine declares it: extents of -1 are dynamic.
struct BindingInfo {
  std::string name;                    ///< e.g. "tokens", "positions", "logits"
  DataType dtype = DataType::kF32;     ///< element type a caller must pass
  Dims dims;                           ///< declared extents, -1 where dynamic (empty for outputs)
  std::vector<std::string> dim_names;  ///< e.g. {"batch", "seq"}
};

/// Device memory owned by the caller; freed when destroyed.
class GEARBOX_API DeviceMemory {
 public:
  DeviceMemory() = default;
  /// The address, usable as TensorView::data with MemoryKind::kDevice.
  void* data() const noexcept { return data_.get(); }
  /// Its size.
  int64_t bytes() const noexcept { return bytes_; }
  /// Wraps an allocation; used by Engine::allocate.
  DeviceMemory(std::shared_ptr<void> data, int64_t bytes) : data_(std::move(data)), bytes_(bytes) {}

 private:
  std::shared_ptr<void> data_;
  int64_t bytes_ = 0;
};

/// Host memory owned by the caller, page-locked where the engine's device gains from it
/// (CUDA): a kHost output placed in it is written there directly, without the copy through
/// the session's staging buffer (for a 1 MB logits row, tens of microseconds a call): by
/// DMA, or, where the device's kernels store that output themselves (the CUDA logits GEMV)
/// and the call passes the same memory as the call before, by the kernel's own stores, with
/// no copy at all. Usable wherever host memory is (TensorView::data with MemoryKind::kHost);
/// freed when destroyed.
class GEARBOX_API HostMemory {
 public:
  HostMemory() = default;
  /// The address, usable as TensorView::data with MemoryKind::kHost.
  void* data() const noexcept { return data_.get(); }
  /// Its size.
  int64_t bytes() const noexcept { return bytes_; }
  /// Wraps an allocation; used by Engine::allocate_host.
  HostMemory(std::shared_ptr<void> data, int64_t bytes) : data_(std::move(data)), bytes_(bytes) {}

 private:
  std::shared_ptr<void> data_;
  int64_t bytes_ = 0;
};

/// Options for loading an engine.
struct EngineOptions {
  /// The device to run on.
  DeviceKind device = DeviceKind::kCpu;
  /// Where tactics tuned at load are kept when the engine holds none for this device: read
  /// from this file when it matches the engine and the device's libraries, else tuned and
  /// written to it, so the next load does not tune again. Unset: FILE.DEVICE.tactics
  /// beside the file for load_file, none for load_buffer. Empty: no cache.
  std::optional<std::string> tactic_cache;
};

/// A loaded engine: weights on the device, profiles, bindings. Cheap to copy (shared).
class GEARBOX_API Engine {
 public:
  /// Loads (memory-maps) an engine file and uploads its weights. Errors: kNotFound for a
  /// missing file, kDataLoss for a damaged one, kUnimplemented for a device this build
  /// lacks, kResourceExhausted when memory runs out.
  static Result<Engine> load_file(const std::string& path, const EngineOptions& options = {});
  /// The same from bytes in memory (e.g. an ExecuTorch delegate blob); not retained.
  static Result<Engine> load_buffer(std::span<const uint8_t> bytes, const EngineOptions& options = {});

  /// The device the weights live on.
  DeviceKind device() const noexcept;
  /// The optimization profiles (index, name, bounds per input), as a policy table whose
  /// `active` is 0.
  const ProfileTable& profiles() const noexcept;
  /// The network inputs, in binding order.
  std::span<const BindingInfo> inputs() const noexcept;
  /// The network outputs, in binding order.
  std::span<const BindingInfo> outputs() const noexcept;
  /// The maximum context (KV cache rows) of a session.
  int64_t max_context() const noexcept;
  /// The KV-cache slots of a session of a batched engine (inputs `tokens` and `positions`
  /// [batch, seq], `slots` [batch]): the most sequences one session holds. 0 for an engine
  /// of one sequence (`tokens` [1, seq], no `slots`).
  int64_t max_batch() const noexcept;
  /// A metadata value (e.g. "tokenizer.bos"), or empty when absent.
  std::string metadata(const std::string& key) const;
  /// Bytes of weights on the device.
  int64_t weight_bytes() const noexcept;
  /// Allocates device memory for kDevice tensors. Errors: kResourceExhausted.
  Result<DeviceMemory> allocate(int64_t bytes) const;
  /// Allocates host memory for kHost tensors that the device reaches directly (HostMemory):
  /// page-locked on CUDA, ordinary (64-byte aligned) on the CPU device. Page-locked memory
  /// is a scarce system resource: allocate it once and reuse it across calls. Errors:
  /// kInvalidArgument for a negative size, kResourceExhausted.
  Result<HostMemory> allocate_host(int64_t bytes) const;

  /// Implementation access for gearbox's runtime.
  const std::shared_ptr<internal::EngineCore>& core() const noexcept { return core_; }
  /// Wraps a loaded core; used by the loaders.
  explicit Engine(std::shared_ptr<internal::EngineCore> core) : core_(std::move(core)) {}

 private:
  std::shared_ptr<internal::EngineCore> core_;
};

/// An output whose memory the caller provides once the run knows its shape: how a
/// framework integration (the ExecuTorch delegate) resizes its own tensors in place.
struct OutputSink {
  DataType dtype = DataType::kF32;        ///< element type; must match the binding
  MemoryKind memory = MemoryKind::kHost;  ///< where the returned pointer lives
  /// Called once per run, after the profile is chosen and the output's shape inferred,
  /// before anything is written to it. Returns where the output goes (room for `dims`
  /// elements of `dtype`), or an error that fails the run.
  std::function<Result<void*>(const Dims& dims)> prepare;
};

/// Per-call options of Session::run with OutputSink outputs.
struct RunOptions {
  /// The stream to enqueue on; null: the session's own.
  Stream* stream = nullptr;
  /// Replaces the session's default request for this call (it still applies only when no
  /// guard is active). Lets several callers with different defaults share one session.
  std::optional<ProfileRequest> default_request;
  /// When set, receives the index of the profile a successful call ran.
  int32_t* ran_profile = nullptr;
};

/// Options for a session.
struct SessionOptions {
  /// The request used when no OptimizationProfileGuard is active on the calling thread.
  /// Unset means profile 0, as in TensorRT.
  ProfileRequest default_request;
  /// Whether create() ends with warm_up(), so that the session's first request is not its
  /// slowest (the CLI and the ExecuTorch delegate set it).
  bool warm_up = false;
};

/// One execution context on an engine and the execute path. Not copyable; movable.
/// Thread-safe: concurrent run() calls on one session are serialized.
class GEARBOX_API Session {
 public:
  /// Creates the context: its KV cache and an activation arena for the largest profile
  /// (so switching never allocates), staging buffers and its own stream; then warm_up()
  /// where options.warm_up says so (its error is create's).
  static Result<Session> create(const Engine& engine, const SessionOptions& options = {});

  /// Runs the network: selects the profile (guard, else the default request), validates
  /// the inputs against it, switches if it changed, binds, enqueues on `stream` (or the
  /// session's own), copies host outputs back and waits for them. With only kDevice
  /// outputs it returns without waiting; the next run, synchronize() and the destructor
  /// wait. Outputs are resized (Tensor) or must fit (TensorView capacity).
  /// Errors: kInvalidArgument (wrong count, dtype, rank, token id...), kOutOfRange (no
  /// profile covers the shapes, or the pinned one does not), kNotFound (a pinned profile
  /// the engine does not have), kDeviceError (the device failed). A rejected call changes
  /// nothing (not the profile, not the KV cache). Token ids and positions in host memory
  /// are checked before anything runs; in device memory the host cannot read them without
  /// waiting, so the kernels check them: a bad one gives NaN where it is used and
  /// kOutOfRange from the call that waits for that run (this one with host outputs, else
  /// the next run or synchronize()).
  Status run(std::span<const TensorView> inputs, std::span<Tensor> outputs, Stream* stream = nullptr);
  /// The same with outputs in caller memory (host or device).
  Status run(std::span<const TensorView> inputs, std::span<TensorView> outputs, Stream* stream = nullptr);
  /// The same with outputs placed by the caller once their shapes are known.
  Status run(std::span<const TensorView> inputs, std::span<const OutputSink> outputs, const RunOptions& options = {});

  /// Prepares every profile before the first request: runs each once with placeholder
  /// inputs (a profile whose shapes vary, at the extents its device names: on CUDA, one per
  /// bucket of row counts its GEMMs choose algorithms by), so that loading kernels, choosing
  /// algorithms and capturing graphs happen here and not inside a request. The session is
  /// then on the profile it was on; its KV cache holds placeholder rows, which no call reads
  /// before writing them (as after create). The CLI and the ExecuTorch delegate create their
  /// sessions with SessionOptions::warm_up; a caller whose first request is latency-bound should.
  /// Errors: kDeviceError where the device failed (the session is then unusable).
  Status warm_up();

  /// The profile the last run used (0 before any run).
  int32_t active_profile() const;
  /// Waits for the session's in-flight work; returns its error, if any.
  Status synchronize();
  /// Batched engines: frees KV-cache slot `slot` for a new sequence. The next row naming it
  /// must start at position 0; no row ever reads keys another sequence wrote. Errors:
  /// kInvalidArgument for a slot outside [0, Engine::max_batch()).
  [[nodiscard]] Status release_slot(int64_t slot);
  /// Batched engines: the rows the sequence in `slot` has written (its next position); 0
  /// for a free slot or one outside the session.
  int64_t slot_length(int64_t slot) const;

  /// Moves the session (its context, KV cache and in-flight work) to a new owner.
  Session(Session&&) noexcept;
  /// Destroys this session (waiting for its work) and takes over `other`.
  Session& operator=(Session&&) noexcept;
  /// Waits for the session's in-flight work, then frees its memory.
  ~Session();

  /// Implementation access for gearbox's runtime and tests.
  internal::EngineHandle* handle() const noexcept { return handle_.get(); }

 private:
  explicit Session(std::unique_ptr<internal::EngineHandle> handle);
  std::unique_ptr<internal::EngineHandle> handle_;
};

}  // namespace gearbox
