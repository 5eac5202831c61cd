// GearboxBackend: ExecuTorch's BackendInterface over gearbox's public C++ API.
//
// init    reads the blob (an engine file), loads it once per (engine, device) for the whole
//         process (every method and delegate instance naming the same engine shares it and
//         its weight upload), and gives the handle an execution context (a Session): its
//         own, or the one shared by handles with the same context key.
// execute is Session::run, the execute path every gearbox front end shares (tensors of any
//         rank and of the dtypes to_gearbox_dtype names, in and out): profile from
//         the calling thread's guard (else the method's default request), validation,
//         switch only on change, outputs resized in place, host outputs drained.
// destroy drops the handle; the last user of a Session waits for its in-flight work.
// All three may run concurrently from any number of threads.
#include <charconv>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include <executorch/runtime/backend/interface.h>
#include <executorch/runtime/core/error.h>
#include <executorch/runtime/core/evalue.h>
#include <executorch/runtime/core/exec_aten/util/tensor_util.h>
#include <executorch/runtime/platform/log.h>

#include "core/settings.h"
#include "gearbox/device.h"
#include "gearbox/engine.h"
#include "gearbox/executorch/backend.h"
#include "gearbox/executorch/blob.h"

namespace gearbox::executorch {
namespace {

namespace et = ::executorch::runtime;
using ::executorch::aten::ScalarType;
using ::executorch::aten::SizesType;

// What one delegate instance was compiled with.
struct Specs {
  ProfileRequest default_request;
  std::string device = "auto";
  std::string context;
};

Result<ProfileRequest> parse_request(std::string_view v) {
  if (v == "automatic") return ProfileRequest::automatic();
  if (v.starts_with("name:") && v.size() > 5) return ProfileRequest::named(std::string(v.substr(5)));
  if (v.starts_with("index:")) {
    int64_t index = -1;
    const std::string_view digits = v.substr(6);
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (ec == std::errc() && end == digits.data() + digits.size() && index >= 0) return ProfileRequest::pinned(index);
  }
  return invalid_argument(std::string("compile spec ") + kSpecDefaultProfile + ": '" + std::string(v) +
                          "' is not automatic, index:N or name:NAME");
}

Result<Specs> parse_specs(et::ArrayRef<et::CompileSpec> specs) {
  Specs out;
  for (const et::CompileSpec& spec : specs) {
    const std::string_view key = spec.key != nullptr ? spec.key : "";
    const std::string_view value(static_cast<const char*>(spec.value.buffer), spec.value.nbytes);
    if (key == kSpecDefaultProfile) {
      Result<ProfileRequest> r = parse_request(value);
      if (!r.ok()) return r.status();
      out.default_request = *r;
    } else if (key == kSpecDevice) {
      out.device = std::string(value);
    } else if (key == kSpecContext) {
      out.context = std::string(value);
    } else if (key.starts_with(kSpecBuildPrefix)) {
      // Read by the export only (profiles, tuning device); the engine already holds them.
    } else {
      return invalid_argument("unknown compile spec '" + std::string(key) + "' (this gearbox knows " +
                              kSpecDefaultProfile + ", " + kSpecDevice + ", " + kSpecContext + ")");
    }
  }
  if (const std::string& device = internal::settings().device; !device.empty()) out.device = device;
  return out;
}

Result<DeviceKind> resolve_device(const std::string& name) {
  Result<DeviceKind> device = device_from_name(name);
  if (!device.ok())
    return device.status().with_context(std::string("compile spec ") + kSpecDevice + " or GEARBOX_DEVICE");
  return device;
}

// Engines and shared contexts of the process, keyed by the engine's identity: its
// checksums and sizes (a blob only loads if they match its bytes) and the device.
using EngineKey = std::tuple<uint64_t, uint64_t, uint64_t, uint64_t, DeviceKind>;

class Registry {
 public:
  static Registry& instance() {
    static Registry* registry = new Registry();  // never destroyed: handles may outlive statics
    return *registry;
  }

  Result<std::shared_ptr<Engine>> engine(const EngineKey& key, std::span<const uint8_t> bytes, DeviceKind device) {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (std::shared_ptr<Engine> live = engines_[key].lock()) return live;
    EngineOptions options;
    options.device = device;
    // A blob without tactics for this device tunes at init; GEARBOX_TACTIC_CACHE_DIR keeps
    // what it chose for the next process (one file per engine and device).
    if (const std::string& dir = internal::settings().tactic_cache_dir; !dir.empty()) {
      char name[64];
      std::snprintf(name, sizeof(name), "/%016llx-%016llx.", static_cast<unsigned long long>(std::get<0>(key)),
                    static_cast<unsigned long long>(std::get<1>(key)));
      options.tactic_cache = dir + name + device_kind_name(device) + ".tactics";
    }
    Result<Engine> loaded = Engine::load_buffer(bytes, options);
    if (!loaded.ok()) return loaded.status();
    auto engine = std::make_shared<Engine>(std::move(*loaded));
    engines_[key] = engine;
    return engine;
  }

  // `scope` is the program instance's runtime allocator: ExecuTorch's Module gives every
  // method of one Module the same one, so a context key is shared within a Module only.
  Result<std::shared_ptr<Session>> session(const EngineKey& key, const std::shared_ptr<Engine>& engine,
                                           const Specs& specs, const void* scope) {
    SessionOptions options;
    options.default_request = specs.default_request;
    // Every session is warmed up at init, so that a method's first execute is not its slowest.
    options.warm_up = true;
    const auto create = [&] { return Session::create(*engine, options); };
    if (specs.context.empty()) {
      Result<Session> s = create();
      if (!s.ok()) return s.status();
      return std::make_shared<Session>(std::move(*s));
    }
    const std::lock_guard<std::mutex> lock(mutex_);
    std::weak_ptr<Session>& slot = contexts_[{key, specs.context, scope}];
    if (std::shared_ptr<Session> live = slot.lock()) return live;
    Result<Session> s = create();
    if (!s.ok()) return s.status();
    auto session = std::make_shared<Session>(std::move(*s));
    slot = session;
    return session;
  }

  int64_t live_engines() {
    const std::lock_guard<std::mutex> lock(mutex_);
    int64_t n = 0;
    for (auto it = engines_.begin(); it != engines_.end();) {
      if (it->second.expired()) {
        it = engines_.erase(it);
      } else {
        ++n;
        ++it;
      }
    }
    return n;
  }

 private:
  std::mutex mutex_;
  std::map<EngineKey, std::weak_ptr<Engine>> engines_;
  std::map<std::tuple<EngineKey, std::string, const void*>, std::weak_ptr<Session>> contexts_;
};

// One delegate instance: the shared engine, its context and its method's default request.
struct Handle {
  std::shared_ptr<Engine> engine;
  std::shared_ptr<Session> session;
  ProfileRequest default_request;
  std::string method;
  int32_t engine_index = 0;  // per method, in init order
};

// The calls of this thread (take_profile_records), the latest kMaxRecords.
constexpr size_t kMaxRecords = 256;
thread_local std::vector<ProfileRecord> t_records;

// Delegate instances initialized so far per method name, to number a method's engines.
std::mutex g_count_mutex;
std::map<std::string, int32_t> g_instances_per_method;

et::Error to_et_error(const Status& s) {
  switch (s.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
    case StatusCode::kNotFound: return et::Error::InvalidArgument;
    case StatusCode::kDataLoss: return et::Error::InvalidProgram;
    case StatusCode::kResourceExhausted: return et::Error::MemoryAllocationFailed;
    case StatusCode::kUnimplemented: return et::Error::NotSupported;
    default: return et::Error::Internal;
  }
}

et::Error report(const char* what, const std::string& method, const Status& s) {
  ET_LOG(Error, "gearbox: %s of method '%s' failed: %s", what, method.c_str(), s.to_string().c_str());
  return to_et_error(s);
}

Result<DataType> to_gearbox_dtype(ScalarType t) {
  switch (t) {
    case ScalarType::Float: return DataType::kF32;
    case ScalarType::Long: return DataType::kI64;
    case ScalarType::Int: return DataType::kI32;
    case ScalarType::BFloat16: return DataType::kBF16;
    case ScalarType::Half: return DataType::kF16;
    case ScalarType::Bool: return DataType::kBool;
    default:
      return invalid_argument("tensor dtype " + std::string(::executorch::runtime::toString(t)) +
                              " is not one gearbox binds (float, bfloat16, half, int, long, bool)");
  }
}

class GearboxBackend final : public et::BackendInterface {
 public:
  bool is_available() const override { return true; }

  et::Result<et::DelegateHandle*> init(et::BackendInitContext& context, et::FreeableBuffer* processed,
                                       et::ArrayRef<et::CompileSpec> compile_specs) const override {
    const std::string method = context.get_method_name() != nullptr ? context.get_method_name() : "?";
    if (processed == nullptr) return report("init", method, invalid_argument("no delegate blob"));
    const std::span<const uint8_t> bytes(static_cast<const uint8_t*>(processed->data()), processed->size());
    BlobHeader header{};
    if (!read_blob_header(bytes.data(), bytes.size(), &header)) {
      return report("init", method,
                    data_loss("the delegate blob is not a gearbox engine (" + std::to_string(bytes.size()) +
                              " bytes, bad magic); was the .pte exported with gearbox's partitioner?"));
    }
    Result<Specs> specs = parse_specs(compile_specs);
    if (!specs.ok()) return report("init", method, specs.status());
    Result<DeviceKind> device = resolve_device(specs->device);
    if (!device.ok()) return report("init", method, device.status());

    const EngineKey key{header.metadata_xxh3, header.payload_xxh3, header.metadata_bytes, header.payload_bytes,
                        *device};
    Result<std::shared_ptr<Engine>> engine = Registry::instance().engine(key, bytes, *device);
    if (!engine.ok()) return report("init", method, engine.status());
    // The engine holds its own copy of everything it needs: the blob can go.
    processed->Free();
    Result<std::shared_ptr<Session>> session =
        Registry::instance().session(key, *engine, *specs, context.get_runtime_allocator());
    if (!session.ok()) return report("init", method, session.status());
    int32_t engine_index = 0;
    {
      const std::lock_guard<std::mutex> lock(g_count_mutex);
      engine_index = g_instances_per_method[method]++;
    }
    auto* handle = new (std::nothrow) Handle{*engine, *session, specs->default_request, method, engine_index};
    if (handle == nullptr) return et::Error::MemoryAllocationFailed;
    return handle;
  }

  et::Error execute(et::BackendExecutionContext& /*context*/, et::DelegateHandle* opaque,
                    et::Span<et::EValue*> args) const override {
    auto* handle = static_cast<Handle*>(opaque);
    if (handle == nullptr) return et::Error::InvalidArgument;
    const size_t n_in = handle->engine->inputs().size(), n_out = handle->engine->outputs().size();
    if (args.size() != n_in + n_out) {
      return report("execute", handle->method,
                    invalid_argument("the engine has " + std::to_string(n_in) + " inputs and " + std::to_string(n_out) +
                                     " outputs, the call passed " + std::to_string(args.size()) + " arguments"));
    }
    std::vector<TensorView> inputs(n_in);
    for (size_t i = 0; i < n_in; ++i) {
      const std::string& name = handle->engine->inputs()[i].name;
      if (args[i] == nullptr || !args[i]->isTensor()) {
        return report("execute", handle->method, invalid_argument("input '" + name + "' is not a tensor"));
      }
      const ::executorch::aten::Tensor t = args[i]->toTensor();
      Result<DataType> dtype = to_gearbox_dtype(t.scalar_type());
      if (!dtype.ok()) return report("execute", handle->method, dtype.status().with_context("input '" + name + "'"));
      std::vector<int64_t> extents(static_cast<size_t>(t.dim()));
      for (size_t d = 0; d < extents.size(); ++d) extents[d] = t.size(static_cast<ssize_t>(d));
      inputs[i] = TensorView{const_cast<void*>(t.const_data_ptr()), *dtype, Dims(extents), MemoryKind::kHost, 0};
    }
    std::vector<OutputSink> outputs(n_out);
    for (size_t o = 0; o < n_out; ++o) {
      et::EValue* arg = args[n_in + o];
      const std::string& name = handle->engine->outputs()[o].name;
      if (arg == nullptr || !arg->isTensor()) {
        return report("execute", handle->method, invalid_argument("output '" + name + "' is not a tensor"));
      }
      ::executorch::aten::Tensor t = arg->toTensor();
      Result<DataType> dtype = to_gearbox_dtype(t.scalar_type());
      if (!dtype.ok()) return report("execute", handle->method, dtype.status().with_context("output '" + name + "'"));
      outputs[o].dtype = *dtype;
      outputs[o].memory = MemoryKind::kHost;
      outputs[o].prepare = [t](const Dims& dims) mutable -> Result<void*> {
        std::vector<SizesType> sizes(static_cast<size_t>(dims.rank()));
        for (size_t d = 0; d < sizes.size(); ++d) sizes[d] = static_cast<SizesType>(dims[static_cast<int>(d)]);
        const et::Error e = et::resize_tensor(t, {sizes.data(), sizes.size()});
        if (e != et::Error::Ok) {
          return invalid_argument("cannot resize the ExecuTorch output to " + dims.to_string() +
                                  " (its memory plan is smaller; export with a larger max sequence)");
        }
        return t.mutable_data_ptr();
      };
    }
    // The method's default request applies when no guard is active on this thread (a
    // shared context serves handles with different defaults, so each call states its own).
    RunOptions options;
    options.default_request = handle->default_request;
    int32_t profile = 0;
    options.ran_profile = &profile;
    const Status s = handle->session->run(inputs, std::span<const OutputSink>(outputs), options);
    if (!s.ok()) return report("execute", handle->method, s);
    const std::vector<std::string>& names = handle->engine->profiles().names;
    if (t_records.size() >= kMaxRecords) t_records.erase(t_records.begin());
    t_records.push_back({handle->method, handle->engine_index, profile,
                         static_cast<size_t>(profile) < names.size() ? names[static_cast<size_t>(profile)] : ""});
    return et::Error::Ok;
  }

  void destroy(et::DelegateHandle* opaque) const override { delete static_cast<Handle*>(opaque); }
};

GearboxBackend& backend() {
  static GearboxBackend* b = new GearboxBackend();
  return *b;
}

// Registration when the library is loaded (a .pte run from C++ or Python finds the
// backend as soon as libgearbox_executorch is in the process).
const bool kRegisteredAtLoad = register_backend().ok();

}  // namespace

Status register_backend() {
  static std::mutex mutex;
  const std::lock_guard<std::mutex> lock(mutex);
  if (et::get_backend_class(kBackendId) == &backend()) return {};
  const et::Error e = et::register_backend(et::Backend{kBackendId, &backend()});
  if (e != et::Error::Ok) {
    return internal_error(std::string("ExecuTorch refused to register ") + kBackendId + ": " + et::to_string(e));
  }
  return {};
}

std::vector<ProfileRecord> take_profile_records() { return std::exchange(t_records, {}); }

int64_t loaded_engine_count() noexcept { return Registry::instance().live_engines(); }

}  // namespace gearbox::executorch
