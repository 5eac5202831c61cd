#include "builder/builder.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <set>

#include "core/check.h"
#include "ir/generic_shapes.h"
#include "ir/shape_inference.h"
#include "ir/validate.h"
#include "runtime/memory_plan.h"

namespace gearbox::internal {
namespace {

std::vector<Dims> dims_at(std::span<const InputProfileBounds> bounds, Dims InputProfileBounds::*which) {
  std::vector<Dims> out;
  out.reserve(bounds.size());
  for (const InputProfileBounds& b : bounds) out.push_back(b.*which);
  return out;
}

// Buffers for timing one node at the opt dims: its inputs (filled with valid data), its
// outputs, scratch and the KV caches.
class NodeBench {
 public:
  NodeBench(const ir::Network& net, const DeviceBackend& device) : net_(net), device_(device) {}

  Status prepare(size_t n, std::span<const Dims> dims, int64_t scratch_bytes) {
    const ir::Node& node = net_.nodes[n];
    tensors_.assign(net_.tensors.size(), nullptr);
    buffers_.clear();
    std::mt19937 rng(static_cast<uint32_t>(n) + 1);
    const int64_t position_base = timing_position_base(node, dims);
    for (int32_t t : node.inputs) {
      const auto ti = static_cast<size_t>(t);
      if (tensors_[ti] != nullptr) continue;
      const DataType type = device_.storage_type(net_.tensors[ti].dtype);
      const int64_t count = dims[ti].volume();
      Result<DeviceBuffer> buf = device_.allocate(ir::tensor_bytes(dims[ti], type));
      if (!buf.ok()) return buf.status();
      std::vector<uint8_t> host(static_cast<size_t>(ir::tensor_bytes(dims[ti], type)));
      fill(host.data(), type, count, node, t, position_base, rng);
      GEARBOX_RETURN_IF_ERROR(upload(buf->get(), host));
      tensors_[ti] = buf->get();
      buffers_.push_back(std::move(*buf));
    }
    for (int32_t t : node.outputs) {
      const auto ti = static_cast<size_t>(t);
      Result<DeviceBuffer> buf =
          device_.allocate(ir::tensor_bytes(dims[ti], device_.storage_type(net_.tensors[ti].dtype)));
      if (!buf.ok()) return buf.status();
      tensors_[ti] = buf->get();
      buffers_.push_back(std::move(*buf));
    }
    Result<DeviceBuffer> scratch = device_.allocate(scratch_bytes);
    if (!scratch.ok()) return scratch.status();
    scratch_ = scratch->get();
    buffers_.push_back(std::move(*scratch));
    if (node.kind == ir::OpKind::kAttention && states_.empty()) GEARBOX_RETURN_IF_ERROR(allocate_states());
    return {};
  }

  Status init(int32_t profiles) {
    Result<std::unique_ptr<DeviceContextState>> state = device_.create_context_state(profiles);
    if (!state.ok()) return state.status();
    context_ = std::move(*state);
    Result<std::shared_ptr<StreamImpl>> stream = device_.create_stream();
    if (!stream.ok()) return stream.status();
    stream_ = std::move(*stream);
    return {};
  }

  NodeArgs args(std::span<const Dims> dims) const {
    return NodeArgs{tensors_, dims, scratch_, states_, context_.get()};
  }

 private:
  // Where the timed tokens sit in the context: a short sequence is timed as a step after
  // a 128-token context (what decoding looks like), a long one from position 0.
  int64_t timing_position_base(const ir::Node& node, std::span<const Dims> dims) const {
    if (node.inputs.empty()) return 0;
    const Dims& x = dims[static_cast<size_t>(node.inputs[0])];
    const int64_t seq = x.rank() >= 2 ? x[1] : 1;
    if (seq >= 128) return 0;
    return std::min<int64_t>(128, std::max<int64_t>(net_.max_context - seq, 0));
  }

  void fill(void* data, DataType type, int64_t count, const ir::Node& node, int32_t tensor, int64_t position_base,
            std::mt19937& rng) const {
    if (type == DataType::kF32) {
      std::uniform_real_distribution<float> u(-1.0f, 1.0f);
      auto* f = static_cast<float*>(data);
      for (int64_t i = 0; i < count; ++i) f[i] = u(rng);
      return;
    }
    if (type == DataType::kBool) {
      auto* b = static_cast<uint8_t*>(data);
      for (int64_t i = 0; i < count; ++i) b[i] = static_cast<uint8_t>(rng() & 1U);
      return;
    }
    // A generic op's integers: -1, a valid index of any axis (it wraps to the last) and a
    // valid divisor.
    if (ir::is_generic_op(node.kind)) {
      for (int64_t i = 0; i < count; ++i) {
        if (type == DataType::kI64) {
          static_cast<int64_t*>(data)[i] = -1;
        } else {
          static_cast<int32_t*>(data)[i] = -1;
        }
      }
      return;
    }
    // Integer inputs: token ids inside the vocabulary, distinct KV-cache slots, or
    // consecutive positions.
    const bool ids = node.kind == ir::OpKind::kEmbedding && node.inputs[0] == tensor;
    const bool slots = node.kind == ir::OpKind::kAttention && node.inputs.size() > 4 && node.inputs[4] == tensor;
    const int64_t vocab = ids ? net_.weights[static_cast<size_t>(node.weights[0])].dims[0] : 0;
    std::uniform_int_distribution<int64_t> token(0, std::max<int64_t>(vocab - 1, 0));
    for (int64_t i = 0; i < count; ++i) {
      const int64_t v = ids     ? token(rng)
                        : slots ? i % net_.caches()
                                : std::min(position_base + i, net_.max_context - 1);
      if (type == DataType::kI64) {
        static_cast<int64_t*>(data)[i] = v;
      } else {
        static_cast<int32_t*>(data)[i] = static_cast<int32_t>(v);
      }
    }
  }

  Status allocate_states() {
    for (const ir::StateSpec& s : net_.states) {
      const int64_t bytes =
          net_.caches() * s.rows * s.width * static_cast<int64_t>(data_type_size(device_.storage_type(s.dtype)));
      for (int kv = 0; kv < 2; ++kv) {
        Result<DeviceBuffer> buf = device_.allocate(bytes);
        if (!buf.ok()) return buf.status();
        GEARBOX_RETURN_IF_ERROR(upload(buf->get(), std::vector<uint8_t>(static_cast<size_t>(bytes), 0)));
        states_.push_back(buf->get());
        state_buffers_.push_back(std::move(*buf));
      }
    }
    return {};
  }

  // Host bytes into device memory, complete on return.
  Status upload(void* device_memory, const std::vector<uint8_t>& host) {
    GEARBOX_RETURN_IF_ERROR(
        device_.copy_from_host(device_memory, host.data(), static_cast<int64_t>(host.size()), *stream_));
    return stream_->synchronize();
  }

  const ir::Network& net_;
  const DeviceBackend& device_;
  std::shared_ptr<StreamImpl> stream_;
  std::vector<void*> tensors_;
  std::vector<void*> states_;
  void* scratch_ = nullptr;
  std::vector<DeviceBuffer> buffers_;        // this node's tensors and scratch
  std::vector<DeviceBuffer> state_buffers_;  // the KV caches, kept for every node
  std::unique_ptr<DeviceContextState> context_;
};

}  // namespace

Status validate_profiles(const ir::Network& net, std::span<const format::ProfileDesc> profiles) {
  if (profiles.empty()) return invalid_argument("an engine needs at least one optimization profile");
  std::set<std::string> names;
  for (size_t p = 0; p < profiles.size(); ++p) {
    const format::ProfileDesc& profile = profiles[p];
    const std::string label = "profile " + std::to_string(p) + " '" + profile.name + "'";
    if (profile.name.empty()) return invalid_argument("profile " + std::to_string(p) + " has no name");
    if (!names.insert(profile.name).second) return invalid_argument(label + ": the name is used twice");
    if (profile.bounds.size() != net.inputs.size()) {
      return invalid_argument(label + " has " + std::to_string(profile.bounds.size()) + " bounds for " +
                              std::to_string(net.inputs.size()) + " network inputs");
    }
    for (size_t i = 0; i < net.inputs.size(); ++i) {
      const InputProfileBounds& b = profile.bounds[i];
      const std::string input = "'" + net.tensors[static_cast<size_t>(net.inputs[i].tensor)].name + "'";
      for (const Dims* d : {&b.min, &b.opt, &b.max}) {
        Status s = ir::check_input_dims(net, i, *d);
        if (!s.ok()) return s.with_context(label);
      }
      if (net.slots > 0 && b.max[0] > net.slots) {
        return invalid_argument(label + ": input " + input + " has a batch of up to " + std::to_string(b.max[0]) +
                                ", above the network's " + std::to_string(net.slots) + " KV-cache slots");
      }
      for (int32_t d = 0; d < b.min.rank(); ++d) {
        if (!(b.min[d] <= b.opt[d] && b.opt[d] <= b.max[d])) {
          return invalid_argument(label + ": input " + input + " dim " + std::to_string(d) +
                                  " needs min <= opt <= max, got " + std::to_string(b.min[d]) + ", " +
                                  std::to_string(b.opt[d]) + ", " + std::to_string(b.max[d]));
        }
      }
    }
    std::vector<Dims> dims;
    for (auto which : {&InputProfileBounds::min, &InputProfileBounds::max}) {
      Status s = ir::infer_shapes(net, dims_at(profile.bounds, which), dims);
      if (!s.ok()) return s.with_context(label + (which == &InputProfileBounds::min ? " at min" : " at max"));
    }
  }
  return {};
}

Result<format::TacticTable> tune(const ir::Network& net, std::span<const format::ProfileDesc> profiles,
                                 const DeviceBackend& device, const DeviceWeights& weights,
                                 const BuildOptions& options) {
  format::TacticTable table;
  table.device = device.kind();
  table.device_name = device.device_name();
  table.library_versions = device.library_versions();
  NodeBench bench(net, device);
  GEARBOX_RETURN_IF_ERROR(bench.init(static_cast<int32_t>(profiles.size())));
  DeviceBackend::TuningMemo memo;
  for (size_t p = 0; p < profiles.size(); ++p) {
    const format::ProfileDesc& profile = profiles[p];
    std::vector<Dims> min_dims, opt_dims, max_dims;
    GEARBOX_RETURN_IF_ERROR(ir::infer_shapes(net, dims_at(profile.bounds, &InputProfileBounds::min), min_dims));
    GEARBOX_RETURN_IF_ERROR(ir::infer_shapes(net, dims_at(profile.bounds, &InputProfileBounds::opt), opt_dims));
    GEARBOX_RETURN_IF_ERROR(ir::infer_shapes(net, dims_at(profile.bounds, &InputProfileBounds::max), max_dims));
    if (options.progress) {
      options.progress("tuning profile " + std::to_string(p) + " '" + profile.name + "' (" +
                       std::to_string(net.nodes.size()) + " nodes) at opt " + profile.bounds.front().opt.to_string());
    }
    format::ProfileTactics chosen;
    for (size_t n = 0; n < net.nodes.size(); ++n) {
      const ir::Node& node = net.nodes[n];
      uint32_t best = 0;
      float best_us = -1.0f;
      for (const TacticInfo& tactic : device.tactics(node)) {
        if (!device.tactic_valid(net, node, tactic.id, max_dims)) continue;
        GEARBOX_RETURN_IF_ERROR(bench.prepare(n, opt_dims, device.scratch_bytes(net, node, tactic.id, opt_dims)));
        const NodeArgs args = bench.args(opt_dims);
        std::vector<double> times;
        for (int r = 0; r < options.warmup + options.repetitions; ++r) {
          Result<double> us = device.time_node(net, weights, n, tactic.id, args);
          if (!us.ok()) {
            return us.status().with_context("timing tactic '" + std::string(tactic.name) + "' of node " + node.name);
          }
          if (r >= options.warmup) times.push_back(*us);
        }
        std::nth_element(times.begin(), times.begin() + static_cast<ptrdiff_t>(times.size() / 2), times.end());
        const auto median = static_cast<float>(times[times.size() / 2]);
        if (best_us < 0 || median < best_us) {
          best_us = median;
          best = tactic.id;
        }
      }
      if (best_us < 0) return internal_error("no valid tactic for node " + node.name + " in profile " + profile.name);
      // The device may add choices for the profile's other shapes to the winner at opt.
      Result<uint32_t> refined = device.refine_tactic(net, weights, n, best, min_dims, max_dims, memo);
      if (!refined.ok()) return refined.status().with_context("tuning node " + node.name + " across its profile");
      if (!device.tactic_valid(net, node, *refined, max_dims)) {
        return internal_error("node " + node.name + ": the device refined its tactic to one it does not accept");
      }
      best = *refined;
      chosen.tactic_per_node.push_back(best);
      chosen.time_us_per_node.push_back(best_us);
      if (options.progress && net.nodes.size() >= 10 && (n + 1) % (net.nodes.size() / 10) == 0) {
        options.progress("  " + std::to_string(n + 1) + "/" + std::to_string(net.nodes.size()) + " nodes");
      }
    }
    chosen.arena_bytes = static_cast<uint64_t>(plan_memory(net, max_dims, chosen.tactic_per_node, device).arena_bytes);
    table.profiles.push_back(std::move(chosen));
  }
  return table;
}

Result<format::EngineDesc> build_engine(const ir::Network& net, std::vector<format::ProfileDesc> profiles,
                                        std::span<const uint8_t> payload, const BuildOptions& options) {
  GEARBOX_RETURN_IF_ERROR(ir::validate_network(net, payload.size()));
  GEARBOX_RETURN_IF_ERROR(validate_profiles(net, profiles));
  Result<std::shared_ptr<const DeviceBackend>> device = device_backend(options.device);
  if (!device.ok()) return device.status();
  Result<std::shared_ptr<DeviceWeights>> weights = (*device)->upload_weights(net, payload);
  if (!weights.ok()) return weights.status();
  Result<format::TacticTable> table = tune(net, profiles, **device, **weights, options);
  if (!table.ok()) return table.status();
  format::EngineDesc desc;
  desc.network = net;
  desc.profiles = std::move(profiles);
  desc.tactic_tables.push_back(std::move(*table));
  desc.metadata = options.metadata;
  desc.producer = "gearbox 0.1.0";
  return desc;
}

}  // namespace gearbox::internal
