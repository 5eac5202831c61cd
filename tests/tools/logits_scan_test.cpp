// tools/logits_scan against a plain reference (std::max_element and std::isfinite) on
// awkward vocabularies (shorter than a lane group, one past it, odd sizes, a large one), ties,
// and NaN or infinities at the start, in a lane group and in the tail; and scan_rows over
// several threads against one.
#include "logits_scan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace gearbox::cli {
namespace {

cli::LogitsScan reference(const float* x, int64_t vocab) {
  cli::LogitsScan want;
  for (int64_t i = 0; i < vocab; ++i) {
    if (!std::isfinite(x[i])) {
      want.first_non_finite = i;
      return want;
    }
  }
  want.argmax = std::max_element(x, x + vocab) - x;
  return want;
}

std::vector<float> random_row(int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> x(static_cast<size_t>(vocab));
  for (float& v : x) v = normal(rng);
  return x;
}

struct Case {
  int64_t vocab;
  int64_t max_at;  // -1: wherever it falls
  int64_t tie_at;  // a second copy of the largest value there; -1: none
  int64_t bad_at;  // a non-finite value there; -1: none
  float bad;
};

constexpr float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

TEST(LogitsScan, MatchesTheReferenceOnAwkwardRows) {
  const std::vector<Case> cases = {
      {1, -1, -1, -1, 0},          {1, -1, -1, 0, kNaN},       {15, 14, -1, -1, 0},
      {16, 0, 15, -1, 0},          {17, 16, -1, -1, 0},        {17, 3, 16, -1, 0},
      {33, -1, -1, 32, kInf},      {33, -1, -1, 5, -kInf},     {1000, 999, -1, -1, 0},
      {1000, 500, 20, -1, 0},      {1000, -1, -1, 0, kNaN},    {1000, 10, -1, 999, kNaN},
      {262147, 262146, -1, -1, 0}, {262147, 7, 262146, -1, 0}, {262147, -1, -1, 131073, kInf},
  };
  uint32_t seed = 1;
  for (const Case& c : cases) {
    std::vector<float> x = random_row(c.vocab, seed++);
    if (c.max_at >= 0) x[static_cast<size_t>(c.max_at)] = 100.0f;
    if (c.tie_at >= 0) x[static_cast<size_t>(c.tie_at)] = 100.0f;
    if (c.bad_at >= 0) x[static_cast<size_t>(c.bad_at)] = c.bad;
    const LogitsScan got = scan_logits(x.data(), c.vocab);
    const LogitsScan want = reference(x.data(), c.vocab);
    const std::string what = "vocab " + std::to_string(c.vocab) + ", max at " + std::to_string(c.max_at) + ", tie at " +
                             std::to_string(c.tie_at) + ", bad at " + std::to_string(c.bad_at);
    EXPECT_EQ(got.first_non_finite, want.first_non_finite) << what;
    if (want.first_non_finite < 0) {
      EXPECT_EQ(got.argmax, want.argmax) << what;
    }
  }
}

TEST(LogitsScan, RowsOnSeveralThreadsMatchOneThread) {
  for (const int64_t rows : {1, 2, 3, 7, 32, 33}) {
    const int64_t vocab = 4099;
    std::vector<float> x;
    for (int64_t r = 0; r < rows; ++r) {
      const std::vector<float> row = random_row(vocab, static_cast<uint32_t>(100 + r));
      x.insert(x.end(), row.begin(), row.end());
    }
    if (rows > 2) x[static_cast<size_t>(2 * vocab + 17)] = kNaN;  // row 2 is not finite
    const std::vector<LogitsScan> one = scan_rows(x.data(), rows, vocab, 1);
    ASSERT_EQ(one.size(), static_cast<size_t>(rows));
    for (const int threads : {2, 4, 64}) {
      const std::vector<LogitsScan> many = scan_rows(x.data(), rows, vocab, threads);
      ASSERT_EQ(many.size(), one.size());
      for (int64_t r = 0; r < rows; ++r) {
        const LogitsScan want = reference(x.data() + r * vocab, vocab);
        EXPECT_EQ(many[static_cast<size_t>(r)].first_non_finite, want.first_non_finite) << rows << " rows, row " << r;
        EXPECT_EQ(many[static_cast<size_t>(r)].argmax, want.argmax) << rows << " rows, row " << r;
        EXPECT_EQ(one[static_cast<size_t>(r)].argmax, want.argmax) << rows << " rows, row " << r;
      }
    }
  }
  EXPECT_TRUE(scan_rows(nullptr, 0, 10, 4).empty());
}

}  // namespace
}  // namespace gearbox::cli
