// Builds arbitrary profile tables, inputs and requests from fuzz bytes and runs the policy
// on them. The policy must never read out of bounds (ASan), never hit undefined behaviour
// (UBSan), and its answers must be consistent with profile_fits.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "gearbox/profile_selection.h"

namespace {

class Bytes {
 public:
  Bytes(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t u8() { return pos_ < size_ ? data_[pos_++] : 0; }
  int64_t i64() {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v = (v << 8) | u8();
    return static_cast<int64_t>(v);
  }
  // Small extents most of the time, any int64 sometimes.
  int64_t extent() { return (u8() & 7) == 0 ? i64() : static_cast<int64_t>(static_cast<int8_t>(u8())); }
  gearbox::Dims dims() {
    const int rank = u8() % (gearbox::kMaxDims + 1);
    std::vector<int64_t> e;
    for (int i = 0; i < rank; ++i) e.push_back(extent());
    return gearbox::Dims(std::span<const int64_t>(e));
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Bytes in(data, size);
  gearbox::ProfileTable table;
  const int profiles = in.u8() % 6;
  for (int p = 0; p < profiles; ++p) {
    std::vector<gearbox::InputProfileBounds> row(in.u8() % 4);
    for (auto& b : row) b = {in.dims(), in.dims(), in.dims()};
    table.bounds.push_back(std::move(row));
  }
  const int names = in.u8() % 8;
  for (int i = 0; i < names; ++i) table.names.push_back(std::string(in.u8() % 3, static_cast<char>('a' + in.u8() % 2)));
  table.active = static_cast<int32_t>(in.i64());
  std::vector<gearbox::Dims> inputs(in.u8() % 4);
  for (auto& d : inputs) d = in.dims();

  gearbox::ProfileRequest request;
  switch (in.u8() % 5) {
    case 0: request = gearbox::ProfileRequest::unset(); break;
    case 1: request = gearbox::ProfileRequest::automatic(); break;
    case 2: request = gearbox::ProfileRequest::pinned(in.i64()); break;
    case 3: request = gearbox::ProfileRequest::pinned_beyond_int64(); break;
    default: request = gearbox::ProfileRequest::named(std::string(in.u8() % 3, static_cast<char>('a' + in.u8() % 2)));
  }

  const gearbox::ProfileSelection sel = gearbox::select_profile(table, request, inputs);
  using S = gearbox::ProfileSelection::Status;
  if (sel.status == S::kOk || sel.status == S::kPinIgnoredSingleProfile) {
    if (sel.profile < 0 || sel.profile >= table.size()) std::abort();
    if (request.kind() == gearbox::ProfileRequest::Kind::kAutomatic &&
        !gearbox::profile_fits(table, sel.profile, inputs)) {
      std::abort();
    }
  }
  for (int64_t p : {int64_t{-1}, int64_t{0}, int64_t{1}, static_cast<int64_t>(table.active), in.i64()}) {
    (void)gearbox::profile_fits(table, p, inputs);
  }
  return 0;
}
