// CPU attention: the KV-cache write and two tactics for causal (optionally sliding-window)
// grouped-query attention over the caches.
//
//   q       [T, heads * hd]          out [T, heads * hd]
//   caches  [max_ctx, kv_heads * hd] (K and V), row j holds the token at position j
//
// Dot products and row updates use 4-float GNU vectors for the reason given in
// kernels_linear.cpp: scalar loops vectorize well under only one of gcc and clang at -O2.

#include "devices/cpu/kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "core/check.h"
#include "devices/cpu/vec4.h"

namespace gearbox::cpu {
namespace {

float dot(const float* __restrict a, const float* __restrict b, int64_t n) {
  Vec4 lo = {}, hi = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    lo += load4(a + i) * load4(b + i);
    hi += load4(a + i + 4) * load4(b + i + 4);
  }
  float sum = hsum(lo + hi);
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

/// y[:n] += alpha * x[:n].
void axpy(float* __restrict y, float alpha, const float* __restrict x, int64_t n) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) store4(y + i, load4(y + i) + alpha * load4(x + i));
  for (; i < n; ++i) y[i] += alpha * x[i];
}

void scale(float* y, float s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] *= s;
}

bool is_index_type(DataType type) { return type == DataType::kI32 || type == DataType::kI64; }

int64_t position_at(const void* positions, DataType type, int64_t t) {
  return type == DataType::kI64 ? static_cast<const int64_t*>(positions)[t] : static_cast<const int32_t*>(positions)[t];
}

/// The first key a query at position p sees.
int64_t window_start(int64_t p, int64_t window) { return window > 0 ? std::max<int64_t>(0, p - window + 1) : 0; }

void check_shape(const AttentionShape& s, DataType pos_type) {
  GEARBOX_CHECK(s.T >= 0 && s.heads > 0 && s.kv_heads > 0 && s.head_dim > 0 && s.window >= 0);
  GEARBOX_CHECK(s.heads % s.kv_heads == 0);
  GEARBOX_CHECK(is_index_type(pos_type));
}

// Tiled tactic: a tile is up to kTileTokens tokens times the heads of one kv group, all
// reading the same K/V rows; keys go in blocks of kKeyBlock, whose K and V rows (2 * 64 *
// hd floats: 40 KiB at hd 80) stay in L1 or L2 while every row of the tile uses them. The
// rows are processed kRowGroup at a time so that one load of a K or V vector serves four
// rows and the accumulators stay in registers.
constexpr int64_t kTileTokens = 16;
constexpr int64_t kKeyBlock = 64;
constexpr int64_t kRowGroup = 4;

int64_t tile_rows(const AttentionShape& s) { return kTileTokens * (s.heads / s.kv_heads); }

/// s[g][j - jb] = dot(q[g], k row j) * scale for kRowGroup query rows and keys [jb, je).
void group_scores(const float* const (&q)[kRowGroup], const float* k, int64_t kv_width, int64_t hd, int64_t jb,
                  int64_t je, float scale, float* const (&s)[kRowGroup]) {
  for (int64_t j = jb; j < je; ++j) {
    const float* kj = k + j * kv_width;
    Vec4 a0 = {}, b0 = {}, a1 = {}, b1 = {}, a2 = {}, b2 = {}, a3 = {}, b3 = {};
    int64_t d = 0;
    for (; d + 8 <= hd; d += 8) {
      const Vec4 lo = load4(kj + d);
      const Vec4 hi = load4(kj + d + 4);
      a0 += load4(q[0] + d) * lo;
      b0 += load4(q[0] + d + 4) * hi;
      a1 += load4(q[1] + d) * lo;
      b1 += load4(q[1] + d + 4) * hi;
      a2 += load4(q[2] + d) * lo;
      b2 += load4(q[2] + d + 4) * hi;
      a3 += load4(q[3] + d) * lo;
      b3 += load4(q[3] + d + 4) * hi;
    }
    float dots[kRowGroup] = {hsum(a0 + b0), hsum(a1 + b1), hsum(a2 + b2), hsum(a3 + b3)};
    for (; d < hd; ++d) {
      for (int64_t g = 0; g < kRowGroup; ++g) dots[g] += q[g][d] * kj[d];
    }
    for (int64_t g = 0; g < kRowGroup; ++g) s[g][j - jb] = dots[g] * scale;
  }
}

/// acc[g][:hd] += sum over keys j in [jb, je) of p[g][j - jb] * (v row j), for kRowGroup rows.
void group_accumulate(const float* const (&p)[kRowGroup], const float* v, int64_t kv_width, int64_t hd, int64_t jb,
                      int64_t je, float* const (&acc)[kRowGroup]) {
  int64_t c = 0;
  for (; c + 8 <= hd; c += 8) {  // 8 columns of 4 rows: 8 accumulators in registers
    Vec4 a0 = load4(acc[0] + c), b0 = load4(acc[0] + c + 4), a1 = load4(acc[1] + c), b1 = load4(acc[1] + c + 4);
    Vec4 a2 = load4(acc[2] + c), b2 = load4(acc[2] + c + 4), a3 = load4(acc[3] + c), b3 = load4(acc[3] + c + 4);
    for (int64_t j = jb; j < je; ++j) {
      const Vec4 lo = load4(v + j * kv_width + c);
      const Vec4 hi = load4(v + j * kv_width + c + 4);
      const int64_t i = j - jb;
      a0 += p[0][i] * lo;
      b0 += p[0][i] * hi;
      a1 += p[1][i] * lo;
      b1 += p[1][i] * hi;
      a2 += p[2][i] * lo;
      b2 += p[2][i] * hi;
      a3 += p[3][i] * lo;
      b3 += p[3][i] * hi;
    }
    store4(acc[0] + c, a0);
    store4(acc[0] + c + 4, b0);
    store4(acc[1] + c, a1);
    store4(acc[1] + c + 4, b1);
    store4(acc[2] + c, a2);
    store4(acc[2] + c + 4, b2);
    store4(acc[3] + c, a3);
    store4(acc[3] + c + 4, b3);
  }
  for (; c < hd; ++c) {
    for (int64_t g = 0; g < kRowGroup; ++g) {
      float sum = acc[g][c];
      for (int64_t j = jb; j < je; ++j) sum += p[g][j - jb] * v[j * kv_width + c];
      acc[g][c] = sum;
    }
  }
}

}  // namespace

Status kv_cache_write(const float* k, const float* v, const void* positions, DataType pos_type, int64_t T,
                      int64_t width, float* k_cache, float* v_cache, int64_t max_ctx) {
  if (!is_index_type(pos_type)) {
    return invalid_argument(std::string("positions must be i32 or i64, not ") + data_type_name(pos_type));
  }
  for (int64_t t = 0; t < T; ++t) {
    const int64_t p = position_at(positions, pos_type, t);
    if (p < 0 || p >= max_ctx) {
      return out_of_range("position " + std::to_string(p) + " of token " + std::to_string(t) +
                          " is outside the KV cache [0, " + std::to_string(max_ctx) + ")");
    }
  }
  for (int64_t t = 0; t < T; ++t) {
    const int64_t p = position_at(positions, pos_type, t);
    std::copy_n(k + t * width, width, k_cache + p * width);
    std::copy_n(v + t * width, width, v_cache + p * width);
  }
  return Status::ok_status();
}

int64_t attention_scratch_floats(const AttentionShape& shape, int64_t max_ctx) {
  GEARBOX_CHECK(shape.kv_heads > 0 && shape.heads % shape.kv_heads == 0 && shape.head_dim > 0);
  const int64_t rowwise = shape.window > 0 ? std::min(shape.window, max_ctx) : max_ctx;
  const int64_t tiled = tile_rows(shape) * (shape.head_dim + kKeyBlock + 2);
  return std::max(rowwise, tiled);
}

void attention_rowwise(const float* q, const float* k_cache, const float* v_cache, const void* positions,
                       DataType pos_type, float* out, const AttentionShape& shape, float* scratch) {
  check_shape(shape, pos_type);
  const int64_t hd = shape.head_dim;
  const int64_t group = shape.heads / shape.kv_heads;
  const int64_t q_width = shape.heads * hd;
  const int64_t kv_width = shape.kv_heads * hd;
  float* scores = scratch;  // [p - lo + 1]
  for (int64_t t = 0; t < shape.T; ++t) {
    const int64_t p = position_at(positions, pos_type, t);
    const int64_t lo = window_start(p, shape.window);
    for (int64_t h = 0; h < shape.heads; ++h) {
      const int64_t kv_offset = h / group * hd;
      const float* qh = q + t * q_width + h * hd;
      float max_score = -std::numeric_limits<float>::infinity();
      for (int64_t j = lo; j <= p; ++j) {
        const float s = dot(qh, k_cache + j * kv_width + kv_offset, hd) * shape.scale;
        scores[j - lo] = s;
        max_score = std::max(max_score, s);
      }
      float sum = 0.0f;
      float* oh = out + t * q_width + h * hd;
      std::fill_n(oh, hd, 0.0f);
      for (int64_t j = lo; j <= p; ++j) {
        const float e = std::exp(scores[j - lo] - max_score);
        sum += e;
        axpy(oh, e, v_cache + j * kv_width + kv_offset, hd);
      }
      scale(oh, 1.0f / sum, hd);
    }
  }
}

void attention_tiled(const float* q, const float* k_cache, const float* v_cache, const void* positions,
                     DataType pos_type, float* out, const AttentionShape& shape, float* scratch) {
  check_shape(shape, pos_type);
  const int64_t hd = shape.head_dim;
  const int64_t group = shape.heads / shape.kv_heads;
  const int64_t q_width = shape.heads * hd;
  const int64_t kv_width = shape.kv_heads * hd;
  // Tile row r is token r / group, query head kvh * group + r % group.
  const int64_t rows = tile_rows(shape);
  float* acc = scratch;            // [rows, hd]: unnormalized outputs
  float* probs = acc + rows * hd;  // [rows, kKeyBlock]: scores, then probabilities
  float* row_max = probs + rows * kKeyBlock;
  float* row_sum = row_max + rows;
  int64_t lo[kTileTokens];
  int64_t hi[kTileTokens];  // one past the last key

  for (int64_t t0 = 0; t0 < shape.T; t0 += kTileTokens) {
    const int64_t tokens = std::min(kTileTokens, shape.T - t0);
    int64_t keys_begin = std::numeric_limits<int64_t>::max();
    int64_t keys_end = 0;
    for (int64_t i = 0; i < tokens; ++i) {
      const int64_t p = position_at(positions, pos_type, t0 + i);
      lo[i] = window_start(p, shape.window);
      hi[i] = p + 1;
      keys_begin = std::min(keys_begin, lo[i]);
      keys_end = std::max(keys_end, hi[i]);
    }
    const int64_t used = tokens * group;
    // Rows [0, grouped) go kRowGroup at a time, the rest one by one.
    const int64_t grouped = used / kRowGroup * kRowGroup;
    for (int64_t kvh = 0; kvh < shape.kv_heads; ++kvh) {
      std::fill_n(acc, used * hd, 0.0f);
      std::fill_n(row_max, used, -std::numeric_limits<float>::infinity());
      std::fill_n(row_sum, used, 0.0f);
      const float* k_head = k_cache + kvh * hd;
      const float* v_head = v_cache + kvh * hd;
      auto q_row = [&](int64_t r) { return q + (t0 + r / group) * q_width + (kvh * group + r % group) * hd; };
      auto p_row = [&](int64_t r) { return probs + r * kKeyBlock; };
      auto acc_row = [&](int64_t r) { return acc + r * hd; };
      for (int64_t jb = keys_begin; jb < keys_end; jb += kKeyBlock) {
        const int64_t je = std::min(jb + kKeyBlock, keys_end);
        // 1. Scores of every row against every key of the block. Keys outside a row's own
        //    range are still cache rows below the tile's last position, so they hold data
        //    (the caller's contract); their scores are masked in step 2.
        for (int64_t r = 0; r < grouped; r += kRowGroup) {
          group_scores({q_row(r), q_row(r + 1), q_row(r + 2), q_row(r + 3)}, k_head, kv_width, hd, jb, je, shape.scale,
                       {p_row(r), p_row(r + 1), p_row(r + 2), p_row(r + 3)});
        }
        for (int64_t r = grouped; r < used; ++r) {
          for (int64_t j = jb; j < je; ++j) p_row(r)[j - jb] = dot(q_row(r), k_head + j * kv_width, hd) * shape.scale;
        }
        // 2. Online softmax: per row, mask, update the running max and sum, rescale what
        //    was accumulated under the old max, and turn scores into probabilities.
        for (int64_t r = 0; r < used; ++r) {
          float* pr = p_row(r);
          const int64_t j0 = std::max(jb, lo[r / group]);
          const int64_t j1 = std::min(je, hi[r / group]);
          if (j0 >= j1) {
            std::fill_n(pr, je - jb, 0.0f);
            continue;
          }
          const float block_max = *std::max_element(pr + (j0 - jb), pr + (j1 - jb));
          const float new_max = std::max(row_max[r], block_max);
          const float keep = std::exp(row_max[r] - new_max);  // 0 before the first key
          row_max[r] = new_max;
          float sum = 0.0f;
          for (int64_t j = jb; j < je; ++j) {
            const float e = j >= j0 && j < j1 ? std::exp(pr[j - jb] - new_max) : 0.0f;
            pr[j - jb] = e;
            sum += e;
          }
          row_sum[r] = row_sum[r] * keep + sum;
          if (keep != 1.0f) scale(acc_row(r), keep, hd);
        }
        // 3. acc += P V.
        for (int64_t r = 0; r < grouped; r += kRowGroup) {
          group_accumulate({p_row(r), p_row(r + 1), p_row(r + 2), p_row(r + 3)}, v_head, kv_width, hd, jb, je,
                           {acc_row(r), acc_row(r + 1), acc_row(r + 2), acc_row(r + 3)});
        }
        for (int64_t r = grouped; r < used; ++r) {
          for (int64_t j = jb; j < je; ++j) axpy(acc_row(r), p_row(r)[j - jb], v_head + j * kv_width, hd);
        }
      }
      for (int64_t r = 0; r < used; ++r) {
        float* o = out + (t0 + r / group) * q_width + (kvh * group + r % group) * hd;
        const float inv = 1.0f / row_sum[r];
        for (int64_t d = 0; d < hd; ++d) o[d] = acc_row(r)[d] * inv;
      }
    }
  }
}

}  // namespace gearbox::cpu
