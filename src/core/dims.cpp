#include "gearbox/dims.h"

#include <algorithm>
#include <limits>

#include "core/check.h"

namespace gearbox {

Dims::Dims(std::initializer_list<int64_t> extents) : Dims(std::span<const int64_t>(extents.begin(), extents.size())) {}

Dims::Dims(std::span<const int64_t> extents) {
  GEARBOX_CHECK_MSG(extents.size() <= static_cast<size_t>(kMaxDims), "a Dims holds at most kMaxDims extents");
  std::copy(extents.begin(), extents.end(), extents_.begin());
  rank_ = static_cast<int32_t>(extents.size());
}

int64_t Dims::operator[](int32_t i) const {
  GEARBOX_CHECK_MSG(i >= 0 && i < rank_, "Dims index out of range");
  return extents_[static_cast<size_t>(i)];
}

int64_t Dims::volume() const noexcept {
  int64_t v = 1;
  for (int32_t i = 0; i < rank_; ++i) {
    const int64_t e = extents_[static_cast<size_t>(i)];
    if (e <= 0) return e == 0 ? 0 : -1;
    if (v > std::numeric_limits<int64_t>::max() / e) return std::numeric_limits<int64_t>::max();
    v *= e;
  }
  return v;
}

std::string Dims::to_string() const {
  std::string s = "[";
  for (int32_t i = 0; i < rank_; ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(extents_[static_cast<size_t>(i)]);
  }
  return s + "]";
}

bool Dims::operator==(const Dims& other) const noexcept {
  return rank_ == other.rank_ && std::equal(extents_.begin(), extents_.begin() + rank_, other.extents_.begin());
}

}  // namespace gearbox
