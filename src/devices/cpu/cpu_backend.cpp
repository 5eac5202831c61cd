// The CPU device: f32 compute over weights converted once at upload, work run in order on
// a CpuStream's worker thread. The reference for every other device, and CI's device.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <thread>

#include "core/check.h"
#include "core/half.h"
#include "devices/cpu/kernels.h"
#include "ir/generic_shapes.h"
#include "ir/shape_inference.h"
#include "runtime/device_backend.h"

namespace gearbox::internal {
namespace {

using ir::Network;
using ir::Node;
using ir::OpKind;

// Tactic ids (stored in engine files).
constexpr uint32_t kDefault = 0;
constexpr uint32_t kLinearSmallM = 1;
constexpr uint32_t kLinearBlocked = 2;
constexpr uint32_t kAttentionRowwise = 1;
constexpr uint32_t kAttentionTiled = 2;

class CpuWeights final : public DeviceWeights {
 public:
  std::vector<std::vector<float>> per_weight;  // f32, index = weight id (empty for the others)
  // i32 / i64 / bool weights (a constant's), as stored; index = weight id.
  std::vector<std::vector<uint8_t>> raw;
  // Per node id: a RoPE node's inverse frequencies (its weight, or computed from theta).
  std::vector<std::vector<float>> rope_freqs;
  int64_t bytes() const noexcept override {
    int64_t total = 0;
    for (const auto& w : per_weight) total += static_cast<int64_t>(w.size() * sizeof(float));
    for (const auto& w : raw) total += static_cast<int64_t>(w.size());
    return total;
  }
};

// How the CPU device stores a tensor of `declared` dtype: bf16 and f16 as f32.
DataType cpu_storage(DataType declared) {
  return declared == DataType::kBF16 || declared == DataType::kF16 ? DataType::kF32 : declared;
}

// A generic op (ir/network.h) on the kernels of kernels_generic.cpp / kernels_layout.cpp.
Status run_generic_node(const Network& net, const CpuWeights& weights, size_t n, const NodeArgs& a) {
  const Node& node = net.nodes[n];
  const ir::OpAttrs& at = node.attrs;
  auto in = [&](size_t i) {
    const auto t = static_cast<size_t>(node.inputs[i]);
    return cpu::In{a.tensors[t], a.dims[t], cpu_storage(net.tensors[t].dtype)};
  };
  const auto ot = static_cast<size_t>(node.outputs[0]);
  const cpu::Out out{a.tensors[ot], a.dims[ot], cpu_storage(net.tensors[ot].dtype)};
  auto weight = [&](size_t i) -> const float* {
    return i < node.weights.size() ? weights.per_weight[static_cast<size_t>(node.weights[i])].data() : nullptr;
  };
  switch (node.kind) {
    case OpKind::kUnary: cpu::unary(in(0), out, at.code, at.alpha, at.beta); return {};
    case OpKind::kBinary: return cpu::binary(in(0), in(1), out, at.code);
    case OpKind::kWhere: cpu::where(in(0), in(1), in(2), out); return {};
    case OpKind::kReduce: cpu::reduce(in(0), out, at.code, at.ints); return {};
    case OpKind::kSoftmax:
      cpu::softmax(in(0), out, at.axis, at.code == static_cast<int32_t>(ir::SoftmaxCode::kLogSoftmax));
      return {};
    case OpKind::kMatmul: cpu::matmul(in(0), in(1), out); return {};
    case OpKind::kSdpa: {
      const cpu::In mask = node.inputs.size() > 3 ? in(3) : cpu::In{};
      cpu::sdpa(in(0), in(1), in(2), node.inputs.size() > 3 ? &mask : nullptr, out, at.scale,
                (at.flags & ir::kFlagCausal) != 0, static_cast<float*>(a.scratch));
      return {};
    }
    case OpKind::kLayerNorm: cpu::layer_norm(in(0), weight(0), weight(1), out, at.eps); return {};
    case OpKind::kPermute: cpu::permute(in(0), out, at.ints); return {};
    case OpKind::kReshape:
      std::memcpy(out.data, in(0).data, static_cast<size_t>(ir::tensor_bytes(out.dims, out.dtype)));
      return {};
    case OpKind::kExpand: cpu::expand(in(0), out); return {};
    case OpKind::kSlice: {
      const cpu::In x = in(0);
      const ir::SliceRange r = ir::slice_range(x.dims[at.axis], at.ints[0], at.ints[1], at.ints[2]);
      cpu::slice(x, out, at.axis, r.start, r.step);
      return {};
    }
    case OpKind::kConcat: {
      std::vector<cpu::In> xs;
      for (size_t i = 0; i < node.inputs.size(); ++i) xs.push_back(in(i));
      cpu::concat(xs, out, at.axis);
      return {};
    }
    case OpKind::kCast: cpu::cast(in(0), out, net.tensors[ot].dtype); return {};
    case OpKind::kIndexSelect: return cpu::index_select(in(0), in(1), out, at.axis);
    case OpKind::kGather: return cpu::gather(in(0), in(1), out, at.axis);
    case OpKind::kConstant: {
      const auto w = static_cast<size_t>(node.weights[0]);
      const void* src = weights.per_weight[w].empty() ? static_cast<const void*>(weights.raw[w].data())
                                                      : static_cast<const void*>(weights.per_weight[w].data());
      const auto bytes = static_cast<size_t>(ir::tensor_bytes(out.dims, out.dtype));
      if (bytes > 0) std::memcpy(out.data, src, bytes);
      return {};
    }
    default: return internal_error(std::string(ir::op_kind_name(node.kind)) + " is not a generic op");
  }
}

void free_aligned(void* p) { std::free(p); }

cpu::AttentionShape attention_shape(const Node& node, const Dims& q) {
  cpu::AttentionShape s;
  s.T = q[0] * q[1];
  s.heads = node.attrs.heads;
  s.kv_heads = node.attrs.kv_heads;
  s.head_dim = node.attrs.head_dim;
  s.window = node.attrs.window;
  s.scale = node.attrs.scale;
  return s;
}

Status run_cpu_node(const Network& net, const CpuWeights& weights, size_t n, uint32_t tactic, const NodeArgs& a) {
  const Node& node = net.nodes[n];
  auto in = [&](size_t i) { return a.tensors[static_cast<size_t>(node.inputs[i])]; };
  auto in_dims = [&](size_t i) -> const Dims& { return a.dims[static_cast<size_t>(node.inputs[i])]; };
  auto in_type = [&](size_t i) { return net.tensors[static_cast<size_t>(node.inputs[i])].dtype; };
  auto out = [&](size_t i) { return static_cast<float*>(a.tensors[static_cast<size_t>(node.outputs[i])]); };
  auto w = [&](size_t i) { return weights.per_weight[static_cast<size_t>(node.weights[i])].data(); };
  auto wdims = [&](size_t i) -> const Dims& { return net.weights[static_cast<size_t>(node.weights[i])].dims; };
  auto f = [&](size_t i) { return static_cast<const float*>(in(i)); };
  const ir::OpAttrs& at = node.attrs;

  switch (node.kind) {
    case OpKind::kEmbedding:
      return cpu::embedding(in(0), in_type(0), in_dims(0).volume(), w(0), wdims(0)[0], wdims(0)[1], at.scale, out(0))
          .with_context(node.name);
    case OpKind::kRmsNorm: {
      const Dims& x = in_dims(0);
      const int64_t dim = at.head_dim > 0 ? at.head_dim : x[x.rank() - 1];
      cpu::rms_norm(f(0), w(0), out(0), x.volume() / dim, dim, at.eps, at.weight_offset);
      return {};
    }
    case OpKind::kLinear: {
      const Dims& x = in_dims(0);
      const int64_t m = ir::row_count(x);
      const int64_t k = x[x.rank() - 1];
      const size_t outs = node.outputs.size();
      for (size_t o = 0; o < outs; ++o) {
        const float* bias = at.has_bias != 0 ? w(outs + o) : nullptr;
        const int64_t nout = wdims(o)[0];
        if (tactic == kLinearSmallM) {
          cpu::linear_small_m(f(0), w(o), bias, out(o), m, nout, k);
        } else {
          cpu::linear_blocked(f(0), w(o), bias, out(o), m, nout, k, static_cast<float*>(a.scratch));
        }
      }
      return {};
    }
    case OpKind::kRope: {
      const Dims& x = in_dims(0);
      if (net.slots > 0) {
        return cpu::rope_rows(f(0), in(1), in_type(1), out(0), x[0], x[1], at.heads, at.head_dim, weights.rope_freqs[n],
                              at.scale)
            .with_context(node.name);
      }
      return cpu::rope_with_freqs(f(0), in(1), in_type(1), out(0), x[0] * x[1], at.heads, at.head_dim,
                                  weights.rope_freqs[n], at.scale)
          .with_context(node.name);
    }
    case OpKind::kAttention: {
      const Dims& q = in_dims(0);
      const cpu::AttentionShape shape = attention_shape(node, q);
      float* k_cache = static_cast<float*>(a.states[static_cast<size_t>(at.state) * 2]);
      float* v_cache = static_cast<float*>(a.states[static_cast<size_t>(at.state) * 2 + 1]);
      const int64_t width = static_cast<int64_t>(at.kv_heads) * at.head_dim;
      if (node.inputs.size() > 4) {
        cpu::SlotAttention args;
        args.q = f(0);
        args.k = f(1);
        args.v = f(2);
        args.positions = in(3);
        args.pos_type = in_type(3);
        args.slots = in(4);
        args.slot_type = in_type(4);
        args.rows = q[0];
        args.seq = q[1];
        args.slot_count = net.slots;
        args.max_ctx = net.max_context;
        args.k_cache = k_cache;
        args.v_cache = v_cache;
        args.out = out(0);
        return cpu::attention_rows(args, shape, tactic == kAttentionTiled, static_cast<float*>(a.scratch))
            .with_context(node.name);
      }
      GEARBOX_RETURN_IF_ERROR(
          cpu::kv_cache_write(f(1), f(2), in(3), in_type(3), shape.T, width, k_cache, v_cache, net.max_context)
              .with_context(node.name));
      if (tactic == kAttentionTiled) {
        cpu::attention_tiled(f(0), k_cache, v_cache, in(3), in_type(3), out(0), shape, static_cast<float*>(a.scratch));
      } else {
        cpu::attention_rowwise(f(0), k_cache, v_cache, in(3), in_type(3), out(0), shape,
                               static_cast<float*>(a.scratch));
      }
      return {};
    }
    case OpKind::kGeluTanhMul: cpu::gelu_tanh_mul(f(0), f(1), out(0), in_dims(0).volume()); return {};
    case OpKind::kSiluMul: cpu::silu_mul(f(0), f(1), out(0), in_dims(0).volume()); return {};
    case OpKind::kAdd: cpu::add(f(0), f(1), out(0), in_dims(0).volume()); return {};
    case OpKind::kTakeLast: {
      const Dims& x = in_dims(0);
      const int64_t batch = x[0], seq = x[1], width = x[2];
      for (int64_t b = 0; b < batch; ++b) {
        std::memcpy(out(0) + b * width, f(0) + (b * seq + seq - 1) * width, static_cast<size_t>(width) * sizeof(float));
      }
      return {};
    }
    default:
      if (ir::is_generic(node.kind)) return run_generic_node(net, weights, n, a).with_context(node.name);
      break;
  }
  return internal_error("unknown op kind in node " + node.name);
}

void convert_to_f32(const uint8_t* src, DataType type, int64_t count, float* dst) {
  switch (type) {
    case DataType::kF32: std::memcpy(dst, src, static_cast<size_t>(count) * sizeof(float)); return;
    case DataType::kBF16:
      for (int64_t i = 0; i < count; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = bf16_to_f32(h);
      }
      return;
    case DataType::kF16:
      for (int64_t i = 0; i < count; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = f16_to_f32(h);
      }
      return;
    case DataType::kI32:
    case DataType::kI64:
    case DataType::kBool: break;
  }
  GEARBOX_CHECK_MSG(false, "integer weights are not supported");
}

class CpuBackend final : public DeviceBackend {
 public:
  DeviceKind kind() const noexcept override { return DeviceKind::kCpu; }
  std::string device_name() const override {
    Result<std::vector<DeviceInfo>> devices = list_devices();
    return devices.ok() && !devices->empty() ? devices->front().name : "cpu";
  }
  std::string library_versions() const override { return "gearbox-cpu-kernels 1"; }

  DataType storage_type(DataType declared) const noexcept override { return cpu_storage(declared); }

  std::vector<TacticInfo> tactics(const Node& node) const override {
    switch (node.kind) {
      case OpKind::kLinear: return {{kLinearBlocked, "blocked"}, {kLinearSmallM, "small_m"}};
      case OpKind::kAttention: return {{kAttentionRowwise, "rowwise"}, {kAttentionTiled, "tiled"}};
      default: return {{kDefault, "default"}};
    }
  }

  bool tactic_valid(const Network& /*net*/, const Node& node, uint32_t tactic,
                    std::span<const Dims> max_dims) const override {
    switch (node.kind) {
      case OpKind::kLinear:
        if (tactic == kLinearSmallM)
          return ir::row_count(max_dims[static_cast<size_t>(node.inputs[0])]) <= cpu::kSmallMMaxRows;
        return tactic == kLinearBlocked;
      case OpKind::kAttention: return tactic == kAttentionRowwise || tactic == kAttentionTiled;
      default: return tactic == kDefault;
    }
  }

  int64_t scratch_bytes(const Network& net, const Node& node, uint32_t tactic,
                        std::span<const Dims> dims) const override {
    if (node.kind == OpKind::kSdpa) {
      const Dims& k = dims[static_cast<size_t>(node.inputs[1])];
      return cpu::sdpa_scratch_floats(k[k.rank() - 2]) * static_cast<int64_t>(sizeof(float));
    }
    if (node.inputs.empty()) return 0;
    const Dims& x = dims[static_cast<size_t>(node.inputs[0])];
    if (node.kind == OpKind::kLinear && tactic == kLinearBlocked) {
      return cpu::linear_blocked_scratch_floats(x[x.rank() - 1]) * static_cast<int64_t>(sizeof(float));
    }
    if (node.kind == OpKind::kAttention) {
      return cpu::attention_scratch_floats(attention_shape(node, x), net.max_context) *
             static_cast<int64_t>(sizeof(float));
    }
    return 0;
  }

  Result<std::shared_ptr<DeviceWeights>> upload_weights(const Network& net,
                                                        std::span<const uint8_t> payload) const override {
    auto weights = std::make_shared<CpuWeights>();
    weights->per_weight.resize(net.weights.size());
    weights->raw.resize(net.weights.size());
    for (size_t i = 0; i < net.weights.size(); ++i) {
      const ir::WeightInfo& info = net.weights[i];
      if (info.offset + info.bytes > payload.size())
        return data_loss("weight '" + info.name + "' lies outside the payload");
      const int64_t count = info.dims.volume();
      const bool as_float = cpu_storage(info.dtype) == DataType::kF32;
      try {
        if (as_float) {
          weights->per_weight[i].resize(static_cast<size_t>(count));
        } else {
          weights->raw[i].assign(payload.begin() + static_cast<ptrdiff_t>(info.offset),
                                 payload.begin() + static_cast<ptrdiff_t>(info.offset + info.bytes));
        }
      } catch (const std::bad_alloc&) {
        return resource_exhausted("out of host memory uploading weight '" + info.name + "'");
      }
      if (as_float) convert_to_f32(payload.data() + info.offset, info.dtype, count, weights->per_weight[i].data());
    }
    weights->rope_freqs.resize(net.nodes.size());
    for (size_t n = 0; n < net.nodes.size(); ++n) {
      const Node& node = net.nodes[n];
      if (node.kind != OpKind::kRope) continue;
      std::vector<float>& freqs = weights->rope_freqs[n];
      if (!node.weights.empty()) {
        freqs = weights->per_weight[static_cast<size_t>(node.weights[0])];
      } else {
        for (int64_t i = 0; i < node.attrs.head_dim / 2; ++i) {
          freqs.push_back(cpu::rope_inv_freq(node.attrs.theta, i, node.attrs.head_dim));
        }
      }
    }
    return std::shared_ptr<DeviceWeights>(std::move(weights));
  }

  Result<DeviceBuffer> allocate(int64_t bytes) const override {
    const size_t rounded = static_cast<size_t>((std::max<int64_t>(bytes, 1) + 63) / 64 * 64);
    void* p = std::aligned_alloc(64, rounded);
    if (p == nullptr)
      return resource_exhausted("could not allocate " + std::to_string(bytes) + " bytes of host memory");
    return DeviceBuffer(p, &free_aligned);
  }

  Result<std::unique_ptr<DeviceContextState>> create_context_state(int32_t /*profiles*/) const override {
    return std::unique_ptr<DeviceContextState>();
  }

  Result<std::shared_ptr<StreamImpl>> create_stream() const override {
    return std::shared_ptr<StreamImpl>(std::make_shared<CpuStream>());
  }

  Status copy_from_host(void* dst, const void* src, int64_t bytes, StreamImpl& /*stream*/) const override {
    // The destination (staging) is idle: the handle waited for its in-flight work.
    std::memcpy(dst, src, static_cast<size_t>(bytes));
    return {};
  }

  Status enqueue_copy(void* dst, const void* src, int64_t bytes, StreamImpl& stream) const override {
    return stream.enqueue([dst, src, bytes] {
      std::memcpy(dst, src, static_cast<size_t>(bytes));
      return Status();
    });
  }

  Status enqueue_network(const Network& net, const DeviceWeights& weights, NetworkLaunch launch,
                         StreamImpl& stream) const override {
    const auto& cpu_weights = static_cast<const CpuWeights&>(weights);
    return stream.enqueue([&net, &cpu_weights, launch = std::move(launch)]() -> Status {
      const NodeArgs args{launch.tensors, launch.dims, launch.scratch, launch.states, nullptr};
      for (size_t n = 0; n < net.nodes.size(); ++n) {
        GEARBOX_RETURN_IF_ERROR(run_cpu_node(net, cpu_weights, n, launch.tactics[n], args));
      }
      return Status();
    });
  }

  Status run_node(const Network& net, const DeviceWeights& weights, size_t node, uint32_t tactic,
                  const NodeArgs& args) const override {
    return run_cpu_node(net, static_cast<const CpuWeights&>(weights), node, tactic, args);
  }
};

}  // namespace

std::shared_ptr<const DeviceBackend> cpu_backend() {
  static const auto backend = std::make_shared<const CpuBackend>();
  return backend;
}

}  // namespace gearbox::internal
