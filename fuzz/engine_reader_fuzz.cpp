// Feeds arbitrary bytes to parse_engine. The reader must never read out of bounds (ASan),
// never hit undefined behaviour (UBSan), never allocate without bound, and whatever it
// accepts must serialize again.
//
// The first byte picks the mode; the rest is the input:
// - even: the rest is a whole engine file (the header, checksums and all);
// - odd: the rest is metadata. It is wrapped in a valid version-1 header with correct
//   checksums and a zero payload of (first byte >> 1) * 64 bytes, so that the fuzzer gets
//   past the checksums and exercises the metadata decoder and the checks after it. An
//   accepted metadata must re-serialize to exactly the same bytes (the encoding is
//   canonical).
//
// Seeds: a file engine is "\x00" + its bytes; its metadata alone is "\x01" + bytes[64, 64 +
// metadata_bytes).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "format/engine_file.h"

namespace {

template <typename T>
void put(std::vector<uint8_t>& b, size_t at, T v) {
  std::memcpy(b.data() + at, &v, sizeof v);
}

std::vector<uint8_t> wrap_metadata(std::span<const uint8_t> metadata, uint64_t payload_bytes) {
  constexpr uint64_t kHeader = 64;
  const uint64_t payload_offset = (kHeader + metadata.size() + 63) / 64 * 64;
  std::vector<uint8_t> file(payload_offset + payload_bytes, 0);
  std::memcpy(file.data(), gearbox::format::kMagic, sizeof gearbox::format::kMagic);
  put<uint32_t>(file, 8, gearbox::format::kFormatVersion);
  put<uint32_t>(file, 12, kHeader);
  put<uint64_t>(file, 16, kHeader);
  put<uint64_t>(file, 24, metadata.size());
  put<uint64_t>(file, 32, payload_offset);
  put<uint64_t>(file, 40, payload_bytes);
  put<uint64_t>(file, 48, XXH3_64bits(metadata.data(), metadata.size()));
  put<uint64_t>(file, 56, XXH3_64bits(file.data() + payload_offset, payload_bytes));
  if (!metadata.empty()) std::memcpy(file.data() + kHeader, metadata.data(), metadata.size());
  return file;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  const std::span<const uint8_t> rest(data + 1, size - 1);

  if ((mode & 1) == 0) {
    const gearbox::Result<gearbox::format::ParsedEngine> parsed = gearbox::format::parse_engine(rest);
    if (parsed.ok()) {
      const std::span<const uint8_t> payload = parsed->payload;
      if (payload.data() < rest.data() || payload.data() + payload.size() != rest.data() + rest.size()) std::abort();
      if (!gearbox::format::serialize_engine(parsed->desc, payload).ok()) std::abort();
    } else if (parsed.status().code() != gearbox::StatusCode::kDataLoss) {
      std::abort();
    }
    return 0;
  }

  const std::vector<uint8_t> file = wrap_metadata(rest, static_cast<uint64_t>(mode >> 1) * 64);
  const gearbox::Result<gearbox::format::ParsedEngine> parsed = gearbox::format::parse_engine(file);
  if (!parsed.ok()) {
    if (parsed.status().code() != gearbox::StatusCode::kDataLoss) std::abort();
    return 0;
  }
  const gearbox::Result<std::vector<uint8_t>> again = gearbox::format::serialize_engine(parsed->desc, parsed->payload);
  if (!again.ok() || *again != file) std::abort();
  return 0;
}
