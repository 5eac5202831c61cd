// The CUDA device's tactic ids for linears that run cuBLASLt (stored in engine files: an id
// keeps its meaning for good), and the row-bucketed form the builder stores for a profile
// whose row count spans a range. Plain C++: the CPU tests check the encoding.
//
// A cuBLASLt tactic names one of the heuristics cuBLASLt returns for the call's shape (M, N,
// K), not one algorithm: heuristic 0 at M = 128 and at M = 512 are often different kernels.
// Timed at the profile's opt rows only, the index that won there can lose up to 17% at other M
// (docs/PERFORMANCE.md). A row-bucketed tactic holds one heuristic index per bucket of row
// counts (powers of two from 16 up), each chosen by timing at the bucket's top row count
// (refine_by_rows in tuning.cpp).
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace gearbox::cuda::linear_tactics {

inline constexpr uint32_t kCublasLt = 2;       // heuristic 0 for the call's shape
inline constexpr uint32_t kCublasLtAlt = 100;  // + i: heuristic i, i in [1, kAltAlgos]
inline constexpr int kAltAlgos = 3;            // heuristics 0 .. kAltAlgos may be named
// + i: one GEMM (heuristic i, i in [0, kAltAlgos]) over the stacked weights of a
// multi-output linear.
inline constexpr uint32_t kStacked = 200;
// Row-bucketed: kByRows, kByRowsStacked for the stacked GEMM, and 2 bits a bucket (bucket b
// in bits 2b, 2b + 1): the heuristic at that bucket's row counts.
inline constexpr uint32_t kByRows = 1u << 30;
inline constexpr uint32_t kByRowsStacked = 1u << 29;
inline constexpr int kRowBuckets = 10;
inline constexpr uint32_t kByRowsIndexBits = (1u << (2 * kRowBuckets)) - 1;
static_assert(kAltAlgos < 4, "a bucket's index has 2 bits");

/// The top row count of bucket b: 16, 32, ... 8192 (the last bucket also takes every count
/// above 4096).
constexpr int64_t bucket_top(int b) { return int64_t{16} << b; }

/// The bucket of m rows: 0 for m <= 16, b for bucket_top(b - 1) < m <= bucket_top(b), the
/// last bucket above 4096.
constexpr int row_bucket(int64_t m) {
  int b = 0;
  while (b < kRowBuckets - 1 && m > bucket_top(b)) ++b;
  return b;
}

/// The smallest top whose list serves the row counts just above it (list_rows).
inline constexpr int64_t kLowerListFrom = 512;

/// The row count whose cuBLASLt heuristic list, and whose bucket's heuristic index, a GEMM of
/// m rows runs: the count the builder timed that bucket at and the session's warm-up loaded
/// (so a length never met before loads nothing). One row, and counts above the last top, keep
/// their own. m at most half a bucket above a top of at least kLowerListFrom rows takes that
/// top's: the upper top's algorithms are tiled for up to twice the rows, and a length just
/// past a top ran as many tiles as twice that top (decision 0040). Other counts take their
/// bucket's top.
constexpr int64_t list_rows(int64_t m) {
  if (m <= 1 || m > bucket_top(kRowBuckets - 1)) return m;
  const int b = row_bucket(m);
  if (b > 0) {
    const int64_t below = bucket_top(b - 1);
    if (below >= kLowerListFrom && m - below <= below / 2) return below;
  }
  return bucket_top(b);
}

constexpr bool is_by_rows(uint32_t t) {
  return (t & kByRows) != 0 && (t & ~(kByRows | kByRowsStacked | kByRowsIndexBits)) == 0;
}
/// One GEMM over stacked weights (plain or row-bucketed).
constexpr bool is_stacked(uint32_t t) {
  return (t >= kStacked && t <= kStacked + kAltAlgos) || (is_by_rows(t) && (t & kByRowsStacked) != 0);
}
/// A cuBLASLt GEMM per output (plain or row-bucketed).
constexpr bool is_per_output(uint32_t t) {
  return t == kCublasLt || (t > kCublasLtAlt && t <= kCublasLtAlt + kAltAlgos) ||
         (is_by_rows(t) && (t & kByRowsStacked) == 0);
}

/// The heuristic index tactic t names for a call of m rows (t is_stacked or is_per_output).
constexpr int heuristic(uint32_t t, int64_t m) {
  if (is_by_rows(t)) return static_cast<int>((t >> (2 * row_bucket(m))) & 3u);
  if (t >= kStacked && t <= kStacked + kAltAlgos) return static_cast<int>(t - kStacked);
  if (t > kCublasLtAlt && t <= kCublasLtAlt + kAltAlgos) return static_cast<int>(t - kCublasLtAlt);
  return 0;
}

/// The row-bucketed tactic with heuristic per_bucket[b] for bucket b.
constexpr uint32_t by_rows(bool stacked, const std::array<int, kRowBuckets>& per_bucket) {
  uint32_t t = kByRows | (stacked ? kByRowsStacked : 0u);
  for (int b = 0; b < kRowBuckets; ++b)
    t |= (static_cast<uint32_t>(per_bucket[static_cast<size_t>(b)]) & 3u) << (2 * b);
  return t;
}

/// "cublaslt_rows(h1 to 128, h0 to 512, h2)" ("cublaslt_stacked_rows(...)"): runs of buckets
/// that name the same heuristic, each with the top row count of its last bucket.
inline std::string by_rows_name(uint32_t t) {
  std::string name = (t & kByRowsStacked) != 0 ? "cublaslt_stacked_rows(" : "cublaslt_rows(";
  for (int b = 0; b < kRowBuckets; ++b) {
    const int h = heuristic(t, bucket_top(b));
    if (b + 1 < kRowBuckets && heuristic(t, bucket_top(b + 1)) == h) continue;
    name += "h" + std::to_string(h);
    if (b + 1 < kRowBuckets) name += " to " + std::to_string(bucket_top(b)) + ", ";
  }
  return name + ")";
}

}  // namespace gearbox::cuda::linear_tactics
