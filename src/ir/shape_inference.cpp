#include "ir/shape_inference.h"

#include <limits>
#include <string>

#include "core/check.h"
#include "ir/generic_shapes.h"

namespace gearbox::ir {
namespace {

std::string node_label(const Network& net, size_t n) {
  const Node& node = net.nodes[n];
  return "node " + std::to_string(n) + " '" + node.name + "' (" + op_kind_name(node.kind) + ")";
}

// Dims with the last extent replaced.
Dims with_last(const Dims& d, int64_t last) {
  std::vector<int64_t> e(d.extents().begin(), d.extents().end());
  e.back() = last;
  return Dims(std::span<const int64_t>(e));
}

class Inferer {
 public:
  Inferer(const Network& net, std::vector<Dims>& dims) : net_(net), dims_(dims) {}

  Status node(size_t n) {
    const Node& node = net_.nodes[n];
    const OpAttrs& a = node.attrs;
    label_ = node_label(net_, n);
    auto in = [&](size_t i) -> const Dims& { return dims_[static_cast<size_t>(node.inputs[i])]; };
    auto weight = [&](size_t i) -> const WeightInfo& { return net_.weights[static_cast<size_t>(node.weights[i])]; };
    auto set_out = [&](size_t i, const Dims& d) { dims_[static_cast<size_t>(node.outputs[i])] = d; };

    switch (node.kind) {
      case OpKind::kEmbedding: {
        const Dims& ids = in(0);
        std::vector<int64_t> e(ids.extents().begin(), ids.extents().end());
        if (e.size() + 1 > static_cast<size_t>(kMaxDims))
          return fail("token ids have rank " + std::to_string(e.size()));
        e.push_back(weight(0).dims[1]);
        set_out(0, Dims(std::span<const int64_t>(e)));
        return {};
      }
      case OpKind::kRmsNorm: {
        const Dims& x = in(0);
        GEARBOX_RETURN_IF_ERROR(need_rank_at_least(x, 1, 0));
        const int64_t last = x[x.rank() - 1];
        const int64_t len = weight(0).dims[0];
        if (a.head_dim > 0) {
          if (len != a.head_dim || last % a.head_dim != 0) {
            return fail("input " + name(node.inputs[0]) + " " + x.to_string() + " is not a whole number of heads of " +
                        std::to_string(a.head_dim) + " (weight length " + std::to_string(len) + ")");
          }
        } else if (len != last) {
          return fail("input " + name(node.inputs[0]) + " has last dim " + std::to_string(last) + " but weight '" +
                      weight(0).name + "' has " + std::to_string(len));
        }
        set_out(0, x);
        return {};
      }
      case OpKind::kLinear: {
        const Dims& x = in(0);
        GEARBOX_RETURN_IF_ERROR(need_rank_at_least(x, 1, 0));
        const int64_t k = x[x.rank() - 1];
        for (size_t o = 0; o < node.outputs.size(); ++o) {
          const WeightInfo& w = weight(o);
          if (w.dims[1] != k) {
            return fail("input " + name(node.inputs[0]) + " has last dim " + std::to_string(k) + " but weight '" +
                        w.name + "' expects " + std::to_string(w.dims[1]));
          }
          set_out(o, with_last(x, w.dims[0]));
        }
        return {};
      }
      case OpKind::kRope: {
        const Dims& x = in(0);
        GEARBOX_RETURN_IF_ERROR(need_rank(x, 3, 0));
        GEARBOX_RETURN_IF_ERROR(need_positions(x, in(1), node.inputs[1]));
        if (x[2] != static_cast<int64_t>(a.heads) * a.head_dim) {
          return fail("input " + name(node.inputs[0]) + " " + x.to_string() + " is not " + std::to_string(a.heads) +
                      " heads of " + std::to_string(a.head_dim));
        }
        set_out(0, x);
        return {};
      }
      case OpKind::kAttention: {
        const Dims& q = in(0);
        GEARBOX_RETURN_IF_ERROR(need_rank(q, 3, 0));
        if (node.inputs.size() < 5 && q[0] != 1) {
          return fail("batch " + std::to_string(q[0]) +
                      " needs a network with KV-cache slots: attention without them has batch 1");
        }
        if (node.inputs.size() >= 5) {
          const Dims& slots = in(4);
          if (slots.rank() != 1 || slots[0] != q[0]) {
            return fail("slots " + slots.to_string() + " must be [" + std::to_string(q[0]) + "], one per row of q " +
                        q.to_string());
          }
        }
        const int64_t qw = static_cast<int64_t>(a.heads) * a.head_dim;
        const int64_t kvw = static_cast<int64_t>(a.kv_heads) * a.head_dim;
        if (q[2] != qw)
          return fail("q " + q.to_string() + " is not " + std::to_string(a.heads) + " heads of " +
                      std::to_string(a.head_dim));
        for (size_t i : {size_t{1}, size_t{2}}) {
          const Dims& kv = in(i);
          if (kv.rank() != 3 || kv[0] != q[0] || kv[1] != q[1] || kv[2] != kvw) {
            return fail((i == 1 ? "k " : "v ") + kv.to_string() + " does not match q " + q.to_string() + " with " +
                        std::to_string(a.kv_heads) + " kv heads");
          }
        }
        GEARBOX_RETURN_IF_ERROR(need_positions(q, in(3), node.inputs[3]));
        if (q[1] > net_.max_context) {
          return fail(std::to_string(q[1]) + " tokens do not fit the context of " + std::to_string(net_.max_context));
        }
        set_out(0, q);
        return {};
      }
      case OpKind::kGeluTanhMul:
      case OpKind::kSiluMul:
      case OpKind::kAdd: {
        if (in(0) != in(1)) {
          return fail("inputs " + name(node.inputs[0]) + " " + in(0).to_string() + " and " + name(node.inputs[1]) +
                      " " + in(1).to_string() + " differ in shape");
        }
        set_out(0, in(0));
        return {};
      }
      case OpKind::kTakeLast: {
        const Dims& x = in(0);
        GEARBOX_RETURN_IF_ERROR(need_rank(x, 3, 0));
        if (x[1] < 1) return fail("input " + name(node.inputs[0]) + " has no positions");
        set_out(0, Dims{x[0], 1, x[2]});
        return {};
      }
      default:
        if (is_generic(node.kind)) return infer_generic_node(net_, n, label_, dims_);
        break;
    }
    return fail("unknown op kind");
  }

 private:
  std::string name(int32_t tensor) const { return "'" + net_.tensors[static_cast<size_t>(tensor)].name + "'"; }
  Status fail(const std::string& what) const { return invalid_argument(label_ + ": " + what); }
  Status need_rank(const Dims& d, int32_t rank, size_t input) const {
    if (d.rank() == rank) return {};
    return fail("input " + std::to_string(input) + " " + d.to_string() + " must have rank " + std::to_string(rank));
  }
  Status need_rank_at_least(const Dims& d, int32_t rank, size_t input) const {
    if (d.rank() >= rank) return {};
    return fail("input " + std::to_string(input) + " " + d.to_string() + " must have rank >= " + std::to_string(rank));
  }
  Status need_positions(const Dims& x, const Dims& pos, int32_t pos_tensor) const {
    if (pos.rank() == 2 && pos[0] == x[0] && pos[1] == x[1]) return {};
    return fail("positions " + name(pos_tensor) + " " + pos.to_string() + " must be [" + std::to_string(x[0]) + ", " +
                std::to_string(x[1]) + "]");
  }

  const Network& net_;
  std::vector<Dims>& dims_;
  std::string label_;
};

}  // namespace

int64_t row_count(const Dims& dims) noexcept {
  const int64_t last = dims.rank() > 0 ? dims[dims.rank() - 1] : 1;
  return last > 0 ? dims.volume() / last : 0;
}

int64_t tensor_bytes(const Dims& dims, DataType dtype) noexcept {
  const int64_t v = dims.volume();
  const int64_t size = static_cast<int64_t>(data_type_size(dtype));
  if (v <= 0) return 0;
  if (v > std::numeric_limits<int64_t>::max() / size) return std::numeric_limits<int64_t>::max();
  return v * size;
}

bool linear_weights_stacked(const Network& network, const Node& node) noexcept {
  const size_t outs = node.outputs.size();
  if (node.kind != OpKind::kLinear || outs < 2 || node.weights.size() < outs) return false;
  const auto weight = [&](size_t o) -> const WeightInfo& {
    return network.weights[static_cast<size_t>(node.weights[o])];
  };
  for (size_t o = 1; o < outs; ++o) {
    const WeightInfo& prev = weight(o - 1);
    const WeightInfo& w = weight(o);
    if (w.dtype != prev.dtype || w.dims.rank() != 2 || prev.dims.rank() != 2 || w.dims[1] != prev.dims[1] ||
        w.offset != prev.offset + prev.bytes) {
      return false;
    }
  }
  return true;
}

Status check_input_dims(const Network& network, size_t input, const Dims& dims) {
  const InputSpec& spec = network.inputs[input];
  const std::string& tname = network.tensors[static_cast<size_t>(spec.tensor)].name;
  if (dims.rank() != spec.dims.rank()) {
    return invalid_argument("input '" + tname + "' has rank " + std::to_string(dims.rank()) + " (" + dims.to_string() +
                            "), expected " + std::to_string(spec.dims.rank()));
  }
  for (int32_t d = 0; d < dims.rank(); ++d) {
    const std::string dim_name = static_cast<size_t>(d) < spec.dim_names.size()
                                     ? "'" + spec.dim_names[static_cast<size_t>(d)] + "'"
                                     : std::to_string(d);
    if (dims[d] < 1) {
      return invalid_argument("input '" + tname + "' dim " + dim_name + " is " + std::to_string(dims[d]) +
                              "; extents must be >= 1");
    }
    if (spec.dims[d] != -1 && dims[d] != spec.dims[d]) {
      return invalid_argument("input '" + tname + "' dim " + dim_name + " is " + std::to_string(dims[d]) +
                              " but the engine was built for " + std::to_string(spec.dims[d]));
    }
  }
  return {};
}

Status infer_shapes(const Network& network, std::span<const Dims> input_dims, std::vector<Dims>& dims) {
  if (input_dims.size() != network.inputs.size()) {
    return invalid_argument("the network has " + std::to_string(network.inputs.size()) + " inputs, got " +
                            std::to_string(input_dims.size()));
  }
  dims.assign(network.tensors.size(), Dims());
  for (size_t i = 0; i < input_dims.size(); ++i) {
    GEARBOX_RETURN_IF_ERROR(check_input_dims(network, i, input_dims[i]));
    dims[static_cast<size_t>(network.inputs[i].tensor)] = input_dims[i];
  }
  Inferer inferer(network, dims);
  for (size_t n = 0; n < network.nodes.size(); ++n) GEARBOX_RETURN_IF_ERROR(inferer.node(n));
  return {};
}

}  // namespace gearbox::ir
