// Little-endian binary encoding with bounds checks: what the engine file's metadata is
// written and read with.
//
// ByteWriter appends fixed-width little-endian values and u32-length-prefixed strings to a
// growing buffer. ByteReader reads them back from a span and never reads past its end:
// every read returns false once the data runs out (or a string or count is implausible),
// and the reader keeps the first failure, with the field's name and byte offset, as a
// kDataLoss Status. Counts are checked against the bytes left (a count of N elements of
// at least S bytes each needs N * S bytes), so a corrupt count can never make a decoder
// allocate more than a small multiple of its input.
//
//   ByteWriter w;
//   w.u32(7);
//   w.string("tokens");
//   ByteReader r(w.bytes());
//   uint32_t n = 0;
//   std::string name;
//   if (!r.u32("count", n) || !r.string("name", name)) return r.status();
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gearbox/status.h"

namespace gearbox::format {

static_assert(std::endian::native == std::endian::little, "the engine format's encoders assume a little-endian host");

/// Appends little-endian values to a byte buffer. A string longer than UINT32_MAX bytes or
/// a count above UINT32_MAX cannot be encoded; the writer then records the failure
/// (ok() turns false) instead of writing a wrong prefix.
class ByteWriter {
 public:
  void u8(uint8_t v) { bytes_.push_back(v); }
  void u32(uint32_t v) { put(&v, sizeof v); }
  void u64(uint64_t v) { put(&v, sizeof v); }
  void i32(int32_t v) { put(&v, sizeof v); }
  void i64(int64_t v) { put(&v, sizeof v); }
  /// The IEEE-754 bits, so NaN payloads and -0 round-trip exactly.
  void f32(float v) { u32(std::bit_cast<uint32_t>(v)); }
  /// A u32 element count.
  void count(size_t n) {
    if (n > std::numeric_limits<uint32_t>::max()) {
      ok_ = false;
      n = 0;
    }
    u32(static_cast<uint32_t>(n));
  }
  /// A u32 byte length, then the bytes (no terminator).
  void string(std::string_view s) {
    count(s.size());
    if (s.size() <= std::numeric_limits<uint32_t>::max()) put(s.data(), s.size());
  }
  /// Raw bytes, no length.
  void raw(std::span<const uint8_t> data) { put(data.data(), data.size()); }
  /// Zero bytes up to the next multiple of `alignment`.
  void pad_to(size_t alignment) {
    while (bytes_.size() % alignment != 0) bytes_.push_back(0);
  }
  /// Overwrites 8 bytes at `pos` (for a length written before its contents were known).
  void patch_u64(size_t pos, uint64_t v) {
    if (pos > bytes_.size() || bytes_.size() - pos < sizeof v) {
      ok_ = false;
      return;
    }
    std::memcpy(bytes_.data() + pos, &v, sizeof v);
  }

  size_t size() const noexcept { return bytes_.size(); }
  /// False when something could not be encoded.
  bool ok() const noexcept { return ok_; }
  std::span<const uint8_t> bytes() const noexcept { return bytes_; }
  std::vector<uint8_t> take() && { return std::move(bytes_); }

 private:
  // resize + memcpy rather than vector::insert, whose inlined copy GCC 12 at -O3 misreads
  // as an overflow (-Wstringop-overflow).
  void put(const void* p, size_t n) {
    if (n == 0) return;
    const size_t at = bytes_.size();
    bytes_.resize(at + n);
    std::memcpy(bytes_.data() + at, p, n);
  }
  std::vector<uint8_t> bytes_;
  bool ok_ = true;
};

/// Reads little-endian values from a span, never past its end. `field` names what is being
/// read, for the error message of a failed read.
class ByteReader {
 public:
  /// Strings longer than this are rejected unless a read asks for another limit.
  static constexpr uint32_t kDefaultMaxStringBytes = 64 * 1024;

  /// `base_offset` is where `data` starts in the enclosing file; messages report file offsets.
  explicit ByteReader(std::span<const uint8_t> data, uint64_t base_offset = 0) : data_(data), base_(base_offset) {}

  bool u8(const char* field, uint8_t& out) { return get(field, &out, sizeof out); }
  bool u32(const char* field, uint32_t& out) { return get(field, &out, sizeof out); }
  bool u64(const char* field, uint64_t& out) { return get(field, &out, sizeof out); }
  bool i32(const char* field, int32_t& out) { return get(field, &out, sizeof out); }
  bool i64(const char* field, int64_t& out) { return get(field, &out, sizeof out); }
  bool f32(const char* field, float& out) {
    uint32_t bits = 0;
    if (!u32(field, bits)) return false;
    out = std::bit_cast<float>(bits);
    return true;
  }

  /// A u32 length and that many bytes. Fails when the length exceeds `max_bytes` or the
  /// bytes left.
  bool string(const char* field, std::string& out, uint32_t max_bytes = kDefaultMaxStringBytes) {
    const size_t at = pos_;
    uint32_t n = 0;
    if (!u32(field, n)) return false;
    if (n > max_bytes) {
      return fail_at(at, field,
                     "is " + std::to_string(n) + " bytes long, more than the limit of " + std::to_string(max_bytes));
    }
    if (n > remaining()) return truncated(at, field, sizeof(uint32_t) + size_t{n});
    out.assign(reinterpret_cast<const char*>(data_.data() + pos_), n);
    pos_ += n;
    return true;
  }

  /// A u32 element count whose elements take at least `min_element_bytes` each: fails when
  /// count * min_element_bytes exceeds the bytes left, or the count exceeds `max_count`.
  bool count(const char* field, uint32_t& out, size_t min_element_bytes,
             uint32_t max_count = std::numeric_limits<uint32_t>::max()) {
    const size_t at = pos_;
    uint32_t n = 0;
    if (!u32(field, n)) return false;
    if (n > max_count) {
      return fail_at(at, field, "is " + std::to_string(n) + ", more than the limit of " + std::to_string(max_count));
    }
    const size_t per = min_element_bytes == 0 ? 1 : min_element_bytes;
    if (n > remaining() / per) {
      return fail_at(at, field,
                     "is " + std::to_string(n) + ", but only " + std::to_string(remaining()) +
                         " bytes remain (room for at most " + std::to_string(remaining() / per) + ")");
    }
    out = n;
    return true;
  }

  /// A view of the next `n` bytes.
  bool bytes(const char* field, size_t n, std::span<const uint8_t>& out) {
    if (failed_) return false;
    if (n > remaining()) return truncated(pos_, field, n);
    out = data_.subspan(pos_, n);
    pos_ += n;
    return true;
  }

  /// Records a failure that the caller detected (e.g. an enum value out of range) at the
  /// position of the last value read. Returns false. Keeps an earlier failure.
  bool fail(const char* field, const std::string& what) { return fail_at(last_, field, what); }

  size_t position() const noexcept { return pos_; }
  size_t remaining() const noexcept { return data_.size() - pos_; }
  bool ok() const noexcept { return !failed_; }
  /// The first failure as kDataLoss ("... at byte N: ..."), or ok.
  const Status& status() const noexcept { return status_; }

 private:
  bool get(const char* field, void* out, size_t n) {
    if (failed_) return false;
    if (n > remaining()) return truncated(pos_, field, n);
    std::memcpy(out, data_.data() + pos_, n);
    last_ = pos_;
    pos_ += n;
    return true;
  }
  bool truncated(size_t at, const char* field, size_t needed) {
    return fail_at(at, field,
                   "needs " + std::to_string(needed) + " bytes but only " + std::to_string(data_.size() - at) +
                       " remain (truncated)");
  }
  bool fail_at(size_t at, const char* field, const std::string& what) {
    if (failed_) return false;
    failed_ = true;
    status_ = data_loss("'" + std::string(field) + "' at byte " + std::to_string(base_ + at) + " " + what);
    return false;
  }

  std::span<const uint8_t> data_;
  uint64_t base_ = 0;
  size_t pos_ = 0;
  size_t last_ = 0;
  bool failed_ = false;
  Status status_;
};

}  // namespace gearbox::format
