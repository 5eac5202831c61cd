#include "gearbox/profile_selection.h"

#include <algorithm>
#include <limits>

namespace gearbox {
namespace {

// One input against one bound: the rank of min, opt and max must all equal the input's
// rank (a bound whose min and max disagree in rank fits nothing), then every extent
// must lie in [min, max].
bool input_fits(const InputProfileBounds& bound, const Dims& input) noexcept {
  const int32_t rank = input.rank();
  if (bound.min.rank() != rank || bound.opt.rank() != rank || bound.max.rank() != rank) return false;
  const auto extents = input.extents();
  const auto lo = bound.min.extents();
  const auto hi = bound.max.extents();
  for (size_t d = 0; d < extents.size(); ++d) {
    if (extents[d] < lo[d] || extents[d] > hi[d]) return false;
  }
  return true;
}

ProfileSelection ok(int32_t profile) noexcept { return {ProfileSelection::Status::kOk, profile}; }
ProfileSelection pin_ignored() noexcept { return {ProfileSelection::Status::kPinIgnoredSingleProfile, 0}; }
ProfileSelection unavailable() noexcept { return {ProfileSelection::Status::kRequestedProfileUnavailable, 0}; }
ProfileSelection no_match() noexcept { return {ProfileSelection::Status::kNoProfileMatchesInputs, 0}; }

ProfileSelection select_automatic(const ProfileTable& table, std::span<const Dims> inputs) noexcept {
  if (profile_fits(table, table.active, inputs)) return ok(table.active);
  for (int32_t p = 0; p < table.size(); ++p) {
    if (profile_fits(table, p, inputs)) return ok(p);
  }
  return no_match();
}

ProfileSelection select_pinned(const ProfileTable& table, const ProfileRequest& request) noexcept {
  const int64_t index = request.index();
  if (request.index_beyond_int64() || index < 0) return unavailable();
  if (index < table.size()) return ok(static_cast<int32_t>(index));
  return table.size() == 1 ? pin_ignored() : unavailable();
}

ProfileSelection select_named(const ProfileTable& table, const ProfileRequest& request) noexcept {
  if (request.name().empty()) return unavailable();
  // Only names that label an existing row count; extra names in a malformed table do not.
  const size_t labelled = std::min(table.names.size(), table.bounds.size());
  for (size_t p = 0; p < labelled && p < static_cast<size_t>(table.size()); ++p) {
    if (table.names[p] == request.name()) return ok(static_cast<int32_t>(p));
  }
  return table.size() == 1 ? pin_ignored() : unavailable();
}

}  // namespace

int32_t ProfileTable::size() const noexcept {
  constexpr size_t kMax = static_cast<size_t>(std::numeric_limits<int32_t>::max());
  return static_cast<int32_t>(std::min(bounds.size(), kMax));
}

ProfileRequest ProfileRequest::pinned(int64_t index) noexcept {
  ProfileRequest r;
  r.kind_ = Kind::kPinned;
  r.index_ = index;
  return r;
}

ProfileRequest ProfileRequest::pinned_beyond_int64() noexcept {
  ProfileRequest r;
  r.kind_ = Kind::kPinned;
  r.index_ = std::numeric_limits<int64_t>::max();
  r.beyond_int64_ = true;
  return r;
}

ProfileRequest ProfileRequest::automatic() noexcept {
  ProfileRequest r;
  r.kind_ = Kind::kAutomatic;
  return r;
}

ProfileRequest ProfileRequest::named(std::string name) {
  ProfileRequest r;
  r.kind_ = Kind::kNamed;
  r.name_ = std::move(name);
  return r;
}

std::string ProfileRequest::to_string() const {
  switch (kind_) {
    case Kind::kUnset: return "unset";
    case Kind::kAutomatic: return "automatic";
    case Kind::kPinned:
      return beyond_int64_ ? std::string("profile index beyond int64") : "profile " + std::to_string(index_);
    case Kind::kNamed: return "profile '" + name_ + "'";
  }
  return "?";
}

const char* selection_status_name(ProfileSelection::Status status) noexcept {
  switch (status) {
    case ProfileSelection::Status::kOk: return "Ok";
    case ProfileSelection::Status::kPinIgnoredSingleProfile: return "PinIgnoredSingleProfile";
    case ProfileSelection::Status::kRequestedProfileUnavailable: return "RequestedProfileUnavailable";
    case ProfileSelection::Status::kNoProfileMatchesInputs: return "NoProfileMatchesInputs";
  }
  return "?";
}

bool profile_fits(const ProfileTable& table, int64_t profile, std::span<const Dims> inputs) noexcept {
  if (profile < 0 || profile >= table.size()) return false;
  const auto& row = table.bounds[static_cast<size_t>(profile)];
  if (row.size() != inputs.size()) return false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!input_fits(row[i], inputs[i])) return false;
  }
  return true;
}

ProfileSelection select_profile(const ProfileTable& table, const ProfileRequest& request,
                                std::span<const Dims> inputs) noexcept {
  if (table.size() == 0) return no_match();
  switch (request.kind()) {
    case ProfileRequest::Kind::kUnset: return ok(0);
    case ProfileRequest::Kind::kAutomatic: return select_automatic(table, inputs);
    case ProfileRequest::Kind::kPinned: return select_pinned(table, request);
    case ProfileRequest::Kind::kNamed: return select_named(table, request);
  }
  return no_match();
}

}  // namespace gearbox
