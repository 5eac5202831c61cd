// The CPU device's generic ops: every case of tests/support/generic_cases.h, built and run
// as an engine, against a naive reference computed here in double precision from the same
// inputs (closed forms for casts to bf16 / f16); and the errors of the call and of the
// build, each naming the node.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "devices/cpu/kernels.h"
#include "ir/generic_shapes.h"
#include "ir/shape_inference.h"
#include "support/generic_cases.h"

namespace gearbox::testing {
namespace {

using ir::OpKind;
using Doubles = std::vector<double>;

Doubles to_doubles(const std::vector<uint8_t>& bytes, DataType dtype) {
  const size_t size = data_type_size(dtype);
  Doubles out(bytes.size() / size);
  for (size_t i = 0; i < out.size(); ++i) {
    const uint8_t* p = bytes.data() + i * size;
    switch (dtype) {
      case DataType::kF32: {
        float v;
        std::memcpy(&v, p, 4);
        out[i] = v;
        break;
      }
      case DataType::kBF16: {  // the upper half of an f32
        uint32_t bits = 0;
        uint16_t h;
        std::memcpy(&h, p, 2);
        bits = static_cast<uint32_t>(h) << 16;
        float v;
        std::memcpy(&v, &bits, 4);
        out[i] = v;
        break;
      }
      case DataType::kI32: {
        int32_t v;
        std::memcpy(&v, p, 4);
        out[i] = v;
        break;
      }
      case DataType::kI64: {
        int64_t v;
        std::memcpy(&v, p, 8);
        out[i] = static_cast<double>(v);
        break;
      }
      case DataType::kBool: out[i] = *p != 0 ? 1.0 : 0.0; break;
      case DataType::kF16: ADD_FAILURE() << "f16 values are not read back"; break;
    }
  }
  return out;
}

std::vector<int64_t> dims_vec(const Dims& d) { return {d.extents().begin(), d.extents().end()}; }
Dims to_dims(const std::vector<int64_t>& e) { return Dims(std::span<const int64_t>(e)); }

std::vector<int64_t> unravel(int64_t i, const std::vector<int64_t>& dims) {
  std::vector<int64_t> idx(dims.size(), 0);
  for (size_t d = dims.size(); d-- > 0;) {
    idx[d] = dims[d] > 0 ? i % dims[d] : 0;
    i = dims[d] > 0 ? i / dims[d] : 0;
  }
  return idx;
}
int64_t ravel(const std::vector<int64_t>& idx, const std::vector<int64_t>& dims) {
  int64_t at = 0;
  for (size_t d = 0; d < dims.size(); ++d) at = at * dims[d] + idx[d];
  return at;
}
// The element of `dims` an index of a (right-aligned, broadcast) larger tensor reads.
int64_t broadcast_at(const std::vector<int64_t>& idx, const std::vector<int64_t>& dims) {
  std::vector<int64_t> own(dims.size());
  for (size_t d = 0; d < dims.size(); ++d) {
    const int64_t e = idx[idx.size() - dims.size() + d];
    own[d] = dims[d] == 1 ? 0 : e;
  }
  return ravel(own, dims);
}
std::vector<int64_t> broadcast(const std::vector<std::vector<int64_t>>& shapes) {
  size_t rank = 0;
  for (const auto& s : shapes) rank = std::max(rank, s.size());
  std::vector<int64_t> out(rank, 1);
  for (const auto& s : shapes) {
    for (size_t d = 0; d < s.size(); ++d) {
      int64_t& o = out[rank - s.size() + d];
      if (s[d] != 1) o = s[d];
    }
  }
  return out;
}
int64_t volume(const std::vector<int64_t>& d) {
  int64_t v = 1;
  for (int64_t e : d) v *= e;
  return v;
}

double unary_ref(double x, ir::UnaryCode c, double alpha, double beta) {
  switch (c) {
    case ir::UnaryCode::kNeg: return -x;
    case ir::UnaryCode::kExp: return std::exp(x);
    case ir::UnaryCode::kLog: return std::log(x);
    case ir::UnaryCode::kSqrt: return std::sqrt(x);
    case ir::UnaryCode::kRsqrt: return 1.0 / std::sqrt(x);
    case ir::UnaryCode::kTanh: return std::tanh(x);
    case ir::UnaryCode::kSigmoid: return 1.0 / (1.0 + std::exp(-x));
    case ir::UnaryCode::kSilu: return x / (1.0 + std::exp(-x));
    case ir::UnaryCode::kGeluErf: return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case ir::UnaryCode::kGeluTanh:
      return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    case ir::UnaryCode::kRelu: return x > 0 ? x : 0.0;
    case ir::UnaryCode::kAbs: return std::fabs(x);
    case ir::UnaryCode::kSin: return std::sin(x);
    case ir::UnaryCode::kCos: return std::cos(x);
    case ir::UnaryCode::kReciprocal: return 1.0 / x;
    case ir::UnaryCode::kPowScalar: return std::pow(x, alpha);
    case ir::UnaryCode::kAffine: return x * alpha + beta;
    case ir::UnaryCode::kClamp: return std::min(std::max(x, alpha), beta);
    case ir::UnaryCode::kLogicalNot: return x != 0 ? 0.0 : 1.0;
    case ir::UnaryCode::kErf: return std::erf(x);
  }
  return NAN;
}

double binary_ref(double a, double b, ir::BinaryCode c, bool integer) {
  switch (c) {
    case ir::BinaryCode::kAdd: return a + b;
    case ir::BinaryCode::kSub: return a - b;
    case ir::BinaryCode::kMul: return a * b;
    case ir::BinaryCode::kDiv: return integer ? std::trunc(a / b) : a / b;
    case ir::BinaryCode::kMaximum: return std::max(a, b);
    case ir::BinaryCode::kMinimum: return std::min(a, b);
    case ir::BinaryCode::kPow:
      if (integer && b < 0) return a == 1 ? 1 : a == -1 ? (std::fmod(-b, 2.0) == 1 ? -1 : 1) : 0;
      return std::pow(a, b);
    case ir::BinaryCode::kEq: return a == b;
    case ir::BinaryCode::kNe: return a != b;
    case ir::BinaryCode::kLt: return a < b;
    case ir::BinaryCode::kLe: return a <= b;
    case ir::BinaryCode::kGt: return a > b;
    case ir::BinaryCode::kGe: return a >= b;
    case ir::BinaryCode::kLogicalAnd: return a != 0 && b != 0;
    case ir::BinaryCode::kLogicalOr: return a != 0 || b != 0;
  }
  return NAN;
}

struct Ref {
  std::vector<int64_t> dims;
  Doubles values;
};

Ref sdpa_ref(const GenericCase& c, const std::vector<Doubles>& in, const std::vector<std::vector<int64_t>>& d) {
  const auto& q = d[0];
  const auto& k = d[1];
  const auto& v = d[2];
  const int64_t lq = q[q.size() - 2], dh = q.back(), lk = k[k.size() - 2], dv = v.back();
  auto batch = [](std::vector<int64_t> s) { return std::vector<int64_t>(s.begin(), s.end() - 2); };
  std::vector<std::vector<int64_t>> batches = {batch(q), batch(k), batch(v)};
  std::vector<int64_t> full = broadcast(batches);
  if (in.size() > 3) {
    std::vector<int64_t> scores = full;
    scores.push_back(lq);
    scores.push_back(lk);
    scores = broadcast({scores, d[3]});
    full = batch(scores);
  }
  Ref r;
  r.dims = full;
  r.dims.push_back(lq);
  r.dims.push_back(dv);
  r.values.assign(static_cast<size_t>(volume(r.dims)), 0.0);
  const bool causal = (c.attrs.flags & ir::kFlagCausal) != 0;
  for (int64_t bi = 0; bi < volume(full); ++bi) {
    std::vector<int64_t> b = unravel(bi, full);
    auto at = [&](const std::vector<int64_t>& dims, int64_t row, int64_t col) {
      std::vector<int64_t> idx = b;
      idx.push_back(row);
      idx.push_back(col);
      return broadcast_at(idx, dims);
    };
    for (int64_t i = 0; i < lq; ++i) {
      std::vector<double> s(static_cast<size_t>(lk), -INFINITY);
      for (int64_t j = 0; j < lk; ++j) {
        if (causal && j > i) continue;
        double add = 0;
        if (in.size() > 3) {
          const double m = in[3][static_cast<size_t>(at(d[3], i, j))];
          if (c.inputs[3].dtype == DataType::kBool) {
            if (m == 0) continue;
          } else {
            add = m;
          }
        }
        double dot = 0;
        for (int64_t x = 0; x < dh; ++x) dot += in[0][at(q, i, x)] * in[1][at(k, j, x)];
        s[static_cast<size_t>(j)] = dot * c.attrs.scale + add;
      }
      const double mx = *std::max_element(s.begin(), s.end());
      if (mx == -INFINITY) continue;
      double sum = 0;
      for (double& e : s) sum += (e = std::exp(e - mx));
      for (int64_t x = 0; x < dv; ++x) {
        double acc = 0;
        for (int64_t j = 0; j < lk; ++j) acc += s[static_cast<size_t>(j)] / sum * in[2][at(v, j, x)];
        r.values[static_cast<size_t>((bi * lq + i) * dv + x)] = acc;
      }
    }
  }
  return r;
}

Ref reference(const GenericCase& c, const std::vector<Doubles>& in, const std::vector<Doubles>& w) {
  std::vector<std::vector<int64_t>> d;
  for (const TensorSpec& s : c.inputs) d.push_back(dims_vec(s.dims));
  const ir::OpAttrs& a = c.attrs;
  const bool integer =
      c.inputs.empty() ? false : c.inputs[0].dtype == DataType::kI32 || c.inputs[0].dtype == DataType::kI64;
  Ref r;
  auto elementwise = [&](auto&& f) {
    r.dims = broadcast(d);
    r.values.resize(static_cast<size_t>(volume(r.dims)));
    for (int64_t i = 0; i < volume(r.dims); ++i) {
      const std::vector<int64_t> idx = unravel(i, r.dims);
      std::vector<double> args;
      for (size_t k = 0; k < in.size(); ++k) args.push_back(in[k][static_cast<size_t>(broadcast_at(idx, d[k]))]);
      r.values[static_cast<size_t>(i)] = f(args);
    }
  };
  // Moves elements: r.values[i] = in[0][source(index of i)].
  auto gather_by = [&](std::vector<int64_t> dims, auto&& source) {
    r.dims = std::move(dims);
    for (int64_t i = 0; i < volume(r.dims); ++i)
      r.values.push_back(in[0][static_cast<size_t>(source(unravel(i, r.dims)))]);
  };
  switch (c.kind) {
    case OpKind::kUnary:
      elementwise([&](const std::vector<double>& x) {
        return unary_ref(x[0], static_cast<ir::UnaryCode>(a.code), a.alpha, a.beta);
      });
      break;
    case OpKind::kBinary:
      elementwise([&](const std::vector<double>& x) {
        return binary_ref(x[0], x[1], static_cast<ir::BinaryCode>(a.code), integer);
      });
      break;
    case OpKind::kWhere: elementwise([](const std::vector<double>& x) { return x[0] != 0 ? x[1] : x[2]; }); break;
    case OpKind::kReduce: {
      const std::vector<int64_t>& x = d[0];
      std::vector<bool> red(x.size(), a.ints.empty());
      for (int64_t ax : a.ints) red[static_cast<size_t>(ax)] = true;
      std::vector<int64_t> kept;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!red[i]) kept.push_back(x[i]);
      }
      for (size_t i = 0; i < x.size(); ++i) {
        if (red[i] && (a.flags & ir::kFlagKeepdim) != 0) r.dims.push_back(1);
        if (!red[i]) r.dims.push_back(x[i]);
      }
      const auto code = static_cast<ir::ReduceCode>(a.code);
      Doubles acc(static_cast<size_t>(volume(kept)), code == ir::ReduceCode::kAmax   ? -INFINITY
                                                     : code == ir::ReduceCode::kAmin ? INFINITY
                                                                                     : 0.0);
      for (int64_t i = 0; i < volume(x); ++i) {
        const std::vector<int64_t> idx = unravel(i, x);
        std::vector<int64_t> k;
        for (size_t j = 0; j < x.size(); ++j) {
          if (!red[j]) k.push_back(idx[j]);
        }
        double& v = acc[static_cast<size_t>(ravel(k, kept))];
        const double e = in[0][static_cast<size_t>(i)];
        v = code == ir::ReduceCode::kAmax ? std::max(v, e) : code == ir::ReduceCode::kAmin ? std::min(v, e) : v + e;
      }
      if (code == ir::ReduceCode::kMean) {
        for (double& v : acc) v /= static_cast<double>(volume(x) / std::max<int64_t>(volume(kept), 1));
      }
      r.values = acc;
      break;
    }
    case OpKind::kSoftmax: {
      r.dims = d[0];
      r.values.resize(in[0].size());
      const auto ax = static_cast<size_t>(a.axis);
      for (int64_t i = 0; i < volume(r.dims); ++i) {
        std::vector<int64_t> idx = unravel(i, r.dims);
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j < r.dims[ax]; ++j) {
          idx[ax] = j;
          mx = std::max(mx, in[0][static_cast<size_t>(ravel(idx, r.dims))]);
        }
        for (int64_t j = 0; j < r.dims[ax]; ++j) {
          idx[ax] = j;
          sum += std::exp(in[0][static_cast<size_t>(ravel(idx, r.dims))] - mx);
        }
        const double x = in[0][static_cast<size_t>(i)] - mx;
        r.values[static_cast<size_t>(i)] = a.code == 1 ? x - std::log(sum) : std::exp(x) / sum;
      }
      break;
    }
    case OpKind::kMatmul: {
      const auto& A = d[0];
      const auto& B = d[1];
      const int64_t m = A[A.size() - 2], k = A.back(), n = B.back();
      r.dims = broadcast({{A.begin(), A.end() - 2}, {B.begin(), B.end() - 2}});
      r.dims.push_back(m);
      r.dims.push_back(n);
      for (int64_t i = 0; i < volume(r.dims); ++i) {
        std::vector<int64_t> idx = unravel(i, r.dims);
        const int64_t row = idx[idx.size() - 2], col = idx.back();
        double acc = 0;
        for (int64_t kk = 0; kk < k; ++kk) {
          idx[idx.size() - 2] = row;
          idx.back() = kk;
          const double av = in[0][static_cast<size_t>(broadcast_at(idx, A))];
          idx[idx.size() - 2] = kk;
          idx.back() = col;
          acc += av * in[1][static_cast<size_t>(broadcast_at(idx, B))];
        }
        r.values.push_back(acc);
      }
      break;
    }
    case OpKind::kSdpa: return sdpa_ref(c, in, d);
    case OpKind::kLayerNorm: {
      r.dims = d[0];
      const int64_t f = d[0].back();
      for (int64_t row = 0; row < volume(d[0]) / f; ++row) {
        double mean = 0, var = 0;
        for (int64_t i = 0; i < f; ++i) mean += in[0][static_cast<size_t>(row * f + i)];
        mean /= static_cast<double>(f);
        for (int64_t i = 0; i < f; ++i) var += std::pow(in[0][static_cast<size_t>(row * f + i)] - mean, 2);
        var /= static_cast<double>(f);
        for (int64_t i = 0; i < f; ++i) {
          const auto ui = static_cast<size_t>(i);
          const double y = (in[0][static_cast<size_t>(row * f + i)] - mean) / std::sqrt(var + a.eps);
          r.values.push_back(y * (w.empty() ? 1.0 : w[0][ui]) + (w.size() > 1 ? w[1][ui] : 0.0));
        }
      }
      break;
    }
    case OpKind::kPermute: {
      std::vector<int64_t> dims;
      for (int64_t p : a.ints) dims.push_back(d[0][static_cast<size_t>(p)]);
      gather_by(dims, [&](const std::vector<int64_t>& idx) {
        std::vector<int64_t> src(idx.size());
        for (size_t i = 0; i < idx.size(); ++i) src[static_cast<size_t>(a.ints[i])] = idx[i];
        return ravel(src, d[0]);
      });
      break;
    }
    case OpKind::kReshape:
    case OpKind::kExpand: {
      Result<Dims> dims = ir::resolve_shape_spec(a.ints, c.inputs[0].dims, c.kind == OpKind::kExpand);
      EXPECT_TRUE(dims.ok()) << dims.status().message();
      if (c.kind == OpKind::kReshape) {
        r.dims = dims_vec(*dims);
        r.values = in[0];
      } else {
        gather_by(dims_vec(*dims), [&](const std::vector<int64_t>& idx) { return broadcast_at(idx, d[0]); });
      }
      break;
    }
    case OpKind::kSlice: {
      const auto ax = static_cast<size_t>(a.axis);
      const int64_t e = d[0][ax];
      auto fix = [e](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + e : v, 0, e); };
      const int64_t start = fix(a.ints[0]), end = fix(a.ints[1]), step = a.ints[2];
      std::vector<int64_t> dims = d[0];
      dims[ax] = 0;
      for (int64_t i = start; i < end; i += step) ++dims[ax];
      gather_by(dims, [&](std::vector<int64_t> idx) {
        idx[ax] = start + idx[ax] * step;
        return ravel(idx, d[0]);
      });
      break;
    }
    case OpKind::kConcat: {
      const auto ax = static_cast<size_t>(a.axis);
      r.dims = d[0];
      r.dims[ax] = 0;
      for (const auto& x : d) r.dims[ax] += x[ax];
      for (int64_t i = 0; i < volume(r.dims); ++i) {
        std::vector<int64_t> idx = unravel(i, r.dims);
        size_t k = 0;
        while (idx[ax] >= d[k][ax]) idx[ax] -= d[k++][ax];
        r.values.push_back(in[k][static_cast<size_t>(ravel(idx, d[k]))]);
      }
      break;
    }
    case OpKind::kCast:
      r.dims = d[0];
      for (double x : in[0]) {
        switch (c.output) {
          case DataType::kI32:
          case DataType::kI64: r.values.push_back(std::trunc(x)); break;
          case DataType::kBool: r.values.push_back(x != 0 ? 1.0 : 0.0); break;
          default: r.values.push_back(x); break;  // bf16 / f16: checked within their rounding
        }
      }
      break;
    case OpKind::kIndexSelect:
    case OpKind::kGather: {
      const auto ax = static_cast<size_t>(a.axis);
      const int64_t e = d[0][ax];
      std::vector<int64_t> dims = d[0];
      if (c.kind == OpKind::kIndexSelect) dims[ax] = d[1][0];
      if (c.kind == OpKind::kGather) dims = d[1];
      gather_by(dims, [&](std::vector<int64_t> idx) {
        const double iv = in[1][static_cast<size_t>(c.kind == OpKind::kGather ? ravel(idx, d[1]) : idx[ax])];
        idx[ax] = static_cast<int64_t>(iv) < 0 ? static_cast<int64_t>(iv) + e : static_cast<int64_t>(iv);
        return ravel(idx, d[0]);
      });
      break;
    }
    case OpKind::kConstant:
      r.dims = dims_vec(c.weights[0].dims);
      r.values = w[0];
      break;
    default: ADD_FAILURE() << "no reference for " << ir::op_kind_name(c.kind);
  }
  return r;
}

class GenericCpu : public ::testing::TestWithParam<GenericCase> {};

TEST_P(GenericCpu, MatchesTheNaiveReference) {
  const GenericCase& c = GetParam();
  std::vector<Doubles> in, w;
  for (size_t i = 0; i < c.inputs.size(); ++i)
    in.push_back(to_doubles(make_values(c.inputs[i], case_seed(c, i)), c.inputs[i].dtype));
  for (size_t i = 0; i < c.weights.size(); ++i) {
    w.push_back(to_doubles(make_values(c.weights[i], case_seed(c, c.inputs.size() + i)), c.weights[i].dtype));
  }
  const Ref want = reference(c, in, w);
  Result<CaseOutput> got = run_generic_case(c, DeviceKind::kCpu);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(got->dims, to_dims(want.dims));
  const bool half = c.output == DataType::kBF16 || c.output == DataType::kF16;
  EXPECT_EQ(got->dtype, half ? DataType::kF32 : c.output);
  const Doubles values = to_doubles(got->bytes, got->dtype);
  ASSERT_EQ(values.size(), want.values.size());
  const bool exact = c.output != DataType::kF32 && !half;
  for (size_t i = 0; i < values.size(); ++i) {
    const double g = values[i], e = want.values[i];
    ASSERT_FALSE(std::isnan(g)) << c.name << " element " << i;
    if (exact) {
      ASSERT_EQ(g, e) << c.name << " element " << i;
    } else if (c.output == DataType::kBF16) {  // rounded to bf16: 8 significant bits
      ASSERT_NEAR(g, e, std::fabs(e) * 0x1.0p-8) << c.name << " element " << i;
      const auto f = static_cast<float>(g);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      ASSERT_EQ(bits & 0xFFFFu, 0u) << c.name << ": " << g << " is not a bf16 value";
    } else if (c.output == DataType::kF16) {  // 11 significant bits
      ASSERT_NEAR(g, e, std::fabs(e) * 0x1.0p-11) << c.name << " element " << i;
    } else {
      ASSERT_NEAR(g, e, 1e-5 + 1e-4 * std::fabs(e)) << c.name << " element " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, GenericCpu, ::testing::ValuesIn(generic_cases()),
                         [](const ::testing::TestParamInfo<GenericCase>& param) { return param.param.name; });

TEST(GenericCpu, TheTableCoversEveryOpAndCode) {
  std::vector<bool> kinds(ir::kMaxOpKind + 1, false);
  std::vector<bool> unary(ir::kMaxUnaryCode + 1, false), binary(ir::kMaxBinaryCode + 1, false);
  std::vector<bool> reduce(ir::kMaxReduceCode + 1, false);
  std::vector<bool> ranks(6, false);
  for (const GenericCase& c : generic_cases()) {
    kinds[static_cast<size_t>(c.kind)] = true;
    if (c.kind == OpKind::kUnary) unary[static_cast<size_t>(c.attrs.code)] = true;
    if (c.kind == OpKind::kBinary) binary[static_cast<size_t>(c.attrs.code)] = true;
    if (c.kind == OpKind::kReduce) reduce[static_cast<size_t>(c.attrs.code)] = true;
    for (const TensorSpec& s : c.inputs) ranks[static_cast<size_t>(s.dims.rank())] = true;
    // Rank 0 is no input's (an engine input has a dim): outputs of rank 0 count.
    const CaseNetwork cn = make_case_network(c);
    std::vector<Dims> input_dims, dims;
    for (const ir::InputSpec& in : cn.network.inputs) input_dims.push_back(in.dims);
    ASSERT_TRUE(ir::infer_shapes(cn.network, input_dims, dims).ok()) << c.name;
    ranks[static_cast<size_t>(dims[static_cast<size_t>(cn.network.outputs[0])].rank())] = true;
  }
  for (uint32_t k = static_cast<uint32_t>(OpKind::kUnary); k <= ir::kMaxOpKind; ++k) EXPECT_TRUE(kinds[k]) << k;
  for (size_t i = 1; i < unary.size(); ++i) EXPECT_TRUE(unary[i]) << "unary " << i;
  for (size_t i = 1; i < binary.size(); ++i) EXPECT_TRUE(binary[i]) << "binary " << i;
  for (size_t i = 1; i < reduce.size(); ++i) EXPECT_TRUE(reduce[i]) << "reduce " << i;
  for (size_t r = 0; r < ranks.size(); ++r) EXPECT_TRUE(ranks[r]) << "rank " << r;
}

// ---- errors ------------------------------------------------------------------------------------

std::string error_of(const GenericCase& c) {
  Result<CaseOutput> got = run_generic_case(c, DeviceKind::kCpu);
  EXPECT_FALSE(got.ok()) << c.name;
  return got.ok() ? "" : got.status().message();
}

TEST(GenericCpuErrors, ShapeMismatchNamesTheNodeAndDims) {
  const GenericCase c{"mm", OpKind::kMatmul, {}, {{DataType::kF32, {2, 3, 5}}, {DataType::kF32, {4, 6}}},
                      {},   DataType::kF32};
  EXPECT_NE(error_of(c).find("node 0 'mm' (matmul): a [2, 3, 5] and b [4, 6] do not multiply: K 5 vs 4"),
            std::string::npos)
      << error_of(c);
  const GenericCase add{"sum", OpKind::kBinary, {}, {{DataType::kF32, {2, 3}}, {DataType::kF32, {4}}},
                        {},    DataType::kF32};
  GenericCase b = add;
  b.attrs.code = 1;
  EXPECT_NE(error_of(b).find("node 0 'sum' (binary): a [2, 3] and b [4] do not broadcast"), std::string::npos)
      << error_of(b);
}

TEST(GenericCpuErrors, BadPermNamesTheNode) {
  GenericCase c{"tr", OpKind::kPermute, {}, {{DataType::kF32, {2, 3}}}, {}, DataType::kF32};
  c.attrs.ints = {0, 0};
  EXPECT_NE(error_of(c).find("node 0 'tr' (permute): perm [0, 0] is not a permutation"), std::string::npos)
      << error_of(c);
  c.attrs.ints = {1, 0, 2};
  EXPECT_NE(error_of(c).find("node 0 'tr' (permute): perm has 3 entries but x [2, 3] has rank 2"), std::string::npos)
      << error_of(c);
}

TEST(GenericCpuErrors, BoolMisuseNamesTheNode) {
  GenericCase c{"e", OpKind::kUnary, {}, {{DataType::kBool, {4}}}, {}, DataType::kBool};
  c.attrs.code = static_cast<int32_t>(ir::UnaryCode::kExp);
  EXPECT_NE(error_of(c).find("node 0 'e' (unary): exp takes f32, not bool"), std::string::npos) << error_of(c);
  GenericCase add{"plus", OpKind::kBinary, {}, {{DataType::kBool, {4}}, {DataType::kBool, {4}}}, {}, DataType::kBool};
  add.attrs.code = static_cast<int32_t>(ir::BinaryCode::kAdd);
  EXPECT_NE(error_of(add).find("node 0 'plus' (binary): add takes f32, i32 or i64, not bool"), std::string::npos)
      << error_of(add);
  GenericCase where{"w", OpKind::kWhere, {}, {{DataType::kF32, {4}}, {DataType::kF32, {4}}, {DataType::kF32, {4}}},
                    {},  DataType::kF32};
  EXPECT_NE(error_of(where).find("node 0 'w' (where): cond must be bool, not f32"), std::string::npos)
      << error_of(where);
}

TEST(GenericCpuErrors, BadIndexIsAnErrorOfTheCallNamingTheNode) {
  const GenericCase c{"pick", OpKind::kIndexSelect,
                      {},     {{DataType::kF32, {5, 4}}, {DataType::kI64, {16}, Values::kIndex, 100}},
                      {},     DataType::kF32};
  const std::string e = error_of(c);
  EXPECT_NE(e.find("pick"), std::string::npos) << e;
  EXPECT_NE(e.find("index_select: index "), std::string::npos) << e;
  EXPECT_NE(e.find("is outside [-5, 5) of axis 0"), std::string::npos) << e;
}

TEST(GenericCpuErrors, IntegerDivisionByZeroNamesTheNode) {
  GenericCase c{"quot", OpKind::kBinary, {}, {{DataType::kI32, {3, 64}}, {DataType::kI32, {64}}}, {}, DataType::kI32};
  c.attrs.code = static_cast<int32_t>(ir::BinaryCode::kDiv);
  // 64 uniform integers in [-5, 5]: this seed holds a 0 (checked below).
  const Doubles divisor = to_doubles(make_values(c.inputs[1], case_seed(c, 1)), DataType::kI32);
  if (std::find(divisor.begin(), divisor.end(), 0.0) == divisor.end()) GTEST_SKIP() << "no zero divisor drawn";
  const std::string e = error_of(c);
  EXPECT_NE(e.find("quot"), std::string::npos) << e;
  EXPECT_NE(e.find("integer division by zero"), std::string::npos) << e;
}

// The kernels write nothing when the call fails.
TEST(GenericCpuErrors, FailedKernelsWriteNothing) {
  const float x[6] = {1, 2, 3, 4, 5, 6};
  const int64_t bad[2] = {1, 3};
  float y[4] = {-7, -7, -7, -7};
  const cpu::In xin{x, Dims{3, 2}, DataType::kF32};
  const cpu::In index{bad, Dims{2}, DataType::kI64};
  EXPECT_FALSE(cpu::index_select(xin, index, cpu::Out{y, Dims{2, 2}, DataType::kF32}, 0).ok());
  const cpu::In gidx{bad, Dims{2, 1}, DataType::kI64};
  EXPECT_FALSE(cpu::gather(xin, gidx, cpu::Out{y, Dims{2, 1}, DataType::kF32}, 0).ok());
  const int32_t a[2] = {4, 9}, b[2] = {2, 0};
  int32_t q[2] = {-7, -7};
  EXPECT_FALSE(cpu::binary({a, Dims{2}, DataType::kI32}, {b, Dims{2}, DataType::kI32}, {q, Dims{2}, DataType::kI32},
                           static_cast<int32_t>(ir::BinaryCode::kDiv))
                   .ok());
  for (float v : y) EXPECT_EQ(v, -7.0f);
  for (int32_t v : q) EXPECT_EQ(v, -7);
}

TEST(GenericCpuErrors, IntegerEdgeCasesAreDefined) {
  const int32_t a[3] = {std::numeric_limits<int32_t>::min(), -7, 7}, b[3] = {-1, 2, -2};
  int32_t q[3] = {};
  ASSERT_TRUE(cpu::binary({a, Dims{3}, DataType::kI32}, {b, Dims{3}, DataType::kI32}, {q, Dims{3}, DataType::kI32},
                          static_cast<int32_t>(ir::BinaryCode::kDiv))
                  .ok());
  EXPECT_EQ(q[0], std::numeric_limits<int32_t>::min());  // wraps
  EXPECT_EQ(q[1], -3);                                   // truncates toward zero
  EXPECT_EQ(q[2], -3);
  const float big[4] = {3e9f, -3e9f, NAN, -2.7f};
  int32_t c[4] = {};
  cpu::cast({big, Dims{4}, DataType::kF32}, {c, Dims{4}, DataType::kI32}, DataType::kI32);
  EXPECT_EQ(c[0], std::numeric_limits<int32_t>::max());
  EXPECT_EQ(c[1], std::numeric_limits<int32_t>::min());
  EXPECT_EQ(c[2], 0);
  EXPECT_EQ(c[3], -2);
}

TEST(GenericCpu, ARowWithEveryKeyMaskedIsZero) {
  const float q[2] = {1, 2}, k[2] = {3, 4}, v[2] = {5, 6};
  const uint8_t mask[2] = {0, 0};
  float y[2] = {-1, -1}, scratch[2];
  const cpu::In m{mask, Dims{1, 2}, DataType::kBool};
  cpu::sdpa({q, Dims{1, 2}, DataType::kF32}, {k, Dims{2, 1}, DataType::kF32}, {v, Dims{2, 1}, DataType::kF32}, &m,
            {y, Dims{1, 1}, DataType::kF32}, 1.0f, false, scratch);
  EXPECT_EQ(y[0], 0.0f);
}

}  // namespace
}  // namespace gearbox::testing
