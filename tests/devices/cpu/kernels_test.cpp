// The CPU kernels against plain double-precision references written here from the op
// definitions (src/ir/network.h), over awkward shapes, with every tactic of an op checked
// against the same reference. Outputs are poisoned with NaN before each run and followed
// by sentinels; a NaN or Inf left in an output, or a changed sentinel, fails.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "devices/cpu/kernels.h"

namespace gearbox::cpu {
namespace {

// ---- helpers ------------------------------------------------------------------------------

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kSentinel = -12345.5f;
constexpr int64_t kGuard = 16;

/// Per-element bound |got - ref| <= atol + rtol * |ref|.
struct Tolerance {
  double atol = 0;
  double rtol = 0;
};
constexpr Tolerance kF32{1e-5, 1e-4};

std::vector<float> random_floats(std::mt19937& rng, int64_t n) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

/// n floats poisoned with NaN, followed by kGuard sentinels that a kernel must not touch.
class Guarded {
 public:
  explicit Guarded(int64_t n) : n_(n), buf_(static_cast<size_t>(n + kGuard), kNaN) {
    std::fill(buf_.begin() + n, buf_.end(), kSentinel);
  }
  explicit Guarded(const std::vector<float>& init) : Guarded(static_cast<int64_t>(init.size())) {
    std::copy(init.begin(), init.end(), buf_.begin());
  }
  float* data() { return buf_.data(); }
  const float* data() const { return buf_.data(); }
  bool all_poison() const {
    return std::all_of(buf_.begin(), buf_.begin() + n_, [](float x) { return std::isnan(x); });
  }
  bool guards_intact() const {
    return std::all_of(buf_.begin() + n_, buf_.end(), [](float x) { return x == kSentinel; });
  }

 private:
  int64_t n_;
  std::vector<float> buf_;
};

::testing::AssertionResult matches(const float* got, const std::vector<double>& ref, Tolerance tol) {
  size_t bad = 0;
  std::ostringstream detail;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double err = std::abs(static_cast<double>(got[i]) - ref[i]);
    if (!std::isfinite(got[i]) || !(err <= tol.atol + tol.rtol * std::abs(ref[i]))) {
      if (bad++ < 4) detail << "\n  [" << i << "] got " << got[i] << ", want " << ref[i] << " (error " << err << ")";
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << ref.size() << " elements out of tolerance" << detail.str();
}

/// Token ids or positions, stored as the kernel reads them.
struct Indices {
  Indices(DataType t, const std::vector<int64_t>& values) : type(t), i64(values) {
    for (int64_t v : values) i32.push_back(static_cast<int32_t>(v));
  }
  const void* data() const { return type == DataType::kI64 ? static_cast<const void*>(i64.data()) : i32.data(); }
  DataType type;
  std::vector<int64_t> i64;
  std::vector<int32_t> i32;
};

std::vector<int64_t> iota(int64_t start, int64_t count) {
  std::vector<int64_t> v(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) v[i] = start + i;
  return v;
}

constexpr DataType kIndexTypes[] = {DataType::kI32, DataType::kI64};

// ---- references ---------------------------------------------------------------------------

std::vector<double> ref_linear(const std::vector<float>& x, const std::vector<float>& w, const float* bias, int64_t M,
                               int64_t N, int64_t K) {
  std::vector<double> y(static_cast<size_t>(M * N));
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      double sum = bias != nullptr ? bias[n] : 0.0;
      for (int64_t k = 0; k < K; ++k) sum += static_cast<double>(x[m * K + k]) * w[n * K + k];
      y[m * N + n] = sum;
    }
  }
  return y;
}

std::vector<double> ref_rms_norm(const std::vector<float>& x, const std::vector<float>& w, int64_t rows, int64_t dim,
                                 double eps, double offset) {
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double sq = 0;
    for (int64_t i = 0; i < dim; ++i) sq += static_cast<double>(x[r * dim + i]) * x[r * dim + i];
    const double inv = 1.0 / std::sqrt(sq / static_cast<double>(dim) + eps);
    for (int64_t i = 0; i < dim; ++i) y[r * dim + i] = x[r * dim + i] * inv * (w[i] + offset);
  }
  return y;
}

// The angle is f32 by definition (HF computes inv_freq and pos * inv_freq in f32, and at
// position 4096 that rounding moves the angle by ~1e-4), so the reference forms the same
// f32 angle and takes cos/sin and the rotation in double.
std::vector<double> ref_rope(const std::vector<float>& x, const std::vector<int64_t>& pos, int64_t heads, int64_t hd,
                             float theta) {
  std::vector<double> y(x.size());
  const int64_t half = hd / 2;
  for (size_t t = 0; t < pos.size(); ++t) {
    for (int64_t i = 0; i < half; ++i) {
      const float inv_freq = 1.0f / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(hd));
      const double angle = static_cast<float>(pos[t]) * inv_freq;
      for (int64_t h = 0; h < heads; ++h) {
        const size_t base = (t * heads + h) * hd;
        const double a = x[base + i], b = x[base + i + half];
        y[base + i] = a * std::cos(angle) - b * std::sin(angle);
        y[base + i + half] = b * std::cos(angle) + a * std::sin(angle);
      }
    }
  }
  return y;
}

/// k_all, v_all: [max_ctx, kv_heads * hd], the K and V of the token at each position.
std::vector<double> ref_attention(const std::vector<float>& q, const std::vector<float>& k_all,
                                  const std::vector<float>& v_all, const std::vector<int64_t>& pos,
                                  const AttentionShape& s) {
  const int64_t hd = s.head_dim, kv_width = s.kv_heads * hd;
  std::vector<double> out(q.size());
  for (int64_t t = 0; t < s.T; ++t) {
    const int64_t p = pos[t];
    const int64_t lo = s.window > 0 ? std::max<int64_t>(0, p - s.window + 1) : 0;
    for (int64_t h = 0; h < s.heads; ++h) {
      const int64_t kv = h / (s.heads / s.kv_heads);
      const float* qh = &q[(t * s.heads + h) * hd];
      std::vector<double> score;
      for (int64_t j = lo; j <= p; ++j) {
        double dot = 0;
        for (int64_t d = 0; d < hd; ++d) dot += static_cast<double>(qh[d]) * k_all[j * kv_width + kv * hd + d];
        score.push_back(dot * s.scale);
      }
      const double max = *std::max_element(score.begin(), score.end());
      double sum = 0;
      for (double& e : score) sum += (e = std::exp(e - max));
      for (int64_t d = 0; d < hd; ++d) {
        double o = 0;
        for (int64_t j = lo; j <= p; ++j) o += score[j - lo] * v_all[j * kv_width + kv * hd + d];
        out[(t * s.heads + h) * hd + d] = o / sum;
      }
    }
  }
  return out;
}

// ---- embedding ----------------------------------------------------------------------------

TEST(Embedding, MatchesReference) {
  std::mt19937 rng(1);
  constexpr int64_t kVocab = 300;
  for (DataType type : kIndexTypes) {
    for (int64_t count : {1, 5, 13, 129}) {
      for (int64_t hidden : {1, 3, 17, 130}) {
        const std::vector<float> table = random_floats(rng, kVocab * hidden);
        std::vector<int64_t> ids = {0, kVocab - 1};  // both ends of the vocabulary
        std::uniform_int_distribution<int64_t> pick(0, kVocab - 1);
        while (static_cast<int64_t>(ids.size()) < count) ids.push_back(pick(rng));
        ids.resize(static_cast<size_t>(count));
        const float scale = hidden == 17 ? std::sqrt(17.0f) : 1.0f;
        std::vector<double> ref;
        for (int64_t id : ids) {
          for (int64_t d = 0; d < hidden; ++d) ref.push_back(static_cast<double>(table[id * hidden + d]) * scale);
        }
        Guarded out(count * hidden);
        const Indices idx(type, ids);
        ASSERT_TRUE(embedding(idx.data(), type, count, table.data(), kVocab, hidden, scale, out.data()).ok());
        EXPECT_TRUE(matches(out.data(), ref, kF32))
            << data_type_name(type) << " count " << count << " hidden " << hidden;
        EXPECT_TRUE(out.guards_intact());
      }
    }
  }
}

TEST(Embedding, RejectsIdsOutsideTheVocabularyAndWritesNothing) {
  constexpr int64_t kVocab = 2048, kHidden = 4, kCount = 5;
  const std::vector<float> table(kVocab * kHidden, 1.0f);
  for (DataType type : kIndexTypes) {
    for (int64_t bad : {kVocab, int64_t{9000}, int64_t{-1}}) {
      const Indices ids(type, {5, 0, kVocab - 1, bad, 7});
      Guarded out(kCount * kHidden);
      const Status s = embedding(ids.data(), type, kCount, table.data(), kVocab, kHidden, 1.0f, out.data());
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
      EXPECT_EQ(s.message(), "token id " + std::to_string(bad) + " at position 3 is outside the vocabulary [0, 2048)");
      EXPECT_TRUE(out.all_poison()) << "an invalid id must leave the output unwritten";
      EXPECT_TRUE(out.guards_intact());
    }
  }
  // An i64 id that would wrap to a valid i32 one, and ids that are not integers.
  const Indices huge(DataType::kI64, {int64_t{1} << 32});
  Guarded out(kHidden);
  EXPECT_EQ(embedding(huge.data(), DataType::kI64, 1, table.data(), kVocab, kHidden, 1.0f, out.data()).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(embedding(table.data(), DataType::kF32, 1, table.data(), kVocab, kHidden, 1.0f, out.data()).code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(out.all_poison());
}

// ---- rms_norm ------------------------------------------------------------------------------

TEST(RmsNorm, MatchesReferenceOutOfPlaceAndInPlace) {
  std::mt19937 rng(2);
  for (int64_t rows : {1, 5, 127}) {
    for (int64_t dim : {1, 3, 17, 64, 130}) {
      for (float offset : {0.0f, 1.0f}) {
        const std::vector<float> x = random_floats(rng, rows * dim), w = random_floats(rng, dim);
        const std::vector<double> ref = ref_rms_norm(x, w, rows, dim, 1e-6, offset);
        Guarded out(rows * dim);
        rms_norm(x.data(), w.data(), out.data(), rows, dim, 1e-6f, offset);
        EXPECT_TRUE(matches(out.data(), ref, kF32)) << "rows " << rows << " dim " << dim << " offset " << offset;
        EXPECT_TRUE(out.guards_intact());
        Guarded in_place(x);
        rms_norm(in_place.data(), w.data(), in_place.data(), rows, dim, 1e-6f, offset);
        EXPECT_TRUE(matches(in_place.data(), ref, kF32)) << "in place, rows " << rows << " dim " << dim;
        EXPECT_TRUE(in_place.guards_intact());
      }
    }
  }
}

// ---- linear -------------------------------------------------------------------------------

// A K-term f32 dot product carries rounding error that grows with K (the blocked tactic
// sums each output sequentially over a 256-long K chunk), so atol grows with sqrt(K):
// 1e-5 at K <= 16, 4.3e-5 at K = 300. Measured worst errors over 129 x 130 outputs:
// 1.3e-5 at K = 300 (over the flat 1e-5) and 3.7e-5 at K = 4096.
Tolerance linear_tolerance(int64_t K) { return {1e-5 * std::max(1.0, std::sqrt(static_cast<double>(K) / 16.0)), 1e-4}; }

TEST(Linear, BothTacticsMatchReference) {
  std::mt19937 rng(3);
  int cases = 0;
  for (int64_t M : {1, 2, 5, 7, 8, 13, 127, 129}) {  // 1, 2, 7: every remainder of a 4-row group
    for (int64_t N : {1, 3, 17, 130}) {              // 130 spans two packed blocks of W rows
      for (int64_t K : {1, 3, 17, 64, 300}) {        // 300 spans two K chunks
        const std::vector<float> x = random_floats(rng, M * K), w = random_floats(rng, N * K);
        const std::vector<float> bias = random_floats(rng, N);
        const float* b = (++cases % 2 == 0) ? bias.data() : nullptr;
        const std::vector<double> ref = ref_linear(x, w, b, M, N, K);
        const std::string where =
            "M " + std::to_string(M) + " N " + std::to_string(N) + " K " + std::to_string(K) + (b ? " bias" : "");
        Guarded scratch(linear_blocked_scratch_floats(K));
        Guarded out(M * N);
        linear_blocked(x.data(), w.data(), b, out.data(), M, N, K, scratch.data());
        EXPECT_TRUE(matches(out.data(), ref, linear_tolerance(K))) << "blocked, " << where;
        EXPECT_TRUE(out.guards_intact() && scratch.guards_intact()) << "blocked, " << where;
        if (M <= kSmallMMaxRows) {
          Guarded small(M * N);
          linear_small_m(x.data(), w.data(), b, small.data(), M, N, K);
          EXPECT_TRUE(matches(small.data(), ref, linear_tolerance(K))) << "small_m, " << where;
          EXPECT_TRUE(small.guards_intact()) << "small_m, " << where;
        }
      }
    }
  }
}

TEST(Linear, SmallMAndBlockedAgreeOnEightRows) {
  std::mt19937 rng(4);
  constexpr int64_t M = 8, N = 130, K = 300;
  const std::vector<float> x = random_floats(rng, M * K), w = random_floats(rng, N * K), bias = random_floats(rng, N);
  Guarded small(M * N), blocked(M * N), scratch(linear_blocked_scratch_floats(K));
  linear_small_m(x.data(), w.data(), bias.data(), small.data(), M, N, K);
  linear_blocked(x.data(), w.data(), bias.data(), blocked.data(), M, N, K, scratch.data());
  const std::vector<double> as_ref(small.data(), small.data() + M * N);
  EXPECT_TRUE(matches(blocked.data(), as_ref, linear_tolerance(K)));
  EXPECT_TRUE(small.guards_intact() && blocked.guards_intact() && scratch.guards_intact());
}

// ---- rope ---------------------------------------------------------------------------------

TEST(Rope, MatchesReferenceOutOfPlaceAndInPlace) {
  std::mt19937 rng(5);
  for (DataType type : kIndexTypes) {
    for (int64_t T : {1, 5, 13}) {
      for (int64_t heads : {1, 3}) {
        for (int64_t hd : {2, 8, 12, 80}) {
          for (int64_t start : {0, 200, 4090}) {
            const float theta = hd == 80 ? 1e6f : 1e4f;
            const std::vector<float> x = random_floats(rng, T * heads * hd);
            const std::vector<int64_t> pos = iota(start, T);
            const std::vector<double> ref = ref_rope(x, pos, heads, hd, theta);
            const Indices p(type, pos);
            const std::string where = std::string(data_type_name(type)) + " T " + std::to_string(T) + " heads " +
                                      std::to_string(heads) + " hd " + std::to_string(hd) + " start " +
                                      std::to_string(start);
            Guarded out(T * heads * hd);
            ASSERT_TRUE(rope(x.data(), p.data(), type, out.data(), T, heads, hd, theta).ok());
            EXPECT_TRUE(matches(out.data(), ref, kF32)) << where;
            EXPECT_TRUE(out.guards_intact()) << where;
            Guarded in_place(x);
            ASSERT_TRUE(rope(in_place.data(), p.data(), type, in_place.data(), T, heads, hd, theta).ok());
            EXPECT_TRUE(matches(in_place.data(), ref, kF32)) << "in place, " << where;
            EXPECT_TRUE(in_place.guards_intact()) << where;
          }
        }
      }
    }
  }
}

TEST(Rope, RejectsBadInputAndWritesNothing) {
  constexpr int64_t kT = 4, kHeads = 2, kHeadDim = 8, kSize = kT * kHeads * kHeadDim;
  std::mt19937 rng(6);
  const std::vector<float> x = random_floats(rng, kSize);
  for (DataType type : kIndexTypes) {
    const Indices pos(type, {3, 4, -1, 6});
    Guarded out(kSize);
    Status s = rope(x.data(), pos.data(), type, out.data(), kT, kHeads, kHeadDim, 1e4f);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(s.message(), "position -1 of token 2 is negative");
    EXPECT_TRUE(out.all_poison());
    Guarded in_place(x);
    EXPECT_FALSE(rope(in_place.data(), pos.data(), type, in_place.data(), kT, kHeads, kHeadDim, 1e4f).ok());
    EXPECT_TRUE(std::equal(x.begin(), x.end(), in_place.data())) << "a rejected in-place call changed x";

    const Indices ok_pos(type, {0, 1, 2, 3});
    s = rope(x.data(), ok_pos.data(), type, out.data(), kT, kHeads, kHeadDim - 1, 1e4f);  // odd: no rotate-half pairs
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("head_dim"), std::string::npos) << s.message();
    EXPECT_TRUE(out.all_poison());
    EXPECT_TRUE(out.guards_intact());
  }
}

// Given inverse frequencies (Llama-3 scaling precomputes them) and a position scale (linear
// scaling): the angle (float(pos) * scale) * inv_freq_i in f32, cos/sin and rotation in double.
TEST(Rope, WithFreqsAndPositionScale) {
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> freq_dist(1e-5f, 1.0f);
  for (DataType type : kIndexTypes) {
    for (int64_t hd : {2, 12, 80}) {
      for (float scale : {1.0f, 0.25f, 0.3f}) {
        constexpr int64_t kT = 5, kHeads = 3;
        std::vector<float> inv_freq(static_cast<size_t>(hd / 2));
        for (float& f : inv_freq) f = freq_dist(rng);
        const std::vector<float> x = random_floats(rng, kT * kHeads * hd);
        const std::vector<int64_t> pos = iota(1000, kT);
        std::vector<double> ref(x.size());
        for (size_t t = 0; t < pos.size(); ++t) {
          for (int64_t i = 0; i < hd / 2; ++i) {
            const double angle = static_cast<float>(pos[t]) * scale * inv_freq[static_cast<size_t>(i)];
            for (int64_t h = 0; h < kHeads; ++h) {
              const size_t base = (t * kHeads + h) * hd;
              const double a = x[base + i], b = x[base + i + hd / 2];
              ref[base + i] = a * std::cos(angle) - b * std::sin(angle);
              ref[base + i + hd / 2] = b * std::cos(angle) + a * std::sin(angle);
            }
          }
        }
        const Indices p(type, pos);
        const std::string where =
            std::string(data_type_name(type)) + " hd " + std::to_string(hd) + " scale " + std::to_string(scale);
        Guarded out(kT * kHeads * hd);
        ASSERT_TRUE(rope_with_freqs(x.data(), p.data(), type, out.data(), kT, kHeads, hd, inv_freq, scale).ok());
        EXPECT_TRUE(matches(out.data(), ref, kF32)) << where;
        EXPECT_TRUE(out.guards_intact()) << where;
      }
    }
  }
}

TEST(Rope, WithThetasFreqsIsRopeAndChecksTheirCount) {
  std::mt19937 rng(10);
  constexpr int64_t kT = 7, kHeads = 2, kHeadDim = 16;
  const std::vector<float> x = random_floats(rng, kT * kHeads * kHeadDim);
  const Indices pos(DataType::kI64, iota(4000, kT));
  std::vector<float> inv_freq;
  for (int64_t i = 0; i < kHeadDim / 2; ++i) inv_freq.push_back(rope_inv_freq(5e5f, i, kHeadDim));
  std::vector<float> want(x.size()), got(x.size());
  ASSERT_TRUE(rope(x.data(), pos.data(), DataType::kI64, want.data(), kT, kHeads, kHeadDim, 5e5f).ok());
  ASSERT_TRUE(
      rope_with_freqs(x.data(), pos.data(), DataType::kI64, got.data(), kT, kHeads, kHeadDim, inv_freq, 1.0f).ok());
  EXPECT_EQ(got, want);  // bit for bit

  inv_freq.pop_back();
  Guarded out(kT * kHeads * kHeadDim);
  const Status s =
      rope_with_freqs(x.data(), pos.data(), DataType::kI64, out.data(), kT, kHeads, kHeadDim, inv_freq, 1.0f);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "RoPE needs 8 inverse frequencies (head_dim / 2), got 7");
  EXPECT_TRUE(out.all_poison());
}

// ---- kv_cache_write -----------------------------------------------------------------------

TEST(KvCacheWrite, WritesEachTokenAtItsPositionAndNothingElse) {
  std::mt19937 rng(7);
  constexpr int64_t kWidth = 6, kMaxCtx = 9;
  const std::vector<float> k = random_floats(rng, 3 * kWidth), v = random_floats(rng, 3 * kWidth);
  for (DataType type : kIndexTypes) {
    const Indices pos(type, {5, 0, 8});
    Guarded k_cache(kMaxCtx * kWidth), v_cache(kMaxCtx * kWidth);
    ASSERT_TRUE(
        kv_cache_write(k.data(), v.data(), pos.data(), type, 3, kWidth, k_cache.data(), v_cache.data(), kMaxCtx).ok());
    for (int64_t row = 0; row < kMaxCtx; ++row) {
      const auto t = std::find(pos.i64.begin(), pos.i64.end(), row) - pos.i64.begin();
      for (int64_t d = 0; d < kWidth; ++d) {
        const float kc = k_cache.data()[row * kWidth + d], vc = v_cache.data()[row * kWidth + d];
        if (t < 3) {
          EXPECT_EQ(kc, k[t * kWidth + d]) << "row " << row;
          EXPECT_EQ(vc, v[t * kWidth + d]) << "row " << row;
        } else {
          EXPECT_TRUE(std::isnan(kc) && std::isnan(vc)) << "row " << row << " was not written to";
        }
      }
    }
    EXPECT_TRUE(k_cache.guards_intact() && v_cache.guards_intact());
  }
}

TEST(KvCacheWrite, RejectsPositionsOutsideTheCacheAndWritesNothing) {
  constexpr int64_t kWidth = 2, kMaxCtx = 4096;
  const std::vector<float> k(4 * kWidth, 1.0f), v(4 * kWidth, 2.0f);
  for (DataType type : kIndexTypes) {
    for (int64_t bad : {int64_t{4096}, int64_t{-1}}) {
      const Indices pos(type, {0, 1, 2, bad});
      Guarded k_cache(kMaxCtx * kWidth), v_cache(kMaxCtx * kWidth);
      const Status s =
          kv_cache_write(k.data(), v.data(), pos.data(), type, 4, kWidth, k_cache.data(), v_cache.data(), kMaxCtx);
      EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
      EXPECT_EQ(s.message(), "position " + std::to_string(bad) + " of token 3 is outside the KV cache [0, 4096)");
      EXPECT_TRUE(k_cache.all_poison() && v_cache.all_poison()) << "the valid tokens before it were written";
      EXPECT_TRUE(k_cache.guards_intact() && v_cache.guards_intact());
    }
  }
}

// ---- attention ----------------------------------------------------------------------------

struct AttentionCase {
  int64_t heads, kv_heads, head_dim, window;
  int64_t start;  // position of the first query; earlier positions were written by earlier calls
  int64_t T;
};

void check_attention(const AttentionCase& c, DataType type, std::mt19937& rng) {
  constexpr int64_t kMaxCtx = 512;
  const AttentionShape shape{.T = c.T,
                             .heads = c.heads,
                             .kv_heads = c.kv_heads,
                             .head_dim = c.head_dim,
                             .window = c.window,
                             .scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim))};
  const int64_t kv_width = c.kv_heads * c.head_dim;
  const std::vector<float> k_all = random_floats(rng, kMaxCtx * kv_width);
  const std::vector<float> v_all = random_floats(rng, kMaxCtx * kv_width);
  const std::vector<float> q = random_floats(rng, c.T * c.heads * c.head_dim);
  const std::vector<int64_t> pos = iota(c.start, c.T);

  // Rows past the last position stay NaN, so reading one shows up in the output.
  Guarded k_cache(kMaxCtx * kv_width), v_cache(kMaxCtx * kv_width);
  const Indices earlier(type, iota(0, c.start)), now(type, pos);
  ASSERT_TRUE(kv_cache_write(k_all.data(), v_all.data(), earlier.data(), type, c.start, kv_width, k_cache.data(),
                             v_cache.data(), kMaxCtx)
                  .ok());
  ASSERT_TRUE(kv_cache_write(k_all.data() + c.start * kv_width, v_all.data() + c.start * kv_width, now.data(), type,
                             c.T, kv_width, k_cache.data(), v_cache.data(), kMaxCtx)
                  .ok());
  const std::vector<double> ref = ref_attention(q, k_all, v_all, pos, shape);

  using Tactic =
      void (*)(const float*, const float*, const float*, const void*, DataType, float*, const AttentionShape&, float*);
  for (auto [name, tactic] :
       {std::pair<const char*, Tactic>{"rowwise", attention_rowwise}, {"tiled", attention_tiled}}) {
    Guarded out(c.T * c.heads * c.head_dim), scratch(attention_scratch_floats(shape, kMaxCtx));
    tactic(q.data(), k_cache.data(), v_cache.data(), now.data(), type, out.data(), shape, scratch.data());
    const std::string where = std::string(name) + " heads " + std::to_string(c.heads) + "/" +
                              std::to_string(c.kv_heads) + " hd " + std::to_string(c.head_dim) + " window " +
                              std::to_string(c.window) + " positions [" + std::to_string(c.start) + ", " +
                              std::to_string(c.start + c.T) + ") " + data_type_name(type);
    EXPECT_TRUE(matches(out.data(), ref, kF32)) << where;
    EXPECT_TRUE(out.guards_intact() && scratch.guards_intact()) << where;
  }
}

TEST(Attention, BothTacticsMatchReference) {
  std::mt19937 rng(8);
  int cases = 0;
  const std::pair<int64_t, int64_t> head_layouts[] = {{4, 1}, {4, 2}, {6, 3}, {2, 2}};
  const std::pair<int64_t, int64_t> steps[] = {
      {0, 1},   {0, 13},   {0, 129},  // prefill from an empty cache
      {200, 1},                       // a decode step after a 200-token prefill
      {100, 7}, {300, 40},            // a chunk of tokens starting mid-cache
  };
  for (auto [heads, kv_heads] : head_layouts) {
    for (int64_t hd : {2, 8, 12, 80}) {
      for (int64_t window : {0, 1, 3, 512}) {
        for (auto [start, T] : steps) {
          const DataType type = kIndexTypes[++cases % 2];
          check_attention({heads, kv_heads, hd, window, start, T}, type, rng);
        }
      }
    }
  }
}

// ---- elementwise ----------------------------------------------------------------------------

TEST(Elementwise, GatedActivationsAndAddMatchReference) {
  std::mt19937 rng(9);
  for (int64_t n : {1, 5, 7, 13, 127, 129}) {
    std::vector<float> gate = random_floats(rng, n);
    if (n > 4) std::copy_n(std::vector<float>{-30.0f, -6.0f, 6.0f, 30.0f}.begin(), 4, gate.begin());  // the tails
    const std::vector<float> up = random_floats(rng, n);
    std::vector<double> gelu(static_cast<size_t>(n)), silu(gelu), sum(gelu);
    for (int64_t i = 0; i < n; ++i) {
      const double g = gate[i];
      gelu[i] = 0.5 * g * (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (g + 0.044715 * g * g * g))) * up[i];
      silu[i] = g / (1.0 + std::exp(-g)) * up[i];
      sum[i] = g + up[i];
    }
    struct Op {
      const char* name;
      void (*kernel)(const float*, const float*, float*, int64_t);
      const std::vector<double>& ref;
    };
    for (const Op& op :
         {Op{"gelu_tanh_mul", gelu_tanh_mul, gelu}, Op{"silu_mul", silu_mul, silu}, Op{"add", add, sum}}) {
      Guarded out(n);
      op.kernel(gate.data(), up.data(), out.data(), n);
      EXPECT_TRUE(matches(out.data(), op.ref, kF32)) << op.name << " n " << n;
      EXPECT_TRUE(out.guards_intact()) << op.name;
    }
    Guarded in_place(gate);  // a residual add writes into one of its inputs
    add(in_place.data(), up.data(), in_place.data(), n);
    EXPECT_TRUE(matches(in_place.data(), sum, kF32)) << "add in place n " << n;
    EXPECT_TRUE(in_place.guards_intact());
  }
}

}  // namespace
}  // namespace gearbox::cpu
