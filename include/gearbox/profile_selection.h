// gearbox/profile_selection.h: which optimization profile a call runs under.
//
// A gearbox engine holds several optimization profiles: for every network input a range
// of shapes [min, max] (and the shape `opt` its kernels were tuned at). Before each call
// the runtime turns a ProfileRequest (from an OptimizationProfileGuard, or a method's
// default) plus the input shapes into a ProfileSelection. This header is that policy
// and nothing else: standard library only, no device, no ExecuTorch, no engine, so it
// can be tested and reasoned about on its own.
//
//   gearbox::ProfileTable table;
//   table.bounds = {{{{1, 1}, {1, 1}, {1, 1}}},        // profile 0: decode
//                   {{{1, 1}, {1, 128}, {1, 2048}}}};  // profile 1: prefill
//   table.names = {"decode", "prefill"};
//   gearbox::Dims tokens{1, 512};
//   auto sel = gearbox::select_profile(table, gearbox::ProfileRequest::automatic(),
//                                      std::span(&tokens, 1));
//   // sel.status == kOk, sel.profile == 1
//
// Both functions are total: they are safe on any table, including empty tables, ragged
// rows, bounds of mixed ranks and an `active` index the table does not have.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "gearbox/dims.h"
#include "gearbox/export.h"

namespace gearbox {

/// The shape range of one input under one profile. An input fits when its rank equals
/// the rank of min, opt and max and min[d] <= extent[d] <= max[d] for every dim d.
struct InputProfileBounds {
  /// The smallest extents the profile accepts (inclusive).
  Dims min;
  /// The extents the profile's kernels were tuned at.
  Dims opt;
  /// The largest extents the profile accepts (inclusive).
  Dims max;
};

/// The profiles of one engine, as the selection policy sees them.
struct GEARBOX_API ProfileTable {
  /// bounds[profile][input]. A well-formed table has one row per profile and one bound per
  /// network input in each row; the policy tolerates any other table.
  std::vector<std::vector<InputProfileBounds>> bounds;
  /// Empty, or one name per profile (names[i] names bounds[i]).
  std::vector<std::string> names;
  /// The profile the engine is on now; a fresh execution context is on profile 0.
  int32_t active = 0;

  /// The number of profiles (rows of `bounds`), saturated at INT32_MAX.
  int32_t size() const noexcept;
};

/// What the caller asked for: nothing (unset), a profile index, a profile name, or
/// automatic selection from the input shapes.
class GEARBOX_API ProfileRequest {
 public:
  /// What kind of request this is.
  enum class Kind {
    /// No request: run profile 0, whatever the shapes (the engine's default).
    kUnset,
    /// A profile index.
    kPinned,
    /// Sticky first-fit over the input shapes.
    kAutomatic,
    /// A profile name.
    kNamed,
  };

  /// Unset (the same as a default-constructed request).
  ProfileRequest() = default;
  /// No request: the engine runs profile 0.
  static ProfileRequest unset() noexcept { return {}; }
  /// Pin profile `index`. A negative index is never available; there is no -1 sentinel.
  static ProfileRequest pinned(int64_t index) noexcept;
  /// A pin whose index is larger than INT64_MAX (a huge unsigned value). It is never
  /// available; it is kept apart from pinned() so it is not wrapped into a valid index.
  static ProfileRequest pinned_beyond_int64() noexcept;
  /// Choose from the input shapes: keep the active profile while it fits, else the
  /// lowest profile that fits.
  static ProfileRequest automatic() noexcept;
  /// The profile called `name`.
  static ProfileRequest named(std::string name);

  /// The kind of request.
  Kind kind() const noexcept { return kind_; }
  /// The pinned index (kPinned), else 0. INT64_MAX for a pinned_beyond_int64() request.
  int64_t index() const noexcept { return index_; }
  /// True for a pinned_beyond_int64() request.
  bool index_beyond_int64() const noexcept { return beyond_int64_; }
  /// The name (kNamed), else empty.
  const std::string& name() const noexcept { return name_; }
  /// "unset", "automatic", "profile 3", "profile 'decode'".
  std::string to_string() const;

  /// Same kind, index and name.
  bool operator==(const ProfileRequest& other) const noexcept = default;

 private:
  Kind kind_ = Kind::kUnset;
  int64_t index_ = 0;
  bool beyond_int64_ = false;
  std::string name_;
};

/// The policy's answer.
struct ProfileSelection {
  /// The outcome of selection.
  enum class Status {
    /// Run `profile`.
    kOk,
    /// The engine has a single profile and the request named another (a pin > 0, or an
    /// unknown name): run profile 0. The runtime logs this once per engine. It keeps a
    /// pin aimed at a sibling engine in the same program from failing a one-profile one.
    kPinIgnoredSingleProfile,
    /// A pin the engine does not have: negative, past the end of a multi-profile engine,
    /// an unknown name on a multi-profile engine, or an empty name.
    kRequestedProfileUnavailable,
    /// Automatic selection found no profile that fits every input, or the table is empty.
    kNoProfileMatchesInputs,
  };
  /// The outcome.
  Status status = Status::kNoProfileMatchesInputs;
  /// The profile to run; meaningful when status is kOk or kPinIgnoredSingleProfile.
  int32_t profile = 0;

  /// Same status and profile.
  bool operator==(const ProfileSelection& other) const noexcept = default;
};

/// The name of a selection status, e.g. "RequestedProfileUnavailable".
GEARBOX_API const char* selection_status_name(ProfileSelection::Status status) noexcept;

/// True when profile `profile` of `table` accepts `inputs`: `profile` is in [0, size()),
/// its row has exactly one bound per input, and every input has the rank of its bound's
/// min, opt and max with every extent inside [min, max] (inclusive).
GEARBOX_API bool profile_fits(const ProfileTable& table, int64_t profile, std::span<const Dims> inputs) noexcept;

/// Applies the selection policy, in this order:
/// - empty table: kNoProfileMatchesInputs for every kind of request;
/// - unset: profile 0 (the shapes are validated afterwards, not here);
/// - automatic: `table.active` if it fits, else the lowest profile that fits, else
///   kNoProfileMatchesInputs (an `active` outside the table does not fit);
/// - pinned: an index in [0, size()) is taken verbatim; an index > 0 on a single-profile
///   table is profile 0 with kPinIgnoredSingleProfile; anything else is
///   kRequestedProfileUnavailable;
/// - named: the first profile with exactly that name; none on a single-profile table:
///   profile 0 with kPinIgnoredSingleProfile, otherwise kRequestedProfileUnavailable;
///   an empty name is always kRequestedProfileUnavailable.
GEARBOX_API ProfileSelection select_profile(const ProfileTable& table, const ProfileRequest& request,
                                            std::span<const Dims> inputs) noexcept;

}  // namespace gearbox
