#include "generic_cases.h"

#include <cstring>
#include <limits>
#include <utility>

#include "builder/builder.h"
#include "core/half.h"
#include "format/engine_file.h"
#include "gearbox/engine.h"

namespace gearbox::testing {
namespace {

using ir::OpKind;
constexpr DataType kF32 = DataType::kF32;
constexpr DataType kI32 = DataType::kI32;
constexpr DataType kI64 = DataType::kI64;
constexpr DataType kBool = DataType::kBool;
constexpr int64_t kOpenEnd = std::numeric_limits<int64_t>::max();

TensorSpec t(DataType dtype, Dims dims, Values values = Values::kUniform, int64_t bound = 0) {
  return {dtype, dims, values, bound};
}
TensorSpec f(Dims dims) { return t(kF32, dims); }
TensorSpec pos(Dims dims) { return t(kF32, dims, Values::kPositive); }

ir::OpAttrs attrs_code(int32_t code, float alpha = 0.0f, float beta = 0.0f) {
  ir::OpAttrs a;
  a.code = code;
  a.alpha = alpha;
  a.beta = beta;
  return a;
}
ir::OpAttrs attrs_axis(int32_t axis, std::vector<int64_t> ints = {}, int32_t code = 0) {
  ir::OpAttrs a;
  a.axis = axis;
  a.ints = std::move(ints);
  a.code = code;
  return a;
}
ir::OpAttrs attrs_ints(std::vector<int64_t> ints, int32_t flags = 0, int32_t code = 0) {
  ir::OpAttrs a;
  a.ints = std::move(ints);
  a.flags = flags;
  a.code = code;
  return a;
}

void unary_cases(std::vector<GenericCase>& out) {
  const Dims shapes[] = {{5}, {3, 7}, {2, 3, 13}, {1, 2, 3, 4, 5}, {129}};
  for (int32_t code = 1; code <= ir::kMaxUnaryCode; ++code) {
    const auto u = static_cast<ir::UnaryCode>(code);
    const Dims& dims = shapes[static_cast<size_t>(code) % std::size(shapes)];
    const std::string name = std::string("unary_") + ir::unary_code_name(code);
    if (u == ir::UnaryCode::kLogicalNot) {
      out.push_back({name, OpKind::kUnary, attrs_code(code), {t(kBool, {7, 3})}, {}, kBool});
      continue;
    }
    const bool positive = u == ir::UnaryCode::kLog || u == ir::UnaryCode::kSqrt || u == ir::UnaryCode::kRsqrt ||
                          u == ir::UnaryCode::kReciprocal || u == ir::UnaryCode::kPowScalar;
    const float alpha = u == ir::UnaryCode::kPowScalar ? 2.5f : u == ir::UnaryCode::kAffine ? 0.5f : -0.5f;
    const float beta = u == ir::UnaryCode::kAffine ? -1.0f : 0.75f;
    out.push_back({name, OpKind::kUnary, attrs_code(code, alpha, beta), {positive ? pos(dims) : f(dims)}, {}, kF32});
  }
  out.push_back({"unary_clamp_open_below",
                 OpKind::kUnary,
                 attrs_code(static_cast<int32_t>(ir::UnaryCode::kClamp), -std::numeric_limits<float>::infinity(), 1.0f),
                 {f({4, 9})},
                 {},
                 kF32});
  for (DataType dt : {kI32, kI64}) {
    for (ir::UnaryCode u : {ir::UnaryCode::kNeg, ir::UnaryCode::kAbs}) {
      out.push_back({std::string("unary_") + ir::unary_code_name(static_cast<int32_t>(u)) + "_" + data_type_name(dt),
                     OpKind::kUnary,
                     attrs_code(static_cast<int32_t>(u)),
                     {t(dt, {2, 13})},
                     {},
                     dt});
    }
  }
}

void binary_cases(std::vector<GenericCase>& out) {
  for (int32_t code = 1; code <= ir::kMaxBinaryCode; ++code) {
    const auto b = static_cast<ir::BinaryCode>(code);
    const std::string name = std::string("binary_") + ir::binary_code_name(code);
    const ir::OpAttrs a = attrs_code(code);
    if (ir::binary_code_logical(code)) {
      out.push_back({name, OpKind::kBinary, a, {t(kBool, {5, 1}), t(kBool, {1, 6})}, {}, kBool});
      continue;
    }
    if (ir::binary_code_compares(code)) {
      out.push_back({name + "_f32", OpKind::kBinary, a, {f({2, 3, 4}), f({4})}, {}, kBool});
      out.push_back({name + "_i32", OpKind::kBinary, a, {t(kI32, {3, 1}), t(kI32, {1, 5})}, {}, kBool});
      continue;
    }
    const bool positive = b == ir::BinaryCode::kDiv || b == ir::BinaryCode::kPow;
    out.push_back({name + "_f32",
                   OpKind::kBinary,
                   a,
                   {b == ir::BinaryCode::kPow ? pos({2, 1, 5}) : f({2, 1, 5}), positive ? pos({3, 1}) : f({3, 1})},
                   {},
                   kF32});
    const Values divisor = b == ir::BinaryCode::kDiv ? Values::kNonZero : Values::kUniform;
    out.push_back({name + "_i32", OpKind::kBinary, a, {t(kI32, {4, 5}), t(kI32, {5}, divisor)}, {}, kI32});
    out.push_back({name + "_i64", OpKind::kBinary, a, {t(kI64, {3, 1}), t(kI64, {1, 4}, divisor)}, {}, kI64});
  }
  out.push_back(
      {"binary_add_rank5", OpKind::kBinary, attrs_code(1), {f({1, 2, 1, 3, 1}), f({2, 1, 4, 1, 5})}, {}, kF32});
  out.push_back({"binary_mul_same", OpKind::kBinary, attrs_code(3), {f({127}), f({127})}, {}, kF32});
  out.push_back({"binary_sub_scalar_like", OpKind::kBinary, attrs_code(2), {f({1}), f({3, 1, 7})}, {}, kF32});
}

void reduce_softmax_cases(std::vector<GenericCase>& out) {
  out.push_back({"where_f32", OpKind::kWhere, {}, {t(kBool, {3, 1}), f({1, 4}), f({3, 4})}, {}, kF32});
  out.push_back(
      {"where_i64_rank4", OpKind::kWhere, {}, {t(kBool, {2, 1, 3, 1}), t(kI64, {5}), t(kI64, {1, 4, 1, 1})}, {}, kI64});
  out.push_back(
      {"reduce_sum_keepdim", OpKind::kReduce, attrs_ints({1}, ir::kFlagKeepdim, 1), {f({3, 5, 7})}, {}, kF32});
  out.push_back({"reduce_mean_0_2", OpKind::kReduce, attrs_ints({0, 2}, 0, 2), {f({4, 3, 5})}, {}, kF32});
  out.push_back({"reduce_amax_all", OpKind::kReduce, attrs_ints({}, 0, 3), {f({2, 3, 7})}, {}, kF32});
  out.push_back({"reduce_amin_129", OpKind::kReduce, attrs_ints({1}, 0, 4), {f({2, 129})}, {}, kF32});
  out.push_back({"reduce_sum_rank5", OpKind::kReduce, attrs_ints({1, 3}, 0, 1), {f({2, 3, 1, 4, 5})}, {}, kF32});
  out.push_back(
      {"reduce_mean_all_keepdim", OpKind::kReduce, attrs_ints({}, ir::kFlagKeepdim, 2), {f({5, 1})}, {}, kF32});
  out.push_back({"softmax_last", OpKind::kSoftmax, attrs_axis(1), {f({3, 17})}, {}, kF32});
  out.push_back({"softmax_axis0", OpKind::kSoftmax, attrs_axis(0), {f({5, 4})}, {}, kF32});
  out.push_back({"log_softmax_middle", OpKind::kSoftmax, attrs_axis(1, {}, 1), {f({2, 7, 3})}, {}, kF32});
  out.push_back({"softmax_single", OpKind::kSoftmax, attrs_axis(0), {f({1})}, {}, kF32});
}

void matmul_attention_cases(std::vector<GenericCase>& out) {
  out.push_back({"matmul_2d", OpKind::kMatmul, {}, {f({3, 5}), f({5, 4})}, {}, kF32});
  out.push_back({"matmul_batch_b2d", OpKind::kMatmul, {}, {f({2, 3, 5}), f({5, 7})}, {}, kF32});
  out.push_back({"matmul_broadcast", OpKind::kMatmul, {}, {f({2, 1, 3, 5}), f({4, 5, 6})}, {}, kF32});
  out.push_back({"matmul_1x1", OpKind::kMatmul, {}, {f({1, 1}), f({1, 1})}, {}, kF32});
  out.push_back({"matmul_odd", OpKind::kMatmul, {}, {f({7, 13}), f({13, 129})}, {}, kF32});
  ir::OpAttrs s;
  s.scale = 0.35f;
  ir::OpAttrs causal = s;
  causal.flags = ir::kFlagCausal;
  out.push_back({"sdpa_plain", OpKind::kSdpa, s, {f({1, 2, 5, 8}), f({1, 2, 7, 8}), f({1, 2, 7, 6})}, {}, kF32});
  out.push_back({"sdpa_causal", OpKind::kSdpa, causal, {f({2, 5, 8}), f({2, 5, 8}), f({2, 5, 8})}, {}, kF32});
  out.push_back({"sdpa_causal_lq_gt_lk", OpKind::kSdpa, causal, {f({7, 4}), f({3, 4}), f({3, 5})}, {}, kF32});
  out.push_back({"sdpa_bool_mask",
                 OpKind::kSdpa,
                 s,
                 {f({1, 2, 5, 8}), f({1, 2, 7, 8}), f({1, 2, 7, 6}), t(kBool, {5, 7})},
                 {},
                 kF32});
  out.push_back({"sdpa_f32_mask_causal",
                 OpKind::kSdpa,
                 causal,
                 {f({1, 3, 6, 4}), f({1, 3, 6, 4}), f({1, 3, 6, 4}), f({1, 1, 6, 6})},
                 {},
                 kF32});
  out.push_back(
      {"sdpa_batch_broadcast", OpKind::kSdpa, s, {f({2, 3, 4, 8}), f({1, 3, 6, 8}), f({2, 1, 6, 5})}, {}, kF32});
  ir::OpAttrs ln;
  ln.eps = 1e-5f;
  ir::OpAttrs ln_bias = ln;
  ln_bias.has_bias = 1;
  out.push_back({"layer_norm_wb", OpKind::kLayerNorm, ln_bias, {f({3, 16})}, {f({16}), f({16})}, kF32});
  out.push_back({"layer_norm_w", OpKind::kLayerNorm, ln, {f({2, 3, 7})}, {f({7})}, kF32});
  out.push_back({"layer_norm_bare", OpKind::kLayerNorm, ln, {f({5, 33})}, {}, kF32});
}

void layout_cases(std::vector<GenericCase>& out) {
  out.push_back({"permute_3d", OpKind::kPermute, attrs_ints({2, 0, 1}), {f({2, 3, 4})}, {}, kF32});
  out.push_back({"permute_rank5", OpKind::kPermute, attrs_ints({4, 2, 0, 3, 1}), {f({2, 3, 1, 4, 5})}, {}, kF32});
  out.push_back({"permute_i64", OpKind::kPermute, attrs_ints({1, 0}), {t(kI64, {3, 5})}, {}, kI64});
  out.push_back({"permute_bool", OpKind::kPermute, attrs_ints({1, 0, 2}), {t(kBool, {3, 5, 2})}, {}, kBool});
  out.push_back({"reshape_infer", OpKind::kReshape, attrs_ints({6, -1}), {f({2, 3, 4})}, {}, kF32});
  out.push_back({"reshape_symbolic", OpKind::kReshape, attrs_ints({1, -3, 4, 16}), {f({1, 6, 64})}, {}, kF32});
  out.push_back({"reshape_to_rank0", OpKind::kReshape, attrs_ints({}), {t(kI32, {1})}, {}, kI32});
  out.push_back({"expand_middle", OpKind::kExpand, attrs_ints({2, -1, 5}), {f({3, 1})}, {}, kF32});
  out.push_back({"expand_by_dim", OpKind::kExpand, attrs_ints({-2, 4}), {t(kBool, {3, 1})}, {}, kBool});
  out.push_back({"expand_rank5", OpKind::kExpand, attrs_ints({2, 3, -1, 4, -1}), {t(kI64, {1, 1, 5})}, {}, kI64});
  out.push_back({"slice_step", OpKind::kSlice, attrs_axis(0, {1, kOpenEnd, 3}), {f({10, 4})}, {}, kF32});
  out.push_back({"slice_negative", OpKind::kSlice, attrs_axis(1, {-3, -1, 1}), {f({2, 7})}, {}, kF32});
  out.push_back({"slice_clamped_i32", OpKind::kSlice, attrs_axis(2, {-100, 100, 2}), {t(kI32, {2, 3, 5})}, {}, kI32});
  out.push_back({"concat_axis1", OpKind::kConcat, attrs_axis(1), {f({2, 3}), f({2, 5}), f({2, 1})}, {}, kF32});
  out.push_back({"concat_axis0_i64", OpKind::kConcat, attrs_axis(0), {t(kI64, {1, 3}), t(kI64, {4, 3})}, {}, kI64});
  out.push_back({"concat_rank4_last", OpKind::kConcat, attrs_axis(3), {f({2, 1, 3, 2}), f({2, 1, 3, 5})}, {}, kF32});
  out.push_back({"concat_one", OpKind::kConcat, attrs_axis(0), {t(kBool, {7})}, {}, kBool});
  const std::pair<DataType, DataType> casts[] = {
      {kF32, kI32}, {kF32, DataType::kBF16}, {kF32, DataType::kF16}, {kF32, kBool}, {kI64, kF32},
      {kI32, kI64}, {kBool, kF32},           {kI64, kI32},           {kF32, kI64},  {kBool, kI32}};
  for (const auto& [from, to] : casts) {
    out.push_back({std::string("cast_") + data_type_name(from) + "_" + data_type_name(to),
                   OpKind::kCast,
                   {},
                   {t(from, {3, 11})},
                   {},
                   to});
  }
  out.push_back({"index_select_axis0",
                 OpKind::kIndexSelect,
                 attrs_axis(0),
                 {f({5, 4}), t(kI64, {7}, Values::kIndex, 5)},
                 {},
                 kF32});
  out.push_back({"index_select_axis1_i32",
                 OpKind::kIndexSelect,
                 attrs_axis(1),
                 {f({3, 6, 2}), t(kI32, {4}, Values::kIndex, 6)},
                 {},
                 kF32});
  out.push_back({"index_select_bool",
                 OpKind::kIndexSelect,
                 attrs_axis(1),
                 {t(kBool, {2, 9}), t(kI64, {3}, Values::kIndex, 9)},
                 {},
                 kBool});
  out.push_back(
      {"gather_axis1", OpKind::kGather, attrs_axis(1), {f({4, 5}), t(kI64, {4, 3}, Values::kIndex, 5)}, {}, kF32});
  out.push_back({"gather_axis0_smaller",
                 OpKind::kGather,
                 attrs_axis(0),
                 {t(kI32, {3, 4, 5}), t(kI32, {2, 3, 5}, Values::kIndex, 3)},
                 {},
                 kI32});
  for (DataType dt : {kF32, DataType::kBF16, kI32, kI64, kBool}) {
    out.push_back({std::string("constant_") + data_type_name(dt), OpKind::kConstant, {}, {}, {t(dt, {2, 3})}, dt});
  }
  out.push_back({"constant_single", OpKind::kConstant, {}, {}, {f({1})}, kF32});
}

// splitmix64: a tiny, well-mixed generator that is the same everywhere.
uint64_t next(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

}  // namespace

const std::vector<GenericCase>& generic_cases() {
  static const std::vector<GenericCase> cases = [] {
    std::vector<GenericCase> all;
    unary_cases(all);
    binary_cases(all);
    reduce_softmax_cases(all);
    matmul_attention_cases(all);
    layout_cases(all);
    return all;
  }();
  return cases;
}

uint64_t case_seed(const GenericCase& c, size_t i) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a of the name, then the index
  for (char ch : c.name) h = (h ^ static_cast<uint8_t>(ch)) * 1099511628211ULL;
  return h ^ (i * 0x9E3779B97F4A7C15ULL);
}

std::vector<uint8_t> make_values(const TensorSpec& spec, uint64_t seed) {
  const int64_t n = spec.dims.volume();
  const size_t size = data_type_size(spec.dtype);
  std::vector<uint8_t> bytes(static_cast<size_t>(n) * size);
  uint64_t state = seed;
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t r = next(state);
    const double unit = static_cast<double>(r >> 11) * 0x1.0p-53;  // [0, 1)
    int64_t iv = static_cast<int64_t>(r % 11) - 5;                 // [-5, 5]
    if (spec.values == Values::kNonZero && iv == 0) iv = 1 + static_cast<int64_t>(r % 5);
    if (spec.values == Values::kIndex)
      iv = static_cast<int64_t>(r % static_cast<uint64_t>(2 * spec.bound)) - spec.bound;
    const float fv = spec.values == Values::kPositive ? static_cast<float>(0.25 + 3.75 * unit)
                                                      : static_cast<float>(4.0 * unit - 2.0);
    uint8_t* at = bytes.data() + static_cast<size_t>(i) * size;
    switch (spec.dtype) {
      case DataType::kF32: std::memcpy(at, &fv, 4); break;
      case DataType::kBF16: {
        const uint16_t h = internal::f32_to_bf16(fv);
        std::memcpy(at, &h, 2);
        break;
      }
      case DataType::kF16: {
        const uint16_t h = internal::f32_to_f16(fv);
        std::memcpy(at, &h, 2);
        break;
      }
      case DataType::kI32: {
        const auto v = static_cast<int32_t>(iv);
        std::memcpy(at, &v, 4);
        break;
      }
      case DataType::kI64: std::memcpy(at, &iv, 8); break;
      case DataType::kBool: *at = static_cast<uint8_t>((r >> 7) & 1U); break;
    }
  }
  return bytes;
}

CaseNetwork make_case_network(const GenericCase& c) {
  CaseNetwork out;
  ir::Network& net = out.network;
  ir::Node node;
  node.kind = c.kind;
  node.name = c.name;
  node.attrs = c.attrs;
  std::vector<TensorSpec> inputs = c.inputs;
  const bool unused_input = inputs.empty();
  if (unused_input) inputs.push_back(t(kF32, {1}));
  for (size_t i = 0; i < inputs.size(); ++i) {
    net.tensors.push_back({"in" + std::to_string(i), inputs[i].dtype});
    const auto id = static_cast<int32_t>(net.tensors.size() - 1);
    net.inputs.push_back({id, inputs[i].dims, {}});
    if (!unused_input) node.inputs.push_back(id);
  }
  for (size_t w = 0; w < c.weights.size(); ++w) {
    const TensorSpec& spec = c.weights[w];
    const std::vector<uint8_t> bytes = make_values(spec, case_seed(c, c.inputs.size() + w));
    ir::WeightInfo info{"w" + std::to_string(w), spec.dtype, spec.dims, (out.payload.size() + 63) / 64 * 64,
                        bytes.size()};
    out.payload.resize(info.offset, 0);
    out.payload.insert(out.payload.end(), bytes.begin(), bytes.end());
    net.weights.push_back(info);
    node.weights.push_back(static_cast<int32_t>(net.weights.size() - 1));
  }
  out.payload.resize((out.payload.size() + 63) / 64 * 64, 0);
  // A bf16 / f16 result is no engine output on every device: a cast to f32 follows.
  const bool half = c.output == DataType::kBF16 || c.output == DataType::kF16;
  net.tensors.push_back({half ? "out.half" : "out", c.output});
  node.outputs.push_back(static_cast<int32_t>(net.tensors.size() - 1));
  const int32_t result = node.outputs[0];
  net.nodes.push_back(std::move(node));
  if (half) {
    net.tensors.push_back({"out", kF32});
    const auto f32_out = static_cast<int32_t>(net.tensors.size() - 1);
    net.nodes.push_back({OpKind::kCast, c.name + ".to_f32", {result}, {f32_out}, {}, {}});
    net.outputs.push_back(f32_out);
  } else {
    net.outputs.push_back(result);
  }
  return out;
}

Result<CaseOutput> run_generic_case(const GenericCase& c, DeviceKind device) {
  const CaseNetwork cn = make_case_network(c);
  format::ProfileDesc profile{"only", {}};
  for (const ir::InputSpec& in : cn.network.inputs) profile.bounds.push_back({in.dims, in.dims, in.dims});
  internal::BuildOptions options;
  options.device = device;
  options.warmup = 0;
  options.repetitions = 1;
  Result<format::EngineDesc> desc = internal::build_engine(cn.network, {profile}, cn.payload, options);
  if (!desc.ok()) return desc.status();
  Result<std::vector<uint8_t>> bytes = format::serialize_engine(*desc, cn.payload);
  if (!bytes.ok()) return bytes.status();
  EngineOptions load;
  load.device = device;
  load.tactic_cache = "";
  Result<Engine> engine = Engine::load_buffer(*bytes, load);
  if (!engine.ok()) return engine.status();
  Result<Session> session = Session::create(*engine);
  if (!session.ok()) return session.status();
  std::vector<std::vector<uint8_t>> values;
  std::vector<TensorView> views;
  for (size_t i = 0; i < cn.network.inputs.size(); ++i) {
    const ir::InputSpec& in = cn.network.inputs[i];
    const TensorSpec spec = i < c.inputs.size() ? c.inputs[i] : t(kF32, {1});
    values.push_back(make_values(spec, case_seed(c, i)));
    views.push_back({values.back().data(), cn.network.tensors[static_cast<size_t>(in.tensor)].dtype, in.dims});
  }
  std::vector<Tensor> outputs(1);
  outputs[0].dtype = cn.network.tensors[static_cast<size_t>(cn.network.outputs[0])].dtype;
  if (Status run = session->run(views, outputs); !run.ok()) return run;
  CaseOutput out;
  out.dtype = outputs[0].dtype;
  out.dims = outputs[0].dims;
  out.bytes.resize(outputs[0].bytes.size());
  if (!out.bytes.empty()) std::memcpy(out.bytes.data(), outputs[0].bytes.data(), out.bytes.size());
  return out;
}

}  // namespace gearbox::testing
