#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "gearbox/dims.h"
#include "gearbox/logging.h"
#include "gearbox/status.h"

namespace gearbox {
namespace {

TEST(Status, OkAndErrors) {
  EXPECT_TRUE(Status().ok());
  const Status s = invalid_argument("token id 9000 is outside [0, 2048)");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.to_string(), "InvalidArgument: token id 9000 is outside [0, 2048)");
  EXPECT_EQ(s.with_context("input 'tokens'").message(), "input 'tokens': token id 9000 is outside [0, 2048)");
  EXPECT_TRUE(Status().with_context("x").ok());
  EXPECT_EQ(Status(StatusCode::kOk, "ignored").message(), "");
}

TEST(Result, HoldsAValueOrAnError) {
  Result<int> v = 5;
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, 5);
  Result<std::string> e = not_found("no profile 'decode'");
  EXPECT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kNotFound);
}

TEST(ResultDeathTest, ReadingTheValueOfAnErrorAborts) {
  Result<int> e = data_loss("truncated");
  EXPECT_DEATH((void)e.value(), "");
  EXPECT_DEATH((void)Result<int>(Status()), "");
}

TEST(Dims, ValueSemantics) {
  const Dims d{1, 128};
  EXPECT_EQ(d.rank(), 2);
  EXPECT_EQ(d[0], 1);
  EXPECT_EQ(d[1], 128);
  EXPECT_EQ(d.volume(), 128);
  EXPECT_EQ(d.to_string(), "[1, 128]");
  EXPECT_EQ(d, (Dims{1, 128}));
  EXPECT_NE(d, (Dims{1, 128, 1}));
  EXPECT_NE(d, (Dims{1, 127}));
  EXPECT_EQ(Dims().rank(), 0);
  EXPECT_EQ(Dims().volume(), 1);
  EXPECT_EQ(Dims().to_string(), "[]");
  EXPECT_EQ((Dims{1, 2, 3, 4, 5, 6, 7, 8}).rank(), kMaxDims);
  EXPECT_EQ((Dims{std::numeric_limits<int64_t>::max(), 2}).volume(), std::numeric_limits<int64_t>::max());
  EXPECT_EQ((Dims{4, 0}).volume(), 0);
  EXPECT_LT((Dims{4, -1}).volume(), 0);
}

TEST(DimsDeathTest, MisuseAborts) {
  EXPECT_DEATH((Dims{1, 2, 3, 4, 5, 6, 7, 8, 9}), "kMaxDims");
  EXPECT_DEATH((void)(Dims{1})[1], "out of range");
  EXPECT_DEATH((void)(Dims{1})[-1], "out of range");
}

TEST(Logging, LevelAndSink) {
  const LogLevel before = log_level();
  set_log_level(LogLevel::kWarning);
  EXPECT_EQ(log_level(), LogLevel::kWarning);
  set_log_level(before);
}

}  // namespace
}  // namespace gearbox
