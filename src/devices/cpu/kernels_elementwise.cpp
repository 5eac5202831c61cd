// CPU kernels for the row-local ops: embedding lookup, RMSNorm, RoPE and the elementwise
// gated activations and residual add. These are memory- or libm-bound, so they are plain
// loops; only the RMSNorm sum of squares spreads its reduction over several partial sums.

#include "devices/cpu/kernels.h"

#include <cmath>
#include <string>

#include "core/check.h"

namespace gearbox::cpu {
namespace {

bool is_index_type(DataType type) { return type == DataType::kI32 || type == DataType::kI64; }

int64_t index_at(const void* values, DataType type, int64_t i) {
  return type == DataType::kI64 ? static_cast<const int64_t*>(values)[i] : static_cast<const int32_t*>(values)[i];
}

Status not_an_index_type(const char* what, DataType type) {
  return invalid_argument(std::string(what) + " must be i32 or i64, not " + data_type_name(type));
}

float sum_of_squares(const float* x, int64_t n) {
  constexpr int64_t kLanes = 8;
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int64_t l = 0; l < kLanes; ++l) acc[l] += x[i + l] * x[i + l];
  }
  float sum = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  for (; i < n; ++i) sum += x[i] * x[i];
  return sum;
}

}  // namespace

Status embedding(const void* ids, DataType id_type, int64_t count, const float* table, int64_t vocab, int64_t hidden,
                 float scale, float* out) {
  if (!is_index_type(id_type)) return not_an_index_type("token ids", id_type);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t id = index_at(ids, id_type, i);
    if (id < 0 || id >= vocab) {
      return invalid_argument("token id " + std::to_string(id) + " at position " + std::to_string(i) +
                              " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
    }
  }
  for (int64_t i = 0; i < count; ++i) {
    const float* row = table + index_at(ids, id_type, i) * hidden;
    float* o = out + i * hidden;
    for (int64_t d = 0; d < hidden; ++d) o[d] = row[d] * scale;
  }
  return Status::ok_status();
}

void rms_norm(const float* x, const float* w, float* y, int64_t rows, int64_t dim, float eps, float offset) {
  GEARBOX_CHECK(rows >= 0 && dim > 0);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;  // may be xr: each element is read before it is written
    const float inv_rms = 1.0f / std::sqrt(sum_of_squares(xr, dim) / static_cast<float>(dim) + eps);
    for (int64_t i = 0; i < dim; ++i) yr[i] = xr[i] * inv_rms * (w[i] + offset);
  }
}

float rope_inv_freq(float theta, int64_t i, int64_t head_dim) {
  return 1.0f / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(head_dim));
}

namespace {

// Rotate-half RoPE with inv_freq_i = freq(i) and the angle (float(pos) * position_scale) *
// inv_freq_i; angles and cos/sin in f32, as HF computes them.
template <typename Freq>
Status rotate(const float* x, const void* positions, DataType pos_type, float* y, int64_t T, int64_t heads,
              int64_t head_dim, Freq freq, float position_scale) {
  if (!is_index_type(pos_type)) return not_an_index_type("positions", pos_type);
  if (head_dim <= 0 || head_dim % 2 != 0) {
    return invalid_argument("rotate-half RoPE needs a positive, even head_dim; got " + std::to_string(head_dim));
  }
  for (int64_t t = 0; t < T; ++t) {
    const int64_t p = index_at(positions, pos_type, t);
    if (p < 0) {
      return invalid_argument("position " + std::to_string(p) + " of token " + std::to_string(t) + " is negative");
    }
  }
  const int64_t half = head_dim / 2;
  const int64_t width = heads * head_dim;
  for (int64_t t = 0; t < T; ++t) {
    const float pos = static_cast<float>(index_at(positions, pos_type, t)) * position_scale;
    const float* xt = x + t * width;
    float* yt = y + t * width;
    for (int64_t i = 0; i < half; ++i) {
      const float angle = pos * freq(i);
      const float c = std::cos(angle);
      const float s = std::sin(angle);
      for (int64_t h = 0; h < heads; ++h) {
        // Both inputs are read before either output is written, so y may be x.
        const float a = xt[h * head_dim + i];
        const float b = xt[h * head_dim + i + half];
        yt[h * head_dim + i] = a * c - b * s;
        yt[h * head_dim + i + half] = b * c + a * s;
      }
    }
  }
  return Status::ok_status();
}

}  // namespace

Status rope(const float* x, const void* positions, DataType pos_type, float* y, int64_t T, int64_t heads,
            int64_t head_dim, float theta) {
  const auto freq = [&](int64_t i) { return rope_inv_freq(theta, i, head_dim); };
  return rotate(x, positions, pos_type, y, T, heads, head_dim, freq, 1.0f);
}

Status rope_with_freqs(const float* x, const void* positions, DataType pos_type, float* y, int64_t T, int64_t heads,
                       int64_t head_dim, std::span<const float> inv_freq, float position_scale) {
  if (head_dim > 0 && static_cast<int64_t>(inv_freq.size()) != head_dim / 2) {
    return invalid_argument("RoPE needs " + std::to_string(head_dim / 2) + " inverse frequencies (head_dim / 2), got " +
                            std::to_string(inv_freq.size()));
  }
  const auto freq = [&](int64_t i) { return inv_freq[static_cast<size_t>(i)]; };
  return rotate(x, positions, pos_type, y, T, heads, head_dim, freq, position_scale);
}

void gelu_tanh_mul(const float* gate, const float* up, float* out, int64_t n) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = 0.5f * g * (1.0f + std::tanh(kSqrt2OverPi * (g + 0.044715f * g * g * g))) * up[i];
  }
}

void silu_mul(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void add(const float* a, const float* b, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

}  // namespace gearbox::cpu
