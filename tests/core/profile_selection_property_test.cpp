// select_profile and profile_fits against a brute-force oracle on random tables: ragged
// rows, mixed ranks across min/opt/max, out-of-range `active`, negative extents, names.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <string>
#include <vector>

#include "gearbox/profile_selection.h"

namespace gearbox {
namespace {

// Ranks 0..3 and extents in [-3, 12): small enough that random bounds and inputs overlap.
rc::Gen<Dims> gen_dims() {
  return rc::gen::exec([] {
    const size_t rank = *rc::gen::inRange<size_t>(0, 4);
    std::vector<int64_t> extents;
    for (size_t d = 0; d < rank; ++d) extents.push_back(*rc::gen::inRange<int64_t>(-3, 12));
    return Dims(std::span<const int64_t>(extents));
  });
}

struct Case {
  ProfileTable table;
  ProfileRequest request;
  std::vector<Dims> inputs;
};

rc::Gen<ProfileRequest> gen_request() {
  return rc::gen::oneOf(rc::gen::just(ProfileRequest::unset()), rc::gen::just(ProfileRequest::automatic()),
                        rc::gen::just(ProfileRequest::pinned_beyond_int64()),
                        rc::gen::map(rc::gen::inRange<int64_t>(-3, 7), ProfileRequest::pinned),
                        rc::gen::map(rc::gen::element<std::string>("", "a", "b", "c"), ProfileRequest::named));
}

// A plainly written policy, straight from the specification in profile_selection.h.
bool oracle_fits(const ProfileTable& t, int64_t p, const std::vector<Dims>& inputs) {
  if (p < 0 || p >= static_cast<int64_t>(t.bounds.size())) return false;
  const auto& row = t.bounds[static_cast<size_t>(p)];
  if (row.size() != inputs.size()) return false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const InputProfileBounds& b = row[i];
    const Dims& x = inputs[i];
    if (b.min.rank() != x.rank() || b.opt.rank() != x.rank() || b.max.rank() != x.rank()) return false;
    for (int32_t d = 0; d < x.rank(); ++d) {
      if (x[d] < b.min[d] || x[d] > b.max[d]) return false;
    }
  }
  return true;
}

ProfileSelection oracle_select(const ProfileTable& t, const ProfileRequest& r, const std::vector<Dims>& inputs) {
  using S = ProfileSelection::Status;
  const int64_t n = static_cast<int64_t>(t.bounds.size());
  if (n == 0) return {S::kNoProfileMatchesInputs, 0};
  switch (r.kind()) {
    case ProfileRequest::Kind::kUnset: return {S::kOk, 0};
    case ProfileRequest::Kind::kAutomatic:
      if (oracle_fits(t, t.active, inputs)) return {S::kOk, t.active};
      for (int64_t p = 0; p < n; ++p) {
        if (oracle_fits(t, p, inputs)) return {S::kOk, static_cast<int32_t>(p)};
      }
      return {S::kNoProfileMatchesInputs, 0};
    case ProfileRequest::Kind::kPinned:
      if (r.index_beyond_int64() || r.index() < 0) return {S::kRequestedProfileUnavailable, 0};
      if (r.index() < n) return {S::kOk, static_cast<int32_t>(r.index())};
      return {n == 1 ? S::kPinIgnoredSingleProfile : S::kRequestedProfileUnavailable, 0};
    case ProfileRequest::Kind::kNamed:
      if (r.name().empty()) return {S::kRequestedProfileUnavailable, 0};
      for (int64_t p = 0; p < n && p < static_cast<int64_t>(t.names.size()); ++p) {
        if (t.names[static_cast<size_t>(p)] == r.name()) return {S::kOk, static_cast<int32_t>(p)};
      }
      return {n == 1 ? S::kPinIgnoredSingleProfile : S::kRequestedProfileUnavailable, 0};
  }
  return {S::kNoProfileMatchesInputs, 0};
}

RC_GTEST_PROP(ProfileSelectionProperty, MatchesTheOracleOnRandomTables, ()) {
  ProfileTable t;
  const size_t profiles = *rc::gen::inRange<size_t>(0, 5);
  const size_t inputs_n = *rc::gen::inRange<size_t>(0, 3);
  for (size_t p = 0; p < profiles; ++p) {
    // Mostly well-formed rows, sometimes ragged.
    const size_t row_len =
        *rc::gen::weightedOneOf<size_t>({{4, rc::gen::just(inputs_n)}, {1, rc::gen::inRange<size_t>(0, 4)}});
    std::vector<InputProfileBounds> row;
    for (size_t i = 0; i < row_len; ++i) row.push_back({*gen_dims(), *gen_dims(), *gen_dims()});
    t.bounds.push_back(std::move(row));
  }
  const size_t names = *rc::gen::inRange<size_t>(0, 6);
  for (size_t i = 0; i < names; ++i) t.names.push_back(*rc::gen::element<std::string>("", "a", "b", "c"));
  t.active = *rc::gen::inRange<int32_t>(-2, 7);
  std::vector<Dims> inputs;
  for (size_t i = 0; i < inputs_n; ++i) inputs.push_back(*gen_dims());
  const ProfileRequest r = *gen_request();

  const ProfileSelection got = select_profile(t, r, inputs);
  const ProfileSelection want = oracle_select(t, r, inputs);
  RC_ASSERT(got.status == want.status);
  if (want.status == ProfileSelection::Status::kOk ||
      want.status == ProfileSelection::Status::kPinIgnoredSingleProfile) {
    RC_ASSERT(got.profile == want.profile);
  }
  for (int64_t p = -2; p < static_cast<int64_t>(profiles) + 2; ++p) {
    RC_ASSERT(profile_fits(t, p, inputs) == oracle_fits(t, p, inputs));
  }
}

// Tables where bounds are built around the inputs, so that fits are common (random bounds
// rarely contain random inputs).
RC_GTEST_PROP(ProfileSelectionProperty, AutomaticIsStickyFirstFit, ()) {
  ProfileTable t;
  const int64_t profiles = *rc::gen::inRange<int64_t>(1, 6);
  for (int64_t p = 0; p < profiles; ++p) {
    const int64_t lo = *rc::gen::inRange<int64_t>(1, 64);
    const int64_t hi = lo + *rc::gen::inRange<int64_t>(0, 256);
    t.bounds.push_back({{Dims{1, lo}, Dims{1, lo}, Dims{1, hi}}});
  }
  t.active = *rc::gen::inRange<int32_t>(-1, static_cast<int32_t>(profiles) + 1);
  const std::vector<Dims> inputs = {Dims{1, *rc::gen::inRange<int64_t>(1, 320)}};
  const ProfileSelection got = select_profile(t, ProfileRequest::automatic(), inputs);
  RC_ASSERT(got == oracle_select(t, ProfileRequest::automatic(), inputs));
  if (got.status == ProfileSelection::Status::kOk) {
    RC_ASSERT(profile_fits(t, got.profile, inputs));
    if (got.profile != t.active) {
      for (int32_t p = 0; p < got.profile; ++p) RC_ASSERT(!profile_fits(t, p, inputs));
    }
  }
}

}  // namespace
}  // namespace gearbox
