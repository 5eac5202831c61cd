// OptimizationProfileGuard: records a thread-local request, nests, restores, accepts every
// integer type but bool, and never wraps an out-of-range index into a valid one.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <thread>

#include "gearbox/profile_guard.h"

namespace gearbox {
namespace {

using Kind = ProfileRequest::Kind;

TEST(ProfileGuard, NoGuardMeansUnset) { EXPECT_EQ(OptimizationProfileGuard::current(), ProfileRequest::unset()); }

TEST(ProfileGuard, PinsAnIndexForItsScope) {
  {
    OptimizationProfileGuard pin(1);
    EXPECT_EQ(OptimizationProfileGuard::current(), ProfileRequest::pinned(1));
  }
  EXPECT_EQ(OptimizationProfileGuard::current().kind(), Kind::kUnset);
}

TEST(ProfileGuard, FactoriesRecordAutomaticAndNamedRequests) {
  {
    auto a = OptimizationProfileGuard::automatic();
    EXPECT_EQ(OptimizationProfileGuard::current(), ProfileRequest::automatic());
    {
      auto n = OptimizationProfileGuard::named("decode");
      EXPECT_EQ(OptimizationProfileGuard::current(), ProfileRequest::named("decode"));
    }
    EXPECT_EQ(OptimizationProfileGuard::current(), ProfileRequest::automatic());
  }
  EXPECT_EQ(OptimizationProfileGuard::current(), ProfileRequest::unset());
}

TEST(ProfileGuard, NestedGuardsRestoreTheEnclosingRequestInOrder) {
  OptimizationProfileGuard outer(3);
  {
    auto middle = OptimizationProfileGuard::automatic();
    {
      OptimizationProfileGuard inner(0);
      EXPECT_EQ(OptimizationProfileGuard::current(), ProfileRequest::pinned(0));
      {
        auto innermost = OptimizationProfileGuard::named("prefill");
        EXPECT_EQ(OptimizationProfileGuard::current(), ProfileRequest::named("prefill"));
      }
      EXPECT_EQ(OptimizationProfileGuard::current(), ProfileRequest::pinned(0));
    }
    EXPECT_EQ(OptimizationProfileGuard::current(), ProfileRequest::automatic());
  }
  EXPECT_EQ(OptimizationProfileGuard::current(), ProfileRequest::pinned(3));
}

TEST(ProfileGuard, RequestsAreThreadLocal) {
  OptimizationProfileGuard pin(1);
  ProfileRequest seen_by_other_thread = ProfileRequest::pinned(42);
  ProfileRequest seen_inside_other_guard;
  std::thread other([&] {
    seen_by_other_thread = OptimizationProfileGuard::current();
    auto g = OptimizationProfileGuard::named("decode");
    seen_inside_other_guard = OptimizationProfileGuard::current();
  });
  other.join();
  EXPECT_EQ(seen_by_other_thread, ProfileRequest::unset());
  EXPECT_EQ(seen_inside_other_guard, ProfileRequest::named("decode"));
  EXPECT_EQ(OptimizationProfileGuard::current(), ProfileRequest::pinned(1));  // untouched by the other thread
}

TEST(ProfileGuard, ManyThreadsEachSeeOnlyTheirOwnNesting) {
  constexpr int kThreads = 8;
  std::vector<std::thread> threads;
  std::vector<int> failures(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, &failures] {
      for (int i = 0; i < 2000; ++i) {
        OptimizationProfileGuard outer(t);
        {
          OptimizationProfileGuard inner(static_cast<int64_t>(t) * 1000 + i);
          if (OptimizationProfileGuard::current().index() != static_cast<int64_t>(t) * 1000 + i) ++failures[t];
        }
        if (OptimizationProfileGuard::current().index() != t) ++failures[t];
      }
      if (OptimizationProfileGuard::current().kind() != Kind::kUnset) ++failures[t];
    });
  }
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(failures[t], 0) << "thread " << t;
}

template <typename T>
class ProfileGuardIntegerTypes : public ::testing::Test {};
using IntegerTypes = ::testing::Types<signed char, unsigned char, short, unsigned short, int, unsigned, long,
                                      unsigned long, long long, unsigned long long, int8_t, int16_t, int32_t, int64_t,
                                      uint8_t, uint16_t, uint32_t, uint64_t, size_t, ptrdiff_t, char>;
TYPED_TEST_SUITE(ProfileGuardIntegerTypes, IntegerTypes);

TYPED_TEST(ProfileGuardIntegerTypes, PinsByValue) {
  const TypeParam index = static_cast<TypeParam>(5);
  OptimizationProfileGuard pin(index);
  EXPECT_EQ(OptimizationProfileGuard::current(), ProfileRequest::pinned(5));
  if constexpr (std::numeric_limits<TypeParam>::is_signed) {
    OptimizationProfileGuard negative(static_cast<TypeParam>(-1));
    EXPECT_EQ(OptimizationProfileGuard::current(), ProfileRequest::pinned(-1));
  }
  OptimizationProfileGuard top(std::numeric_limits<TypeParam>::max());
  const ProfileRequest r = OptimizationProfileGuard::current();
  EXPECT_EQ(r.kind(), Kind::kPinned);
  if (r.index_beyond_int64()) {
    EXPECT_TRUE(std::is_unsigned_v<TypeParam> && sizeof(TypeParam) == sizeof(int64_t));
  } else {
    EXPECT_EQ(static_cast<uint64_t>(r.index()), static_cast<uint64_t>(std::numeric_limits<TypeParam>::max()));
  }
}

TEST(ProfileGuard, AnIndexBeyondInt64IsNeverWrappedIntoAValidOne) {
  // 2^64 - 1 would wrap to -1 and 2^63 + 1 to a negative index through a plain cast; 2^64
  // would wrap to 0, the one profile every engine has. None of them may be representable
  // as a valid pin.
  const uint64_t huge[] = {std::numeric_limits<uint64_t>::max(), (uint64_t{1} << 63) + 1, uint64_t{1} << 63};
  ProfileTable single;
  single.bounds = {{{Dims{1, 1}, Dims{1, 1}, Dims{1, 2048}}}};
  for (uint64_t h : huge) {
    OptimizationProfileGuard pin(h);
    const ProfileRequest r = OptimizationProfileGuard::current();
    EXPECT_TRUE(r.index_beyond_int64()) << h;
    const Dims input{1, 1};
    EXPECT_EQ(select_profile(single, r, std::span(&input, 1)).status,
              ProfileSelection::Status::kRequestedProfileUnavailable)
        << h;
  }
  OptimizationProfileGuard max_signed(static_cast<uint64_t>(std::numeric_limits<int64_t>::max()));
  EXPECT_FALSE(OptimizationProfileGuard::current().index_beyond_int64());
}

}  // namespace
}  // namespace gearbox
