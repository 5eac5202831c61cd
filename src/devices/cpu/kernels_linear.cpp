// CPU linear tactics: y[M, N] = x[M, K] * W[N, K]^T (+ bias[N]).
//
// The inner loops use GNU vector types (4 floats: one SSE or NEON register) rather than
// scalar loops left to the auto-vectorizer. Measured at -O2 with K = N = 1024, every
// scalar-loop shape tried was fast under one of gcc 12 / clang 14 and 2-4x slower under
// the other (the SLP vectorizer either spilled the accumulators or shuffled across rows);
// explicit vectors with one named accumulator per row are fast under both. No -ffast-math
// is needed since every partial sum is kept separately.

#include "devices/cpu/kernels.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "devices/cpu/vec4.h"

namespace gearbox::cpu {
namespace {

// ---- small M: dot products of each W row with up to 4 rows of x ------------------------

/// The dot product of x[:K] and w[:K] whose first k0 terms are summed in lo + hi.
inline float finish_dot(Vec4 lo, Vec4 hi, const float* x, const float* w, int64_t k0, int64_t K) {
  float sum = hsum(lo + hi);
  for (int64_t k = k0; k < K; ++k) sum += x[k] * w[k];
  return sum;
}

/// out[r] = dot(x[r, :K], w[:K]) for R <= 4 rows of x (row stride K), reading w once.
template <int R>
void dot_rows(const float* __restrict x, const float* __restrict w, int64_t K, float* __restrict out) {
  static_assert(R >= 1 && R <= 4);
  Vec4 a0 = {}, b0 = {}, a1 = {}, b1 = {}, a2 = {}, b2 = {}, a3 = {}, b3 = {};
  int64_t k = 0;
  for (; k + 8 <= K; k += 8) {
    const Vec4 wa = load4(w + k);
    const Vec4 wb = load4(w + k + 4);
    a0 += load4(x + k) * wa;
    b0 += load4(x + k + 4) * wb;
    if constexpr (R > 1) {
      a1 += load4(x + K + k) * wa;
      b1 += load4(x + K + k + 4) * wb;
    }
    if constexpr (R > 2) {
      a2 += load4(x + 2 * K + k) * wa;
      b2 += load4(x + 2 * K + k + 4) * wb;
    }
    if constexpr (R > 3) {
      a3 += load4(x + 3 * K + k) * wa;
      b3 += load4(x + 3 * K + k + 4) * wb;
    }
  }
  out[0] = finish_dot(a0, b0, x, w, k, K);
  if constexpr (R > 1) out[1] = finish_dot(a1, b1, x + K, w, k, K);
  if constexpr (R > 2) out[2] = finish_dot(a2, b2, x + 2 * K, w, k, K);
  if constexpr (R > 3) out[3] = finish_dot(a3, b3, x + 3 * K, w, k, K);
}

// ---- blocked: packed W blocks, 4 x 8 register tiles -------------------------------------

constexpr int64_t kMr = 4;    // rows of x per micro-tile
constexpr int64_t kNr = 8;    // outputs per micro-tile: one packed panel, two Vec4
constexpr int64_t kNb = 128;  // W rows per packed block
constexpr int64_t kKb = 256;  // K columns per packed block: kNb * kKb floats = 128 KiB, in L2
static_assert(kNb % kNr == 0);

/// Packs W[n0 : n0 + nb, k0 : k0 + kc] as nb / kNr panels, each [kc][kNr], so that the
/// micro-tile reads one contiguous stream. Outputs past N are zero; they are never stored.
void pack_w_block(const float* __restrict w, int64_t N, int64_t K, int64_t n0, int64_t nb, int64_t k0, int64_t kc,
                  float* __restrict packed) {
  for (int64_t p = 0; p < nb; p += kNr) {
    float* panel = packed + p * kc;
    for (int64_t j = 0; j < kNr; ++j) {
      const int64_t n = n0 + p + j;
      if (n < N) {
        const float* row = w + n * K + k0;
        for (int64_t k = 0; k < kc; ++k) panel[k * kNr + j] = row[k];
      } else {
        for (int64_t k = 0; k < kc; ++k) panel[k * kNr + j] = 0.0f;
      }
    }
  }
}

/// acc[r][:] = sum over k < kc of a[r * lda + k] * panel[k][:], for R <= kMr rows.
template <int R>
void micro_tile(const float* __restrict a, int64_t lda, const float* __restrict panel, int64_t kc,
                float (&acc)[kMr][kNr]) {
  static_assert(R >= 1 && R <= kMr && kMr == 4);
  Vec4 c0 = {}, d0 = {}, c1 = {}, d1 = {}, c2 = {}, d2 = {}, c3 = {}, d3 = {};
  for (int64_t k = 0; k < kc; ++k) {
    const Vec4 lo = load4(panel + k * kNr);
    const Vec4 hi = load4(panel + k * kNr + 4);
    const float a0 = a[k];
    c0 += a0 * lo;
    d0 += a0 * hi;
    if constexpr (R > 1) {
      const float a1 = a[lda + k];
      c1 += a1 * lo;
      d1 += a1 * hi;
    }
    if constexpr (R > 2) {
      const float a2 = a[2 * lda + k];
      c2 += a2 * lo;
      d2 += a2 * hi;
    }
    if constexpr (R > 3) {
      const float a3 = a[3 * lda + k];
      c3 += a3 * lo;
      d3 += a3 * hi;
    }
  }
  const Vec4 tiles[kMr][2] = {{c0, d0}, {c1, d1}, {c2, d2}, {c3, d3}};
  std::memcpy(acc, tiles, sizeof acc);
}

/// y[r, j] = acc[r][j] (+ bias[j]) on the first K chunk, y[r, j] += acc[r][j] on later ones.
void store_tile(const float (&acc)[kMr][kNr], int64_t rows, int64_t cols, const float* bias, bool first_chunk, float* y,
                int64_t N) {
  for (int64_t r = 0; r < rows; ++r) {
    float* yr = y + r * N;
    for (int64_t j = 0; j < cols; ++j) {
      if (first_chunk) {
        yr[j] = acc[r][j] + (bias != nullptr ? bias[j] : 0.0f);
      } else {
        yr[j] += acc[r][j];
      }
    }
  }
}

}  // namespace

void linear_small_m(const float* x, const float* w, const float* bias, float* y, int64_t M, int64_t N, int64_t K) {
  GEARBOX_CHECK(M >= 0 && M <= kSmallMMaxRows && N >= 0 && K >= 0);
  float out[kSmallMMaxRows];
  for (int64_t n = 0; n < N; ++n) {
    const float* wn = w + n * K;
    for (int64_t m = 0; m < M; m += 4) {
      const float* xm = x + m * K;
      switch (std::min<int64_t>(M - m, 4)) {
        case 4: dot_rows<4>(xm, wn, K, out + m); break;
        case 3: dot_rows<3>(xm, wn, K, out + m); break;
        case 2: dot_rows<2>(xm, wn, K, out + m); break;
        default: dot_rows<1>(xm, wn, K, out + m); break;
      }
    }
    const float b = bias != nullptr ? bias[n] : 0.0f;
    for (int64_t m = 0; m < M; ++m) y[m * N + n] = out[m] + b;
  }
}

int64_t linear_blocked_scratch_floats(int64_t K) { return kNb * std::clamp<int64_t>(K, 1, kKb); }

void linear_blocked(const float* x, const float* w, const float* bias, float* y, int64_t M, int64_t N, int64_t K,
                    float* scratch) {
  GEARBOX_CHECK(M >= 0 && N >= 0 && K >= 0);
  if (K == 0) {  // no K chunk to carry the bias
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t n = 0; n < N; ++n) y[m * N + n] = bias != nullptr ? bias[n] : 0.0f;
    }
    return;
  }
  float acc[kMr][kNr];
  for (int64_t n0 = 0; n0 < N; n0 += kNb) {
    const int64_t valid = std::min(kNb, N - n0);
    const int64_t nb = (valid + kNr - 1) / kNr * kNr;
    for (int64_t k0 = 0; k0 < K; k0 += kKb) {
      const int64_t kc = std::min(kKb, K - k0);
      pack_w_block(w, N, K, n0, nb, k0, kc, scratch);
      for (int64_t m0 = 0; m0 < M; m0 += kMr) {
        const int64_t rows = std::min(kMr, M - m0);
        const float* a = x + m0 * K + k0;
        for (int64_t p = 0; p < nb; p += kNr) {
          const float* panel = scratch + p * kc;
          switch (rows) {
            case 4: micro_tile<4>(a, K, panel, kc, acc); break;
            case 3: micro_tile<3>(a, K, panel, kc, acc); break;
            case 2: micro_tile<2>(a, K, panel, kc, acc); break;
            default: micro_tile<1>(a, K, panel, kc, acc); break;
          }
          const int64_t n = n0 + p;
          store_tile(acc, rows, std::min(kNr, valid - p), bias != nullptr ? bias + n : nullptr, k0 == 0, y + m0 * N + n,
                     N);
        }
      }
    }
  }
}

}  // namespace gearbox::cpu
