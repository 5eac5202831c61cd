// The CUDA device's cuBLASLt tactic ids and their row-bucketed form (plain C++: runs
// everywhere, GPU or not).
#include "devices/cuda/linear_tactics.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <limits>
#include <string>

namespace lt = gearbox::cuda::linear_tactics;

namespace {

TEST(LinearTactics, RowBucketsArePowersOfTwoFromSixteen) {
  struct Case {
    int64_t rows;
    int bucket;
  };
  for (const Case& c : {Case{1, 0}, Case{16, 0}, Case{17, 1}, Case{32, 1}, Case{33, 2}, Case{128, 3}, Case{129, 4},
                        Case{512, 5}, Case{513, 6}, Case{2048, 7}, Case{4096, 8}, Case{4097, 9}, Case{8192, 9},
                        Case{std::numeric_limits<int64_t>::max(), 9}}) {
    EXPECT_EQ(lt::row_bucket(c.rows), c.bucket) << c.rows;
  }
  for (int b = 0; b < lt::kRowBuckets; ++b) {
    EXPECT_EQ(lt::row_bucket(lt::bucket_top(b)), b) << b;
    if (b + 1 < lt::kRowBuckets) {
      EXPECT_EQ(lt::row_bucket(lt::bucket_top(b) + 1), b + 1) << b;
    }
  }
}

TEST(LinearTactics, AGemmTakesTheListOfItsBucketsTopOrOfTheTopJustBelow) {
  struct Case {
    int64_t rows, list;
  };
  // One row and counts past the last top keep their own list; tops below kLowerListFrom
  // serve their bucket; a top of 512 or more serves up to half a bucket above it.
  for (const Case& c : {
           Case{0, 0},       Case{1, 1},       Case{2, 16},      Case{16, 16},     Case{17, 32},     Case{300, 512},
           Case{511, 512},   Case{512, 512},   Case{513, 512},   Case{533, 512},   Case{768, 512},   Case{769, 1024},
           Case{1024, 1024}, Case{1025, 1024}, Case{1536, 1024}, Case{1537, 2048}, Case{4097, 4096}, Case{6144, 4096},
           Case{6145, 8192}, Case{8192, 8192}, Case{8193, 8193},
       }) {
    EXPECT_EQ(lt::list_rows(c.rows), c.list) << c.rows;
  }
  for (int64_t m = 2; m <= 8192; ++m) {
    const int64_t list = lt::list_rows(m);
    // A top, under twice m above the first bucket, and below m only where m is at most half
    // a bucket above it.
    ASSERT_EQ(lt::bucket_top(lt::row_bucket(list)), list) << m;
    if (m > lt::bucket_top(0)) {
      ASSERT_LT(list, 2 * m) << m;
    }
    if (list < m) {
      ASSERT_TRUE(list >= lt::kLowerListFrom && 2 * (m - list) <= list) << m;
    }
  }
}

TEST(LinearTactics, PlainIdsNameOneHeuristicAtEveryRowCount) {
  for (int64_t m : {1, 100, 5000}) {
    EXPECT_EQ(lt::heuristic(lt::kCublasLt, m), 0);
    EXPECT_EQ(lt::heuristic(lt::kCublasLtAlt + 2, m), 2);
    EXPECT_EQ(lt::heuristic(lt::kStacked, m), 0);
    EXPECT_EQ(lt::heuristic(lt::kStacked + 3, m), 3);
  }
  EXPECT_TRUE(lt::is_per_output(lt::kCublasLt));
  EXPECT_TRUE(lt::is_per_output(lt::kCublasLtAlt + 3));
  EXPECT_FALSE(lt::is_per_output(lt::kCublasLtAlt));  // 100 itself names nothing
  EXPECT_FALSE(lt::is_per_output(lt::kCublasLtAlt + 4));
  EXPECT_TRUE(lt::is_stacked(lt::kStacked + 3));
  EXPECT_FALSE(lt::is_stacked(lt::kStacked + 4));
  EXPECT_FALSE(lt::is_by_rows(lt::kStacked));
}

TEST(LinearTactics, ByRowsRoundTripsEachBucketsHeuristic) {
  const std::array<int, lt::kRowBuckets> per_bucket = {1, 1, 1, 1, 0, 0, 2, 3, 3, 0};
  for (bool stacked : {false, true}) {
    const uint32_t t = lt::by_rows(stacked, per_bucket);
    EXPECT_TRUE(lt::is_by_rows(t));
    EXPECT_EQ(lt::is_stacked(t), stacked);
    EXPECT_EQ(lt::is_per_output(t), !stacked);
    for (int b = 0; b < lt::kRowBuckets; ++b) {
      EXPECT_EQ(lt::heuristic(t, lt::bucket_top(b)), per_bucket[static_cast<size_t>(b)]) << b;
    }
    EXPECT_EQ(lt::heuristic(t, 300), 0);  // bucket 5
    EXPECT_EQ(lt::heuristic(t, 1000), 2);
    EXPECT_EQ(lt::by_rows_name(t), std::string(stacked ? "cublaslt_stacked_rows" : "cublaslt_rows") +
                                       "(h1 to 128, h0 to 512, h2 to 1024, h3 to 4096, h0)");
  }
  EXPECT_EQ(lt::by_rows_name(lt::by_rows(false, {})), "cublaslt_rows(h0)");
  // Ids with bits outside the encoding are not row-bucketed tactics (a damaged table).
  EXPECT_FALSE(lt::is_by_rows(lt::kByRows | (1u << 25)));
  EXPECT_FALSE(lt::is_by_rows(lt::kByRowsStacked | 5u));
  EXPECT_FALSE(lt::is_stacked(lt::kByRows | lt::kByRowsStacked | (1u << 31)));
}

}  // namespace
