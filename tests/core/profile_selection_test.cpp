// The selection policy: the seed's 18 cases, the two its review asked for, the guards the
// review found untested (range check, rank check of min, opt and max), named profiles
// and malformed tables.
#include <gtest/gtest.h>

#include <limits>
#include <vector>

#include "gearbox/profile_selection.h"

namespace gearbox {
namespace {

using S = ProfileSelection::Status;

InputProfileBounds seq_bounds(int64_t lo, int64_t opt, int64_t hi) { return {Dims{1, lo}, Dims{1, opt}, Dims{1, hi}}; }

// The seed's fixture: profile 0 decode [1,1]..[1,1], profile 1 prefill [1,1]..[1,2048].
ProfileTable decode_prefill() {
  ProfileTable t;
  t.bounds = {{seq_bounds(1, 1, 1)}, {seq_bounds(1, 128, 2048)}};
  t.names = {"decode", "prefill"};
  return t;
}

ProfileSelection select(const ProfileTable& t, const ProfileRequest& r, const std::vector<Dims>& inputs) {
  return select_profile(t, r, inputs);
}

bool fits(const ProfileTable& t, int64_t p, const std::vector<Dims>& inputs) { return profile_fits(t, p, inputs); }

const std::vector<Dims> kDecode = {Dims{1, 1}};
const std::vector<Dims> kPrefill = {Dims{1, 512}};
const ProfileSelection kNoMatch{S::kNoProfileMatchesInputs, 0};
const ProfileSelection kUnavailable{S::kRequestedProfileUnavailable, 0};
const ProfileSelection kPinIgnored{S::kPinIgnoredSingleProfile, 0};
ProfileSelection ok(int32_t p) { return {S::kOk, p}; }

// ---- the seed's cases ---------------------------------------------------------------

TEST(SelectProfile, UnsetRunsProfileZeroWhateverTheShapes) {
  const ProfileTable t = decode_prefill();
  EXPECT_EQ(select(t, ProfileRequest::unset(), kDecode), ok(0));
  EXPECT_EQ(select(t, ProfileRequest::unset(), kPrefill), ok(0));  // validated later, not here
  ProfileTable on_prefill = t;
  on_prefill.active = 1;
  EXPECT_EQ(select(on_prefill, ProfileRequest::unset(), kDecode), ok(0));
}

TEST(SelectProfile, PinInRangeIsTakenVerbatim) {
  const ProfileTable t = decode_prefill();
  EXPECT_EQ(select(t, ProfileRequest::pinned(1), kDecode), ok(1));
  EXPECT_EQ(select(t, ProfileRequest::pinned(0), kDecode), ok(0));
  EXPECT_EQ(select(t, ProfileRequest::pinned(0), kPrefill), ok(0));  // bounds are checked after selection
}

TEST(SelectProfile, AutoPicksTheOnlyFittingProfile) {
  EXPECT_EQ(select(decode_prefill(), ProfileRequest::automatic(), kPrefill), ok(1));
}

TEST(SelectProfile, AutoKeepsTheActiveProfileWhereRangesOverlap) {
  ProfileTable t = decode_prefill();
  t.active = 1;
  EXPECT_EQ(select(t, ProfileRequest::automatic(), kDecode), ok(1));
  t.active = 0;
  EXPECT_EQ(select(t, ProfileRequest::automatic(), kDecode), ok(0));
}

TEST(SelectProfile, AutoRescansOnceTheActiveProfileStopsFitting) {
  ProfileTable t;
  t.bounds = {{seq_bounds(1, 1, 1)}, {seq_bounds(64, 128, 2048)}};
  t.active = 1;
  EXPECT_EQ(select(t, ProfileRequest::automatic(), kDecode), ok(0));
}

TEST(SelectProfile, AutoSkipsAProfileThatFitsOnlySomeInputs) {
  ProfileTable t;
  t.bounds = {{seq_bounds(1, 1, 1), seq_bounds(1, 1, 1)},           // fits input 0 only
              {seq_bounds(1, 64, 2048), seq_bounds(1, 64, 2048)}};  // fits both
  const std::vector<Dims> inputs = {Dims{1, 1}, Dims{1, 7}};
  EXPECT_EQ(select(t, ProfileRequest::automatic(), inputs), ok(1));
}

TEST(SelectProfile, RescanTakesTheLowestOfSeveralMatchingProfiles) {
  ProfileTable t;
  t.bounds = {{seq_bounds(1, 8, 16)}, {seq_bounds(1, 128, 2048)}, {seq_bounds(512, 1024, 4096)}};
  t.active = 2;
  EXPECT_EQ(select(t, ProfileRequest::automatic(), {Dims{1, 8}}), ok(0));
  EXPECT_EQ(select(t, ProfileRequest::automatic(), {Dims{1, 100}}), ok(1));
}

TEST(SelectProfile, AShapeNoProfileCoversIsRejected) {
  EXPECT_EQ(select(decode_prefill(), ProfileRequest::automatic(), {Dims{1, 4096}}), kNoMatch);
  EXPECT_EQ(select(decode_prefill(), ProfileRequest::automatic(), {Dims{1, 0}}), kNoMatch);
  EXPECT_EQ(select(decode_prefill(), ProfileRequest::automatic(), {Dims{2, 1}}), kNoMatch);
}

TEST(SelectProfile, ARankNoProfileHasIsRejected) {
  EXPECT_EQ(select(decode_prefill(), ProfileRequest::automatic(), {Dims{1}}), kNoMatch);
  EXPECT_EQ(select(decode_prefill(), ProfileRequest::automatic(), {Dims{1, 1, 1}}), kNoMatch);
  EXPECT_EQ(select(decode_prefill(), ProfileRequest::automatic(), {Dims{}}), kNoMatch);
}

TEST(SelectProfile, APinPastTheEndOfAMultiProfileEngineIsRejected) {
  EXPECT_EQ(select(decode_prefill(), ProfileRequest::pinned(2), kDecode), kUnavailable);
  EXPECT_EQ(select(decode_prefill(), ProfileRequest::pinned(std::numeric_limits<int64_t>::max()), kDecode),
            kUnavailable);
}

TEST(SelectProfile, NegativePinsAreRejected) {
  EXPECT_EQ(select(decode_prefill(), ProfileRequest::pinned(-1), kDecode), kUnavailable);
  EXPECT_EQ(select(decode_prefill(), ProfileRequest::pinned(std::numeric_limits<int64_t>::min()), kDecode),
            kUnavailable);
}

TEST(SelectProfile, ASingleStaticProfileEngineIgnoresAPinAboveZero) {
  ProfileTable t;
  t.bounds = {{seq_bounds(1, 1, 1)}};
  EXPECT_EQ(select(t, ProfileRequest::pinned(1), kDecode), kPinIgnored);
  EXPECT_EQ(select(t, ProfileRequest::pinned(99), kDecode), kPinIgnored);
  EXPECT_EQ(select(t, ProfileRequest::pinned(0), kDecode), ok(0));
}

TEST(SelectProfile, ASingleDynamicProfileEngineIgnoresAPinAboveZero) {
  ProfileTable t;
  t.bounds = {{seq_bounds(1, 128, 2048)}};
  EXPECT_EQ(select(t, ProfileRequest::pinned(1), kPrefill), kPinIgnored);
  EXPECT_EQ(select(t, ProfileRequest::pinned(7), kDecode), kPinIgnored);
}

TEST(SelectProfile, ASingleProfileEngineStillRejectsANegativePin) {
  ProfileTable t;
  t.bounds = {{seq_bounds(1, 128, 2048)}};
  EXPECT_EQ(select(t, ProfileRequest::pinned(-1), kDecode), kUnavailable);
  EXPECT_EQ(select(t, ProfileRequest::pinned_beyond_int64(), kDecode), kUnavailable);
}

TEST(SelectProfile, AMultiProfileEngineNeverSubstitutesForAMissingIndex) {
  ProfileTable t = decode_prefill();
  t.bounds.push_back({seq_bounds(1, 1024, 4096)});
  for (int64_t pin : {3, 4, 100}) {
    const ProfileSelection s = select(t, ProfileRequest::pinned(pin), kDecode);
    EXPECT_EQ(s.status, S::kRequestedProfileUnavailable) << "pin " << pin;
  }
}

TEST(SelectProfile, AnEngineWithNoInputsWorksUnderAuto) {
  ProfileTable t;
  t.bounds = {{}, {}};
  t.active = 1;
  EXPECT_EQ(select(t, ProfileRequest::automatic(), {}), ok(1));
  t.active = 0;
  EXPECT_EQ(select(t, ProfileRequest::automatic(), {}), ok(0));
}

TEST(SelectProfile, AnEmptyTableIsRejectedForEveryKindOfRequest) {
  const ProfileTable empty;
  EXPECT_EQ(select(empty, ProfileRequest::unset(), kDecode), kNoMatch);
  EXPECT_EQ(select(empty, ProfileRequest::pinned(0), kDecode), kNoMatch);
  EXPECT_EQ(select(empty, ProfileRequest::pinned(-1), kDecode), kNoMatch);
  EXPECT_EQ(select(empty, ProfileRequest::automatic(), kDecode), kNoMatch);
  EXPECT_EQ(select(empty, ProfileRequest::named("decode"), kDecode), kNoMatch);
  EXPECT_EQ(select(empty, ProfileRequest::automatic(), {}), kNoMatch);
}

TEST(SelectProfile, AutoRescansPastAnActiveIndexTheTableDoesNotHave) {
  ProfileTable t = decode_prefill();
  for (int32_t active : {2, 5, -1, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()}) {
    t.active = active;
    EXPECT_EQ(select(t, ProfileRequest::automatic(), kPrefill), ok(1)) << "active " << active;
    EXPECT_EQ(select(t, ProfileRequest::automatic(), kDecode), ok(0)) << "active " << active;
  }
}

TEST(SelectProfile, AProfileWithFewerBoundsThanInputsDoesNotFit) {
  ProfileTable t;
  t.bounds = {{seq_bounds(1, 1, 2048)}, {seq_bounds(1, 1, 2048), seq_bounds(1, 1, 2048)}};
  const std::vector<Dims> two = {Dims{1, 5}, Dims{1, 5}};
  EXPECT_EQ(select(t, ProfileRequest::automatic(), two), ok(1));
  EXPECT_FALSE(fits(t, 0, two));
}

TEST(SelectProfile, AProfileWithMoreBoundsThanInputsDoesNotFit) {
  ProfileTable t;
  t.bounds = {{seq_bounds(1, 1, 2048), seq_bounds(1, 1, 2048)}};
  EXPECT_FALSE(fits(t, 0, kDecode));
  EXPECT_EQ(select(t, ProfileRequest::automatic(), kDecode), kNoMatch);
}

// ---- guards the seed's review found untested ----------------------------------------

// Deleting the profile-index range check in profile_fits makes these read past the table
// (caught by the hardened standard library and ASan in CI).
TEST(ProfileFits, AnIndexOutsideTheTableNeverFits) {
  const ProfileTable t = decode_prefill();
  for (int64_t p : {int64_t{-1}, int64_t{2}, int64_t{3}, std::numeric_limits<int64_t>::min(),
                    std::numeric_limits<int64_t>::max()}) {
    EXPECT_FALSE(fits(t, p, kDecode)) << "profile " << p;
  }
  EXPECT_TRUE(fits(t, 0, kDecode));
  EXPECT_TRUE(fits(t, 1, kPrefill));
}

// Each case would fit if the rank of that one bound (min, opt or max) were not compared.
TEST(ProfileFits, TheRankOfMinOptAndMaxMustAllEqualTheInputRank) {
  struct Case {
    const char* what;
    InputProfileBounds bound;
  };
  const Case cases[] = {
      {"max has an extra nonzero extent", {Dims{1, 1}, Dims{1, 1}, Dims{1, 2048, 7}}},
      {"opt has an extra extent", {Dims{1, 1}, Dims{1, 128, 1}, Dims{1, 2048}}},
      {"min has an extra extent", {Dims{1, 1, 0}, Dims{1, 1}, Dims{1, 2048}}},
      {"max is shorter", {Dims{1, 1}, Dims{1, 1}, Dims{1}}},
      {"min is shorter", {Dims{1}, Dims{1, 1}, Dims{1, 2048}}},
  };
  for (const Case& c : cases) {
    ProfileTable t;
    t.bounds = {{c.bound}};
    EXPECT_FALSE(fits(t, 0, {Dims{1, 5}})) << c.what;
    EXPECT_EQ(select(t, ProfileRequest::automatic(), {Dims{1, 5}}), kNoMatch) << c.what;
  }
  // The same bound with consistent ranks fits, so the cases above fail for rank alone.
  ProfileTable good;
  good.bounds = {{seq_bounds(1, 1, 2048)}};
  EXPECT_TRUE(fits(good, 0, {Dims{1, 5}}));
}

TEST(ProfileFits, BoundsAreInclusive) {
  ProfileTable t;
  t.bounds = {{seq_bounds(4, 8, 16)}};
  EXPECT_FALSE(fits(t, 0, {Dims{1, 3}}));
  EXPECT_TRUE(fits(t, 0, {Dims{1, 4}}));
  EXPECT_TRUE(fits(t, 0, {Dims{1, 16}}));
  EXPECT_FALSE(fits(t, 0, {Dims{1, 17}}));
}

TEST(ProfileFits, NegativeExtentsAndInvertedBoundsFitNothingOutside) {
  ProfileTable t;
  t.bounds = {{{Dims{1, 10}, Dims{1, 5}, Dims{1, 2}}}};  // min > max: an empty range
  EXPECT_FALSE(fits(t, 0, {Dims{1, 5}}));
  t.bounds = {{{Dims{-4}, Dims{0}, Dims{4}}}};
  EXPECT_TRUE(fits(t, 0, {Dims{-4}}));
  EXPECT_FALSE(fits(t, 0, {Dims{-5}}));
}

TEST(ProfileFits, ScalarInputsFitScalarBounds) {
  ProfileTable t;
  t.bounds = {{{Dims{}, Dims{}, Dims{}}}};
  EXPECT_TRUE(fits(t, 0, {Dims{}}));
  EXPECT_FALSE(fits(t, 0, {Dims{1}}));
}

// ---- named profiles ----------------------------------------------------------------------

TEST(SelectProfileNamed, ANameSelectsItsProfileWhateverTheActiveOne) {
  ProfileTable t = decode_prefill();
  t.active = 1;
  EXPECT_EQ(select(t, ProfileRequest::named("decode"), kDecode), ok(0));
  EXPECT_EQ(select(t, ProfileRequest::named("prefill"), kDecode), ok(1));
}

TEST(SelectProfileNamed, AnUnknownNameIsUnavailableOnAMultiProfileEngine) {
  EXPECT_EQ(select(decode_prefill(), ProfileRequest::named("Decode"), kDecode), kUnavailable);
  EXPECT_EQ(select(decode_prefill(), ProfileRequest::named("decode "), kDecode), kUnavailable);
}

TEST(SelectProfileNamed, AnUnknownNameIsIgnoredOnASingleProfileEngine) {
  ProfileTable t;
  t.bounds = {{seq_bounds(1, 1, 2048)}};
  t.names = {"forward"};
  EXPECT_EQ(select(t, ProfileRequest::named("decode"), kDecode), kPinIgnored);
  EXPECT_EQ(select(t, ProfileRequest::named("forward"), kDecode), ok(0));
  t.names.clear();  // an unnamed single profile
  EXPECT_EQ(select(t, ProfileRequest::named("decode"), kDecode), kPinIgnored);
}

TEST(SelectProfileNamed, AnEmptyNameIsAlwaysUnavailable) {
  ProfileTable single;
  single.bounds = {{seq_bounds(1, 1, 2048)}};
  single.names = {""};
  EXPECT_EQ(select(single, ProfileRequest::named(""), kDecode), kUnavailable);
  EXPECT_EQ(select(decode_prefill(), ProfileRequest::named(""), kDecode), kUnavailable);
}

TEST(SelectProfileNamed, TheFirstOfDuplicateNamesWins) {
  ProfileTable t = decode_prefill();
  t.names = {"x", "x"};
  EXPECT_EQ(select(t, ProfileRequest::named("x"), kDecode), ok(0));
}

TEST(SelectProfileNamed, NamesBeyondTheRowsOfAMalformedTableDoNotCount) {
  ProfileTable t = decode_prefill();
  t.names = {"decode", "prefill", "ghost"};
  EXPECT_EQ(select(t, ProfileRequest::named("ghost"), kDecode), kUnavailable);
  t.names = {"decode"};  // fewer names than rows
  EXPECT_EQ(select(t, ProfileRequest::named("prefill"), kDecode), kUnavailable);
  EXPECT_EQ(select(t, ProfileRequest::named("decode"), kDecode), ok(0));
}

TEST(ProfileRequest, DescribesItself) {
  EXPECT_EQ(ProfileRequest::unset().to_string(), "unset");
  EXPECT_EQ(ProfileRequest::automatic().to_string(), "automatic");
  EXPECT_EQ(ProfileRequest::pinned(3).to_string(), "profile 3");
  EXPECT_EQ(ProfileRequest::named("decode").to_string(), "profile 'decode'");
  EXPECT_EQ(ProfileRequest::pinned_beyond_int64().kind(), ProfileRequest::Kind::kPinned);
  EXPECT_TRUE(ProfileRequest::pinned_beyond_int64().index_beyond_int64());
  EXPECT_FALSE(ProfileRequest::pinned(std::numeric_limits<int64_t>::max()).index_beyond_int64());
  EXPECT_STREQ(selection_status_name(S::kPinIgnoredSingleProfile), "PinIgnoredSingleProfile");
}

}  // namespace
}  // namespace gearbox
