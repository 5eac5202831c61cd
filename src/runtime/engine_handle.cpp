#include "runtime/engine_handle.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/check.h"
#include "core/log.h"
#include "gearbox/profile_guard.h"
#include "ir/shape_inference.h"
#include "runtime/host_progress.h"

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
  for (size_t o = 0; o < outputs; ++o) {
    Result<DeviceBuffer> buf = h->engine_->device().allocate(h->engine_->binding_max_bytes(n_in + o));
    if (!buf.ok()) return buf.status();
    h->output_staging_.push_back(std::move(*buf));
  }
  h->pinned_.resize(outputs);
  h->writes_to_host_.resize(static_cast<size_t>(h->table_.size()));
  for (int32_t p = 0; p < h->table_.size(); ++p) {
    for (size_t o = 0; o < outputs; ++o) {
      h->writes_to_host_[static_cast<size_t>(p)].push_back(
          h->engine_->device().writes_output_to_host(h->engine_->network(), h->engine_->tactics(p), o));
    }
  }
  h->last_host_output_.resize(outputs, nullptr);
  h->host_route_.resize(outputs, -1);
  for (size_t o = 0; o < outputs; ++o) h->progress_.emplace_back(nullptr, [](void*) {});
  h->progress_count_ = h->engine_->device().host_output_progress_slots();
  h->progress_min_bytes_ = h->engine_->device().host_output_progress_min_bytes();
  return h;
}

bool EngineHandle::take_pinned(DeviceBuffer& into, int64_t bytes, const std::string& what) {
  if (pinned_unavailable_) return false;
  Result<DeviceBuffer> buf = engine_->device().allocate_pinned(bytes);
  if (!buf.ok()) {
    GEARBOX_LOG(kWarning, "no page-locked memory for %s (%s)", what.c_str(), buf.status().to_string().c_str());
    return false;
  }
  if (*buf == nullptr) {
    pinned_unavailable_ = true;
    return false;
  }
  into = std::move(*buf);
  return true;
}

uint32_t* EngineHandle::progress_slots(size_t o) {
  if (progress_count_ <= 0) return nullptr;
  if (progress_[o] == nullptr &&
      !take_pinned(progress_[o], int64_t{progress_count_} * 4,
                   "the progress slots of output " + std::to_string(o) + ": it is copied once the network is done")) {
    progress_count_ = 0;
    return nullptr;
  }
  return static_cast<uint32_t*>(progress_[o].get());
}

void* EngineHandle::input_pinned() {
  if (input_pinned_ != nullptr) return input_pinned_.get();
  if (!take_pinned(input_pinned_, input_staging_bytes_, "the inputs: copying the caller's memory directly")) {
    return nullptr;
  }
  // The padding between inputs is copied too: zeroed once, so that no copy reads
  // uninitialized memory.
  std::memset(input_pinned_.get(), 0, static_cast<size_t>(input_staging_bytes_));
  return input_pinned_.get();
}

void* EngineHandle::pinned_staging(size_t o, int64_t bytes) {
  Pinned& p = pinned_[o];
  if (p.buffer != nullptr && p.bytes >= bytes) return p.buffer.get();
  // Grow geometrically up to the output's largest size, so that alternating profiles do
  // not reallocate on every call.
  const int64_t want = std::max(bytes, std::min(2 * p.bytes, engine_->binding_max_bytes(engine_->inputs().size() + o)));
  if (!take_pinned(p.buffer, want, "output " + std::to_string(o) + ": copying to the caller's memory directly")) {
    return nullptr;
  }
  p.bytes = want;
  return p.buffer.get();
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
  for (size_t i = 0; i < inputs.size(); ++i) {
    GEARBOX_RETURN_IF_ERROR(engine_->check_bounds(profile, i, dims[i]));
    const int64_t limit = engine_->input_value_limit(i);
    if (limit == 0 || inputs[i].memory != MemoryKind::kHost) continue;
    const int64_t count = dims[i].volume();
    for (int64_t k = 0; k < count; ++k) {
      const int64_t v = read_int(inputs[i].data, inputs[i].dtype, k);
      if (v < 0 || v >= limit) {
        return invalid_argument("input '" + engine_->inputs()[i].name + "' value " + std::to_string(v) + " at index " +
                                std::to_string(k) + " is outside [0, " + std::to_string(limit) + ")");
      }
    }
  }
  return {};
}

Status EngineHandle::execute(std::span<const TensorView> inputs, std::span<const OutputArg> outputs,
                             StreamImpl* caller_stream, const ProfileRequest* default_request, int32_t* ran_profile) {
  std::lock_guard<std::mutex> lock(mutex_);
  // 1. Nothing may reconfigure the context while its earlier work runs.
  GEARBOX_RETURN_IF_ERROR(wait_inflight());
  // 2. The stream.
  StreamImpl& stream = caller_stream != nullptr ? *caller_stream : *own_stream_;
  if (stream.kind() != engine_->device().kind()) {
    return invalid_argument(std::string("the stream is on the ") + device_kind_name(stream.kind()) +
                            " device but the engine runs on " + device_kind_name(engine_->device().kind()));
  }
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
  // 3. Every input's dims, before anything is switched.
  std::vector<Dims> dims;
  GEARBOX_RETURN_IF_ERROR(check_inputs(inputs, dims));
  // 4. Select.
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
  // 5. Validate against the chosen profile and the model.
  GEARBOX_RETURN_IF_ERROR(validate(inputs, dims, sel.profile));
  // 6. Switch only on a change; from here on work may be in flight.
  if (sel.profile != context_->profile()) {
    GEARBOX_RETURN_IF_ERROR(context_->set_optimization_profile_async(sel.profile, stream));
    table_.active = sel.profile;
    GEARBOX_RETURN_IF_ERROR(mark_inflight(stream));
    GEARBOX_LOG(kDebug, "switched to profile %s", engine_->describe_profile(sel.profile).c_str());
  }
  if (fail_at) GEARBOX_RETURN_IF_ERROR(fail_at(ExecuteStage::kAfterSwitch));
  // 7. Shapes, outputs, bindings. Host inputs are packed into the input staging in input
  // order, each at the next 64-byte boundary, so that one copy carries them all (step 8);
  // the same shapes give the same addresses, so a captured graph stays valid.
  const size_t n_in = inputs.size();
  std::vector<int64_t> input_offset(n_in, 0);
  int64_t packed = 0;  // bytes of the input staging in use
  for (size_t i = 0; i < n_in; ++i) {
    GEARBOX_RETURN_IF_ERROR(context_->set_input_shape(i, dims[i]));
    void* address = inputs[i].data;
    if (inputs[i].memory == MemoryKind::kHost) {
      input_offset[i] = packed;
      address = static_cast<char*>(input_staging_.get()) + packed;
      packed += packed_bytes(ir::tensor_bytes(dims[i], inputs[i].dtype));
    }
    GEARBOX_RETURN_IF_ERROR(context_->set_tensor_address(i, address));
  }
  // A host output: its output index, whether the kernels write it themselves (else a copy
  // after the network does), the kind of the caller's memory, and in `arrival` the caller's
  // memory, its bytes, the page-locked buffer it lands in first (null: straight into the
  // caller's memory) and, where the kernels store into the session's buffer and say how much
  // of it is there, their progress slots (the bytes below arrival.copied are in the caller's
  // memory already).
  struct HostCopy {
    size_t output = 0;
    bool by_kernels = false;
    DeviceBackend::HostMemoryKind kind = DeviceBackend::HostMemoryKind::kPageable;  // of arrival.dst
    LandingCopy arrival;
  };
  std::vector<HostCopy> host_copies;
  host_copies.reserve(outputs.size());
  for (size_t o = 0; o < outputs.size(); ++o) {
    Result<Dims> shape = context_->output_shape(o);
    if (!shape.ok()) return shape.status();
    Result<void*> target = outputs[o].prepare(*shape);
    if (!target.ok()) return target.status().with_context("output '" + engine_->outputs()[o].name + "'");
    void* address = *target;
    if (outputs[o].memory == MemoryKind::kHost) {
      HostCopy c;
      c.output = o;
      LandingCopy& a = c.arrival;
      a.dst = address;
      a.bytes = ir::tensor_bytes(*shape, outputs[o].dtype);
      c.kind = engine_->device().host_memory_kind(a.dst, a.bytes);
      address = output_staging_[o].get();
      // Where the device's kernels can store the output into mapped host memory, they do:
      // into the caller's own memory when it is mapped and the same as at the last call
      // (a new address would make a captured graph be captured again, so a caller that
      // alternates buffers keeps the copy), else into the session's page-locked staging
      // (mapped: allocate_pinned) when the caller's memory is pageable.
      if (writes_to_host_[static_cast<size_t>(sel.profile)][o] && a.bytes > 0) {
        if (c.kind == DeviceBackend::HostMemoryKind::kMapped && a.dst == last_host_output_[o]) {
          c.by_kernels = true;
          address = a.dst;
        } else if (c.kind == DeviceBackend::HostMemoryKind::kPageable) {
          if (void* pinned = pinned_staging(o, a.bytes); pinned != nullptr) {
            c.by_kernels = true;
            a.landed = pinned;
            address = pinned;
            a.slots = a.bytes >= progress_min_bytes_ ? progress_slots(o) : nullptr;
            a.count = a.slots != nullptr ? progress_count_ : 0;
          }
        }
      }
      last_host_output_[o] = a.dst;
      const int route = c.by_kernels ? (a.landed != nullptr ? (a.slots != nullptr ? 3 : 2) : 1) : 0;
      if (route != host_route_[o]) {
        static constexpr const char* kRoutes[] = {
            "a copy after the network", "the kernels' stores into the caller's memory",
            "the kernels' stores into page-locked staging",
            "the kernels' stores into page-locked staging, copied on to the caller's memory as they land"};
        GEARBOX_LOG(kDebug, "output '%s' reaches host memory by %s", engine_->outputs()[o].name.c_str(),
                    kRoutes[route]);
        host_route_[o] = route;
      }
      host_copies.push_back(c);
      GEARBOX_RETURN_IF_ERROR(context_->set_output_progress(o, a.slots));
    } else {
      GEARBOX_RETURN_IF_ERROR(context_->set_output_progress(o, nullptr));
    }
    GEARBOX_RETURN_IF_ERROR(context_->set_tensor_address(n_in + o, address));
  }
  if (fail_at) GEARBOX_RETURN_IF_ERROR(fail_at(ExecuteStage::kBeforeEnqueue));
  // 8. Host inputs in, then the network. From the first copy on, work reads the staging
  // buffers: a failure drains the stream before it returns, so that the next call may
  // overwrite them.
  const auto drain = [&](const Status& s) {
    (void)stream.synchronize();
    inflight_pending_ = false;
    return s;
  };
  // Through page-locked memory, packed as in the input staging: one copy for all of them.
  char* const pinned = packed > 0 ? static_cast<char*>(input_pinned()) : nullptr;
  for (size_t i = 0; i < n_in; ++i) {
    if (inputs[i].memory != MemoryKind::kHost) continue;
    const int64_t bytes = ir::tensor_bytes(dims[i], inputs[i].dtype);
    if (pinned != nullptr) {
      std::memcpy(pinned + input_offset[i], inputs[i].data, static_cast<size_t>(bytes));
      continue;
    }
    void* const dst = static_cast<char*>(input_staging_.get()) + input_offset[i];
    if (Status copied = engine_->device().copy_from_host(dst, inputs[i].data, bytes, stream); !copied.ok()) {
      return drain(copied);
    }
  }
  if (pinned != nullptr) {
    if (Status copied = engine_->device().enqueue_copy(input_staging_.get(), pinned, packed, stream); !copied.ok()) {
      return drain(copied);
    }
  }
  // Progress slots start at 0 every call (nothing of the output is there yet); no earlier
  // work of this session runs any more (step 1).
  for (const HostCopy& c : host_copies) {
    if (c.arrival.slots != nullptr) std::memset(c.arrival.slots, 0, static_cast<size_t>(c.arrival.count) * 4);
  }
  if (Status enqueued = context_->enqueue(stream); !enqueued.ok()) return drain(enqueued);
  if (fail_at) (void)fail_at(ExecuteStage::kAfterEnqueue);  // a test may wait here; it cannot fail the call
  // 9. Host outputs: copy back and drain. Device outputs only: return with work in flight.
  if (host_copies.empty()) {
    GEARBOX_RETURN_IF_ERROR(mark_inflight(stream));
    if (ran_profile != nullptr) *ran_profile = sel.profile;
    return {};
  }
  // Each host output the kernels did not write lands in page-locked memory (a DMA at full
  // link speed): the caller's own where it is page-locked (Engine::allocate_host), else the
  // session's, copied to the caller's after the drain; without either, straight into the
  // caller's memory.
  for (HostCopy& c : host_copies) {
    if (c.by_kernels) continue;
    LandingCopy& a = c.arrival;
    void* const landed =
        c.kind != DeviceBackend::HostMemoryKind::kPageable ? nullptr : pinned_staging(c.output, a.bytes);
    a.landed = landed;
    // The network is in flight: never return with it untracked.
    Status copied = engine_->device().enqueue_copy(landed != nullptr ? landed : a.dst, output_staging_[c.output].get(),
                                                   a.bytes, stream);
    if (!copied.ok()) return drain(copied);
  }
  // While the network runs, an output whose kernels say how much of it is there is copied on
  // to the caller as it lands, so that only its last part waits for the drain. (A run that
  // fails may leave the caller's memory partly written, as a failed call may.)
  const bool any_slots =
      std::any_of(host_copies.begin(), host_copies.end(), [](const HostCopy& c) { return c.arrival.slots != nullptr; });
  if (any_slots && stream.record(inflight_event_).ok()) {
    for (;;) {
      bool moved = false;
      bool whole = true;
      for (HostCopy& c : host_copies) {
        if (c.arrival.slots == nullptr) continue;
        moved = copy_landed(c.arrival) || moved;
        whole = whole && c.arrival.copied == c.arrival.bytes;
      }
      if (whole || (!moved && inflight_event_.query())) break;
      if (!moved) spin_pause();
    }
  }
  inflight_pending_ = false;
  GEARBOX_RETURN_IF_ERROR(stream.synchronize());
  for (const HostCopy& c : host_copies) {
    const LandingCopy& a = c.arrival;
    if (a.landed != nullptr) {
      std::memcpy(static_cast<char*>(a.dst) + a.copied, static_cast<const char*>(a.landed) + a.copied,
                  static_cast<size_t>(a.bytes - a.copied));
    }
  }
  GEARBOX_RETURN_IF_ERROR(input_fault());
  if (ran_profile != nullptr) *ran_profile = sel.profile;
  return {};
}

}  // namespace gearbox::internal
