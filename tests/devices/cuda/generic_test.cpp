// The generic ops (ir/network.h, kUnary .. kConstant) on the CUDA device against the CPU
// device, over every case of the shared table (support/generic_cases.h: one-node networks
// and their inputs) and a few larger ones that take the CUDA kernels' other paths
// (all_cases). Each case runs through the devices' own interface (DeviceBackend:
// upload_weights, enqueue_network on a stream of a context, take_input_fault), launch by
// launch and as a captured CUDA graph (static shapes, captured then replayed), and through
// the whole engine (built, loaded, run by a session), so dispatch, storage types and graph
// capture are checked with the kernels.
//
// Every tensor of the CUDA run is poisoned (0xff bytes: NaN for floats) before the run and
// followed by kGuardBytes sentinel bytes that no kernel may touch. Tolerances, per output
// element (err <= atol * max|ref| + rtol * |ref|; NaN must meet NaN):
//   exact        layout ops (permute, reshape, expand, slice, concat, index_select, gather,
//                constant), cast, where, comparisons and logical ops, integer arithmetic,
//                f32 add / sub / mul / div / maximum / minimum (IEEE-rounded on both), unary
//                neg / abs / relu / clamp / affine / logical_not, amax / amin
//   1e-5 rel     other f32 unary math and pow: CUDA's libm and glibc's differ by a few ulps
//   reductions   sum / mean, softmax, layer_norm: the same sum in another order (a tree per
//                thread group against the CPU's running sum): 2e-5 of the output's largest
//                magnitude plus 1e-4 relative
//   products     matmul and sdpa: K-long dot products in another order (FMA tiles, online
//                softmax): 1e-5 of the largest magnitude plus 1e-4 relative
// Error cases: an index outside its axis makes the CUDA call fail with kOutOfRange (the
// context's error flag, as a bad token id), and the next good call succeeds.
// Label `gpu`: every test skips where there is no CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "ir/network.h"
#include "ir/shape_inference.h"
#include "runtime/device_backend.h"
#include "support/generic_cases.h"

namespace gearbox {
namespace {

using internal::DeviceBackend;
using internal::DeviceBuffer;
using ir::OpKind;

constexpr int64_t kGuardBytes = 64;
constexpr uint8_t kSentinel = 0x5a;
constexpr uint8_t kPoison = 0xff;

std::shared_ptr<const DeviceBackend> cuda_device() {
  Result<std::shared_ptr<const DeviceBackend>> d = internal::cuda_backend();
  return d.ok() ? *d : nullptr;
}

/// One network input: its dims and bytes in its declared dtype.
struct HostInput {
  Dims dims;
  std::vector<uint8_t> bytes;
};

/// What a device left in the network's outputs (as stored: storage_type of their dtype).
struct DeviceResult {
  Status status;
  std::vector<std::vector<uint8_t>> outputs;
  std::vector<DataType> types;
  std::vector<Dims> dims;
  bool guards_intact = true;
};

/// `net` on `device` at the dims of fixed inputs: its weights, a context, a stream and every
/// tensor (poisoned, followed by sentinel bytes), kept across calls, as an execution context
/// keeps them (a captured graph is replayed while the addresses stay).
class Runner {
 public:
  Runner(const DeviceBackend& device, const ir::Network& net, std::span<const uint8_t> payload,
         const std::vector<Dims>& input_dims)
      : device_(device), net_(net) {
    status_ = ir::infer_shapes(net, input_dims, dims_);
    if (!status_.ok()) return;
    Result<std::shared_ptr<internal::DeviceWeights>> weights = device.upload_weights(net, payload);
    Result<std::unique_ptr<internal::DeviceContextState>> context = device.create_context_state(1);
    Result<std::shared_ptr<internal::StreamImpl>> stream = device.create_stream();
    for (const Status& s : {weights.status(), context.status(), stream.status()}) {
      if (!s.ok()) {
        status_ = s;
        return;
      }
    }
    weights_ = std::move(*weights);
    context_ = std::move(*context);
    stream_ = std::move(*stream);
    for (size_t t = 0; t < net.tensors.size(); ++t) {
      bytes_.push_back(ir::tensor_bytes(dims_[t], device.storage_type(net.tensors[t].dtype)));
      Result<DeviceBuffer> b = device.allocate(bytes_[t] + kGuardBytes);
      if (!b.ok()) {
        status_ = b.status();
        return;
      }
      std::vector<uint8_t> fill(static_cast<size_t>(bytes_[t]), kPoison);
      fill.resize(static_cast<size_t>(bytes_[t] + kGuardBytes), kSentinel);
      status_ = device.copy_from_host(b->get(), fill.data(), bytes_[t] + kGuardBytes, *stream_);
      if (status_.ok()) status_ = stream_->synchronize();
      if (!status_.ok()) return;
      tensors_.push_back(b->get());
      buffers_.push_back(std::move(*b));
    }
    // The scratch the nodes' default tactics need (the CPU's sdpa keeps its scores there).
    int64_t scratch = 0;
    for (const ir::Node& node : net.nodes) scratch = std::max(scratch, device.scratch_bytes(net, node, 0, dims_));
    Result<DeviceBuffer> s = device.allocate(scratch);
    if (!s.ok()) {
      status_ = s.status();
      return;
    }
    scratch_ = s->get();
    buffers_.push_back(std::move(*s));
  }

  /// One call with `inputs` (their bytes in the declared dtypes), `calls` times over (a
  /// static-shape call is captured the first time, replayed after), then the outputs.
  DeviceResult call(const std::vector<HostInput>& inputs, bool static_shapes, int calls = 1) {
    DeviceResult r;
    r.status = status_;
    if (!r.status.ok()) return r;
    internal::StreamImpl& s = *stream_;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const auto t = static_cast<size_t>(net_.inputs[i].tensor);
      if (static_cast<int64_t>(inputs[i].bytes.size()) != bytes_[t]) {
        r.status = internal_error("input " + std::to_string(i) + ": " + std::to_string(inputs[i].bytes.size()) +
                                  " bytes, the device stores " + std::to_string(bytes_[t]));
        return r;
      }
      r.status = device_.copy_from_host(tensors_[t], inputs[i].bytes.data(), bytes_[t], s);
      if (!r.status.ok()) return r;
    }
    internal::NetworkLaunch launch;
    launch.tactics.assign(net_.nodes.size(), 0);
    launch.tensors = tensors_;
    launch.dims = dims_;
    launch.scratch = scratch_;
    launch.context = context_.get();
    launch.static_shapes = static_shapes;
    for (int c = 0; c < calls && r.status.ok(); ++c) {
      r.status = device_.enqueue_network(net_, *weights_, launch, s);
      if (r.status.ok()) r.status = s.synchronize();
      if (r.status.ok()) r.status = device_.take_input_fault(context_.get());
    }
    if (!r.status.ok()) return r;
    for (int32_t out : net_.outputs) {
      const auto t = static_cast<size_t>(out);
      std::vector<uint8_t> host(static_cast<size_t>(bytes_[t] + kGuardBytes));
      r.status = device_.enqueue_copy(host.data(), tensors_[t], bytes_[t] + kGuardBytes, s);
      if (r.status.ok()) r.status = s.synchronize();
      if (!r.status.ok()) return r;
      r.guards_intact = r.guards_intact &&
                        std::all_of(host.begin() + bytes_[t], host.end(), [](uint8_t b) { return b == kSentinel; });
      host.resize(static_cast<size_t>(bytes_[t]));
      r.outputs.push_back(std::move(host));
      r.types.push_back(device_.storage_type(net_.tensors[t].dtype));
      r.dims.push_back(dims_[t]);
    }
    return r;
  }

 private:
  const DeviceBackend& device_;
  const ir::Network& net_;
  Status status_;
  std::vector<Dims> dims_;
  std::vector<int64_t> bytes_;
  std::shared_ptr<internal::DeviceWeights> weights_;
  std::unique_ptr<internal::DeviceContextState> context_;
  std::shared_ptr<internal::StreamImpl> stream_;
  std::vector<DeviceBuffer> buffers_;
  std::vector<void*> tensors_;
  void* scratch_ = nullptr;
};

/// The dims of `inputs`.
std::vector<Dims> dims_of(const std::vector<HostInput>& inputs) {
  std::vector<Dims> dims;
  for (const HostInput& in : inputs) dims.push_back(in.dims);
  return dims;
}

/// The tolerance of a node's f32 output (see the file comment): err <= atol * max|ref| +
/// rtol * |ref|.
struct Tolerance {
  double atol = 0;
  double rtol = 0;
};

Tolerance tolerance(OpKind kind, const ir::OpAttrs& attrs) {
  constexpr Tolerance kExact{0, 0}, kLibm{1e-6, 1e-5}, kReduction{2e-5, 1e-4}, kProduct{1e-5, 1e-4};
  switch (kind) {
    case OpKind::kUnary:
      switch (static_cast<ir::UnaryCode>(attrs.code)) {
        case ir::UnaryCode::kNeg:
        case ir::UnaryCode::kAbs:
        case ir::UnaryCode::kRelu:
        case ir::UnaryCode::kClamp:
        case ir::UnaryCode::kAffine:
        case ir::UnaryCode::kLogicalNot: return kExact;
        default: return kLibm;
      }
    case OpKind::kBinary: return attrs.code == static_cast<int32_t>(ir::BinaryCode::kPow) ? kLibm : kExact;
    case OpKind::kReduce:
      return attrs.code == static_cast<int32_t>(ir::ReduceCode::kAmax) ||
                     attrs.code == static_cast<int32_t>(ir::ReduceCode::kAmin)
                 ? kExact
                 : kReduction;
    case OpKind::kSoftmax:
    case OpKind::kLayerNorm: return kReduction;
    case OpKind::kMatmul:
    case OpKind::kSdpa: return kProduct;
    default: return kExact;
  }
}

/// got against want (same storage type), f32 within `tol`, any other type byte for byte.
::testing::AssertionResult same_output(const std::string& what, DataType type, const std::vector<uint8_t>& got,
                                       const std::vector<uint8_t>& want, Tolerance tol) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << what << ": " << got.size() << " bytes, want " << want.size();
  }
  if (type != DataType::kF32) {
    for (size_t i = 0; i < got.size(); ++i) {
      if (got[i] != want[i]) {
        return ::testing::AssertionFailure() << what << ": byte " << i << " is " << int{got[i]} << ", want "
                                             << int{want[i]} << " (" << data_type_name(type) << ")";
      }
    }
    return ::testing::AssertionSuccess();
  }
  const size_t n = got.size() / 4;
  std::vector<float> g(n), w(n);
  std::memcpy(g.data(), got.data(), n * 4);
  std::memcpy(w.data(), want.data(), n * 4);
  double scale = 0;
  for (float v : w) {
    if (std::isfinite(v)) scale = std::max(scale, std::abs(static_cast<double>(v)));
  }
  size_t bad = 0, first = 0;
  double max_err = 0;
  for (size_t i = 0; i < n; ++i) {
    bool ok;
    if (std::isnan(w[i]) || std::isinf(w[i])) {
      ok = std::isnan(w[i]) ? std::isnan(g[i]) : g[i] == w[i];
    } else {
      const double err = std::abs(static_cast<double>(g[i]) - w[i]);
      ok = std::isfinite(g[i]) && err <= tol.atol * scale + tol.rtol * std::abs(static_cast<double>(w[i]));
      if (std::isfinite(g[i])) max_err = std::max(max_err, err);
    }
    if (!ok && bad++ == 0) first = i;
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << bad << " of " << n << " out of tolerance (max error "
                                       << max_err << ", largest |ref| " << scale << "), first [" << first << "] got "
                                       << g[first] << " want " << w[first];
}

/// The case's inputs as the devices take them: the table's values, and for an input the
/// case does not list (a constant's placeholder) its network declaration's.
std::vector<HostInput> host_inputs(const testing::GenericCase& c, const ir::Network& net) {
  std::vector<HostInput> inputs;
  for (size_t i = 0; i < net.inputs.size(); ++i) {
    const ir::InputSpec& in = net.inputs[i];
    const testing::TensorSpec spec = i < c.inputs.size()
                                         ? c.inputs[i]
                                         : testing::TensorSpec{net.tensors[static_cast<size_t>(in.tensor)].dtype,
                                                               in.dims, testing::Values::kUniform, 0};
    inputs.push_back({spec.dims, testing::make_values(spec, testing::case_seed(c, i))});
  }
  return inputs;
}

/// The shared table, and the shapes that only the CUDA kernels' other paths take: reduced
/// lengths and rows over 1024 (a block per output instead of a warp), keys in the thousands
/// (several key tiles of the online softmax), several matmul tiles, bf16 layer-norm weights,
/// and a bool mask sparse enough to exclude every key of some queries.
std::vector<testing::GenericCase> all_cases() {
  std::vector<testing::GenericCase> cases = testing::generic_cases();
  const auto f = [](Dims dims) { return testing::TensorSpec{DataType::kF32, dims, testing::Values::kUniform, 0}; };
  const auto attrs = [](std::vector<int64_t> ints, int32_t code, int32_t axis = 0) {
    ir::OpAttrs a;
    a.ints = std::move(ints);
    a.code = code;
    a.axis = axis;
    return a;
  };
  const auto sum = static_cast<int32_t>(ir::ReduceCode::kSum);
  const auto amax = static_cast<int32_t>(ir::ReduceCode::kAmax);
  const auto mean = static_cast<int32_t>(ir::ReduceCode::kMean);
  cases.push_back({"cuda_reduce_sum_long_rows", OpKind::kReduce, attrs({1}, sum), {f({3, 5000})}, {}, DataType::kF32});
  cases.push_back(
      {"cuda_reduce_mean_strided", OpKind::kReduce, attrs({0, 2}, mean), {f({40, 7, 60})}, {}, DataType::kF32});
  cases.push_back({"cuda_reduce_amax_long", OpKind::kReduce, attrs({}, amax), {f({70, 70})}, {}, DataType::kF32});
  cases.push_back({"cuda_softmax_long", OpKind::kSoftmax, attrs({}, 0, 1), {f({2, 3000})}, {}, DataType::kF32});
  cases.push_back(
      {"cuda_log_softmax_long_strided", OpKind::kSoftmax, attrs({}, 1, 0), {f({2000, 3})}, {}, DataType::kF32});
  ir::OpAttrs ln;
  ln.eps = 1e-5f;
  ln.has_bias = 1;
  const testing::TensorSpec bf16_weight{DataType::kBF16, Dims{2048}, testing::Values::kUniform, 0};
  cases.push_back({"cuda_layer_norm_long_bf16",
                   OpKind::kLayerNorm,
                   ln,
                   {f({3, 2048})},
                   {bf16_weight, bf16_weight},
                   DataType::kF32});
  cases.push_back({"cuda_matmul_tiles", OpKind::kMatmul, {}, {f({2, 130, 70}), f({70, 150})}, {}, DataType::kF32});
  ir::OpAttrs sdpa;
  sdpa.scale = 0.125f;
  ir::OpAttrs causal = sdpa;
  causal.flags = ir::kFlagCausal;
  cases.push_back({"cuda_sdpa_long_keys",
                   OpKind::kSdpa,
                   sdpa,
                   {f({1, 2, 3, 64}), f({1, 2, 3000, 64}), f({1, 2, 3000, 32})},
                   {},
                   DataType::kF32});
  cases.push_back({"cuda_sdpa_long_causal",
                   OpKind::kSdpa,
                   causal,
                   {f({2, 300, 16}), f({2, 300, 16}), f({2, 300, 24})},
                   {},
                   DataType::kF32});
  cases.push_back({"cuda_sdpa_sparse_bool_mask",
                   OpKind::kSdpa,
                   sdpa,
                   {f({16, 8}), f({2, 8}), f({2, 4}),
                    testing::TensorSpec{DataType::kBool, Dims{16, 2}, testing::Values::kUniform, 0}},
                   {},
                   DataType::kF32});
  return cases;
}

/// Every case on both devices: the CUDA outputs against the CPU's.
void compare_all(bool static_shapes) {
  const std::shared_ptr<const DeviceBackend> gpu = cuda_device();
  if (gpu == nullptr) GTEST_SKIP() << "no CUDA device";
  const std::shared_ptr<const DeviceBackend> cpu = internal::cpu_backend();
  ASSERT_FALSE(testing::generic_cases().empty());
  for (const testing::GenericCase& c : all_cases()) {
    const testing::CaseNetwork cn = testing::make_case_network(c);
    const std::vector<HostInput> inputs = host_inputs(c, cn.network);
    const DeviceResult want = Runner(*cpu, cn.network, cn.payload, dims_of(inputs)).call(inputs, false);
    Runner cuda(*gpu, cn.network, cn.payload, dims_of(inputs));
    if (!want.status.ok()) {
      // An error of the call on the CPU: a bad index fails the CUDA call too; an integer
      // division by zero yields 0 there (GENERIC_SPEC), which the CPU does not compute.
      if (c.kind == OpKind::kIndexSelect || c.kind == OpKind::kGather) {
        EXPECT_EQ(cuda.call(inputs, static_shapes).status.code(), StatusCode::kOutOfRange)
            << c.name << ": the CPU fails (" << want.status.to_string() << "), CUDA does not";
      }
      continue;
    }
    const DeviceResult got = cuda.call(inputs, static_shapes, static_shapes ? 2 : 1);
    ASSERT_TRUE(got.status.ok()) << c.name << ": " << got.status.to_string();
    EXPECT_TRUE(got.guards_intact) << c.name << ": a kernel wrote past an output";
    ASSERT_EQ(got.outputs.size(), want.outputs.size()) << c.name;
    const Tolerance tol = tolerance(c.kind, c.attrs);
    for (size_t o = 0; o < got.outputs.size(); ++o) {
      ASSERT_EQ(got.types[o], want.types[o]) << c.name << ": the devices store output " << o << " differently";
      EXPECT_EQ(got.dims[o], want.dims[o]) << c.name;
      EXPECT_TRUE(same_output(c.name, got.types[o], got.outputs[o], want.outputs[o], tol));
    }
  }
}

TEST(CudaGeneric, EveryCaseMatchesTheCpuDevice) { compare_all(/*static_shapes=*/false); }

TEST(CudaGeneric, EveryCaseMatchesTheCpuDeviceAsACapturedGraph) { compare_all(/*static_shapes=*/true); }

// Through the whole engine: built (tactics timed on the device) for one profile of fixed
// shapes, loaded and run by a session, whose call replays a captured graph on CUDA.
TEST(CudaGeneric, EveryCaseThroughTheEngineMatchesTheCpuDevice) {
  if (cuda_device() == nullptr) GTEST_SKIP() << "no CUDA device";
  for (const testing::GenericCase& c : all_cases()) {
    const Result<testing::CaseOutput> want = testing::run_generic_case(c, DeviceKind::kCpu);
    ASSERT_TRUE(want.ok()) << c.name << ": " << want.status().to_string();
    const Result<testing::CaseOutput> got = testing::run_generic_case(c, DeviceKind::kCuda);
    ASSERT_TRUE(got.ok()) << c.name << ": " << got.status().to_string();
    ASSERT_EQ(got->dtype, want->dtype) << c.name;
    EXPECT_EQ(got->dims, want->dims) << c.name;
    EXPECT_TRUE(same_output(c.name + " (engine)", got->dtype, got->bytes, want->bytes, tolerance(c.kind, c.attrs)));
  }
}

// ---- bad indices ------------------------------------------------------------------------------------------

/// x [4, 3] f32 -> index_select (axis 0) or gather (axis 1) by an i64 index.
ir::Network index_network(OpKind kind, const Dims& index_dims) {
  ir::Network net;
  net.tensors = {{"x", DataType::kF32}, {"index", DataType::kI64}, {"y", DataType::kF32}};
  net.inputs = {{0, Dims{4, 3}, {"rows", "cols"}}, {1, index_dims, {}}};
  for (int32_t d = 0; d < index_dims.rank(); ++d) net.inputs[1].dim_names.push_back("i" + std::to_string(d));
  net.outputs = {2};
  ir::Node node;
  node.kind = kind;
  node.name = kind == OpKind::kGather ? "pick" : "rows";
  node.inputs = {0, 1};
  node.outputs = {2};
  node.attrs.axis = kind == OpKind::kGather ? 1 : 0;
  net.nodes.push_back(node);
  return net;
}

std::vector<uint8_t> bytes_of(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}
std::vector<uint8_t> bytes_of(const std::vector<int64_t>& v) {
  std::vector<uint8_t> b(v.size() * 8);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

TEST(CudaGeneric, AnIndexOutsideItsAxisFailsTheCallAndTheNextCallSucceeds) {
  const std::shared_ptr<const DeviceBackend> gpu = cuda_device();
  if (gpu == nullptr) GTEST_SKIP() << "no CUDA device";
  const std::vector<float> x = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  for (const OpKind kind : {OpKind::kIndexSelect, OpKind::kGather}) {
    const Dims index_dims = kind == OpKind::kGather ? Dims{4, 1} : Dims{3};
    const ir::Network net = index_network(kind, index_dims);
    const std::string what = ir::op_kind_name(kind);
    const int64_t extent = kind == OpKind::kGather ? 3 : 4;
    const std::vector<int64_t> good =
        kind == OpKind::kGather ? std::vector<int64_t>{0, 1, 2, -1} : std::vector<int64_t>{1, 0, -1};
    const std::vector<float> want =
        kind == OpKind::kGather ? std::vector<float>{0, 4, 8, 11} : std::vector<float>{3, 4, 5, 0, 1, 2, 9, 10, 11};
    for (const bool graph : {false, true}) {
      Runner cuda(*gpu, net, {}, {Dims{4, 3}, index_dims});
      for (const int64_t bad : {extent, -extent - 1, int64_t{1} << 40}) {
        std::vector<int64_t> index = good;
        index[1] = bad;
        const DeviceResult failed = cuda.call({{Dims{4, 3}, bytes_of(x)}, {index_dims, bytes_of(index)}}, graph);
        EXPECT_EQ(failed.status.code(), StatusCode::kOutOfRange)
            << what << " index " << bad << ": " << failed.status.to_string();
        // The same context again, good indices: the fault was reported once and cleared.
        const DeviceResult ok = cuda.call({{Dims{4, 3}, bytes_of(x)}, {index_dims, bytes_of(good)}}, graph, 2);
        ASSERT_TRUE(ok.status.ok()) << what << ": " << ok.status.to_string();
        std::vector<float> y(ok.outputs[0].size() / 4);
        std::memcpy(y.data(), ok.outputs[0].data(), ok.outputs[0].size());
        EXPECT_EQ(y, want) << what << (graph ? " (graph)" : "");
        EXPECT_TRUE(ok.guards_intact) << what;
      }
    }
  }
}

}  // namespace
}  // namespace gearbox
