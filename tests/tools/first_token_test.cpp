// time_child: a child's first stdout line and exit timed, its stderr kept a line each with
// its arrival, the environment passed with overrides, and a failing child's messages.
#include "first_token.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace gearbox::cli {
namespace {

TEST(TimeChild, StampsTheFirstLineAndKeepsStderrLines) {
  setenv("GEARBOX_TIME_CHILD_TEST", "inherited", 1);
  setenv("GEARBOX_TIME_CHILD_KEPT", "kept", 1);
  Result<ChildTiming> t =
      time_child({"/bin/sh", "-c",
                  "echo one >&2; sleep 0.2; echo token; sleep 0.2; "
                  "echo \"$GEARBOX_TIME_CHILD_TEST $GEARBOX_TIME_CHILD_KEPT\" >&2; printf tail >&2"},
                 {"GEARBOX_TIME_CHILD_TEST=replaced"});
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  ASSERT_EQ(t->messages.size(), 3u);
  EXPECT_EQ(t->messages[0].text, "one");
  EXPECT_EQ(t->messages[1].text, "replaced kept");
  EXPECT_EQ(t->messages[2].text, "tail");  // no newline at the end: kept at the exit
  EXPECT_GE(t->first_line_ms, 150.0);
  EXPECT_LT(t->messages[0].ms, t->first_line_ms);
  EXPECT_GT(t->messages[1].ms, t->first_line_ms);
  EXPECT_GE(t->exit_ms, t->messages[1].ms);
}

TEST(TimeChild, AFailingChildIsAnErrorWithItsMessages) {
  Result<ChildTiming> failed = time_child({"/bin/sh", "-c", "echo token; echo 'what went wrong' >&2; exit 3"});
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find("exited with status 3"), std::string::npos) << failed.status().to_string();
  EXPECT_NE(failed.status().message().find("what went wrong"), std::string::npos) << failed.status().to_string();
  Result<ChildTiming> silent = time_child({"/bin/sh", "-c", "echo nothing >&2"});
  ASSERT_FALSE(silent.ok());
  EXPECT_NE(silent.status().message().find("without printing a line"), std::string::npos);
  Result<ChildTiming> missing = time_child({"/nonexistent/program"});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/nonexistent/program"), std::string::npos);
}

}  // namespace
}  // namespace gearbox::cli
