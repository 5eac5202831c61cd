#include "runtime/engine_handle.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>

#include "core/check.h"
#include "core/elapsed.h"
#include "core/log.h"
#include "gearbox/profile_guard.h"
#include "ir/shape_inference.h"

namespace gearbox::internal {
namespace {

int64_t read_int(const void* data, DataType type, int64_t i) {
  if (type == DataType::kI64) return static_cast<const int64_t*>(data)[i];
  return static_cast<const int32_t*>(data)[i];
}

/// An input's bytes in the packed input staging: rounded up to 64, so that every input starts
/// as aligned as a buffer of its own would (DeviceBackend::allocate).
int64_t packed_bytes(int64_t bytes) { return (bytes + 63) / 64 * 64; }

std::string dims_list(std::span<const BindingInfo> bindings, std::span<const Dims> dims) {
  std::string s;
  for (size_t i = 0; i < dims.size(); ++i) s += (i > 0 ? ", " : "") + bindings[i].name + " " + dims[i].to_string();
  return s;
}

}  // namespace

Result<std::unique_ptr<EngineHandle>> EngineHandle::create(std::shared_ptr<const EngineCore> engine,
                                                           ProfileRequest default_request) {
  std::unique_ptr<EngineHandle> h(new EngineHandle());
  h->engine_ = std::move(engine);
  h->pinned_ = PinnedSource(h->engine_->device());
  h->default_request_ = std::move(default_request);
  h->table_ = h->engine_->profiles();
  h->table_.active = 0;
  Result<std::unique_ptr<ExecutionContext>> ctx = ExecutionContext::create(h->engine_);
  if (!ctx.ok()) return ctx.status();
  h->context_ = std::move(*ctx);
  Result<std::shared_ptr<StreamImpl>> stream = h->engine_->device().create_stream();
  if (!stream.ok()) return stream.status();
  h->own_stream_ = std::move(*stream);
  const size_t n_in = h->engine_->inputs().size();
  const size_t outputs = h->engine_->outputs().size();
  for (size_t i = 0; i < n_in; ++i) h->input_staging_bytes_ += packed_bytes(h->engine_->binding_max_bytes(i));
  Result<DeviceBuffer> inputs = h->engine_->device().allocate(h->input_staging_bytes_);
  if (!inputs.ok()) return inputs.status();
  h->input_staging_ = std::move(*inputs);
  HostOutputsSpec spec;
  spec.net = &h->engine_->network();
  for (int32_t p = 0; p < h->table_.size(); ++p) spec.tactics.push_back(h->engine_->tactics(p));
  for (size_t o = 0; o < outputs; ++o) spec.max_bytes.push_back(h->engine_->binding_max_bytes(n_in + o));
  spec.context = h->context_->device_state();
  Result<std::unique_ptr<HostOutputs>> host_outputs = h->engine_->device().create_host_outputs(spec);
  if (!host_outputs.ok()) return host_outputs.status();
  h->host_outputs_ = std::move(*host_outputs);
  h->slots_ = SlotTable(h->engine_->network().slots, h->engine_->network().max_context);
  return h;
}

void* EngineHandle::input_pinned() {
  if (input_pinned_ != nullptr) return input_pinned_.get();
  if (!pinned_.take(input_pinned_, input_staging_bytes_, "the inputs: copying the caller's memory directly")) {
    return nullptr;
  }
  // The padding between inputs is copied too: zeroed once, so that no copy reads
  // uninitialized memory.
  std::memset(input_pinned_.get(), 0, static_cast<size_t>(input_staging_bytes_));
  return input_pinned_.get();
}

EngineHandle::~EngineHandle() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (inflight_pending_) {
    const Status s = inflight_event_.synchronize();
    if (!s.ok()) GEARBOX_LOG(kError, "work still in flight at teardown failed: %s", s.to_string().c_str());
  }
}

Status EngineHandle::wait_inflight() {
  if (!inflight_pending_) return {};
  inflight_pending_ = false;
  const Status s = inflight_event_.synchronize();
  if (!s.ok()) return s.with_context("an earlier run of this session failed on the device");
  const Status fault = input_fault();
  return fault.ok() ? fault : fault.with_context("an earlier run of this session");
}

Status EngineHandle::input_fault() {
  Status fault = context_->take_input_fault();
  if (fault.ok()) return fault;
  std::string ranges;
  for (size_t i = 0; i < engine_->inputs().size(); ++i) {
    const int64_t limit = engine_->input_value_limit(i);
    if (limit == 0) continue;
    ranges +=
        (ranges.empty() ? "" : ", ") + ("'" + engine_->inputs()[i].name + "' in [0, " + std::to_string(limit) + ")");
  }
  return {fault.code(), fault.message() + (ranges.empty() ? "" : "; the inputs must hold " + ranges)};
}

Status EngineHandle::mark_inflight(StreamImpl& stream) {
  const Status recorded = stream.record(inflight_event_);
  if (recorded.ok()) {
    inflight_pending_ = true;
    return {};
  }
  // Usually a sticky fault of work just enqueued: drain, and report it rather than success.
  GEARBOX_LOG(kError, "recording the in-flight event failed: %s", recorded.to_string().c_str());
  (void)stream.synchronize();
  inflight_pending_ = false;
  return recorded.with_context("the device failed");
}

Status EngineHandle::synchronize() {
  std::lock_guard<std::mutex> lock(mutex_);
  return wait_inflight();
}

int32_t EngineHandle::active_profile() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return context_->profile();
}

bool EngineHandle::inflight_pending() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return inflight_pending_;
}

Status EngineHandle::release_slot(int64_t slot) {
  std::lock_guard<std::mutex> lock(mutex_);
  return slots_.release(slot);
}

int64_t EngineHandle::slot_length(int64_t slot) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return slots_.length(slot);
}

Status EngineHandle::check_inputs(std::span<const TensorView> inputs, std::vector<Dims>& dims) const {
  const std::span<const BindingInfo> bindings = engine_->inputs();
  if (inputs.size() != bindings.size()) {
    return invalid_argument("the engine takes " + std::to_string(bindings.size()) + " inputs, got " +
                            std::to_string(inputs.size()));
  }
  dims.clear();
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].dtype != bindings[i].dtype) {
      return invalid_argument("input '" + bindings[i].name + "' must be " + data_type_name(bindings[i].dtype) +
                              ", got " + data_type_name(inputs[i].dtype));
    }
    if (inputs[i].data == nullptr) return invalid_argument("input '" + bindings[i].name + "' has no data");
    GEARBOX_RETURN_IF_ERROR(ir::check_input_dims(engine_->network(), i, inputs[i].dims));
    dims.push_back(inputs[i].dims);
  }
  return {};
}

Status EngineHandle::validate(std::span<const TensorView> inputs, std::span<const Dims> dims, int32_t profile) const {
  const int32_t positions = engine_->positions_input(), slots = engine_->slots_input();
  for (size_t i = 0; i < inputs.size(); ++i) {
    GEARBOX_RETURN_IF_ERROR(engine_->check_bounds(profile, i, dims[i]));
    const int64_t limit = engine_->input_value_limit(i);
    // A batched engine's positions (-1 pads) and slots are the slot table's to check.
    const bool slot_checked = static_cast<int32_t>(i) == positions || static_cast<int32_t>(i) == slots;
    if (limit == 0 || slot_checked || inputs[i].memory != MemoryKind::kHost) continue;
    const int64_t count = dims[i].volume();
    for (int64_t k = 0; k < count; ++k) {
      const int64_t v = read_int(inputs[i].data, inputs[i].dtype, k);
      if (v < 0 || v >= limit) {
        return invalid_argument("input '" + engine_->inputs()[i].name + "' value " + std::to_string(v) + " at index " +
                                std::to_string(k) + " is outside [0, " + std::to_string(limit) + ")");
      }
    }
  }
  if (positions >= 0 && slots >= 0) {
    GEARBOX_RETURN_IF_ERROR(slots_.check(inputs[static_cast<size_t>(positions)], inputs[static_cast<size_t>(slots)]));
  }
  return {};
}

Status EngineHandle::execute(std::span<const TensorView> inputs, std::span<const OutputArg> outputs,
                             StreamImpl* caller_stream, const ProfileRequest* default_request, int32_t* ran_profile) {
  std::lock_guard<std::mutex> lock(mutex_);
  // 1. Nothing may reconfigure the context while its earlier work runs.
  GEARBOX_RETURN_IF_ERROR(wait_inflight());
  // 2. The stream (and the outputs' count and types).
  Result<StreamImpl*> picked = pick_stream(caller_stream);
  if (!picked.ok()) return picked.status();
  StreamImpl& stream = **picked;
  GEARBOX_RETURN_IF_ERROR(check_outputs(outputs));
  // 3. Every input's dims, before anything is switched.
  std::vector<Dims> dims;
  GEARBOX_RETURN_IF_ERROR(check_inputs(inputs, dims));
  // 4. Select.
  Result<int32_t> profile = choose_profile(dims, default_request);
  if (!profile.ok()) return profile.status();
  GEARBOX_RETURN_IF_ERROR(run_profile(inputs, dims, outputs, *profile, stream, false));
  if (ran_profile != nullptr) *ran_profile = *profile;
  return {};
}

Status EngineHandle::run_profile(std::span<const TensorView> inputs, std::span<const Dims> dims,
                                 std::span<const OutputArg> outputs, int32_t profile, StreamImpl& stream,
                                 bool warm_up) {
  // 5. Validate against the chosen profile and the model.
  GEARBOX_RETURN_IF_ERROR(validate(inputs, dims, profile));
  // 6. Switch only on a change; from here on work may be in flight.
  GEARBOX_RETURN_IF_ERROR(switch_profile(profile, stream));
  if (fail_at) GEARBOX_RETURN_IF_ERROR(fail_at(ExecuteStage::kAfterSwitch));
  // 7. Shapes, outputs, bindings.
  PackedInputs packed;
  GEARBOX_RETURN_IF_ERROR(bind_inputs(inputs, dims, packed));
  Result<bool> any_host = bind_outputs(outputs, profile);
  if (!any_host.ok()) return any_host.status();
  if (fail_at) GEARBOX_RETURN_IF_ERROR(fail_at(ExecuteStage::kBeforeEnqueue));
  // 8. Host inputs in, then the network.
  GEARBOX_RETURN_IF_ERROR(enqueue(inputs, dims, packed, stream, warm_up));
  // A warm-up's placeholder rows are no sequence: the slots keep the lengths they had.
  if (engine_->slots_input() >= 0 && !warm_up) {
    slots_.commit(inputs[static_cast<size_t>(engine_->positions_input())],
                  inputs[static_cast<size_t>(engine_->slots_input())]);
  }
  if (fail_at) (void)fail_at(ExecuteStage::kAfterEnqueue);  // a test may wait here; it cannot fail the call
  // 9. Host outputs: copy back and drain. Device outputs only: return with work in flight.
  return *any_host ? deliver_host_outputs(stream) : mark_inflight(stream);
}

std::vector<std::vector<Dims>> EngineHandle::warm_up_shapes(int32_t profile) const {
  const std::vector<InputProfileBounds>& bounds = table_.bounds[static_cast<size_t>(profile)];
  // The profile's varying extent: the first input dim whose bounds differ. Every varying dim
  // takes the same extent, clamped to its own bounds (inputs share their sequence extent).
  std::vector<int64_t> extents;
  for (const InputProfileBounds& b : bounds) {
    for (int32_t d = 0; d < b.min.rank() && extents.empty(); ++d) {
      if (b.min[d] != b.max[d]) extents = engine_->device().warm_up_extents(b.min[d], b.opt[d], b.max[d]);
    }
  }
  if (extents.empty()) extents.push_back(0);  // nothing varies: the opt shape
  std::vector<std::vector<Dims>> shapes;
  for (const int64_t extent : extents) {
    std::vector<Dims> dims;
    for (const InputProfileBounds& b : bounds) {
      std::vector<int64_t> d(b.opt.extents().begin(), b.opt.extents().end());
      for (int32_t k = 0; k < b.opt.rank(); ++k) {
        if (b.min[k] != b.max[k]) d[static_cast<size_t>(k)] = std::clamp(extent, b.min[k], b.max[k]);
      }
      dims.emplace_back(std::span<const int64_t>(d));
    }
    if (std::find(shapes.begin(), shapes.end(), dims) == shapes.end()) shapes.push_back(std::move(dims));
  }
  return shapes;
}

Status EngineHandle::warm_up() {
  std::lock_guard<std::mutex> lock(mutex_);
  GEARBOX_RETURN_IF_ERROR(wait_inflight());
  StreamImpl& stream = *own_stream_;
  const int32_t was_on = context_->profile();
  const std::span<const BindingInfo> bindings = engine_->inputs();
  for (int32_t p = 0; p < table_.size(); ++p) {
    for (const std::vector<Dims>& dims : warm_up_shapes(p)) {
      // Placeholder inputs the model accepts: zeros, and for a bounded integer input (token
      // ids, positions) 0, 1, 2 ... along its last dim, below its bound.
      std::vector<std::vector<std::byte>> data(bindings.size());
      std::vector<TensorView> inputs;
      for (size_t i = 0; i < bindings.size(); ++i) {
        data[i].assign(static_cast<size_t>(ir::tensor_bytes(dims[i], bindings[i].dtype)), std::byte{0});
        const int64_t limit = engine_->input_value_limit(i);
        const int64_t count = dims[i].volume();
        const int64_t row = dims[i].rank() > 0 ? std::max<int64_t>(dims[i][dims[i].rank() - 1], 1) : 1;
        for (int64_t k = 0; limit > 0 && k < count; ++k) {
          const int64_t v = (k % row) % limit;
          if (bindings[i].dtype == DataType::kI64) {
            reinterpret_cast<int64_t*>(data[i].data())[k] = v;
          } else if (bindings[i].dtype == DataType::kI32) {
            reinterpret_cast<int32_t*>(data[i].data())[k] = static_cast<int32_t>(v);
          }
        }
        inputs.push_back({data[i].data(), bindings[i].dtype, dims[i]});
      }
      std::vector<std::vector<std::byte>> results(engine_->outputs().size());
      std::vector<OutputArg> outputs;
      for (size_t o = 0; o < results.size(); ++o) {
        OutputArg arg;
        arg.dtype = engine_->outputs()[o].dtype;
        arg.memory = MemoryKind::kHost;
        arg.prepare = [&results, o, dtype = arg.dtype](const Dims& out) -> Result<void*> {
          results[o].resize(static_cast<size_t>(std::max<int64_t>(ir::tensor_bytes(out, dtype), 1)));
          return static_cast<void*>(results[o].data());
        };
        outputs.push_back(std::move(arg));
      }
      const auto start = std::chrono::steady_clock::now();
      const Status s = run_profile(inputs, dims, outputs, p, stream, true);
      if (s.ok()) {
        // Host outputs: the call has finished on the device when run_profile returns.
        if (log_enabled(LogLevel::kDebug)) {
          GEARBOX_LOG(kDebug, "warm-up: profile %s at %s in %.1f ms", engine_->describe_profile(p).c_str(),
                      dims_list(bindings, dims).c_str(), internal::ms_since(start));
        }
        continue;
      }
      const std::string where =
          "warming up profile " + engine_->describe_profile(p) + " at " + dims_list(bindings, dims);
      // A shape the model refuses (inputs whose extents must relate otherwise) is skipped:
      // nothing ran. A device failure is the session's and is returned.
      if (s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kOutOfRange) {
        GEARBOX_LOG(kDebug, "%s: skipped, %s", where.c_str(), s.to_string().c_str());
        continue;
      }
      return s.with_context(where);
    }
  }
  GEARBOX_RETURN_IF_ERROR(switch_profile(was_on, stream));
  return wait_inflight();
}

Result<StreamImpl*> EngineHandle::pick_stream(StreamImpl* caller_stream) const {
  StreamImpl* stream = caller_stream != nullptr ? caller_stream : own_stream_.get();
  if (stream->kind() != engine_->device().kind()) {
    return invalid_argument(std::string("the stream is on the ") + device_kind_name(stream->kind()) +
                            " device but the engine runs on " + device_kind_name(engine_->device().kind()));
  }
  return stream;
}

Status EngineHandle::check_outputs(std::span<const OutputArg> outputs) const {
  if (outputs.size() != engine_->outputs().size()) {
    return invalid_argument("the engine has " + std::to_string(engine_->outputs().size()) + " outputs, got " +
                            std::to_string(outputs.size()));
  }
  for (size_t o = 0; o < outputs.size(); ++o) {
    if (outputs[o].dtype != engine_->outputs()[o].dtype) {
      return invalid_argument("output '" + engine_->outputs()[o].name + "' is " +
                              data_type_name(engine_->outputs()[o].dtype) + ", not " +
                              data_type_name(outputs[o].dtype));
    }
    if (!outputs[o].prepare) {
      return invalid_argument("output '" + engine_->outputs()[o].name + "' has no prepare function");
    }
  }
  return {};
}

Result<int32_t> EngineHandle::choose_profile(std::span<const Dims> dims, const ProfileRequest* default_request) {
  ProfileRequest request = OptimizationProfileGuard::current();
  if (request.kind() == ProfileRequest::Kind::kUnset) {
    request = default_request != nullptr ? *default_request : default_request_;
  }
  table_.active = context_->profile();
  const ProfileSelection sel = select_profile(table_, request, dims);
  switch (sel.status) {
    case ProfileSelection::Status::kOk: break;
    case ProfileSelection::Status::kPinIgnoredSingleProfile:
      if (engine_->first_pin_ignored()) {
        GEARBOX_LOG(kWarning, "the engine has a single profile: ignoring the request for %s and running profile 0",
                    request.to_string().c_str());
      }
      break;
    case ProfileSelection::Status::kRequestedProfileUnavailable: {
      std::string have;
      for (int32_t p = 0; p < table_.size(); ++p) have += (p > 0 ? ", " : "") + engine_->describe_profile(p);
      return not_found("the requested " + request.to_string() + " does not exist; the engine has " +
                       std::to_string(table_.size()) + " profiles: " + have);
    }
    case ProfileSelection::Status::kNoProfileMatchesInputs: {
      std::string have;
      for (int32_t p = 0; p < table_.size(); ++p) have += "; " + engine_->describe_profile(p);
      return out_of_range("no optimization profile accepts inputs " + dims_list(engine_->inputs(), dims) + have);
    }
  }
  return sel.profile;
}

Status EngineHandle::switch_profile(int32_t profile, StreamImpl& stream) {
  if (profile == context_->profile()) return {};
  GEARBOX_RETURN_IF_ERROR(context_->set_optimization_profile_async(profile, stream));
  table_.active = profile;
  GEARBOX_RETURN_IF_ERROR(mark_inflight(stream));
  GEARBOX_LOG(kDebug, "switched to profile %s", engine_->describe_profile(profile).c_str());
  return {};
}

Status EngineHandle::bind_inputs(std::span<const TensorView> inputs, std::span<const Dims> dims, PackedInputs& packed) {
  // Host inputs are packed into the input staging in input order, each at the next 64-byte
  // boundary, so that one copy carries them all (step 8); the same shapes give the same
  // addresses, so a captured graph stays valid.
  packed.offset.assign(inputs.size(), 0);
  packed.bytes = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    GEARBOX_RETURN_IF_ERROR(context_->set_input_shape(i, dims[i]));
    void* address = inputs[i].data;
    if (inputs[i].memory == MemoryKind::kHost) {
      packed.offset[i] = packed.bytes;
      address = static_cast<char*>(input_staging_.get()) + packed.bytes;
      packed.bytes += packed_bytes(ir::tensor_bytes(dims[i], inputs[i].dtype));
    }
    GEARBOX_RETURN_IF_ERROR(context_->set_tensor_address(i, address));
  }
  return {};
}

Result<bool> EngineHandle::bind_outputs(std::span<const OutputArg> outputs, int32_t profile) {
  // Each output goes where the device binds it for the caller's memory (HostOutputs).
  const size_t n_in = engine_->inputs().size();
  bool any_host = false;
  for (size_t o = 0; o < outputs.size(); ++o) {
    Result<Dims> shape = context_->output_shape(o);
    if (!shape.ok()) return shape.status();
    Result<void*> target = outputs[o].prepare(*shape);
    if (!target.ok()) return target.status().with_context("output '" + engine_->outputs()[o].name + "'");
    any_host = any_host || outputs[o].memory == MemoryKind::kHost;
    void* const address =
        host_outputs_->bind(o, profile, outputs[o].memory, *target, ir::tensor_bytes(*shape, outputs[o].dtype));
    GEARBOX_RETURN_IF_ERROR(context_->set_tensor_address(n_in + o, address));
  }
  return any_host;
}

Status EngineHandle::enqueue(std::span<const TensorView> inputs, std::span<const Dims> dims, const PackedInputs& packed,
                             StreamImpl& stream, bool warm_up) {
  // From the first copy on, work reads the staging buffers: a failure drains the stream
  // before it returns, so that the next call may overwrite them.
  const auto drain = [&](const Status& s) {
    (void)stream.synchronize();
    inflight_pending_ = false;
    return s;
  };
  // Through page-locked memory, packed as in the input staging: one copy for all of them.
  char* const pinned = packed.bytes > 0 ? static_cast<char*>(input_pinned()) : nullptr;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].memory != MemoryKind::kHost) continue;
    const int64_t bytes = ir::tensor_bytes(dims[i], inputs[i].dtype);
    if (pinned != nullptr) {
      std::memcpy(pinned + packed.offset[i], inputs[i].data, static_cast<size_t>(bytes));
      continue;
    }
    void* const dst = static_cast<char*>(input_staging_.get()) + packed.offset[i];
    if (Status copied = engine_->device().copy_from_host(dst, inputs[i].data, bytes, stream); !copied.ok()) {
      return drain(copied);
    }
  }
  if (pinned != nullptr) {
    if (Status copied = engine_->device().enqueue_copy(input_staging_.get(), pinned, packed.bytes, stream);
        !copied.ok()) {
      return drain(copied);
    }
  }
  if (Status enqueued = context_->enqueue(stream, warm_up); !enqueued.ok()) return drain(enqueued);
  return {};
}

Status EngineHandle::deliver_host_outputs(StreamImpl& stream) {
  const Status delivered = host_outputs_->deliver(stream);  // returns with the stream drained
  inflight_pending_ = false;
  GEARBOX_RETURN_IF_ERROR(delivered);
  return input_fault();
}

}  // namespace gearbox::internal
