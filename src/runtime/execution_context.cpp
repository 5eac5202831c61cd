#include "runtime/execution_context.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/check.h"
#include "ir/shape_inference.h"

namespace gearbox::internal {

Result<std::unique_ptr<ExecutionContext>> ExecutionContext::create(std::shared_ptr<const EngineCore> engine) {
  std::unique_ptr<ExecutionContext> ctx(new ExecutionContext(std::move(engine)));
  const EngineCore& core = *ctx->engine_;
  const ir::Network& net = core.network();
  Result<DeviceBuffer> arena = core.device().allocate(core.arena_bytes());
  if (!arena.ok()) return arena.status();
  ctx->arena_ = std::move(*arena);
  for (const ir::StateSpec& s : net.states) {
    const int64_t bytes =
        net.caches() * s.rows * s.width * static_cast<int64_t>(data_type_size(core.device().storage_type(s.dtype)));
    for (int kv = 0; kv < 2; ++kv) {
      Result<DeviceBuffer> buf = core.device().allocate(bytes);
      if (!buf.ok()) return buf.status().with_context("KV cache '" + s.name + "'");
      ctx->states_.push_back(buf->get());
      ctx->state_buffers_.push_back(std::move(*buf));
    }
  }
  Result<std::unique_ptr<DeviceContextState>> state = core.device().create_context_state(core.profiles().size());
  if (!state.ok()) return state.status();
  ctx->device_state_ = std::move(*state);
  for (const std::vector<InputProfileBounds>& bounds : core.profiles().bounds) {
    bool fixed = true;
    for (const InputProfileBounds& b : bounds) fixed = fixed && b.min == b.max;
    ctx->static_profile_.push_back(fixed);
  }
  ctx->input_dims_.assign(net.inputs.size(), Dims());
  ctx->input_set_.assign(net.inputs.size(), false);
  ctx->addresses_.assign(net.inputs.size() + net.outputs.size(), nullptr);
  return ctx;
}

Status ExecutionContext::set_optimization_profile_async(int32_t profile, StreamImpl& stream) {
  if (profile < 0 || profile >= engine_->profiles().size()) {
    return not_found("profile " + std::to_string(profile) + " does not exist; the engine has " +
                     std::to_string(engine_->profiles().size()));
  }
  // A gearbox switch swaps plans and moves no data, so it enqueues nothing unless a test
  // asks to observe the switch on the stream.
  if (on_device_switch) {
    GEARBOX_RETURN_IF_ERROR(stream.enqueue([hook = on_device_switch]() -> Status {
      hook();
      return Status();
    }));
  }
  profile_ = profile;
  // The shapes must be set again (as TensorRT asks); the inferred dims stay valid for the
  // same input shapes, since they do not depend on the profile.
  std::fill(input_set_.begin(), input_set_.end(), false);
  return {};
}

Status ExecutionContext::set_input_shape(size_t input, const Dims& dims) {
  const ir::Network& net = engine_->network();
  if (input >= net.inputs.size()) return not_found("input " + std::to_string(input) + " does not exist");
  GEARBOX_RETURN_IF_ERROR(ir::check_input_dims(net, input, dims));
  GEARBOX_RETURN_IF_ERROR(engine_->check_bounds(profile_, input, dims));
  // Shape inference walks every node: a decode step, whose shapes repeat, keeps the
  // previous result.
  if (!(input_dims_[input] == dims)) dims_valid_ = false;
  input_dims_[input] = dims;
  input_set_[input] = true;
  return {};
}

Status ExecutionContext::infer() {
  for (size_t i = 0; i < input_set_.size(); ++i) {
    if (!input_set_[i]) return failed_precondition("the shape of input " + std::to_string(i) + " is not set");
  }
  if (dims_valid_) return {};
  GEARBOX_RETURN_IF_ERROR(ir::infer_shapes(engine_->network(), input_dims_, dims_));
  dims_valid_ = true;
  return {};
}

Result<Dims> ExecutionContext::output_shape(size_t output) {
  const ir::Network& net = engine_->network();
  if (output >= net.outputs.size()) return not_found("output " + std::to_string(output) + " does not exist");
  GEARBOX_RETURN_IF_ERROR(infer());
  return dims_[static_cast<size_t>(net.outputs[output])];
}

Status ExecutionContext::set_tensor_address(size_t binding, void* address) {
  if (binding >= addresses_.size()) return not_found("binding " + std::to_string(binding) + " does not exist");
  if (address == nullptr) return invalid_argument("binding " + std::to_string(binding) + " has a null address");
  addresses_[binding] = address;
  return {};
}

Status ExecutionContext::enqueue(StreamImpl& stream, bool warm_up) {
  GEARBOX_RETURN_IF_ERROR(infer());
  const ir::Network& net = engine_->network();
  const MemoryPlan& plan = engine_->memory_plan(profile_);
  NetworkLaunch launch;
  const std::span<const uint32_t> tactics = engine_->tactics(profile_);
  launch.tactics.assign(tactics.begin(), tactics.end());
  launch.dims = dims_;
  launch.tensors.assign(net.tensors.size(), nullptr);
  auto* arena = static_cast<std::byte*>(arena_.get());
  for (size_t t = 0; t < net.tensors.size(); ++t) {
    if (plan.tensor_offset[t] >= 0) launch.tensors[t] = arena + plan.tensor_offset[t];
  }
  for (size_t b = 0; b < addresses_.size(); ++b) {
    if (addresses_[b] == nullptr) return failed_precondition("binding " + std::to_string(b) + " has no address");
    const int32_t tensor = b < net.inputs.size() ? net.inputs[b].tensor : net.outputs[b - net.inputs.size()];
    launch.tensors[static_cast<size_t>(tensor)] = addresses_[b];
  }
  launch.scratch = arena + plan.scratch_offset;
  launch.states = states_;
  launch.context = device_state_.get();
  launch.profile = profile_;
  launch.static_shapes = static_profile_[static_cast<size_t>(profile_)];
  launch.warm_up = warm_up;
  return engine_->device().enqueue_network(net, engine_->weights(), std::move(launch), stream);
}

}  // namespace gearbox::internal
