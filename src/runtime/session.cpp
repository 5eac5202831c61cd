// gearbox::Engine and gearbox::Session: the public face of EngineCore and EngineHandle.
#include "core/check.h"
#include "core/elapsed.h"
#include "core/log.h"
#include "format/mapped_file.h"
#include "gearbox/engine.h"
#include "ir/shape_inference.h"
#include "runtime/engine_core.h"
#include "runtime/engine_handle.h"

#include <algorithm>
#include <chrono>
#include <new>
#include <string>

namespace gearbox {

Result<Engine> Engine::load_file(const std::string& path, const EngineOptions& options) {
  Result<format::MappedFile> file = format::MappedFile::open(path);
  if (!file.ok()) return file.status();
  EngineOptions with_cache = options;
  if (!with_cache.tactic_cache) with_cache.tactic_cache = path + "." + device_kind_name(options.device) + ".tactics";
  Result<std::shared_ptr<internal::EngineCore>> core = internal::EngineCore::load(file->bytes(), with_cache);
  if (!core.ok()) return core.status().with_context(path);
  return Engine(std::move(*core));
}

Result<Engine> Engine::load_buffer(std::span<const uint8_t> bytes, const EngineOptions& options) {
  Result<std::shared_ptr<internal::EngineCore>> core = internal::EngineCore::load(bytes, options);
  if (!core.ok()) return core.status();
  return Engine(std::move(*core));
}

DeviceKind Engine::device() const noexcept { return core_->device().kind(); }
const ProfileTable& Engine::profiles() const noexcept { return core_->profiles(); }
std::span<const BindingInfo> Engine::inputs() const noexcept { return core_->inputs(); }
std::span<const BindingInfo> Engine::outputs() const noexcept { return core_->outputs(); }
int64_t Engine::max_context() const noexcept { return core_->network().max_context; }
int64_t Engine::max_batch() const noexcept { return core_->network().slots; }
int64_t Engine::weight_bytes() const noexcept { return core_->weights().bytes(); }

std::string Engine::metadata(const std::string& key) const { return format::metadata_value(core_->desc(), key); }

Result<DeviceMemory> Engine::allocate(int64_t bytes) const {
  Result<internal::DeviceBuffer> buf = core_->device().allocate(bytes);
  if (!buf.ok()) return buf.status();
  internal::DeviceBuffer owned = std::move(*buf);
  auto deleter = owned.get_deleter();
  return DeviceMemory(std::shared_ptr<void>(owned.release(), deleter), bytes);
}

Result<HostMemory> Engine::allocate_host(int64_t bytes) const {
  if (bytes < 0) return invalid_argument("allocate_host: negative size " + std::to_string(bytes));
  Result<internal::DeviceBuffer> buf = core_->device().allocate_pinned(bytes);
  if (!buf.ok()) return buf.status();
  internal::DeviceBuffer owned = std::move(*buf);
  if (owned != nullptr) {
    auto deleter = owned.get_deleter();
    return HostMemory(std::shared_ptr<void>(owned.release(), deleter), bytes);
  }
  // The device gains nothing from page-locked memory (its memory is the host's).
  constexpr std::align_val_t kAlign{64};
  void* p = ::operator new(static_cast<size_t>(std::max<int64_t>(bytes, 1)), kAlign, std::nothrow);
  if (p == nullptr) return resource_exhausted("allocate_host: no memory for " + std::to_string(bytes) + " bytes");
  return HostMemory(std::shared_ptr<void>(p, [](void* q) { ::operator delete(q, kAlign); }), bytes);
}

Session::Session(std::unique_ptr<internal::EngineHandle> handle) : handle_(std::move(handle)) {}
Session::Session(Session&&) noexcept = default;
Session& Session::operator=(Session&&) noexcept = default;
Session::~Session() = default;

Result<Session> Session::create(const Engine& engine, const SessionOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  Result<std::unique_ptr<internal::EngineHandle>> handle =
      internal::EngineHandle::create(engine.core(), options.default_request);
  if (!handle.ok()) return handle.status();
  Session session(std::move(*handle));
  const double created_ms = internal::ms_since(start);
  if (options.warm_up) GEARBOX_RETURN_IF_ERROR(session.warm_up());
  GEARBOX_LOG(kDebug, "session: created in %.1f ms, warmed up %.1f ms after that%s", created_ms,
              internal::ms_since(start) - created_ms, options.warm_up ? "" : " (no warm-up asked for)");
  return session;
}

Status Session::run(std::span<const TensorView> inputs, std::span<Tensor> outputs, Stream* stream) {
  std::vector<internal::OutputArg> args;
  args.reserve(outputs.size());
  for (Tensor& t : outputs) {
    internal::OutputArg arg;
    arg.dtype = t.dtype;
    arg.memory = MemoryKind::kHost;
    arg.prepare = [&t](const Dims& dims) -> Result<void*> {
      t.dims = dims;
      t.bytes.resize(static_cast<size_t>(ir::tensor_bytes(dims, t.dtype)));
      return static_cast<void*>(t.bytes.data());
    };
    args.push_back(std::move(arg));
  }
  return handle_->execute(inputs, args, stream != nullptr ? stream->impl() : nullptr);
}

Status Session::run(std::span<const TensorView> inputs, std::span<TensorView> outputs, Stream* stream) {
  std::vector<internal::OutputArg> args;
  args.reserve(outputs.size());
  for (TensorView& t : outputs) {
    internal::OutputArg arg;
    arg.dtype = t.dtype;
    arg.memory = t.memory;
    arg.prepare = [&t](const Dims& dims) -> Result<void*> {
      const int64_t bytes = ir::tensor_bytes(dims, t.dtype);
      if (t.data == nullptr || bytes > t.capacity_bytes) {
        return invalid_argument("needs " + std::to_string(bytes) + " bytes for " + dims.to_string() + ", has " +
                                std::to_string(t.capacity_bytes));
      }
      t.dims = dims;
      return t.data;
    };
    args.push_back(std::move(arg));
  }
  return handle_->execute(inputs, args, stream != nullptr ? stream->impl() : nullptr);
}

Status Session::run(std::span<const TensorView> inputs, std::span<const OutputSink> outputs,
                    const RunOptions& options) {
  return handle_->execute(inputs, outputs, options.stream != nullptr ? options.stream->impl() : nullptr,
                          options.default_request ? &*options.default_request : nullptr, options.ran_profile);
}

Status Session::warm_up() { return handle_->warm_up(); }
int32_t Session::active_profile() const { return handle_->active_profile(); }
Status Session::synchronize() { return handle_->synchronize(); }
Status Session::release_slot(int64_t slot) { return handle_->release_slot(slot); }
int64_t Session::slot_length(int64_t slot) const { return handle_->slot_length(slot); }

}  // namespace gearbox
