#include "ir/validate.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/check.h"

namespace gearbox::ir {
namespace {

// A state (one KV cache half) may be at most 1 TiB; anything larger is a corrupt spec.
constexpr uint64_t kMaxStateBytes = uint64_t{1} << 40;
constexpr int64_t kMaxSlots = int64_t{1} << 16;  // KV-cache slots of a batched network
constexpr uint64_t kWeightAlignment = 64;

bool finite(float v) { return std::isfinite(v); }
// NaN-safe: a NaN compares false and is rejected.
bool finite_positive(float v) { return v > 0.0f && std::isfinite(v); }
bool is_index_type(DataType t) { return t == DataType::kI32 || t == DataType::kI64; }
std::string counted(size_t n, const char* noun) { return std::to_string(n) + " " + noun + (n == 1 ? "" : "s"); }
bool dtype_valid(DataType t) { return data_type_valid(static_cast<uint8_t>(t)); }

std::string quoted(std::string_view s) { return "'" + std::string(s) + "'"; }

// "1e-06", "10000", "nan": std::to_string(float) would print 1e-6 as "0.000000".
std::string num(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", static_cast<double>(v));
  return buf;
}

// Everything the per-node checks need, built as the nodes are walked in order.
class Validator {
 public:
  Validator(const Network& network, uint64_t payload_bytes)
      : net_(network), payload_bytes_(payload_bytes), produced_(network.tensors.size(), false) {}

  Status run() {
    GEARBOX_RETURN_IF_ERROR(check_tensors());
    GEARBOX_RETURN_IF_ERROR(check_weights());
    GEARBOX_RETURN_IF_ERROR(check_states());
    GEARBOX_RETURN_IF_ERROR(check_inputs());
    for (size_t i = 0; i < net_.nodes.size(); ++i) GEARBOX_RETURN_IF_ERROR(check_node(i));
    return check_outputs();
  }

 private:
  bool tensor_in_range(int32_t id) const { return id >= 0 && static_cast<size_t>(id) < net_.tensors.size(); }
  bool weight_in_range(int32_t id) const { return id >= 0 && static_cast<size_t>(id) < net_.weights.size(); }
  const TensorInfo& tensor(int32_t id) const { return net_.tensors[static_cast<size_t>(id)]; }
  const WeightInfo& weight(int32_t id) const { return net_.weights[static_cast<size_t>(id)]; }
  std::string tensor_label(int32_t id) const { return "tensor " + std::to_string(id) + " " + quoted(tensor(id).name); }
  std::string weight_label(int32_t id) const { return "weight " + std::to_string(id) + " " + quoted(weight(id).name); }

  Status check_tensors() const {
    std::set<std::string_view> names;
    for (size_t i = 0; i < net_.tensors.size(); ++i) {
      const TensorInfo& t = net_.tensors[i];
      const std::string label = "tensor " + std::to_string(i);
      if (t.name.empty()) return invalid_argument(label + " has an empty name");
      if (!names.insert(t.name).second) return invalid_argument(label + ": the name " + quoted(t.name) + " is taken");
      if (!dtype_valid(t.dtype)) {
        return invalid_argument(label + " " + quoted(t.name) + ": invalid dtype " +
                                std::to_string(static_cast<int>(t.dtype)));
      }
    }
    return Status::ok_status();
  }

  Status check_weights() const {
    std::set<std::string_view> names;
    for (size_t i = 0; i < net_.weights.size(); ++i) {
      const WeightInfo& w = net_.weights[i];
      const std::string label = "weight " + std::to_string(i) + " " + quoted(w.name);
      if (w.name.empty()) return invalid_argument("weight " + std::to_string(i) + " has an empty name");
      if (!names.insert(w.name).second) {
        return invalid_argument("weight " + std::to_string(i) + ": the name " + quoted(w.name) + " is taken");
      }
      if (!dtype_valid(w.dtype)) {
        return invalid_argument(label + ": invalid dtype " + std::to_string(static_cast<int>(w.dtype)));
      }
      if (w.dims.rank() < 1) return invalid_argument(label + ": rank 0; a weight has 1 to 8 dims");
      for (int64_t e : w.dims.extents()) {
        if (e < 1) return invalid_argument(label + ": dims " + w.dims.to_string() + " have an extent below 1");
      }
      // volume * dtype size in uint64, refusing what does not fit.
      uint64_t volume = data_type_size(w.dtype);
      for (int64_t e : w.dims.extents()) {
        if (volume > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(e)) {
          return invalid_argument(label + ": dims " + w.dims.to_string() + " are too large to address");
        }
        volume *= static_cast<uint64_t>(e);
      }
      if (w.bytes != volume) {
        return invalid_argument(label + ": bytes is " + std::to_string(w.bytes) + " but " + w.dims.to_string() +
                                " of " + data_type_name(w.dtype) + " is " + std::to_string(volume));
      }
      if (w.offset % kWeightAlignment != 0) {
        return invalid_argument(label + ": offset " + std::to_string(w.offset) + " is not 64-byte aligned");
      }
      if (w.bytes > payload_bytes_ || w.offset > payload_bytes_ - w.bytes) {
        return invalid_argument(label + ": bytes [" + std::to_string(w.offset) + ", +" + std::to_string(w.bytes) +
                                ") lie outside the " + std::to_string(payload_bytes_) + "-byte payload");
      }
    }
    return Status::ok_status();
  }

  Status check_states() const {
    if (net_.max_context < 0) {
      return invalid_argument("max_context " + std::to_string(net_.max_context) + " is negative");
    }
    if (net_.slots < 0 || net_.slots > kMaxSlots) {
      return invalid_argument("slots " + std::to_string(net_.slots) + " is outside [0, " + std::to_string(kMaxSlots) +
                              "]");
    }
    if (!net_.states.empty() && net_.max_context < 1) {
      return invalid_argument("max_context is " + std::to_string(net_.max_context) +
                              " but the network has states (KV caches); it must be at least 1");
    }
    for (size_t i = 0; i < net_.states.size(); ++i) {
      const StateSpec& s = net_.states[i];
      const std::string label = "state " + std::to_string(i) + " " + quoted(s.name);
      if (!dtype_valid(s.dtype)) {
        return invalid_argument(label + ": invalid dtype " + std::to_string(static_cast<int>(s.dtype)));
      }
      if (s.rows < 1 || s.width < 1) {
        return invalid_argument(label + ": rows " + std::to_string(s.rows) + " and width " + std::to_string(s.width) +
                                " must both be at least 1");
      }
      if (s.rows != net_.max_context) {
        return invalid_argument(label + ": rows " + std::to_string(s.rows) + " differ from max_context " +
                                std::to_string(net_.max_context));
      }
      const auto rows = static_cast<uint64_t>(s.rows) * static_cast<uint64_t>(net_.caches());
      const auto width = static_cast<uint64_t>(s.width);
      const uint64_t size = data_type_size(s.dtype);
      if (width > (kMaxStateBytes - 1) / size / rows) {
        return invalid_argument(label + ": " + std::to_string(rows) + " x " + std::to_string(s.width) + " " +
                                data_type_name(s.dtype) + " is 1 TiB or more");
      }
    }
    return Status::ok_status();
  }

  Status check_inputs() {
    for (size_t i = 0; i < net_.inputs.size(); ++i) {
      const InputSpec& in = net_.inputs[i];
      const std::string label = "input " + std::to_string(i);
      if (!tensor_in_range(in.tensor)) {
        return invalid_argument(label + ": tensor id " + std::to_string(in.tensor) + " is outside [0, " +
                                std::to_string(net_.tensors.size()) + ")");
      }
      const std::string full = label + " (" + tensor_label(in.tensor) + ")";
      if (produced_[static_cast<size_t>(in.tensor)]) return invalid_argument(full + " is listed as an input twice");
      produced_[static_cast<size_t>(in.tensor)] = true;
      if (in.dims.rank() < 1) return invalid_argument(full + ": rank 0; an input has at least one dim");
      for (int64_t e : in.dims.extents()) {
        if (e != -1 && e < 1) {
          return invalid_argument(full + ": dims " + in.dims.to_string() +
                                  " have an extent that is neither -1 (dynamic) nor at least 1");
        }
      }
      if (!in.dim_names.empty() && in.dim_names.size() != static_cast<size_t>(in.dims.rank())) {
        return invalid_argument(full + ": " + std::to_string(in.dim_names.size()) + " dim names for rank " +
                                std::to_string(in.dims.rank()) + " (give none or one per dim)");
      }
    }
    return Status::ok_status();
  }

  Status check_outputs() const {
    if (net_.outputs.empty()) return invalid_argument("the network has no outputs");
    for (size_t i = 0; i < net_.outputs.size(); ++i) {
      const int32_t id = net_.outputs[i];
      if (!tensor_in_range(id)) {
        return invalid_argument("output " + std::to_string(i) + ": tensor id " + std::to_string(id) +
                                " is outside [0, " + std::to_string(net_.tensors.size()) + ")");
      }
    }
    // Every tensor is produced; in particular every output.
    for (size_t i = 0; i < produced_.size(); ++i) {
      if (!produced_[i]) {
        return invalid_argument(tensor_label(static_cast<int32_t>(i)) +
                                " is never produced (neither a network input nor a node output)");
      }
    }
    return Status::ok_status();
  }

  // ---- nodes ----------------------------------------------------------------------------

  Status check_node(size_t index) {
    const Node& node = net_.nodes[index];
    const auto kind_value = static_cast<uint32_t>(node.kind);
    const bool kind_valid = kind_value >= 1 && kind_value <= kMaxOpKind;
    label_ = "node " + std::to_string(index) + " " + quoted(node.name) + " (" +
             (kind_valid ? std::string(op_kind_name(node.kind)) : "op kind " + std::to_string(kind_value)) + ")";
    if (!kind_valid) return error("unknown op kind " + std::to_string(kind_value));

    // Ids first, so the per-kind checks may index freely.
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const int32_t id = node.inputs[i];
      if (!tensor_in_range(id)) return error("input " + std::to_string(i) + ": " + tensor_id_range(id));
      if (!produced_[static_cast<size_t>(id)]) {
        return error("input " + std::to_string(i) + " reads " + tensor_label(id) + " before it is produced");
      }
    }
    for (size_t i = 0; i < node.weights.size(); ++i) {
      const int32_t id = node.weights[i];
      if (!weight_in_range(id)) {
        return error("weight " + std::to_string(i) + ": weight id " + std::to_string(id) + " is outside [0, " +
                     std::to_string(net_.weights.size()) + ")");
      }
    }
    for (size_t i = 0; i < node.outputs.size(); ++i) {
      const int32_t id = node.outputs[i];
      if (!tensor_in_range(id)) return error("output " + std::to_string(i) + ": " + tensor_id_range(id));
      if (produced_[static_cast<size_t>(id)]) {
        return error("output " + std::to_string(i) + " writes " + tensor_label(id) +
                     ", which is already produced (a tensor has one producer)");
      }
      produced_[static_cast<size_t>(id)] = true;
    }

    switch (node.kind) {
      case OpKind::kEmbedding: return check_embedding(node);
      case OpKind::kRmsNorm: return check_rms_norm(node);
      case OpKind::kLinear: return check_linear(node);
      case OpKind::kRope: return check_rope(node);
      case OpKind::kAttention: return check_attention(node);
      case OpKind::kGeluTanhMul:
      case OpKind::kSiluMul:
      case OpKind::kAdd: return arity(node, 2, 1, 0, "(a, b)");
      case OpKind::kTakeLast: return arity(node, 1, 1, 0, "(x)");
      default:
        if (is_generic(node.kind)) return validate_generic_node(net_, node, label_);
        break;
    }
    return error("unknown op kind");  // unreachable: the kind was range-checked above
  }

  std::string tensor_id_range(int32_t id) const {
    return "tensor id " + std::to_string(id) + " is outside [0, " + std::to_string(net_.tensors.size()) + ")";
  }
  Status error(const std::string& what) const { return invalid_argument(label_ + ": " + what); }

  Status arity(const Node& node, size_t inputs, size_t outputs, size_t weights, const char* input_names) const {
    if (node.inputs.size() != inputs) {
      return error("needs " + counted(inputs, "input") + " " + input_names + ", has " +
                   std::to_string(node.inputs.size()));
    }
    if (node.outputs.size() != outputs) {
      return error("needs " + counted(outputs, "output") + ", has " + std::to_string(node.outputs.size()));
    }
    if (node.weights.size() != weights) {
      return error("needs " + counted(weights, "weight") + ", has " + std::to_string(node.weights.size()));
    }
    return Status::ok_status();
  }

  Status index_input(const Node& node, size_t i, const char* what) const {
    const DataType t = tensor(node.inputs[i]).dtype;
    if (!is_index_type(t)) return error(std::string(what) + " must be i32 or i64, not " + data_type_name(t));
    return Status::ok_status();
  }

  Status weight_rank(const Node& node, size_t i, int32_t rank, const char* role) const {
    const WeightInfo& w = weight(node.weights[i]);
    if (w.dims.rank() != rank) {
      return error(weight_label(node.weights[i]) + " (" + role + ") has dims " + w.dims.to_string() +
                   "; it must have rank " + std::to_string(rank));
    }
    return Status::ok_status();
  }

  Status check_embedding(const Node& node) const {
    GEARBOX_RETURN_IF_ERROR(arity(node, 1, 1, 1, "(ids)"));
    GEARBOX_RETURN_IF_ERROR(index_input(node, 0, "ids"));
    GEARBOX_RETURN_IF_ERROR(weight_rank(node, 0, 2, "the table"));
    if (!finite(node.attrs.scale)) return error("scale is not finite");
    return Status::ok_status();
  }

  Status check_rms_norm(const Node& node) const {
    GEARBOX_RETURN_IF_ERROR(arity(node, 1, 1, 1, "(x)"));
    GEARBOX_RETURN_IF_ERROR(weight_rank(node, 0, 1, "the weight"));
    const OpAttrs& a = node.attrs;
    if (!finite_positive(a.eps)) return error("eps " + num(a.eps) + " must be positive and finite");
    if (!finite(a.weight_offset)) return error("weight_offset is not finite");
    if (a.head_dim < 0) return error("head_dim " + std::to_string(a.head_dim) + " is negative");
    const int64_t d = weight(node.weights[0]).dims[0];
    if (a.head_dim > 0 && d != a.head_dim) {
      return error("head_dim is " + std::to_string(a.head_dim) + " but the weight has " + std::to_string(d) +
                   " elements");
    }
    return Status::ok_status();
  }

  Status check_linear(const Node& node) const {
    const OpAttrs& a = node.attrs;
    if (a.has_bias != 0 && a.has_bias != 1) return error("has_bias " + std::to_string(a.has_bias) + " is not 0 or 1");
    if (node.inputs.size() != 1) return error("needs 1 input (x), has " + std::to_string(node.inputs.size()));
    const size_t n = node.outputs.size();
    if (n < 1) return error("needs at least 1 output");
    const size_t want = a.has_bias == 1 ? 2 * n : n;
    if (node.weights.size() != want) {
      return error("has " + counted(n, "output") + " and needs " + std::to_string(want) + " weights (" +
                   (a.has_bias == 1 ? "one matrix and one bias per output" : "one matrix per output") + "), has " +
                   std::to_string(node.weights.size()));
    }
    int64_t k = 0;
    for (size_t i = 0; i < n; ++i) {
      GEARBOX_RETURN_IF_ERROR(weight_rank(node, i, 2, "matrix"));
      const Dims& dims = weight(node.weights[i]).dims;
      if (i == 0) k = dims[1];
      if (dims[1] != k) {
        return error("matrix " + weight_label(node.weights[i]) + " has K = " + std::to_string(dims[1]) +
                     " but the first matrix has K = " + std::to_string(k) + " (all share the input)");
      }
    }
    if (a.has_bias == 1) {
      for (size_t i = 0; i < n; ++i) {
        GEARBOX_RETURN_IF_ERROR(weight_rank(node, n + i, 1, "bias"));
        const int64_t len = weight(node.weights[n + i]).dims[0];
        const int64_t rows = weight(node.weights[i]).dims[0];
        if (len != rows) {
          return error("bias " + weight_label(node.weights[n + i]) + " has " + std::to_string(len) +
                       " elements but its matrix has " + std::to_string(rows) + " rows");
        }
      }
    }
    return Status::ok_status();
  }

  Status check_rope(const Node& node) const {
    // The inverse-frequency table is optional: 0 weights or 1.
    GEARBOX_RETURN_IF_ERROR(arity(node, 2, 1, node.weights.empty() ? 0 : 1, "(x, positions)"));
    GEARBOX_RETURN_IF_ERROR(index_input(node, 1, "positions"));
    const OpAttrs& a = node.attrs;
    if (a.heads <= 0) return error("heads " + std::to_string(a.heads) + " must be positive");
    if (a.head_dim <= 0 || a.head_dim % 2 != 0) {
      return error("head_dim " + std::to_string(a.head_dim) + " must be positive and even");
    }
    if (!finite_positive(a.theta)) return error("theta " + num(a.theta) + " must be positive and finite");
    if (!node.weights.empty()) {
      const WeightInfo& w = weight(node.weights[0]);
      if (w.dtype != DataType::kF32 || !(w.dims == Dims{a.head_dim / 2})) {
        return error("the inverse frequencies " + weight_label(node.weights[0]) + " are " + data_type_name(w.dtype) +
                     " " + w.dims.to_string() + "; they must be f32 [" + std::to_string(a.head_dim / 2) +
                     "] (head_dim / 2)");
      }
    }
    return Status::ok_status();
  }

  Status check_attention(const Node& node) const {
    if (net_.slots > 0) {
      GEARBOX_RETURN_IF_ERROR(arity(node, 5, 1, 0, "(q, k, v, positions, slots) in a network with slots"));
      GEARBOX_RETURN_IF_ERROR(index_input(node, 4, "slots"));
    } else {
      GEARBOX_RETURN_IF_ERROR(arity(node, 4, 1, 0, "(q, k, v, positions)"));
    }
    GEARBOX_RETURN_IF_ERROR(index_input(node, 3, "positions"));
    const OpAttrs& a = node.attrs;
    if (a.heads <= 0 || a.kv_heads <= 0) {
      return error("heads " + std::to_string(a.heads) + " and kv_heads " + std::to_string(a.kv_heads) +
                   " must be positive");
    }
    if (a.heads % a.kv_heads != 0) {
      return error("heads " + std::to_string(a.heads) + " is not a multiple of kv_heads " + std::to_string(a.kv_heads));
    }
    if (a.head_dim <= 0) return error("head_dim " + std::to_string(a.head_dim) + " must be positive");
    if (a.window < 0) return error("window " + std::to_string(a.window) + " is negative (0 means no window)");
    if (!finite(a.scale)) return error("scale is not finite");
    if (a.state < 0 || static_cast<size_t>(a.state) >= net_.states.size()) {
      return error("state slot " + std::to_string(a.state) + " is outside [0, " + std::to_string(net_.states.size()) +
                   ")");
    }
    const StateSpec& s = net_.states[static_cast<size_t>(a.state)];
    const int64_t width = int64_t{a.kv_heads} * a.head_dim;
    if (s.width != width) {
      return error("state " + std::to_string(a.state) + " " + quoted(s.name) + " has width " + std::to_string(s.width) +
                   " but kv_heads * head_dim is " + std::to_string(width));
    }
    return Status::ok_status();
  }

  const Network& net_;
  uint64_t payload_bytes_;
  std::vector<bool> produced_;
  std::string label_;  // the node being checked, for messages
};

}  // namespace

Status validate_network(const Network& network, uint64_t payload_bytes) {
  return Validator(network, payload_bytes).run();
}

}  // namespace gearbox::ir
