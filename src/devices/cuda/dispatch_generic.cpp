// The CUDA device's dispatch of the generic ops (ir/network.h, kUnary .. kConstant): one
// call per op kind, each launching kernels/generic.cuh on node n's tensors as stored
// (storage_type). No generic node is fused (plan_steps leaves them single steps).
#include <algorithm>
#include <string>
#include <vector>

#include "devices/cuda/dispatch.h"
#include "devices/cuda/kernels/generic.cuh"
#include "ir/generic_shapes.h"

namespace gearbox::internal {

using ir::Network;
using ir::Node;
using ir::OpKind;

namespace {

/// Node n's tensors as the generic launchers take them.
struct Generic {
  const Network& net;
  const Node& node;
  const NodeArgs& a;

  Generic(const Network& network, size_t n, const NodeArgs& args) : net(network), node(network.nodes[n]), a(args) {}
  void* in(size_t i) const { return a.tensors[static_cast<size_t>(node.inputs[i])]; }
  const Dims& in_dims(size_t i) const { return a.dims[static_cast<size_t>(node.inputs[i])]; }
  /// Input i's type as stored on the device.
  DataType in_type(size_t i) const { return cuda_storage_type(net.tensors[static_cast<size_t>(node.inputs[i])].dtype); }
  DataType in_declared(size_t i) const { return net.tensors[static_cast<size_t>(node.inputs[i])].dtype; }
  void* out() const { return a.tensors[static_cast<size_t>(node.outputs[0])]; }
  const Dims& out_dims() const { return a.dims[static_cast<size_t>(node.outputs[0])]; }
  DataType out_declared() const { return net.tensors[static_cast<size_t>(node.outputs[0])].dtype; }
  DataType out_type() const { return cuda_storage_type(out_declared()); }
  const float* f(size_t i) const { return static_cast<const float*>(in(i)); }
  float* out_f() const { return static_cast<float*>(out()); }
  /// A launcher's error as a Status naming the node and its op.
  Status check(cudaError_t err) const {
    if (err == cudaSuccess) return {};
    const std::string what = "node '" + node.name + "' (" + ir::op_kind_name(node.kind) + ")";
    return cuda_check(err, what.c_str());
  }
};

}  // namespace

DataType cuda_storage_type(DataType declared) {
  switch (declared) {
    case DataType::kI32:
    case DataType::kI64:
    case DataType::kBool: return declared;
    default: return DataType::kF32;
  }
}

Status run_unary(const Network& net, size_t n, const NodeArgs& a, const cuda::Launch& launch) {
  const Generic g(net, n, a);
  const ir::OpAttrs& at = g.node.attrs;
  return g.check(cuda::generic_unary(static_cast<ir::UnaryCode>(at.code), g.in_type(0), g.in(0), g.out(),
                                     g.out_dims().volume(), at.alpha, at.beta, launch));
}

Status run_binary(const Network& net, size_t n, const NodeArgs& a, const cuda::Launch& launch) {
  const Generic g(net, n, a);
  return g.check(cuda::generic_binary(static_cast<ir::BinaryCode>(g.node.attrs.code), g.in_type(0), g.in(0),
                                      g.in_dims(0), g.in(1), g.in_dims(1), g.out(), g.out_dims(), launch));
}

Status run_where(const Network& net, size_t n, const NodeArgs& a, const cuda::Launch& launch) {
  const Generic g(net, n, a);
  return g.check(cuda::generic_where(g.in(0), g.in_dims(0), g.out_type(), g.in(1), g.in_dims(1), g.in(2), g.in_dims(2),
                                     g.out(), g.out_dims(), launch));
}

Status run_reduce(const Network& net, size_t n, const NodeArgs& a, const cuda::Launch& launch) {
  const Generic g(net, n, a);
  const ir::OpAttrs& at = g.node.attrs;
  return g.check(
      cuda::generic_reduce(static_cast<ir::ReduceCode>(at.code), g.f(0), g.in_dims(0), at.ints, g.out_f(), launch));
}

Status run_softmax(const Network& net, size_t n, const NodeArgs& a, const cuda::Launch& launch) {
  const Generic g(net, n, a);
  const ir::OpAttrs& at = g.node.attrs;
  return g.check(cuda::generic_softmax(at.code == static_cast<int32_t>(ir::SoftmaxCode::kLogSoftmax), g.f(0),
                                       g.in_dims(0), at.axis, g.out_f(), launch));
}

Status run_matmul(const Network& net, size_t n, const NodeArgs& a, const cuda::Launch& launch) {
  const Generic g(net, n, a);
  return g.check(cuda::generic_matmul(g.f(0), g.in_dims(0), g.f(1), g.in_dims(1), g.out_f(), g.out_dims(), launch));
}

Status run_sdpa(const Network& net, size_t n, const NodeArgs& a, const cuda::Launch& launch) {
  const Generic g(net, n, a);
  const ir::OpAttrs& at = g.node.attrs;
  const bool has_mask = g.node.inputs.size() > 3;
  const void* mask = has_mask ? g.in(3) : nullptr;
  const Dims mask_dims = has_mask ? g.in_dims(3) : Dims();
  const bool mask_bool = has_mask && g.in_type(3) == DataType::kBool;
  return g.check(cuda::generic_sdpa(g.f(0), g.in_dims(0), g.f(1), g.in_dims(1), g.f(2), g.in_dims(2), mask, mask_dims,
                                    mask_bool, (at.flags & ir::kFlagCausal) != 0, at.scale, g.out_f(), g.out_dims(),
                                    launch));
}

Status run_layer_norm(const Network& net, const CudaWeights& weights, size_t n, const NodeArgs& a,
                      const cuda::Launch& launch) {
  const Generic g(net, n, a);
  const Node& node = g.node;
  const Dims& x = g.in_dims(0);
  const int64_t f = x.rank() > 0 ? x[x.rank() - 1] : 1;
  const auto weight = [&](size_t i) { return i < node.weights.size() ? static_cast<size_t>(node.weights[i]) : 0; };
  const bool has_w = !node.weights.empty(), has_b = node.weights.size() > 1;
  const void* w = has_w ? weights.ptr[weight(0)] : nullptr;
  const void* b = has_b ? weights.ptr[weight(1)] : nullptr;
  const DataType w_type = has_w ? weights.type[weight(0)] : DataType::kF32;
  const DataType b_type = has_b ? weights.type[weight(1)] : DataType::kF32;
  const int64_t rows = f > 0 ? x.volume() / f : 0;
  return g.check(cuda::generic_layer_norm(g.f(0), rows, f, w, w_type, b, b_type, node.attrs.eps, g.out_f(), launch));
}

Status run_permute(const Network& net, size_t n, const NodeArgs& a, const cuda::Launch& launch) {
  const Generic g(net, n, a);
  return g.check(
      cuda::generic_permute(g.in_type(0), g.in(0), g.in_dims(0), g.node.attrs.ints, g.out(), g.out_dims(), launch));
}

Status run_reshape(const Network& net, size_t n, const NodeArgs& a, const cuda::Launch& launch) {
  const Generic g(net, n, a);
  const int64_t bytes = g.out_dims().volume() * static_cast<int64_t>(data_type_size(g.out_type()));
  return g.check(cuda::generic_copy(g.in(0), g.out(), bytes, launch));
}

Status run_expand(const Network& net, size_t n, const NodeArgs& a, const cuda::Launch& launch) {
  const Generic g(net, n, a);
  return g.check(cuda::generic_expand(g.in_type(0), g.in(0), g.in_dims(0), g.out(), g.out_dims(), launch));
}

Status run_slice(const Network& net, size_t n, const NodeArgs& a, const cuda::Launch& launch) {
  const Generic g(net, n, a);
  const ir::OpAttrs& at = g.node.attrs;
  if (at.ints.size() != 3 || at.axis < 0 || at.axis >= g.in_dims(0).rank()) {
    return internal_error("node '" + g.node.name + "' (slice): not validated");
  }
  const ir::SliceRange r = ir::slice_range(g.in_dims(0)[at.axis], at.ints[0], at.ints[1], at.ints[2]);
  return g.check(cuda::generic_slice(g.in_type(0), g.in(0), g.in_dims(0), at.axis, r.start, r.step, g.out(),
                                     g.out_dims(), launch));
}

Status run_concat(const Network& net, size_t n, const NodeArgs& a, const cuda::Launch& launch) {
  const Generic g(net, n, a);
  const int32_t axis = g.node.attrs.axis;
  int64_t at = 0;
  bool first = true;
  for (size_t i = 0; i < g.node.inputs.size(); ++i) {
    const Dims& x = g.in_dims(i);
    if (x.volume() == 0) continue;
    GEARBOX_RETURN_IF_ERROR(g.check(cuda::generic_concat_part(g.in_type(i), g.in(i), x, axis, at, g.out(), g.out_dims(),
                                                              first ? launch : launch.following())));
    first = false;
    at += x[axis];
  }
  return {};
}

Status run_cast(const Network& net, size_t n, const NodeArgs& a, const cuda::Launch& launch) {
  const Generic g(net, n, a);
  return g.check(cuda::generic_cast(g.in_type(0), g.in(0), g.out_declared(), g.out_type(), g.out(),
                                    g.out_dims().volume(), launch));
}

Status run_index_select(const Network& net, size_t n, const NodeArgs& a, const cuda::Launch& launch) {
  const Generic g(net, n, a);
  const bool i64 = g.in_type(1) == DataType::kI64;
  return g.check(cuda::generic_index_select(g.in_type(0), g.in(0), g.in_dims(0), g.node.attrs.axis, g.in(1), i64,
                                            g.in_dims(1).volume(), g.out(), g.out_dims(), fault_flag(a), launch));
}

Status run_gather(const Network& net, size_t n, const NodeArgs& a, const cuda::Launch& launch) {
  const Generic g(net, n, a);
  const bool i64 = g.in_type(1) == DataType::kI64;
  return g.check(cuda::generic_gather(g.in_type(0), g.in(0), g.in_dims(0), g.node.attrs.axis, g.in(1), i64,
                                      g.in_dims(1), g.out(), fault_flag(a), launch));
}

Status run_constant(const Network& net, const CudaWeights& weights, size_t n, const NodeArgs& a,
                    const cuda::Launch& launch) {
  const Generic g(net, n, a);
  if (g.node.weights.size() != 1) return internal_error("node '" + g.node.name + "' (constant): not validated");
  const auto w = static_cast<size_t>(g.node.weights[0]);
  // The weight keeps its checkpoint dtype on the device; the output is stored as
  // storage_type(declared), so a bf16 / f16 constant widens to f32 (exactly).
  const DataType w_type = weights.type[w];
  const int64_t count = g.out_dims().volume();
  if (w_type == g.out_type()) {
    return g.check(
        cuda::generic_copy(weights.ptr[w], g.out(), count * static_cast<int64_t>(data_type_size(w_type)), launch));
  }
  return g.check(cuda::generic_cast(w_type, weights.ptr[w], g.out_declared(), g.out_type(), g.out(), count, launch));
}

}  // namespace gearbox::internal
