// CPU kernels of the generic math ops: elementwise unary / binary / where, reductions,
// softmax, matmul, scaled-dot-product attention and layer norm. Plain loops over
// tensor_walk.h's broadcast walk: the reference the CUDA device is checked against.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

#include "devices/cpu/kernels.h"
#include "devices/cpu/tensor_walk.h"
#include "ir/generic_shapes.h"
#include "ir/network.h"

namespace gearbox::cpu {
namespace {

using ir::BinaryCode;
using ir::ReduceCode;
using ir::UnaryCode;

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

float unary_f32(float x, UnaryCode code, float alpha, float beta) {
  switch (code) {
    case UnaryCode::kNeg: return -x;
    case UnaryCode::kExp: return std::exp(x);
    case UnaryCode::kLog: return std::log(x);
    case UnaryCode::kSqrt: return std::sqrt(x);
    case UnaryCode::kRsqrt: return 1.0f / std::sqrt(x);
    case UnaryCode::kTanh: return std::tanh(x);
    case UnaryCode::kSigmoid: return 1.0f / (1.0f + std::exp(-x));
    case UnaryCode::kSilu: return x / (1.0f + std::exp(-x));
    case UnaryCode::kGeluErf: return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f));
    case UnaryCode::kGeluTanh: {
      const float inner = 0.79788456080286536f * (x + 0.044715f * x * x * x);
      return 0.5f * x * (1.0f + std::tanh(inner));
    }
    case UnaryCode::kRelu: return std::isnan(x) ? x : std::max(x, 0.0f);
    case UnaryCode::kAbs: return std::fabs(x);
    case UnaryCode::kSin: return std::sin(x);
    case UnaryCode::kCos: return std::cos(x);
    case UnaryCode::kReciprocal: return 1.0f / x;
    case UnaryCode::kPowScalar: return std::pow(x, alpha);
    case UnaryCode::kAffine: return x * alpha + beta;
    case UnaryCode::kClamp: return std::isnan(x) ? x : std::min(std::max(x, alpha), beta);
    case UnaryCode::kErf: return std::erf(x);
    case UnaryCode::kLogicalNot: break;
  }
  return kNan;
}

template <typename T>
void unary_int(const T* x, T* y, int64_t n, UnaryCode code) {
  using U = std::make_unsigned_t<T>;
  for (int64_t i = 0; i < n; ++i) {
    // Through the unsigned type: -INT_MIN wraps to INT_MIN instead of overflowing.
    const U neg = static_cast<U>(U{0} - static_cast<U>(x[i]));
    y[i] = code == UnaryCode::kNeg || x[i] < 0 ? static_cast<T>(neg) : x[i];
  }
}

// Integer pow with wrapping products; a negative exponent truncates 1 / a^-e.
template <typename T>
T int_pow(T base, T exp) {
  using U = std::make_unsigned_t<T>;
  if (exp < 0) {
    if (base == 1) return 1;
    if (base == -1) return (exp & 1) != 0 ? T{-1} : T{1};
    return 0;
  }
  U result = 1;
  auto b = static_cast<U>(base);
  auto e = static_cast<U>(exp);
  while (e != 0) {
    if ((e & 1U) != 0) result = static_cast<U>(result * b);
    b = static_cast<U>(b * b);
    e >>= 1U;
  }
  return static_cast<T>(result);
}

template <typename T>
T arith(T a, T b, BinaryCode code) {
  if constexpr (std::is_floating_point_v<T>) {
    switch (code) {
      case BinaryCode::kAdd: return a + b;
      case BinaryCode::kSub: return a - b;
      case BinaryCode::kMul: return a * b;
      case BinaryCode::kDiv: return a / b;
      case BinaryCode::kMaximum: return std::isnan(a) || std::isnan(b) ? kNan : std::max(a, b);
      case BinaryCode::kMinimum: return std::isnan(a) || std::isnan(b) ? kNan : std::min(a, b);
      case BinaryCode::kPow: return std::pow(a, b);
      default: return kNan;
    }
  } else {
    using U = std::make_unsigned_t<T>;
    const auto ua = static_cast<U>(a), ub = static_cast<U>(b);
    switch (code) {
      case BinaryCode::kAdd: return static_cast<T>(static_cast<U>(ua + ub));
      case BinaryCode::kSub: return static_cast<T>(static_cast<U>(ua - ub));
      case BinaryCode::kMul: return static_cast<T>(static_cast<U>(ua * ub));
      case BinaryCode::kDiv:  // the divisor is checked non-zero; MIN / -1 wraps to MIN
        return b == -1 ? static_cast<T>(static_cast<U>(U{0} - ua)) : static_cast<T>(a / b);
      case BinaryCode::kMaximum: return std::max(a, b);
      case BinaryCode::kMinimum: return std::min(a, b);
      case BinaryCode::kPow: return int_pow(a, b);
      default: return 0;
    }
  }
}

template <typename T>
bool compare(T a, T b, BinaryCode code) {
  switch (code) {
    case BinaryCode::kEq: return a == b;
    case BinaryCode::kNe: return a != b;
    case BinaryCode::kLt: return a < b;
    case BinaryCode::kLe: return a <= b;
    case BinaryCode::kGt: return a > b;
    case BinaryCode::kGe: return a >= b;
    default: return false;
  }
}

template <typename T>
void binary_typed(const In& a, const In& b, const Out& y, BinaryCode code) {
  const int32_t rank = y.dims.rank();
  const std::array<std::vector<int64_t>, 2> strides = {ir::broadcast_strides(a.dims, rank),
                                                       ir::broadcast_strides(b.dims, rank)};
  const auto* pa = static_cast<const T*>(a.data);
  const auto* pb = static_cast<const T*>(b.data);
  const int32_t c = static_cast<int32_t>(code);
  if (ir::binary_code_compares(c)) {
    auto* py = static_cast<uint8_t*>(y.data);
    walk(y.dims, strides,
         [&](int64_t i, const std::array<int64_t, 2>& o) { py[i] = compare(pa[o[0]], pb[o[1]], code) ? 1 : 0; });
  } else if (ir::binary_code_logical(c)) {
    auto* py = static_cast<uint8_t*>(y.data);
    const bool is_and = code == BinaryCode::kLogicalAnd;
    walk(y.dims, strides, [&](int64_t i, const std::array<int64_t, 2>& o) {
      const bool l = pa[o[0]] != 0, r = pb[o[1]] != 0;
      py[i] = (is_and ? (l && r) : (l || r)) ? 1 : 0;
    });
  } else if constexpr (!std::is_same_v<T, uint8_t>) {  // arithmetic: never on bool (validated)
    auto* py = static_cast<T*>(y.data);
    walk(y.dims, strides, [&](int64_t i, const std::array<int64_t, 2>& o) { py[i] = arith(pa[o[0]], pb[o[1]], code); });
  }
}

template <typename T>
bool holds_zero(const In& t) {
  const auto* p = static_cast<const T*>(t.data);
  const int64_t n = t.dims.volume();
  for (int64_t i = 0; i < n; ++i) {
    if (p[i] == 0) return true;
  }
  return false;
}

}  // namespace

void unary(const In& x, const Out& y, int32_t code, float alpha, float beta) {
  const auto c = static_cast<UnaryCode>(code);
  const int64_t n = x.dims.volume();
  if (x.dtype == DataType::kI32)
    return unary_int(static_cast<const int32_t*>(x.data), static_cast<int32_t*>(y.data), n, c);
  if (x.dtype == DataType::kI64)
    return unary_int(static_cast<const int64_t*>(x.data), static_cast<int64_t*>(y.data), n, c);
  if (x.dtype == DataType::kBool) {
    const auto* px = static_cast<const uint8_t*>(x.data);
    auto* py = static_cast<uint8_t*>(y.data);
    for (int64_t i = 0; i < n; ++i) py[i] = px[i] != 0 ? 0 : 1;
    return;
  }
  const auto* px = static_cast<const float*>(x.data);
  auto* py = static_cast<float*>(y.data);
  for (int64_t i = 0; i < n; ++i) py[i] = unary_f32(px[i], c, alpha, beta);
}

Status binary(const In& a, const In& b, const Out& y, int32_t code) {
  const auto c = static_cast<BinaryCode>(code);
  if (c == BinaryCode::kDiv && y.dims.volume() > 0 &&
      ((b.dtype == DataType::kI32 && holds_zero<int32_t>(b)) ||
       (b.dtype == DataType::kI64 && holds_zero<int64_t>(b)))) {
    return invalid_argument("integer division by zero: the divisor " + b.dims.to_string() + " holds a 0");
  }
  switch (a.dtype) {
    case DataType::kI32: binary_typed<int32_t>(a, b, y, c); break;
    case DataType::kI64: binary_typed<int64_t>(a, b, y, c); break;
    case DataType::kBool: binary_typed<uint8_t>(a, b, y, c); break;
    default: binary_typed<float>(a, b, y, c); break;
  }
  return {};
}

void reduce(const In& x, const Out& y, int32_t code, std::span<const int64_t> axes) {
  const auto c = static_cast<ReduceCode>(code);
  const int32_t rank = x.dims.rank();
  std::vector<bool> reduced(static_cast<size_t>(rank), axes.empty());
  for (int64_t ax : axes) reduced[static_cast<size_t>(ax)] = true;
  // Strides into y for each of x's dims (0 on a reduced dim), y's dims kept or dropped.
  std::vector<int64_t> kept;
  int64_t count = 1;
  for (int32_t d = 0; d < rank; ++d) {
    if (reduced[static_cast<size_t>(d)])
      count *= x.dims[d];
    else
      kept.push_back(x.dims[d]);
  }
  const std::vector<int64_t> kept_strides = row_major_strides(Dims(std::span<const int64_t>(kept)));
  std::array<std::vector<int64_t>, 1> strides = {std::vector<int64_t>(static_cast<size_t>(rank), 0)};
  for (int32_t d = 0, k = 0; d < rank; ++d) {
    if (!reduced[static_cast<size_t>(d)]) strides[0][static_cast<size_t>(d)] = kept_strides[static_cast<size_t>(k++)];
  }
  auto* py = static_cast<float*>(y.data);
  const auto* px = static_cast<const float*>(x.data);
  const int64_t outs = y.dims.volume();
  const float init = c == ReduceCode::kAmax ? -kInf : c == ReduceCode::kAmin ? kInf : 0.0f;
  std::fill(py, py + outs, init);
  walk(x.dims, strides, [&](int64_t i, const std::array<int64_t, 1>& o) {
    float& acc = py[o[0]];
    const float v = px[i];
    switch (c) {
      case ReduceCode::kAmax: acc = std::isnan(acc) || std::isnan(v) ? kNan : std::max(acc, v); break;
      case ReduceCode::kAmin: acc = std::isnan(acc) || std::isnan(v) ? kNan : std::min(acc, v); break;
      default: acc += v; break;
    }
  });
  if (c == ReduceCode::kMean) {
    for (int64_t i = 0; i < outs; ++i) py[i] = count > 0 ? py[i] / static_cast<float>(count) : kNan;
  }
}

void softmax(const In& x, const Out& y, int32_t axis, bool log) {
  const int64_t outer = extent_product(x.dims, 0, axis);
  const int64_t n = x.dims[axis];
  const int64_t inner = extent_product(x.dims, axis + 1, x.dims.rank());
  const auto* px = static_cast<const float*>(x.data);
  auto* py = static_cast<float*>(y.data);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t in = 0; in < inner; ++in) {
      const int64_t base = o * n * inner + in;
      float mx = -kInf;
      for (int64_t j = 0; j < n; ++j) mx = std::max(mx, px[base + j * inner]);
      float sum = 0.0f;
      for (int64_t j = 0; j < n; ++j) sum += std::exp(px[base + j * inner] - mx);
      const float log_sum = std::log(sum);
      for (int64_t j = 0; j < n; ++j) {
        const float shifted = px[base + j * inner] - mx;
        py[base + j * inner] = log ? shifted - log_sum : std::exp(shifted) / sum;
      }
    }
  }
}

void matmul(const In& a, const In& b, const Out& y) {
  const int32_t rank = y.dims.rank();
  const int64_t m = y.dims[rank - 2], n = y.dims[rank - 1], k = a.dims[a.dims.rank() - 1];
  // Batch dims only: walk them with strides counted in matrices.
  const Dims batch(y.dims.extents().subspan(0, static_cast<size_t>(rank - 2)));
  const Dims a_batch(a.dims.extents().subspan(0, static_cast<size_t>(a.dims.rank() - 2)));
  const Dims b_batch(b.dims.extents().subspan(0, static_cast<size_t>(b.dims.rank() - 2)));
  std::array<std::vector<int64_t>, 2> strides = {ir::broadcast_strides(a_batch, batch.rank()),
                                                 ir::broadcast_strides(b_batch, batch.rank())};
  const auto* pa = static_cast<const float*>(a.data);
  const auto* pb = static_cast<const float*>(b.data);
  auto* py = static_cast<float*>(y.data);
  const auto one = [&](int64_t bi, int64_t ao, int64_t bo) {
    const float* am = pa + ao * m * k;
    const float* bm = pb + bo * k * n;
    float* ym = py + bi * m * n;
    for (int64_t i = 0; i < m; ++i) {
      float* row = ym + i * n;
      std::fill(row, row + n, 0.0f);
      for (int64_t kk = 0; kk < k; ++kk) {
        const float av = am[i * k + kk];
        const float* brow = bm + kk * n;
        for (int64_t j = 0; j < n; ++j) row[j] += av * brow[j];
      }
    }
  };
  if (batch.rank() == 0) return one(0, 0, 0);
  walk(batch, strides, [&](int64_t i, const std::array<int64_t, 2>& o) { one(i, o[0], o[1]); });
}

int64_t sdpa_scratch_floats(int64_t lk) { return std::max<int64_t>(lk, 1); }

void sdpa(const In& q, const In& k, const In& v, const In* mask, const Out& y, float scale, bool causal,
          float* scratch) {
  const int32_t rank = y.dims.rank();
  const int64_t lq = q.dims[q.dims.rank() - 2], d = q.dims[q.dims.rank() - 1];
  const int64_t lk = k.dims[k.dims.rank() - 2], dv = v.dims[v.dims.rank() - 1];
  const Dims batch(y.dims.extents().subspan(0, static_cast<size_t>(rank - 2)));
  const auto batch_of = [](const Dims& t) { return Dims(t.extents().subspan(0, static_cast<size_t>(t.rank() - 2))); };
  // Mask strides over batch + [Lq, Lk], in elements; q/k/v strides over batch, in matrices.
  std::vector<int64_t> mask_full;
  if (mask != nullptr) {
    std::vector<int64_t> scores(batch.extents().begin(), batch.extents().end());
    scores.push_back(lq);
    scores.push_back(lk);
    mask_full = ir::broadcast_strides(mask->dims, static_cast<int32_t>(scores.size()));
  }
  std::array<std::vector<int64_t>, 4> strides = {
      ir::broadcast_strides(batch_of(q.dims), batch.rank()), ir::broadcast_strides(batch_of(k.dims), batch.rank()),
      ir::broadcast_strides(batch_of(v.dims), batch.rank()),
      mask != nullptr ? std::vector<int64_t>(mask_full.begin(), mask_full.end() - 2)
                      : std::vector<int64_t>(static_cast<size_t>(batch.rank()), 0)};
  const int64_t mask_row = mask != nullptr ? mask_full[mask_full.size() - 2] : 0;
  const int64_t mask_col = mask != nullptr ? mask_full.back() : 0;
  const auto* pq = static_cast<const float*>(q.data);
  const auto* pk = static_cast<const float*>(k.data);
  const auto* pv = static_cast<const float*>(v.data);
  auto* py = static_cast<float*>(y.data);
  const auto one = [&](int64_t bi, const std::array<int64_t, 4>& o) {
    const float* qm = pq + o[0] * lq * d;
    const float* km = pk + o[1] * lk * d;
    const float* vm = pv + o[2] * lk * dv;
    float* ym = py + bi * lq * dv;
    for (int64_t i = 0; i < lq; ++i) {
      float mx = -kInf;
      for (int64_t j = 0; j < lk; ++j) {
        float s = -kInf;
        bool keep = !causal || j <= i;
        float add = 0.0f;
        if (mask != nullptr) {
          const int64_t at = o[3] + i * mask_row + j * mask_col;
          if (mask->dtype == DataType::kBool) {
            keep = keep && static_cast<const uint8_t*>(mask->data)[at] != 0;
          } else {
            add = static_cast<const float*>(mask->data)[at];
          }
        }
        if (keep) {
          float dot = 0.0f;
          for (int64_t c = 0; c < d; ++c) dot += qm[i * d + c] * km[j * d + c];
          s = dot * scale + add;
        }
        scratch[j] = s;
        mx = std::max(mx, s);
      }
      float* out = ym + i * dv;
      std::fill(out, out + dv, 0.0f);
      if (mx == -kInf) continue;  // every key excluded
      float sum = 0.0f;
      for (int64_t j = 0; j < lk; ++j) {
        scratch[j] = std::exp(scratch[j] - mx);
        sum += scratch[j];
      }
      for (int64_t j = 0; j < lk; ++j) {
        const float p = scratch[j] / sum;
        for (int64_t c = 0; c < dv; ++c) out[c] += p * vm[j * dv + c];
      }
    }
  };
  if (batch.rank() == 0) return one(0, {0, 0, 0, 0});
  walk(batch, strides, one);
}

void layer_norm(const In& x, const float* w, const float* b, const Out& y, float eps) {
  const int64_t f = x.dims[x.dims.rank() - 1];
  const int64_t rows = f > 0 ? x.dims.volume() / f : 0;
  const auto* px = static_cast<const float*>(x.data);
  auto* py = static_cast<float*>(y.data);
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = px + r * f;
    float* out = py + r * f;
    float mean = 0.0f;
    for (int64_t i = 0; i < f; ++i) mean += row[i];
    mean /= static_cast<float>(f);
    float var = 0.0f;
    for (int64_t i = 0; i < f; ++i) var += (row[i] - mean) * (row[i] - mean);
    var /= static_cast<float>(f);
    const float inv = 1.0f / std::sqrt(var + eps);
    for (int64_t i = 0; i < f; ++i) {
      out[i] = (row[i] - mean) * inv * (w != nullptr ? w[i] : 1.0f) + (b != nullptr ? b[i] : 0.0f);
    }
  }
}

}  // namespace gearbox::cpu
