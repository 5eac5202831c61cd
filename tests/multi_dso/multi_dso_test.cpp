// Several shared libraries in one process must see one thread-local request: a guard set
// in one DSO is what another DSO reads.
#include <gtest/gtest.h>

#include "gearbox/profile_guard.h"
#include "plugins.h"

namespace {

using gearbox_test::reader_current;
using gearbox_test::setter_run_pinned;

TEST(MultiDso, AGuardInOneLibraryIsSeenByAnother) {
  EXPECT_EQ(setter_run_pinned(1, &reader_current), gearbox::ProfileRequest::pinned(1));
  EXPECT_EQ(reader_current(), gearbox::ProfileRequest::unset());
}

TEST(MultiDso, AGuardInTheApplicationIsSeenByALibrary) {
  auto g = gearbox::OptimizationProfileGuard::named("decode");
  EXPECT_EQ(reader_current(), gearbox::ProfileRequest::named("decode"));
  EXPECT_EQ(setter_run_pinned(0, &reader_current), gearbox::ProfileRequest::pinned(0));
  EXPECT_EQ(reader_current(), gearbox::ProfileRequest::named("decode"));
}

}  // namespace
